"""The suites pytest gets (accelgrid.run.suite_scope): none when the arguments name test
paths or node ids, every suite otherwise; an option's value is never taken for a path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.run import passes as pass_plan
from accelgrid.run import suite_scope

ROOT = Path(__file__).resolve().parents[2]

SUITES = ("suites/alpha", "suites/beta", "suites/gamma")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for suite in SUITES:
        (tmp_path / suite).mkdir(parents=True)
        (tmp_path / suite / f"test_{Path(suite).name}.py").write_text("def test_x():\n    pass\n")
    return tmp_path


@pytest.mark.parametrize(("args", "named"), [
    (["suites/alpha"], [0]),
    (["-k", "suites", "suites/alpha/test_alpha.py::test_x"], [2]),
    (["-ksuites/beta", "suites/gamma"], [1]),          # -k's value glued to it
    (["-xk", "suites/beta", "-v"], []),                # a cluster ending in -k takes the next
    (["--deselect", "suites/gamma", "-rA"], []),
    (["--deselect=suites/gamma", "suites/beta"], [1]),
    (["--", "suites/beta"], [1]),
    (["nosuchfile.py", "-k", "alpha"], []),            # not a path here: pytest says so
])
def test_named_paths(project: Path, args: list[str], named: list[int]) -> None:
    assert suite_scope.named_paths(args, project) == named
    assert suite_scope.suite_paths(SUITES, args, project) == ([] if named else list(SUITES))


def test_the_runner_gives_pytest_the_suites_or_the_paths() -> None:
    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    folder = Path("/results")

    def paths(args: list[str]) -> list[str]:
        cmd = pass_plan.pytest_command(cell, "python", folder, args, root=ROOT)
        first_option = next(i for i, a in enumerate(cmd) if a.startswith("-") and i > 2)
        return cmd[3:first_option]

    assert paths(["-k", "smoke"]) == list(cell.suite_paths)   # -k: pytest deselects
    assert paths([]) == list(cell.suite_paths)
    assert paths(["suites/smoke"]) == []
    # -k's value names a folder of the project: still an expression, not a path (pytest
    # used to get no suite and fall back to the project's own tests/).
    assert paths(["-k", "suites"]) == list(cell.suite_paths)


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
