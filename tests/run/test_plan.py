"""`accelgrid plan` prints the passes and pytest commands the run uses, from the run's own
function (accelgrid.run.passes.plan_run): compared here with a real run's commands, as
its pytest.log records them."""

from __future__ import annotations

import json
import re
import sys

import pytest
from helpers.mini_projects import run_request

from accelgrid import cli
from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.run.cell import run_cell

PAYLOAD = """
import pytest

def test_hidden():
    pass

@pytest.mark.sees_accelerators
def test_sees_them():
    pass
"""


def _plan(capsys, proj, *args: str) -> dict:
    capsys.readouterr()
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "plan", "cpu-2.13", "--no-venv",
                     "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_prints_each_pass_with_its_command(capsys, mini_project, monkeypatch) -> None:
    monkeypatch.delenv(contract.RESULTS_DIR, raising=False)
    monkeypatch.setenv(contract.WORKERS, "3")   # as the run takes it
    proj = mini_project()
    passes = _plan(capsys, proj)["passes"]
    assert [p["name"] for p in passes] == [contract.PASS_SINGLE, contract.PASS_HOST_ACCELERATORS]
    assert passes[1]["gets"] == contract.HANDOFF[contract.PASS_HOST_ACCELERATORS].file
    first = passes[0]["command"]
    assert first[:3] == [sys.executable, "-m", "pytest"]
    assert first[first.index("-n") + 1] == "3"
    assert f"--junitxml={proj.resolve() / 'results' / 'cpu-2.13' / 'junit.xml'}" in first
    # A selection: its arguments, and the run's folder for a selected run.
    first = _plan(capsys, proj, "--", "-k", "matmul")["passes"][0]["command"]
    assert first[-2:] == ["-k", "matmul"]
    assert any("/runs/<run-id>/junit.xml" in a for a in first)


@pytest.mark.slow  # a real cell run
def test_plan_commands_are_the_runs_commands(capsys, mini_project, monkeypatch) -> None:
    monkeypatch.delenv(contract.RESULTS_DIR, raising=False)
    monkeypatch.delenv(contract.WORKERS, raising=False)
    proj = mini_project().resolve()
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    planned = _plan(capsys, proj)["passes"]
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, sys.executable, proj, proj / "results")) == 0
    log = (proj / "results" / "cpu-2.13" / contract.PYTEST_LOG_FILE).read_text()
    ran = dict(re.findall(r"^accelgrid: pass (\S+) \(.*?\): (.*)$", log, re.M))
    assert list(ran) == [p["name"] for p in planned]
    single, later = planned
    assert ran[single["name"]] == " ".join(single["command"])
    # The later pass runs the tests the first left it, in place of the suites' paths.
    left = json.loads((proj / "results" / "cpu-2.13" / later["gets"]).read_text())
    assert left == ["suites/payload/test_payload.py::test_sees_them"]
    expected = [a for a in later["command"] if a not in cell.suite_paths] + left
    assert ran[later["name"]] == " ".join(expected)
