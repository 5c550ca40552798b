"""Reading a cell back (accelgrid.results.cellresults) on folders the results API writes:
each case pins a behaviour a planted fault changed unseen (docs/design/mutation.md,
``python tools/mutate.py cellresults``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from accelgrid import results
from accelgrid.base import contract, jsonio, outputs
from accelgrid.base.errors import InvalidInput
from accelgrid.results import cellresults
from accelgrid.results import plan as run_plan

A = "suites/smoke/test_device_api.py::test_a"
B = "suites/smoke/test_device_api.py::test_b"


def cell_folder(root: Path, name: str = "cpu-2.13", env: dict[str, Any] | None = None,
                records: dict[str, str] | None = None) -> Path:
    """A finished cell's folder, written as a run writes it (env.json, appended records)."""
    folder = root / name
    folder.mkdir(parents=True)
    jsonio.write_json(folder / contract.ENV_FILE, {
        "cell": name, "device_type": "cpu", "start": "s", "end": "e", "status": "finished",
        **(env or {})})
    for nodeid, outcome in (records if records is not None else {A: "passed"}).items():
        results.append_record(folder / contract.TESTS_FILE,
                              {"nodeid": nodeid, "outcome": outcome, "cell": name})
    return folder


def test_env_torch_devices_keep_only_the_mappings(tmp_path: Path) -> None:
    cell = cellresults.read_cell(cell_folder(tmp_path, env={"torch": {
        "version": "2.13.0", "devices": [{"name": "Box"}, "junk", 3, None]}}))
    torch = cell.env["torch"]
    assert torch is not None
    assert torch["devices"] == [{"name": "Box"}]
    assert torch["version"] == "2.13.0"


def test_a_long_bad_cell_name_is_quoted_cut_to_60_characters(tmp_path: Path) -> None:
    bad = "/" + "x" * 100
    cell = cellresults.read_cell(cell_folder(tmp_path, env={"cell": bad}))
    note = next(p for p in cell.problems if "is not a cell name" in p)
    assert note == f"env.json: cell {bad[:60]!r} is not a cell name; ignored"
    assert cell.name == "cpu-2.13" and "cell" not in cell.env


def test_a_path_that_is_not_a_folder_is_an_errored_cell(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    cell = cellresults.load_cell(plain)
    assert cell.error == f"{plain} is not a results folder"
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    assert cellresults.load_cell(loop).error == f"{loop} is not a results folder (a symlink loop)"
    assert cellresults.load_cell(tmp_path / "absent").error == (
        f"{tmp_path / 'absent'} is not a results folder")


def test_a_name_too_long_to_stat_is_an_errored_cell_not_a_traceback(tmp_path: Path) -> None:
    # ENAMETOOLONG: Path.is_dir raises it (only ENOENT-like errors read as False).
    long = tmp_path / ("x" * 300)
    assert cellresults.load_cell(long).error == f"{long} is not a results folder"
    assert cellresults.read_cell(long).error == f"results folder {long} does not exist"


def test_the_cells_name_is_env_jsons_not_the_folders(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path, name="results-artifact-7", env={"cell": "cuda-2.11"})
    cell = cellresults.load_cell(folder)
    assert cell.name == "cuda-2.11" and cell.error is None
    without = cell_folder(tmp_path, name="cpu-2.9", env={"cell": None})
    assert cellresults.load_cell(without).name == "cpu-2.9"


def test_collected_tests_without_a_record_make_the_cell_incomplete(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path, records={A: "passed"})
    jsonio.write_json(folder / contract.COLLECTED_FILE, [A, B])
    cell = cellresults.read_cell(folder)
    assert cell.problems == [cellresults.INCOMPLETE_PREFIX + "1 of the 2 collected tests "
                             f"have no record: {B}"]
    jsonio.write_json(folder / contract.COLLECTED_FILE, [A])
    assert cellresults.read_cell(folder).problems == []


def test_pytests_own_counts_against_the_records(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path, records={})
    for nodeid in (A, B):
        results.append_record(folder / contract.TESTS_FILE, {
            "nodeid": nodeid, "outcome": "passed", "pass": contract.PASS_SINGLE})
    run_plan.start_pass(folder, contract.PASS_SINGLE, None, "cpu-2.13", env={})
    run_plan.end_pass(folder, contract.PASS_SINGLE, 3, 3, {"passed": 3}, 0)
    cell = cellresults.read_cell(folder)
    assert cell.plan is not None
    assert cell.problems == [cellresults.INCOMPLETE_PREFIX + (
        f"pass {contract.PASS_SINGLE}: pytest collected 3 and reported 3, the recorder "
        "wrote 2")]
    run_plan.end_pass(folder, contract.PASS_SINGLE, 2, 2, {"passed": 2}, 0)
    assert cellresults.read_cell(folder).problems == []


def test_a_summary_linked_from_outside_the_folder_is_not_read(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path, records={})
    results.append_record(folder / contract.TESTS_FILE,
                          {"nodeid": A, "outcome": "passed", "run_id": "r1"})
    outside = tmp_path / "elsewhere.json"
    jsonio.write_json(outside, {"run_id": "r2", "selection": ["-k", "x"]})
    os.symlink(outside, folder / contract.SUMMARY_FILE)
    cell = cellresults.read_cell(folder)
    assert cell.error is None and list(cell.tests) == [A]
    assert not any("selected run" in p for p in cell.problems)
    # The same summary inside the folder names the run: its selection shows.
    (folder / contract.SUMMARY_FILE).unlink()
    jsonio.write_json(folder / contract.SUMMARY_FILE, {"run_id": "r1", "selection": ["-k", "x"]})
    assert cellresults.read_cell(folder).problems == [
        "a selected run (pytest -k x), not the whole cell"]


def test_run_of_reads_env_json_then_summary_json(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path, env={"run_id": "r1", "pytest_args": ["-x"],
                                        "selection": []})
    assert cellresults.run_of(folder) == {"run_id": "r1", "pytest_args": ["-x"],
                                          "selection": []}
    jsonio.write_json(folder / contract.SUMMARY_FILE, {"run_id": "r0", "selection": ["a"]})
    assert cellresults.run_of(folder)["run_id"] == "r1"
    jsonio.write_json(folder / contract.ENV_FILE, {"cell": "cpu-2.13"})   # no run id
    assert cellresults.run_of(folder) == {"run_id": "r0", "selection": ["a"]}
    assert cellresults.run_of(folder, read_summary=False) == {}
    assert cellresults.run_of(folder, env={"run_id": "r9"}) == {"run_id": "r9"}


def test_a_reports_output_folder_is_passed_over_with_a_note(tmp_path: Path) -> None:
    out = tmp_path / "predicted"
    out.mkdir()
    jsonio.write_json(out / "grid.json", {})
    folders, notes = cellresults.discover([out])
    assert folders == []
    assert notes == [f"{out}: accelgrid's own output (report files), not a cell run; "
                     "passed over"]


def test_a_cell_folder_given_is_the_cell_not_its_selected_runs(tmp_path: Path) -> None:
    folder = cell_folder(tmp_path)
    cell_folder(folder / contract.RUNS_DIR, name="r1")   # results/<cell>/runs/<run-id>/
    assert cellresults.discover([folder]) == ([folder], [])


def test_the_reproductions_folder_is_left_out_with_a_note(tmp_path: Path) -> None:
    repro = tmp_path / contract.REPRO_DIR
    cell_folder(repro / "pytorch-pytorch-1", name="cpu-2.13")
    folders, notes = cellresults.discover([repro])
    assert folders == []
    assert notes == [f"{repro}: reproductions (accelgrid repro), left out of the cells' "
                     f"grid; name {repro}/<issue> to show them"]


def test_require_runs_names_the_path_that_holds_no_run(tmp_path: Path) -> None:
    cell = cell_folder(tmp_path / "results")
    report = tmp_path / "site"
    report.mkdir()
    jsonio.write_json(report / "grid.json", {})
    assert cellresults.require_runs([cell, report]) == [cell, report]
    with pytest.raises(InvalidInput) as absent:
        cellresults.require_runs([cell, tmp_path / "typo"])
    assert str(absent.value) == f"{tmp_path / 'typo'}: no such file or folder"
    with pytest.raises(InvalidInput) as only_report:
        cellresults.require_runs([report])   # passed over, and nothing else: no results
    assert str(only_report.value) == f"no results folders found in {report}"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInput, match="empty: holds no cell run"):
        cellresults.require_runs([cell, empty])
    long = str(tmp_path / ("y" * 400))
    with pytest.raises(InvalidInput) as too_long:
        cellresults.require_runs([Path(long)])
    assert str(too_long.value) == f"{long[:199]}…: cannot be read (File name too long)"


def test_require_runs_passes_over_plain_files_and_takes_a_cells_file(tmp_path: Path) -> None:
    cell = cell_folder(tmp_path / "results")
    page = tmp_path / "results" / "grid.html"   # results/* matches the grids too
    page.write_text("<html/>")
    assert cellresults.require_runs([cell, page]) == [cell, page]
    records = cell / contract.TESTS_FILE
    assert cellresults.require_runs([records]) == [records]
    with pytest.raises(InvalidInput) as only_page:
        cellresults.require_runs([page])
    assert str(only_page.value) == f"no results folders found in {page}"


def test_a_cell_folder_holding_a_report_file_is_still_a_cell(tmp_path: Path) -> None:
    cell = cell_folder(tmp_path)
    jsonio.write_json(cell / "grid.json", {})   # grid --out into the cell's folder
    assert cellresults.discover([cell]) == ([cell], [])


def test_a_folder_marked_as_a_reports_output_is_passed_over_by_its_manifest(
        tmp_path: Path) -> None:
    out = tmp_path / "predicted"
    outputs.mark(out, "ops-predict")   # its manifest only, no report file yet
    assert cellresults.discover([out]) == ([], [
        f"{out}: accelgrid's own output (ops-predict), not a cell run; passed over"])
    bisect = tmp_path / "bisect"
    outputs.mark(bisect, "bisect")     # a run kind: searched, its runs noted
    assert cellresults.discover([bisect])[1] == []


def test_results_with_a_grid_written_beside_the_cells_are_searched(tmp_path: Path) -> None:
    cell = cell_folder(tmp_path / "results")
    jsonio.write_json(tmp_path / "results" / "grid.json", {})   # grid --out results
    assert cellresults.discover([tmp_path / "results"]) == ([cell], [])


def test_a_bisections_runs_under_results_are_left_out_with_a_note(tmp_path: Path) -> None:
    cell = cell_folder(tmp_path / "results")
    bisect = tmp_path / "results" / "bisect-1"
    outputs.mark(bisect, "bisect")
    cell_folder(bisect, name="cpu-2.13")   # one step's cell run
    assert cellresults.discover([tmp_path / "results"]) == ([cell], [
        f"{bisect}: a bisection's runs (accelgrid bisect), left out of the cells' grid; "
        f"name {bisect} to show them"])


def test_without_env_json_the_name_comes_from_a_record_that_names_a_cell(
        tmp_path: Path) -> None:
    folder = tmp_path / "artifact-3"
    folder.mkdir()
    for cell in (None, [7], "../evil", "cuda-2.11"):   # [7]: dropped on reading
        results.append_record(folder / contract.TESTS_FILE,
                              {"nodeid": f"t.py::t{cell}", "outcome": "passed", "cell": cell})
    assert cellresults.read_cell(folder).name == "cuda-2.11"
    bad_only = tmp_path / "artifact-4"
    bad_only.mkdir()
    results.append_record(bad_only / contract.TESTS_FILE,
                          {"nodeid": "t.py::t", "outcome": "passed", "cell": "../evil"})
    assert cellresults.read_cell(bad_only).name == "artifact-4"


def test_require_runs_cuts_the_paths_it_names_to_one_short_line(tmp_path: Path) -> None:
    pages = []
    for letter in "ab":
        page = tmp_path / (letter * 150)
        page.mkdir()
        jsonio.write_json(page / "grid.json", {})   # passed over: no cell anywhere
        pages.append(page)
    with pytest.raises(InvalidInput) as none:
        cellresults.require_runs(pages)
    names = f"{pages[0]} {pages[1]}"
    assert str(none.value) == f"no results folders found in {names[:199]}…"
