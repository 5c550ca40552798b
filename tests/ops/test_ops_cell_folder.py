"""`ops predict` / `ops grid` given a cell's folder read its latest capture, a selected run's
under runs/<id>/ included, and given ``results/*`` pass over the plain files (#38)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from helpers.report_cases import ops_cell, write_cell

from accelgrid import ops, results
from accelgrid.base import contract
from accelgrid.cli import main

CELL = "cpu-2.13-op-capture"
FIRST = {"aten::addmm.default": "native"}
LATER = {"aten::addmm.default": "native", "aten::linspace.default": "decomposed"}


def _selected_capture(cell_folder: Path, run_id: str, statuses: dict[str, str],
                      age: int = 0) -> Path:
    """A selected run's folder as a run leaves it: runs/<id>/ with its captured ops, named
    the cell's latest by last-run.json."""
    made = ops_cell(cell_folder.parent / f"made-{run_id}", CELL, "2.13.0+cpu", statuses,
                    device_type="cpu")
    run = results.run_folder(cell_folder, run_id, partial=True)
    run.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(made, run)
    shutil.rmtree(made.parent)
    if age:
        os.utime(run, (run.stat().st_atime - age, run.stat().st_mtime - age))
    results.write_last_run(cell_folder, run_id, run, ["-k", "capture"])
    return run


def test_the_latest_capture_of_a_cell_folder(tmp_path: Path) -> None:
    root = tmp_path / "results"
    cell = root / CELL
    cell.mkdir(parents=True)
    assert ops.capture_folder(cell) == cell             # nothing captured: the folder itself
    run = _selected_capture(cell, "r1", FIRST)
    assert ops.capture_folder(cell) == run              # only a selected run captured
    # A whole run's capture in the folder, named latest: the folder.
    shutil.copytree(run / contract.OPS_RAW_DIR, cell / contract.OPS_RAW_DIR)
    results.write_last_run(cell, "r2", cell, [])
    assert ops.capture_folder(cell) == cell
    # A later selected run that captured: it.
    later = _selected_capture(cell, "r3", LATER)
    assert ops.capture_folder(cell) == later
    # A later one that captured nothing: the folder's own (the last that captured).
    quiet = results.run_folder(cell, "r4", partial=True)
    quiet.mkdir()
    results.write_last_run(cell, "r4", quiet, ["-k", "none"])
    assert ops.capture_folder(cell) == cell
    # Without the folder's own: the newest run under runs/ that captured.
    shutil.rmtree(cell / contract.OPS_RAW_DIR)
    assert ops.capture_folder(cell) == later


def test_ops_predict_on_a_cell_folder_after_a_selected_capture_run(tmp_path: Path,
                                                                    capsys) -> None:
    cell = tmp_path / "results" / CELL
    cell.mkdir(parents=True)
    run = _selected_capture(cell, "r1", LATER)
    assert main(["ops", "predict", str(cell), "--series", "2.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"captured: {run}: {CELL}") and out[0].endswith(", 2 ops")
    assert (cell / "ops-predicted.json").is_file()  # beside the input named
    # A folder with no capture anywhere is still refused, in one line.
    empty = tmp_path / "results" / "cpu-2.13"
    empty.mkdir()
    assert main(["ops", "predict", str(empty), "--series", "2.5"]) == 2
    assert "no captured ops" in capsys.readouterr().err


def _results_star(tmp_path: Path) -> tuple[Path, list[str]]:
    """results/ as runs and a grid leave it: a capture cell whose ops are in a selected
    run, one with a whole run's capture, a cell without captured ops, the grids' files."""
    root = tmp_path / "results"
    cell = root / CELL
    cell.mkdir(parents=True)
    _selected_capture(cell, "r1", LATER)
    ops_cell(root, "xpu-2.13", "2.13.0+xpu", FIRST)
    write_cell(root, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    for name in ("grid.md", "grid.html", "grid.json", "junit.xml"):
        (root / name).write_text("{}" if name.endswith(".json") else "x")
    return root, sorted(str(p) for p in root.iterdir())


def test_ops_grid_of_results_star_passes_over_plain_files(tmp_path: Path, capsys) -> None:
    root, star = _results_star(tmp_path)
    assert main(["ops", "grid", *star, "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert not any(str(root / n) in printed for n in ("grid.md", "grid.html", "grid.json",
                                                       "junit.xml"))
    assert f"{root / 'cpu-2.13'}: no captured ops" in printed   # a cell is still named
    view = json.loads((tmp_path / "out" / "ops-grid.json").read_text())
    assert sorted(view["cells"]) == [CELL, "xpu-2.13"]
    assert "aten::linspace.default" in view["ops"]            # the selected run's capture
    # Only plain files: nothing captured, said so (exit 1).
    files = [s for s in star if Path(s).is_file()]
    assert main(["ops", "grid", *files, "--out", str(tmp_path / "out2")]) == 1


def test_ops_predict_of_results_star(tmp_path: Path, capsys) -> None:
    root, star = _results_star(tmp_path)
    assert main(["ops", "predict", *star, "--series", "2.5",
                 "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "grid." not in captured.err and "junit.xml" not in captured.err
    assert captured.err.count("note: ") == 1 and "cpu-2.13: no captured ops" in captured.err
    doc = json.loads((tmp_path / "out" / "ops-predicted.json").read_text())
    assert set(doc["ops"]) == set(LATER)
    # Only plain files, or a path that is not there among them: refused.
    files = [s for s in star if Path(s).is_file()]
    assert main(["ops", "predict", *files, "--series", "2.5"]) == 2
    assert "no captured ops in" in capsys.readouterr().err
    assert main(["ops", "predict", *star, str(root / "nope"), "--series", "2.5"]) == 2
    assert "nope: no such file or folder" in capsys.readouterr().err
