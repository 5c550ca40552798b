"""Small projects for tests that run cells: the repo's conftest, a one-suite matrix and,
on request, a noxfile (the ``mini_project`` fixture builds one in ``tmp_path``)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]

# A noxfile for a project made by make_project: the cells of its matrix as nox sessions.
NOXFILE = """
import sys
sys.path.insert(0, {src!r})
from pathlib import Path

import nox

from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
sessions.register(load_matrix(Path(__file__).parent / "matrix.yaml"))
"""
# What a cell env needs to run the suites (the runner's pytest options).
TOOLS = ("pytest==9.2.0", "pytest-xdist==3.8.0", "pytest-timeout==2.4.0")


# Where the slow tests' cell envs live: $ACCELGRID_TEST_ENVS, else the user's cache; one
# folder per checkout (each env links its checkout's src/, so two checkouts never share).
TEST_ENVS = "ACCELGRID_TEST_ENVS"


def cell_envdir() -> Path:
    """The folder the slow tests build this checkout's cell envs in (outside it; the
    slow set is run after building the shared one there: docs/design/testing.md)."""
    base = os.environ.get(TEST_ENVS) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "accelgrid",
        "test-envs")
    return Path(base) / hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]


def run_request(cell, python, root: Path, results_root: Path, pytest_args=(), **fields):
    """A run's request (accelgrid.run.request.RunRequest) as a session makes it: the
    preflight made once, here, by the caller (the run asks no other)."""
    from accelgrid.run import preflight
    from accelgrid.run.request import RunRequest

    return RunRequest(cell, str(python), root, results_root, preflight.check(cell, root),
                      tuple(pytest_args), **fields)


def make_project(proj: Path, test_seconds: int = 60, cell_minutes: int = 10, workers: int = 1,
                 noxfile: bool = False) -> Path:
    """A project folder with the repo's conftest and a matrix whose only suite is
    ``suites/payload``; with ``noxfile``, a noxfile whose sessions are its cells (whose envs
    get pytest, xdist and timeout)."""
    (proj / "suites" / "payload").mkdir(parents=True)
    shutil.copy(ROOT / "conftest.py", proj / "conftest.py")
    (proj / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    text = (TESTS / "base_matrix.yaml").read_text()
    text = text.replace("  smoke: {path: .}", "  smoke: {path: suites/payload}")
    text = text.replace("  suites: [smoke]", "  suites: [smoke]\n  timeout: {cell_minutes: "
                        f"{cell_minutes}, test_seconds: {test_seconds}}}\n  workers: {workers}")
    if noxfile:
        text = text.replace("\ndevices:", f"\ntools: [{', '.join(TOOLS)}]\ndevices:", 1)
        (proj / "noxfile.py").write_text(NOXFILE.format(src=str(ROOT / "src")))
    (proj / "matrix.yaml").write_text(text)
    return proj


# A payload of a test that fails on its first attempt (a marker file beside it says it
# ran) and passes on the second, one that always fails and one that passes: reruns.
RERUN_PAYLOAD = '''
import os

def test_flaky():
    marker = os.path.join(os.path.dirname(__file__), "attempted")
    if not os.path.exists(marker):
        open(marker, "w").close()
        assert False, "fails on its first attempt"

def test_always_fails():
    assert False, "every attempt"

def test_passes():
    pass
'''
