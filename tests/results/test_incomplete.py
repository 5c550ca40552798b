"""Issue 36: a run that recorded less than it collected is not ok. Real pytest runs
through the runner: the plugin not loaded, a test file that exits at import
(``sys.exit``, ``os._exit``), and a normal run that stays complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.mini_projects import run_request
from helpers.report_cases import write_cell

from accelgrid import cli, results
from accelgrid.base import contract, jsonio
from accelgrid.config.matrix import load_matrix
from accelgrid.results.records import TestRecord as TypedRecord
from accelgrid.run.cell import run_cell

TWO_TESTS = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"


def _run(proj: Path, python: str, capsys: pytest.CaptureFixture[str],
         posargs: list[str] | None = None) -> tuple[int, dict, str]:
    (proj / "suites" / "payload" / "test_a.py").write_text(TWO_TESTS)
    rc = run_cell(run_request(load_matrix(proj / "matrix.yaml").cell("cpu-2.13"), python, proj,
                              proj / "results", posargs or []))
    folder = proj / "results" / "cpu-2.13"
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    return rc, summary, capsys.readouterr().err


def test_a_normal_run_stays_complete(mini_project, python, capsys) -> None:
    rc, summary, err = _run(mini_project(), python, capsys)
    assert rc == 0 and summary["counts"]["passed"] == 2
    assert "incomplete" not in summary and "incomplete" not in err


def test_a_run_without_the_plugin_is_incomplete(mini_project, python, capsys) -> None:
    proj = mini_project()
    # The runner names the plugin itself (PYTEST_PLUGINS); pytest's own -p no: blocks it:
    # pytest runs both tests, nothing records them.
    (proj / "conftest.py").write_text("")
    rc, summary, err = _run(proj, python, capsys,
                            ["-p", "no:accelgrid.testing.pytest_plugin"])
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


def test_a_file_that_os_exits_at_import_is_named_and_the_rest_runs(
        mini_project, python, capsys) -> None:
    """Every test process dies importing the file (xdist replaces its workers until
    --max-worker-restart, then pytest ends): the runner names the file in one line, it is
    an error record, and the pass runs again without it."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_b.py").write_text(
        "import os\nos._exit(0)\n\ndef test_never():\n    pass\n")
    rc, summary, err = _run(proj, python, capsys)
    assert rc == 1
    assert summary["counts"]["passed"] == 2 and summary["counts"]["error"] == 1
    assert "incomplete" not in summary
    named = [ln for ln in err.splitlines() if "suites/payload/test_b.py" in ln]
    assert len(named) == 1 and "ended its test process at import" in named[0]
    recs = {r["nodeid"]: r for r in results.read_records(
        proj / "results" / "cpu-2.13" / contract.TESTS_FILE)[0]}
    assert recs["suites/payload/test_b.py"]["outcome"] == "error"
    assert not (proj / "results" / "cpu-2.13" / results.IMPORTING_DIR).exists()


def test_a_spec_file_that_os_exits_at_import_is_named(mini_project, python, capsys) -> None:
    """A device spec file that calls os._exit at import: it ended the runner itself while
    loading the matrix (exit 0, no word) and every test process; now loading it is a
    SpecDidNotRun (the matrix falls back to its literal facts), the cell's pytest stops
    with a usage error naming the file, and the run fails."""
    from helpers.device_cases import FAKE_DEVICE

    proj = mini_project()
    text = (proj / "matrix.yaml").read_text().replace("devices:\n", FAKE_DEVICE, 1)
    (proj / "matrix.yaml").write_text(text.replace("  device: [cpu, xpu]",
                                                   "  device: [cpu, xpu, fakeacc]"))
    (proj / "fake_device_spec.py").write_text(
        "DEVICE_NAME = 'fakeacc'\nimport os\nos._exit(0)\n")
    (proj / "suites" / "payload" / "test_a.py").write_text(TWO_TESTS)
    cell = load_matrix(proj / "matrix.yaml").cell("fakeacc-2.13")
    rc = run_cell(run_request(cell, python, proj, proj / "results"))
    err = capsys.readouterr().err
    assert rc == 4
    named = [ln for ln in err.splitlines() if "fake_device_spec.py" in ln]
    assert len(named) == 1 and "it calls os._exit(0) at import" in named[0], err


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


# --- pytest's own counts against the recorder's (results.plan) -------------------------

def _plan(*passes: dict) -> dict:
    return {"run_id": "r", "cell": "cpu-2.13", "shard": None, "inputs": {}, "passes": list(passes)}


REC: list[TypedRecord] = [
    {"nodeid": "t.py::a", "outcome": "passed", "pass": "single"},
    {"nodeid": "t.py::b", "outcome": "failed", "pass": "single"},
    {"nodeid": "t.py", "outcome": "error", "pass": "single", "phase": "collect"},
    {"nodeid": "t.py::c", "outcome": "passed", "pass": "host-accelerators"}]


@pytest.mark.parametrize(("passes", "expect"), [
    ([{"name": "single", "collected": 2, "reported": 2}], None),
    ([{"name": "single", "collected": 3, "reported": 2}],
     "pass single: pytest collected 3 and reported 2, the recorder wrote 2"),
    ([{"name": "single", "collected": 2, "reported": 3}],
     "pass single: pytest collected 2 and reported 3, the recorder wrote 2"),
    ([{"name": "single", "collected": 1, "reported": 1}],
     "pass single: pytest collected 1 and reported 1, the recorder wrote 2"),
    ([{"name": "single", "collected": 2}], None),              # no terminal reporter
    ([{"name": "single"}], None),                              # pytest never reached its end
    ([{"name": "single", "collected": 2, "reported": 2},
      {"name": "host-accelerators", "collected": 1, "reported": 1}], None),
    ([{"name": "host-accelerators", "collected": 2, "reported": 2}],
     "pass host-accelerators: pytest collected 2 and reported 2, the recorder wrote 1"),
    ([{"name": "device-alone", "collected": 1, "reported": 1}],
     "pass device-alone: pytest collected 1 and reported 1, the recorder wrote 0"),
])
def test_pytest_counts_against_the_records(passes, expect) -> None:
    from accelgrid.results import plan

    assert plan.count_mismatch(_plan(*passes), REC) == expect
    assert plan.count_mismatch(None, REC) is None  # a folder from before plans


def test_records_lost_in_place_are_caught_by_pytests_counts(mini_project, python,
                                                            capsys, tmp_path) -> None:
    """A real run whose last test empties tests.jsonl in place (the same file, so the
    recorder's restore does not see it) and collected.json: pytest's own counts in
    plan.json say 3 tests ran against the recorder's 1, and the run and the grid say
    incomplete in one line naming the counts."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_z.py").write_text(
        "import os, pathlib\n\ndef test_z():\n"
        "    folder = pathlib.Path(os.environ['ACCELGRID_RESULTS'])\n"
        "    open(folder / 'tests.jsonl', 'w').close()\n"
        "    (folder / 'collected.json').write_text('[]')\n")
    rc, summary, err = _run(proj, python, capsys)
    assert rc == 1
    line = "pass single: pytest collected 3 and reported 3, the recorder wrote 1"
    assert line in summary["incomplete"] and line in err
    folder = proj / "results" / "cpu-2.13"
    assert cli.main(["grid", str(folder), "--out", str(tmp_path / "out")]) == 1
    assert line in capsys.readouterr().err


@pytest.mark.parametrize(("body", "why"), [
    ("import os\nos._exit(3)\n", "it calls os._exit(3) at import"),
    ("import sys\nsys.exit(2)\n", "it exits at import (SystemExit: 2)"),
])
def test_a_spec_that_exits_at_import_did_not_run(tmp_path, body, why) -> None:
    """Loading a spec that ends its process at import raises (the runner and the test
    processes live on to say so); os._exit is the real one again afterwards."""
    import os

    from accelgrid.devices import spec

    real = os._exit
    path = tmp_path / "exits_spec.py"
    path.write_text("DEVICE_NAME = 'exitacc'\n" + body)
    with pytest.raises(spec.SpecDidNotRun, match=f"{path}: running the device spec failed: "
                       + why.replace("(", r"\(").replace(")", r"\)")):
        spec.load(path)
    assert os._exit is real
    # The matrix's view: its literal facts, the reason in its source.
    assert why in spec.resolve(path).source and spec.resolve(path).name == "exitacc"
