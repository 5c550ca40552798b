"""`accelgrid repro` writes <results>/repro/<issue>/<cell>/: a grid of the cells' results
(`accelgrid grid results/*`) leaves those runs out instead of showing each reproduced cell
as a second column (cpu-2.13#2); naming the issue's folder shows them."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.report_cases import write_cell

from accelgrid.base import contract
from accelgrid.report import model
from accelgrid.results import cellresults


def _results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    write_cell(root, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    write_cell(root / contract.REPRO_DIR / "pytorch-ao-958", "cpu-2.13",
               {"suites/repro/t.py::r": "failed"})
    return root


def test_the_cells_grid_leaves_reproductions_out(tmp_path: Path) -> None:
    root = _results(tmp_path)
    given = sorted(root.iterdir())          # what results/* expands to
    grid = model.from_folders(given)
    assert [c["name"] for c in grid["columns"]] == ["cpu-2.13"]
    _, notes = cellresults.discover(given)
    assert notes == [f"{root / 'repro'}: reproductions (accelgrid repro), left out of the "
                     f"cells' grid; name {root / 'repro'}/<issue> to show them"]
    assert [c["name"] for c in model.from_folders([root])["columns"]] == ["cpu-2.13"]


def test_naming_the_issue_folder_shows_its_runs(tmp_path: Path) -> None:
    root = _results(tmp_path)
    grid = model.from_folders([root / "repro" / "pytorch-ao-958"])
    assert [c["name"] for c in grid["columns"]] == ["cpu-2.13"]
    assert [r["nodeid"] for r in grid["rows"]] == ["suites/repro/t.py::r"]
    both = model.from_folders([root / "cpu-2.13", root / "repro" / "pytorch-ao-958"])
    assert [c["name"] for c in both["columns"]] == ["cpu-2.13", "cpu-2.13#2"]


# --- what is a cell column: each command's output carries its kind (issue 36, item 5) ---
CAPTURED = Path(__file__).resolve().parents[2] / "docs" / "cuda" / "ops-cuda-2.11.json"


def test_a_real_ops_predict_and_a_bisection_are_passed_over_by_name(tmp_path: Path,
                                                                    capsys) -> None:
    """``accelgrid ops predict --out results/predicted`` (the README's example) and a
    bisection's runs (its folder's kind, as ``accelgrid bisect`` marks it) among
    ``results/*``: one column, the cell's, and a note naming each folder passed over;
    the predicted folder named alone holds no run (exit 2)."""
    from accelgrid.base import outputs
    from accelgrid.cli import main

    root = tmp_path / "results"
    write_cell(root, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    predicted = root / "predicted"
    assert main(["ops", "predict", str(CAPTURED), "--series", "2.8", "--out",
                 str(predicted)]) == 0
    bisected = root / "bisect" / "suites-s-t-py-a"
    outputs.mark(bisected, "bisect", test="suites/s/t.py::a", device="cpu")
    write_cell(bisected, "cpu-2.13", {"suites/s/t.py::a": "failed"})
    capsys.readouterr()
    out = tmp_path / "grid"
    assert main(["grid", *map(str, sorted(root.iterdir())), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    grid = json.loads((out / "grid.json").read_text())
    assert [c["name"] for c in grid["columns"]] == ["cpu-2.13"]
    assert f"note: {predicted}: accelgrid's own output (ops-predicted), not a cell run; " \
           "passed over" in err.splitlines()
    assert f"note: {bisected}: a bisection's runs (accelgrid bisect), left out of the " \
           f"cells' grid; name {bisected} to show them" in err.splitlines()
    assert main(["grid", str(root), "--out", str(out)]) == 0  # searched: the same
    assert [c["name"] for c in json.loads((out / "grid.json").read_text())["columns"]] == [
        "cpu-2.13"]
    assert main(["grid", str(bisected), "--out", str(tmp_path / "b")]) == 0  # named: shown
    shown = json.loads((tmp_path / "b" / "grid.json").read_text())["columns"]
    assert [(c["name"], c["counts"]["failed"]) for c in shown] == [("cpu-2.13", 1)]
    capsys.readouterr()
    assert main(["grid", str(predicted), "--out", str(out)]) == 2
    # A grid's own --out among the results is passed over as well.
    assert main(["grid", str(root / "cpu-2.13"), str(out), "--out", str(out)]) == 0
    assert "accelgrid's own output (grid), not a cell run" in capsys.readouterr().err
