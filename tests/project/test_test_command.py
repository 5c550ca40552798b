"""How the project's own tests run: a plain ``pytest`` leaves the end-to-end set (``slow``)
out and ``-m`` decides alone; the slow tests' cell envs live outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.mini_projects import ROOT, cell_envdir

from accelgrid.config.matrix import load_matrix
from accelgrid.host import venvs


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p",
                           "no:cacheprovider", "tests/e2e/test_nox.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.split("::")[-1] for line in proc.stdout.splitlines() if "::" in line]


def test_a_plain_pytest_leaves_the_slow_set_out_and_m_decides() -> None:
    quick, slow = _collected(), _collected("-m", "slow")
    assert "test_real_cpu_cell_end_to_end" in slow and "test_real_cpu_cell_end_to_end" not in quick
    assert "test_list_has_a_session_per_cell" in quick and not set(quick) & set(slow)
    assert sorted(_collected("-m", "slow or not slow")) == sorted(quick + slow)


def test_cell_envs_go_where_accelgrid_envdir_says(monkeypatch, tmp_path: Path) -> None:
    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    assert venvs.env_dir(ROOT, cell) == ROOT / ".nox" / "cpu-2-13"
    monkeypatch.setenv("ACCELGRID_ENVDIR", str(tmp_path / "envs"))
    assert venvs.env_dir(ROOT, cell) == tmp_path / "envs" / "cpu-2-13"


def test_the_slow_tests_envs_are_outside_the_checkout(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ACCELGRID_TEST_ENVS", raising=False)
    where = cell_envdir()
    assert not where.is_relative_to(ROOT)
    assert where.parent.parts[-2:] == ("accelgrid", "test-envs")
    monkeypatch.setenv("ACCELGRID_TEST_ENVS", str(tmp_path))
    assert cell_envdir().parent == tmp_path   # one folder per checkout under it
    assert cell_envdir().name == where.name and len(where.name) == 12


def test_a_passing_tests_tmp_path_is_gone_at_its_end_a_failing_ones_stays(tmp_path: Path
                                                                          ) -> None:
    """The project's pytest settings: the slow set builds a cell env in many tests' tmp_path;
    kept to the end of the run they filled a CI machine's disk (13 GB by the end here)."""
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_two.py").write_text(
        "def test_passes(tmp_path):\n    (tmp_path / 'env').write_text('x')\n\n"
        "def test_fails(tmp_path):\n    (tmp_path / 'env').write_text('x')\n    assert 0\n")
    base = tmp_path / "base"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(tests), "--basetemp", str(base), "-p", "no:xdist",
                           "-p", "no:cacheprovider", "-q", str(tests)], cwd=tests,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in base.iterdir() if not p.is_symlink()) == ["test_fails0"]


@pytest.mark.parametrize("name", ["ACCELGRID_ENVDIR", "ACCELGRID_WORKERS_PER_DEVICE"])
def test_each_test_starts_from_the_same_variables(name: str) -> None:
    # conftest's autouse fixtures: mini projects keep their envs beside them, and plans
    # do not depend on this host's cores.
    assert os.environ.get(name) == (None if name == "ACCELGRID_ENVDIR" else "1")


def _test_times():
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_times", ROOT / "tools" / "test_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_test_times_sums_each_file_of_a_junit_run(tmp_path: Path, capsys) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="t1" time="3.0"/>'
        '<testcase classname="tests.test_a.TestX" name="t2" time="1.5"/>'
        '<testcase classname="tests.test_b" name="t3" time="0.5"/>'
        '<testcase classname="tests.test_b" name="t4"/>'
        '</testsuite></testsuites>')
    assert _test_times().main([str(junit)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:] == ["| tests/test_a.py | 2 | 4.5 | 90.0 % |",
                        "| tests/test_b.py | 2 | 0.5 | 10.0 % |", "| all | 4 | 5.0 | 100 % |"]
    junit.write_text("<testsuites>")   # cut short: one line, exit 2
    assert _test_times().main([str(junit)]) == 2
    assert capsys.readouterr().err.startswith("test_times: ")


def test_a_run_that_leaves_an_env_in_the_checkout_fails(monkeypatch, tmp_path: Path) -> None:
    import types

    import conftest

    monkeypatch.setattr(conftest, "NOX_IN_CHECKOUT", tmp_path / ".nox")
    lines: list[str] = []
    writer = types.SimpleNamespace(line=lambda text, **_: lines.append(text))
    config = types.SimpleNamespace(stash=pytest.Stash(), get_terminal_writer=lambda: writer)
    session: Any
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    for before, after, failed in ([], ["cpu-2-13"], True), (["cpu-2-13"], ["cpu-2-13"], False):
        session = types.SimpleNamespace(config=config, exitstatus=0)
        for name in before:
            (tmp_path / ".nox" / name).mkdir(parents=True, exist_ok=True)
        conftest.pytest_sessionstart(session)
        for name in after:
            (tmp_path / ".nox" / name).mkdir(parents=True, exist_ok=True)
        conftest.pytest_sessionfinish(session, 0)
        assert (session.exitstatus == pytest.ExitCode.TESTS_FAILED) is failed
    assert len(lines) == 1 and "a test left cpu-2-13 in " in lines[0]
