"""Issue 36: a run that recorded less than it collected is not ok. Real pytest runs
through the runner: the plugin not loaded, a test file that exits at import
(``sys.exit``, ``os._exit``), and a normal run that stays complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_cases import write_cell

from accelgrid import cli, results
from accelgrid.base import contract, jsonio
from accelgrid.config.matrix import load_matrix
from accelgrid.run.cell import run_cell

TWO_TESTS = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"


def _run(proj: Path, python: str, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, dict, str]:
    (proj / "suites" / "payload" / "test_a.py").write_text(TWO_TESTS)
    rc = run_cell(load_matrix(proj / "matrix.yaml").cell("cpu-2.13"), python, proj,
                  proj / "results")
    folder = proj / "results" / "cpu-2.13"
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    return rc, summary, capsys.readouterr().err


def test_a_normal_run_stays_complete(mini_project, python, capsys) -> None:
    rc, summary, err = _run(mini_project(), python, capsys)
    assert rc == 0 and summary["counts"]["passed"] == 2
    assert "incomplete" not in summary and "incomplete" not in err


def test_a_run_without_the_plugin_is_incomplete(mini_project, python, capsys) -> None:
    proj = mini_project()
    (proj / "conftest.py").write_text("")  # pytest runs both tests, nothing records them
    rc, summary, err = _run(proj, python, capsys)
    assert rc == 1
    assert "the recorder never ran" in summary["incomplete"]
    assert "incomplete: the recorder never ran" in err


def test_a_file_that_sys_exits_at_import_is_named_and_the_rest_runs(
        mini_project, python, capsys) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_b.py").write_text(
        "import sys\nsys.exit(0)\n\ndef test_never():\n    pass\n")
    rc, summary, err = _run(proj, python, capsys)
    assert rc == 1
    assert summary["counts"]["passed"] == 2 and summary["counts"]["error"] == 1
    recs = {r["nodeid"]: r for r in results.read_records(
        proj / "results" / "cpu-2.13" / contract.TESTS_FILE)[0]}
    assert "exited at import (SystemExit: 0)" in recs["suites/payload/test_b.py"]["message"]


def test_a_file_that_os_exits_at_import_is_incomplete(mini_project, python, capsys) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_b.py").write_text(
        "import os\nos._exit(0)\n\ndef test_never():\n    pass\n")
    rc, summary, err = _run(proj, python, capsys)
    # Every worker dies collecting (xdist replaces it until --max-worker-restart): pytest
    # exits 5, no collection is recorded, and the run says so.
    assert rc != 0
    assert "no collection was recorded" in summary["incomplete"]
    assert "incomplete: no collection was recorded" in err


@pytest.mark.parametrize(("collected", "recorded", "passes", "expect"), [
    (["a", "b"], {"a", "b"}, [{}], None),                        # every test recorded
    (["a", "b"], {"a"}, [{}], "1 of the 2 collected tests have no record: b"),
    ([], set(), [{}], None),                                     # nothing collected
    (None, set(), [{"name": "single"}], "no collection was recorded"),
    (None, set(), None, "the recorder never ran"),
    (["a", "b", "c", "d", "e"], set(), [{}], "5 of the 5 collected tests have no record: "
     "a, b, c, ..."),
])
def test_incompleteness(collected, recorded, passes, expect) -> None:
    found = results.incompleteness(collected, recorded, passes)
    assert (found is None) if expect is None else (found or "").startswith(expect)


@pytest.mark.parametrize(("incomplete", "flags", "rc"), [
    (None, [], 0),                              # complete: the grid passes
    ("1 of the 2 collected tests have no record: t.py::b", [], 1),
    ("1 of the 2 collected tests have no record: t.py::b", ["--allow-incomplete"], 0),
])
def test_the_grid_gates_on_an_incomplete_run(tmp_path, capsys, incomplete, flags, rc) -> None:
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"t.py::a": "passed"})
    summary = {"cell": "cpu-2.13", "total": 1, "counts": {"passed": 1}, "problems": []}
    jsonio.write_json(cell / contract.SUMMARY_FILE,
                      {**summary, **({"incomplete": incomplete} if incomplete else {})})
    assert cli.main(["grid", str(cell), "--out", str(tmp_path / "out"), *flags]) == rc
    err = capsys.readouterr().err
    assert ("t.py::b" in err) == bool(incomplete)
    assert ("--allow-incomplete: accepted" in err) == bool(incomplete and flags)


def test_records_lost_after_the_run_make_it_incomplete(tmp_path, capsys) -> None:
    """The grid judges the plan (collected.json) against the records as they are when it
    reads them: a record lost after the run ended (its summary said complete) gates too."""
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"t.py::a": "passed"})
    jsonio.write_json(cell / contract.COLLECTED_FILE, ["t.py::a"])
    assert cli.main(["grid", str(cell), "--out", str(tmp_path / "out")]) == 0
    jsonio.write_json(cell / contract.COLLECTED_FILE, ["t.py::a", "t.py::gone"])
    assert cli.main(["grid", str(cell), "--out", str(tmp_path / "out")]) == 1
    assert "1 of the 2 collected tests have no record: t.py::gone" in capsys.readouterr().err
