"""Finding and reading results folders for reports (accelgrid.results: discover,
read_cell, fill_cell_name)."""

from __future__ import annotations

import json
from pathlib import Path

from report_cases import artifacts, broken_cells, write_cell

from accelgrid import results


def test_discovers_cells_in_an_artifacts_download(tmp_path: Path) -> None:
    art, _ = artifacts(tmp_path)
    folders, notes = results.discover([art, tmp_path / "grid.html", art / "results-cuda-2.11"])
    assert sorted(p.name for p in folders) == ["cpu-2.13", "results-cuda-2.11"]
    assert notes == [f"{tmp_path / 'grid.html'}: a file, not a results folder; ignored"]


def test_a_cell_file_stands_for_its_folder_and_missing_paths_are_kept(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    empty = tmp_path / "empty"
    empty.mkdir()
    folders, notes = results.discover([cell / results.TESTS, cell, empty, tmp_path / "nope"])
    assert folders == [cell, empty, tmp_path / "nope"] and notes == []
    assert results.is_cell(cell) and not results.is_cell(empty)


def test_search_skips_tool_folders_and_stops_at_depth(tmp_path: Path) -> None:
    write_cell(tmp_path / "top" / ".nox", "cpu-2.4", {"t.py::a": "passed"})
    write_cell(tmp_path / "top" / "node_modules", "cpu-2.5", {"t.py::a": "passed"})
    deep = tmp_path / "top" / "a" / "b" / "c" / "d" / "e" / "f"
    write_cell(deep, "cpu-2.6", {"t.py::a": "passed"})
    shallow = write_cell(tmp_path / "top" / "a", "cpu-2.7", {"t.py::a": "passed"})
    folders, _ = results.discover([tmp_path / "top"])
    assert folders == [shallow]


def test_read_cell_names_and_repairs(tmp_path: Path) -> None:
    cells = {p.name: results.read_cell(p) for p in broken_cells(tmp_path)}
    assert "does not exist" in cells["cpu-2.7"].error
    assert cells["cpu-2.6"].error.startswith("no tests.jsonl")
    killed = cells["cpu-2.9"]
    assert killed.tests["suites/smoke/t.py::c"]["outcome"] == "error"
    assert killed.tests["suites/smoke/t.py::c"]["message"] == (
        "unknown outcome 'sideways' recorded; why sideways")
    assert any("unknown outcome 'sideways'" in p for p in killed.problems)
    assert any("never finished" in p for p in killed.problems)
    assert cells["cpu-2.13"].error is None and not cells["cpu-2.13"].problems


def test_fill_cell_name_from_the_records(tmp_path: Path) -> None:
    art, flat = artifacts(tmp_path)
    cell = results.load_cell(flat)
    assert cell.name == "cuda-2.11"  # the folder's name
    uploaded = results.load_cell(art / "results-cuda-2.11")
    assert uploaded.name == "results-cuda-2.11"
    results.fill_cell_name(uploaded)
    assert uploaded.name == "cuda-2.11"
    assert results.read_cell(art / "results-cuda-2.11").name == "cuda-2.11"
    # env.json's name wins over the records'.
    named = write_cell(tmp_path / "n", "cpu-2.13", {"t.py::a": "passed"})
    (named / results.TESTS).write_text(json.dumps(
        {"nodeid": "t.py::a", "outcome": "passed", "cell": "other"}) + "\n")
    assert results.read_cell(named).name == "cpu-2.13"
