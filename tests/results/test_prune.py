"""`accelgrid prune --keep N` (#38): all but the newest N selected runs under
results/<cell>/runs/ removed (--dry-run lists), never the latest run nor the whole run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract
from accelgrid.base.errors import EXIT_INVALID
from accelgrid.cli import main
from accelgrid.config.matrix import load_matrix
from accelgrid.run.cell import run_cell


def _runs(cell: Path) -> list[str]:
    return sorted(p.name for p in (cell / contract.RUNS_DIR).iterdir())


def _laid_out(root: Path, name: str, ids: list[str]) -> Path:
    """A cell folder whose selected runs ``ids`` are oldest first, the last named latest
    by last-run.json, as run_cell leaves them (one file in each)."""
    cell = root / name
    for age, run_id in enumerate(reversed(ids)):
        run = results.run_folder(cell, run_id, partial=True)
        run.mkdir(parents=True)
        (run / contract.TESTS_FILE).write_text("{}\n")
        os.utime(run, (1e9 - age * 100, 1e9 - age * 100))
    results.write_last_run(cell, ids[-1], results.run_folder(cell, ids[-1], True), ["-k", "x"])
    return cell


def test_keep_n_dry_run_then_removal(tmp_path: Path, capsys) -> None:
    root = tmp_path / "results"
    a = _laid_out(root, "cpu-2.13", ["r1", "r2", "r3", "r4"])
    b = _laid_out(root, "xpu-2.5", ["s1"])
    (root / "grid.md").write_text("x")            # results/* holds the grids too
    (root / "cpu-2.12").mkdir()                   # a cell without selected runs
    assert main(["prune", str(root), "--keep", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{a}: would remove 2 of 4 selected runs" in out and f"  {a / 'runs' / 'r1'}" in out
    assert f"{b}: would remove 0 of 1 selected runs" in out and "grid.md" not in out
    assert _runs(a) == ["r1", "r2", "r3", "r4"]   # a dry run removes nothing
    assert main(["prune", str(root), "--keep", "2"]) == 0
    assert f"{a}: removed 2 of 4 selected runs" in capsys.readouterr().out
    assert _runs(a) == ["r3", "r4"] and _runs(b) == ["s1"]
    # Only the latest, named by last-run.json, is kept with 0; newer by time or not.
    os.utime(a / "runs" / "r3", None)
    assert main(["prune", str(a), "--keep", "0"]) == 0
    assert _runs(a) == ["r4"]


def test_default_folder_and_bad_input(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "elsewhere"
    cell = _laid_out(root, "cpu-2.13", ["r1", "r2"])
    monkeypatch.setenv(contract.RESULTS_DIR, str(root))
    assert main(["prune", "--keep", "1"]) == 0
    assert _runs(cell) == ["r2"]
    capsys.readouterr()
    assert main(["prune", str(tmp_path / "nope"), "--keep", "1"]) == EXIT_INVALID
    assert "nope: no such folder" in capsys.readouterr().err
    assert main(["prune", str(root), "--keep", "-1"]) == EXIT_INVALID
    assert "--keep -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prune", str(root)])                # --keep is asked for


def test_a_linked_run_is_never_followed(tmp_path: Path) -> None:
    cell = _laid_out(tmp_path / "results", "cpu-2.13", ["r1", "r2"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (cell / contract.RUNS_DIR / "link").symlink_to(outside)
    assert main(["prune", str(cell), "--keep", "0"]) == 0
    assert (outside / "keep.txt").read_text() == "mine"
    assert _runs(cell) == ["link", "r2"]


SELECTABLE = '''
def test_smoke_a(): pass
def test_other_b(): pass
'''


def test_prune_real_selected_runs(mini_project, python, capsys) -> None:
    """A whole run and three selected runs of a real cell; prune keeps the newest one and
    the whole run, and the grid still reads the cell."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_sel.py").write_text(SELECTABLE)
    out = proj / "results"
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, out)) == 0
    ids: list[str] = []
    for k in ("smoke", "other", "smoke"):
        assert run_cell(run_request(cell, python, proj, out, ["-k", k])) == 0
        run_id = results.last_run(out / "cpu-2.13")[0]
        assert run_id is not None   # a run of today's runner is named
        ids.append(run_id)
    assert _runs(out / "cpu-2.13") == sorted(ids)
    assert main(["prune", str(out), "--keep", "1", "--dry-run"]) == 0
    assert "would remove 2 of 3 selected runs" in capsys.readouterr().out
    assert main(["prune", str(out), "--keep", "1"]) == 0
    assert _runs(out / "cpu-2.13") == [ids[-1]]
    assert (out / "cpu-2.13" / contract.TESTS_FILE).is_file()   # the whole run stays
    assert main(["grid", str(out / "cpu-2.13"), "--out", str(proj / "g")]) == 0
