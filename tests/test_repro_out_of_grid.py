"""`accelgrid repro` writes <results>/repro/<issue>/<cell>/: a grid of the cells' results
(`accelgrid grid results/*`) leaves those runs out instead of showing each reproduced cell
as a second column (cpu-2.13#2); naming the issue's folder shows them."""

from __future__ import annotations

from pathlib import Path

from report_cases import write_cell

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
