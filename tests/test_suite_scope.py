"""Which suites a selection can touch (accelgrid.run.suite_scope): real pytest collections of a
project with traps (a test in one suite named after another, a marker, a parametrize id,
ids read from a data file, a conftest hook that marks every test) must select exactly the
same tests from the narrowed suites as from all of them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.run import passes as pass_plan
from accelgrid.run import suite_scope

ROOT = Path(__file__).resolve().parents[1]

SUITES = ("suites/alpha", "suites/beta", "suites/gamma", "suites/delta", "suites/epsilon",
          "suites/zeta")
FILES = {
    "suites/alpha/test_alpha.py": """
import pytest

def test_plain():
    pass

class TestGroup:
    def test_in_class(self):
        pass

@pytest.mark.parametrize("x", ["one", "two"])
def test_param(x):
    pass
""",
    # Another suite's name in a test name, a marker and a parametrize id.
    "suites/beta/test_beta.py": """
import pytest

def test_about_alpha():
    pass

@pytest.mark.gamma
def test_marked():
    pass

@pytest.mark.parametrize("w", ["deltaish", "plain"])
def test_ids(w):
    pass
""",
    # Test ids read at collection time from a data file of the suite.
    "suites/gamma/test_gamma.py": """
from pathlib import Path

import pytest

NAMES = (Path(__file__).parent / "names.txt").read_text().split()

@pytest.mark.parametrize("n", NAMES)
def test_named(n):
    pass
""",
    "suites/gamma/names.txt": "Epsilon zeta\n",
    "suites/delta/test_delta.py": "def test_d():\n    pass\n",
    "suites/epsilon/__init__.py": "",
    "suites/epsilon/test_epsilon.py": "def test_e():\n    pass\n",
    "suites/zeta/deep/test_zeta.py": "def test_z():\n    pass\n",
}
# A conftest whose hook marks every collected test, whatever its suite.
HOOK_CONFTEST = """
import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.omicron_everywhere)
"""


pytest_plugins = ["pytester"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "conftest.py").write_text("")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def selected(pytester: pytest.Pytester, paths: list[str], args: list[str]) -> set[str]:
    """The node ids a real pytest run (in this process, with its modules put back after)
    selects from ``paths`` with ``args``, in ``pytester.path``."""
    result = pytester.runpytest_inprocess("--co", "-q", *paths, *args)
    assert result.ret in (0, 5), "\n".join(result.outlines + result.errlines)
    return {line.strip() for line in result.outlines if "::" in line}


CASES = [
    # -k args, the suites pytest gets
    (["-k", "alpha"], ["suites/alpha", "suites/beta"]),           # beta: test_about_alpha
    (["-k", "ALPHA and plain"], ["suites/alpha", "suites/beta"]),  # case-insensitive
    (["-k", "gamma"], ["suites/beta", "suites/gamma"]),           # beta: @pytest.mark.gamma
    (["-k", "delta"], ["suites/beta", "suites/delta"]),           # beta: the id deltaish
    (["-k", "EPSILON"], ["suites/gamma", "suites/epsilon"]),      # gamma: names.txt
    (["-k", "zeta"], ["suites/gamma", "suites/zeta"]),
    (["-k", "not alpha"], [s for s in SUITES if s != "suites/alpha"]),
    (["-xk", "delta and not deltaish"], ["suites/beta", "suites/delta"]),
    (["-kdelta or epsilon"], ["suites/beta", "suites/gamma", "suites/delta", "suites/epsilon"]),
    (["-k", "smoke or delta"], list(SUITES)),                     # smoke: names no suite
    (["-k", "(alpha or zeta) and not in_class", "-v"],
     ["suites/alpha", "suites/beta", "suites/gamma", "suites/zeta"]),
    (["-k", "deep"], list(SUITES)),                               # a folder in a suite
    (["-k", "zeta and not deep"], ["suites/gamma", "suites/zeta"]),
    (["-k", "suites"], list(SUITES)),                             # every test's folder
    (["-k", "one"], list(SUITES)),                                # names no suite
    (["-k", "alpha or one"], list(SUITES)),
    (["-k", "nosuchtest and alpha"], ["suites/alpha", "suites/beta"]),
    (["-k", "alpha", "--lf"], list(SUITES)),                      # last-failed: unsure
    (["-k", "alpha", "-p", "xdist"], list(SUITES)),               # a plugin: unsure
    (["-k", "alpha", "-p", "no:cacheprovider", "-m", "not slow"],
     ["suites/alpha", "suites/beta"]),
    (["-k", "alpha(x=1)"], list(SUITES)),                         # pytest refuses it
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_narrowed_suites_select_exactly_what_all_suites_select(
        pytester: pytest.Pytester, project: Path, args: list[str], expected: list[str]
) -> None:
    narrowed = suite_scope.suite_paths(SUITES, args, project, env={})
    assert narrowed == expected
    if any("alpha(x=1)" in a for a in args):
        return   # pytest stops with a usage error either way
    everything = selected(pytester, list(SUITES), args)
    assert selected(pytester, narrowed, args) == everything


def test_the_comparison_catches_a_suite_left_out_by_its_name_alone(
        pytester: pytest.Pytester, project: Path) -> None:
    """The check above fails for a narrowing that trusts the suite names: -k alpha also
    selects beta's test_about_alpha."""
    everything = selected(pytester, list(SUITES), ["-k", "alpha"])
    assert "suites/beta/test_beta.py::test_about_alpha" in everything
    assert selected(pytester, ["suites/alpha"], ["-k", "alpha"]) != everything


def test_a_conftest_hook_reaching_every_suite_keeps_them_all(
        pytester: pytest.Pytester, project: Path) -> None:
    (project / "suites" / "omicron").mkdir()
    (project / "suites" / "omicron" / "conftest.py").write_text(HOOK_CONFTEST)
    (project / "suites" / "omicron" / "test_omicron.py").write_text("def test_o():\n    pass\n")
    suites = [*SUITES, "suites/omicron"]
    # Every test carries omicron's marker, so -k omicron selects them all.
    everything = selected(pytester, suites, ["-k", "omicron"])
    assert everything == selected(pytester, suites, [])
    assert suite_scope.suite_paths(suites, ["-k", "omicron"], project, env={}) == suites
    # Declared local by its author: the same hook is trusted to stay in its suite.
    (project / "suites" / "omicron" / "conftest.py").write_text(
        "ACCELGRID_SUITE_LOCAL = True\n" + HOOK_CONFTEST)
    assert suite_scope.suite_paths(suites, ["-k", "alpha"], project, env={}) \
        == suite_scope.suite_paths(SUITES, ["-k", "alpha"], project, env={})
    # Fixtures and hooks for its own folder alone: omicron's tests only.
    (project / "suites" / "omicron" / "conftest.py").write_text(
        "def pytest_generate_tests(metafunc):\n    pass\n")
    assert suite_scope.suite_paths(suites, ["-k", "omicron"], project, env={}) \
        == ["suites/omicron"]
    assert selected(pytester, ["suites/omicron"], ["-k", "omicron"]) \
        == selected(pytester, suites, ["-k", "omicron"])


def test_unsure_settings_keep_every_suite(project: Path, tmp_path: Path) -> None:
    args = ["-k", "alpha"]
    assert suite_scope.suite_paths(SUITES, args, project, env={"PYTEST_ADDOPTS": "-p x"}) \
        == list(SUITES)
    assert suite_scope.suite_paths(SUITES, args, project, env={"PYTEST_PLUGINS": "x"}) \
        == list(SUITES)
    assert suite_scope.suite_paths(SUITES, [*args, "--rootdir", "suites"], project,
                                   env={}) == list(SUITES)
    assert suite_scope.suite_paths(SUITES, [*args, "--no-such-option"], project,
                                   env={}) == list(SUITES)
    assert suite_scope.suite_paths(SUITES, [*args, "nosuchfile.py"], project,
                                   env={}) == list(SUITES)
    # An ini file inside a suite would make it pytest's rootdir for a narrowed run.
    (project / "suites" / "delta" / "tox.ini").write_text("")
    try:
        assert suite_scope.suite_paths(SUITES, args, project, env={}) == list(SUITES)
    finally:
        (project / "suites" / "delta" / "tox.ini").unlink()
    # No pytest configuration at the root: the rootdir depends on the paths given.
    bare = tmp_path / "bare"
    (bare / "suites" / "alpha").mkdir(parents=True)
    (bare / "suites" / "beta").mkdir()
    (bare / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert suite_scope.suite_paths(["suites/alpha", "suites/beta"], args, bare,
                                   env={}) == ["suites/alpha", "suites/beta"]


def test_paths_and_node_ids_replace_the_suites_and_option_values_are_not_paths(
        project: Path) -> None:
    args = ["-k", "suites", "suites/alpha/test_alpha.py::test_plain", "-m", "suites/beta",
            "--deselect", "suites/gamma", "-rA"]
    assert suite_scope.named_paths(args, project) == [2]
    assert suite_scope.suite_paths(SUITES, args, project, env={}) == []
    assert suite_scope.named_paths(["--", "suites/beta"], project) == [1]


def test_the_runner_gives_pytest_the_narrowed_suites() -> None:
    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    folder = Path("/results")

    def paths(args: list[str]) -> list[str]:
        cmd = pass_plan.pytest_command(cell, "python", folder, args, root=ROOT)
        first_option = next(i for i, a in enumerate(cmd) if a.startswith("-") and i > 2)
        return cmd[3:first_option]

    assert paths(["-k", "smoke"]) == ["suites/smoke"]
    assert paths([]) == list(cell.suite_paths)
    assert paths(["suites/smoke"]) == []
    # -k's value names a folder of the project: still an expression, not a path (pytest
    # used to get no suite and fall back to the project's own tests/).
    assert paths(["-k", "suites"]) == list(cell.suite_paths)


@pytest.mark.slow
# ("smoke" alone is in "smoke or distributed"; each case is two collections of the real
# suites, ~20 s of CPU here.)
@pytest.mark.parametrize("expr", ["not smoke", "offload and not bf16",
                                  "smoke or distributed", "hf_examples"])
def test_the_cells_suites_select_the_same_tests_narrowed(expr: str,
                                                        outside_envdir: Path) -> None:
    """The real suites in the cpu-2.13 cell's env (built if missing: minutes)."""
    from accelgrid.commands import sessions

    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    python = sessions.prepared_python(ROOT, cell)
    narrowed = suite_scope.suite_paths(cell.suite_paths, ["-k", expr], ROOT)
    assert len(narrowed) < len(cell.suite_paths)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTEST_ADDOPTS": ""}

    def ids(paths: list[str]) -> set[str]:
        proc = subprocess.run([python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                               *paths, "-k", expr], cwd=ROOT, capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return {line for line in proc.stdout.splitlines() if "::" in line}

    assert ids(narrowed) == ids(list(cell.suite_paths))


def test_a_later_pass_keeps_option_values_that_name_paths(tmp_path: Path) -> None:
    """A pass that runs what an earlier one left it drops the user's test paths (the list
    replaces them), not an option's value that happens to be a folder (`-k suites`)."""
    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    later = pass_plan.cpu_passes(cell)[1]
    left = ["suites/smoke/test_device_api.py::test_x"]
    (tmp_path / contract.HANDOFF[later.name].file).write_text(json.dumps(left))
    args = ["-k", "suites", "suites/smoke", "-ksmoke", "suites/smoke/test_device_api.py::t", "-v"]
    assert pass_plan.pass_args(later, tmp_path, ROOT, args) == [*left, "-k", "suites",
                                                              "-ksmoke", "-v"]
