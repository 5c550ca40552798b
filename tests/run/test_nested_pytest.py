"""A pytest that a cell's test starts (transformers' ``run_test_using_subprocess`` re-runs
a test that way; a test of a test runner does the same) inherits the cell's variables, and
its tests must not land in the cell's records: a real cell run through the runner, whose
test starts pytest on a file of the project (so the project's conftest and the recording
plugin load there too), plain and with two xdist workers."""
from __future__ import annotations

from pathlib import Path

from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.run import cellenv, preflight
from accelgrid.run.cell import run_cell

INNER = '''
def test_inner_one():
    pass

def test_inner_two():
    assert 0, "a failure of the inner run"
'''

OUTER = '''
import os, subprocess, sys
from pathlib import Path

INNER = Path(__file__).with_name("inner_case.py")

def test_starts_pytest_itself():
    proc = subprocess.run([sys.executable, "-m", "pytest", str(INNER), "-q",
                           "-p", "no:cacheprovider"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # its failure

def test_starts_pytest_with_workers():
    proc = subprocess.run([sys.executable, "-m", "pytest", str(INNER), "-q", "-n", "2",
                           "-p", "xdist.plugin", "-p", "no:cacheprovider"],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]

def test_after():
    pass
'''


def test_a_pytest_started_by_a_test_records_nothing(mini_project, python) -> None:
    proj = mini_project()
    payload = proj / "suites" / "payload"
    (payload / "inner_case.py").write_text(INNER)
    (payload / "test_outer.py").write_text(OUTER)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, proj / "results")) == 0
    folder = proj / "results" / "cpu-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems, problems
    names = sorted(r["nodeid"].split("::")[-1] for r in recs)
    assert [n for n in names if "inner" in n] == []
    assert {"test_starts_pytest_itself", "test_starts_pytest_with_workers",
            "test_after"} <= set(names)
    assert all(r["outcome"] == "passed" for r in recs
               if r["nodeid"].startswith("suites/payload/test_outer.py")), recs
    assert not list(folder.rglob("*inner*"))  # no worker markers or files of its own


def test_the_runner_does_not_hand_a_recorder_mark_on(tmp_path: Path, mini_project,
                                                     monkeypatch) -> None:
    """`accelgrid run` started from inside a cell's test is a run of its own: it records."""
    proj = mini_project()
    monkeypatch.setenv("ACCELGRID_RECORDER_PID", "1")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    env = cellenv.cell_env(cell, proj, tmp_path / "r",
                           checked=preflight.check(cell, proj))
    assert "ACCELGRID_RECORDER_PID" not in env
