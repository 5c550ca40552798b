"""Finding and reading results folders for reports (accelgrid.results: discover,
read_cell, fill_cell_name)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from helpers.report_cases import artifacts, broken_cells, write_cell

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.results import cellresults
from accelgrid.results.records import TestRecord as TypedRecord


def test_discovers_cells_in_an_artifacts_download(tmp_path: Path) -> None:
    art, _ = artifacts(tmp_path)
    folders, notes = cellresults.discover([art, tmp_path / "grid.html", art / "results-cuda-2.11"])
    assert sorted(p.name for p in folders) == ["cpu-2.13", "results-cuda-2.11"]
    assert notes == [f"{tmp_path / 'grid.html'}: a file, not a results folder; ignored"]


def test_a_cell_file_stands_for_its_folder_and_missing_paths_are_kept(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    empty = tmp_path / "empty"
    empty.mkdir()
    folders, notes = cellresults.discover([cell / contract.TESTS_FILE, cell, empty,
                                           tmp_path / "nope"])
    assert folders == [cell, empty, tmp_path / "nope"] and notes == []
    assert cellresults.is_cell(cell) and not cellresults.is_cell(empty)


def test_search_skips_tool_folders_and_stops_at_depth(tmp_path: Path) -> None:
    write_cell(tmp_path / "top" / ".nox", "cpu-2.4", {"t.py::a": "passed"})
    write_cell(tmp_path / "top" / "node_modules", "cpu-2.5", {"t.py::a": "passed"})
    deep = tmp_path / "top" / "a" / "b" / "c" / "d" / "e" / "f"
    write_cell(deep, "cpu-2.6", {"t.py::a": "passed"})
    shallow = write_cell(tmp_path / "top" / "a", "cpu-2.7", {"t.py::a": "passed"})
    folders, _ = cellresults.discover([tmp_path / "top"])
    assert folders == [shallow]


def test_read_cell_names_and_repairs(tmp_path: Path) -> None:
    cells = {p.name: cellresults.read_cell(p) for p in broken_cells(tmp_path)}
    missing, untested = cells["cpu-2.7"].error, cells["cpu-2.6"].error
    assert missing is not None and untested is not None
    assert "does not exist" in missing
    assert untested.startswith("no tests.jsonl")
    killed = cells["cpu-2.9"]
    assert killed.tests["suites/smoke/t.py::c"]["outcome"] == "error"
    assert killed.tests["suites/smoke/t.py::c"]["message"] == (
        "unknown outcome 'sideways' recorded; why sideways")
    assert any("unknown outcome 'sideways'" in p for p in killed.problems)
    assert any("never finished" in p for p in killed.problems)
    assert cells["cpu-2.13"].error is None and not cells["cpu-2.13"].problems


def test_fill_cell_name_from_the_records(tmp_path: Path) -> None:
    art, flat = artifacts(tmp_path)
    cell = cellresults.load_cell(flat)
    assert cell.name == "cuda-2.11"  # the folder's name
    uploaded = cellresults.load_cell(art / "results-cuda-2.11")
    assert uploaded.name == "results-cuda-2.11"
    cellresults.fill_cell_name(uploaded)
    assert uploaded.name == "cuda-2.11"
    assert cellresults.read_cell(art / "results-cuda-2.11").name == "cuda-2.11"
    # env.json's name wins over the records'.
    named = write_cell(tmp_path / "n", "cpu-2.13", {"t.py::a": "passed"})
    (named / contract.TESTS_FILE).write_text(json.dumps(
        {"nodeid": "t.py::a", "outcome": "passed", "cell": "other"}) + "\n")
    assert cellresults.read_cell(named).name == "cpu-2.13"


# --- the writing side: safe text, run ids, a cell's folder -----------------------------

BAD = b"\xff".decode("utf-8", "surrogateescape")


def test_safe_text_escapes_lone_surrogates_only() -> None:
    assert jsonio.safe_text("plain ünïcode ✓") == "plain ünïcode ✓"
    assert jsonio.safe_text("file-" + BAD) == "file-\\xff"  # the byte it stood for
    assert jsonio.safe_text("x\ud800y") == "x\\ud800y"  # not from surrogateescape
    data = {"k" + BAD: ["v" + BAD, ("t" + BAD, 1)], "n": None}
    assert jsonio.safe(data) == {"k\\xff": ["v\\xff", ("t\\xff", 1)], "n": None}


def test_writers_make_every_string_safe(tmp_path: Path) -> None:
    results.append_record(tmp_path / contract.TESTS_FILE, {"nodeid": "t.py::a" + BAD,
                                                    "outcome": "failed", "message": BAD})
    jsonio.write_json(tmp_path / contract.ENV_FILE, {"env": {"ACCELGRID_X": BAD}})
    results.mark_running(tmp_path, "gw0", "t.py::b" + BAD, 5)
    for f in (contract.TESTS_FILE, contract.ENV_FILE, f"{contract.RUNNING_DIR}/gw0.json"):
        text = (tmp_path / f).read_text(encoding="utf-8")
        assert "\\\\xff" in text and "udcff" not in text  # JSON of the text \xff


def _records(folder: Path) -> list[TypedRecord]:
    return results.read_records(folder / contract.TESTS_FILE)[0]


def test_finalize_and_readers_keep_to_the_run(tmp_path: Path) -> None:
    jsonio.write_json(tmp_path / contract.ENV_FILE, {"cell": "cpu-2.13", "run_id": "new",
                                                "status": "running", "selection": ["-x"]})
    jsonio.write_json(tmp_path / contract.COLLECTED_FILE, ["t.py::a", "t.py::b", "t.py::c"])
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::a", "outcome": "passed", "run_id": "new"})
    # A stray record of another run (an orphan of a killed run) must not count.
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::b", "outcome": "failed", "run_id": "old"})
    summary = results.finalize(tmp_path, "stopped", {"run_id": "new", "selection": ["-x"],
                                                     "pytest_args": ["-x"]})
    assert summary["counts"]["passed"] == 1 and summary["counts"]["not-run"] == 2
    assert (summary["run_id"], summary["selection"], summary["partial"]) == ("new", ["-x"],
                                                                            True)
    assert all(r["run_id"] in ("new", "old") for r in _records(tmp_path))
    cell = cellresults.load_cell(tmp_path)
    assert {n: r["outcome"] for n, r in cell.tests.items()} == {
        "t.py::a": "passed", "t.py::b": "not-run", "t.py::c": "not-run"}
    assert any("1 record(s) of another run ignored" in p for p in cell.problems)
    assert any("a selected run (pytest -x)" in p for p in cell.problems)


def test_a_full_run_clears_the_cell_folder_but_keeps_selected_runs(tmp_path: Path) -> None:
    cell = tmp_path / "cpu-2.13"
    selected = results.run_folder(cell, "abc", partial=True)
    selected.mkdir(parents=True)
    (cell / contract.LOCK_FILE).write_text("held")
    (cell / contract.TESTS_FILE).write_text("{}\n")
    (cell / contract.RUNNING_DIR).mkdir()
    results.clear_for_run(cell)
    assert sorted(p.name for p in cell.iterdir()) == [contract.LOCK_FILE, contract.RUNS_DIR]
    assert results.run_folder(cell, "abc", partial=False) == cell
    assert results.last_run(cell) == (None, cell)
    results.write_last_run(cell, "abc", selected, ["-k", "x"])
    assert results.last_run(cell) == ("abc", selected.resolve())
    jsonio.write_json(cell / contract.LAST_RUN_FILE, {"run_id": "z", "folder": "../../etc"})
    assert results.last_run(cell) == (None, cell)  # never out of the cell's folder
    for age, name in enumerate(("r3", "r2", "r1")):
        (cell / contract.RUNS_DIR / name).mkdir()
        os.utime(cell / contract.RUNS_DIR / name, (1e9 - age * 100, 1e9 - age * 100))
    results.prune_runs(cell, 2)
    assert sorted(p.name for p in (cell / contract.RUNS_DIR).iterdir()) == ["abc", "r3"]


def test_jsonl_lines_are_read_as_json_loads_reads_each(tmp_path: Path) -> None:
    # read_jsonl scans most lines with json's C scanner directly: every other shape of
    # line must still come out as json.loads of that line alone says.
    rec = '{"nodeid": "suites/s/t.py::a", "outcome": "passed", "duration": 0.5}'
    lines = [rec, rec + "\r", " " + rec, rec + "  ", rec + " x", rec + rec, rec + "\t",
             '{"nodeid": "b", "outcome": "failed", "duration": NaN}', "\ufeff" + rec,
             '{"nodeid": "c", "outcome":', '"passed"}', "[1]", '{"nodeid": "d"}',
             '{"nodeid": "e", "outcome": "passed", "n": ' + "9" * 5000 + "}",
             '{"nodeid": "f", "outcome": "passed", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
             '{"nodeid": "g", "outcome": "passed"}']
    path = tmp_path / contract.TESTS_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected, bad = [], []
    for n, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            bad.append(n)
            continue
        if isinstance(value, dict) and {"nodeid", "outcome"} <= value.keys():
            expected.append(value)
        else:
            bad.append(n)
    records, problems = jsonio.read_jsonl(path, ("nodeid", "outcome"))
    assert json.dumps(records) == json.dumps(expected)  # NaN compares equal this way
    assert [int(p.split(":")[1]) for p in problems] == bad
    assert [r["nodeid"] for r in records] == ["suites/s/t.py::a"] * 5 + ["b", "g"]


# --- passes writing one folder at once (the all-devices pass beside the pinned one) -----

def _bump(folder: Path, times: int) -> None:
    def one_more(value: object) -> int:
        time.sleep(0.002)   # a wide read-to-write window: an unlocked update loses others'
        return (value if isinstance(value, int) else 0) + 1

    for _ in range(times):
        jsonio.update_json(folder / "count.json", one_more)


def _append(folder: Path, who: int, times: int) -> None:
    for i in range(times):
        results.append_record(folder / contract.TESTS_FILE, {"nodeid": f"t.py::w{who}_{i}",
                                                       "outcome": "passed",
                                                       "message": str(who) * 20000})


def _processes(target, *args_per_process) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=args) for args in args_per_process]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


@pytest.mark.parametrize("lock", [True, False])
def test_updates_from_processes_at_once_are_never_lost(tmp_path: Path, monkeypatch,
                                                       lock: bool) -> None:
    if not lock:  # the planted fault: the same read-modify-write without the lock
        monkeypatch.setattr(jsonio, "locked", lambda folder: contextlib.nullcontext())
    _processes(_bump, *[(tmp_path, 50)] * 4)
    count = json.loads((tmp_path / "count.json").read_text())
    assert count == 200 if lock else count < 200


def test_records_appended_at_once_stay_whole(tmp_path: Path) -> None:
    _processes(_append, *[(tmp_path, who, 150) for who in range(4)])
    recs, problems = results.read_records(tmp_path / contract.TESTS_FILE)
    assert not problems and len(recs) == 600
    assert all(r["message"] == r["nodeid"][7] * 20000 for r in recs)


def test_an_error_record_is_written_once_per_run(tmp_path: Path) -> None:
    rec: TypedRecord = {"nodeid": "suites/x/test_broken.py", "outcome": "error", "run_id": "r1"}
    assert results.append_record_once(tmp_path / contract.TESTS_FILE, rec)
    assert not results.append_record_once(tmp_path / contract.TESTS_FILE, rec)
    assert results.append_record_once(tmp_path / contract.TESTS_FILE, {**rec, "run_id": "r2"})
    assert len(results.read_records(tmp_path / contract.TESTS_FILE)[0]) == 2


def test_pass_times_from_the_runners_clock_and_the_records() -> None:
    t0 = 1_700_000_000.0
    passes = [{"name": "pinned", "workers": 2, "rc": 0, "start": t0 + 1, "end": t0 + 31},
              {"name": "all-devices", "workers": 1, "rc": 0, "beside": "pinned",
               "start": t0 + 1.5, "end": t0 + 21.5}]
    recs: list[TypedRecord] = [
        {"nodeid": "a", "outcome": "passed", "pass": "pinned", "worker": "gw0",
         "start": t0 + 7},
        {"nodeid": "b", "outcome": "passed", "pass": "pinned", "worker": "gw1",
         "start": t0 + 8},
        {"nodeid": "c", "outcome": "passed", "pass": "pinned", "worker": "gw0",
         "start": t0 + 20},
        {"nodeid": "d", "outcome": "passed", "pass": "all-devices", "worker": "gw0",
         "start": t0 + 6.5},
        {"nodeid": "e", "outcome": "not-run"}]     # finalize's: no pass, no start
    timing = results.pass_times(recs, passes, t0)
    assert timing["wall_s"] == 31.0
    pinned, beside = timing["passes"]
    assert (pinned["wall_s"], pinned["tests"], pinned["first_test_s"]) == (30.0, 3, 6.0)
    assert pinned["workers_first_test_s"] == {"gw0": 6.0, "gw1": 7.0}
    assert pinned["start"] == "2023-11-14T22:13:21.000+00:00" and pinned["beside"] is None
    assert (beside["beside"], beside["wall_s"], beside["first_test_s"]) == ("pinned", 20.0, 5.0)


def test_a_finished_run_leaves_no_running_files(tmp_path: Path) -> None:
    """Markers cleared by workers that finished go at the run's end (with running/); a
    marker of a test still running when the run ended stays beside its crash record."""
    jsonio.write_json(tmp_path / contract.ENV_FILE, {"cell": "cpu-2.13", "run_id": "r",
                                                "status": "running"})
    results.mark_running(tmp_path, "gw0", "t.py::a", None, slot="single-gw0")
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::a", "outcome": "passed", "run_id": "r"})
    results.clear_running(tmp_path, "single-gw0")
    results.finalize(tmp_path, "ended", {"run_id": "r"})
    assert not (tmp_path / contract.RUNNING_DIR).exists()
    # A test that was running when the run ended: its marker stays, and it is a crash.
    results.mark_running(tmp_path, "gw1", "t.py::b", None, slot="single-gw1")
    results.mark_running(tmp_path, "gw0", "t.py::c", None, slot="single-gw0")
    results.clear_running(tmp_path, "single-gw0")
    results.finalize(tmp_path, "killed", {"run_id": "r"})
    left = sorted(p.name for p in (tmp_path / contract.RUNNING_DIR).iterdir())
    assert left == ["single-gw1.json"]
    assert {r["nodeid"]: r["outcome"] for r in _records(tmp_path)}["t.py::b"] == "crashed"
