"""``accelgrid bench grid``: small real runs (a few synthetic cells, a tmp output folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.bench import grid as bench_grid
from accelgrid.cli import main
from accelgrid.errors import InvalidInput


def test_tiny_run_reports_and_writes_bench_grid_md(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    report = bench_grid.run(3, 40, repeat=2, budget=60.0, out=tmp_path / "docs")
    out = capsys.readouterr().out
    assert "synthesized 3 cells x 40 tests" in out
    assert "run 1: build" in out and "run 2: build" in out and "within the 60 s budget" in out
    assert len(report["runs"]) == 2 and report["ok"]
    assert report["worst"] == max(r["total"] for r in report["runs"])
    assert set(report["sizes"]) == {"json", "md", "html"}
    md = (tmp_path / "docs" / "bench-grid.md").read_text(encoding="utf-8")
    assert md == bench_grid.render_markdown(report)
    assert "synthetic results of 3 cells × 40 tests" in md
    assert "| 2 |" in md and "| median |" in md and "; 2 runs." in md
    assert "against a 60 s budget: met." in md


def test_over_budget_exits_1_and_empty_out_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["bench", "grid", "--cells", "2", "--tests", "10", "--repeat", "1",
               "--budget", "0", "--out", ""])
    assert rc == 1
    assert "OVER the 0 s budget" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_markdown_from_a_given_report() -> None:
    runs = [{"build": 1.0, "write": 0.5, "total": 1.5}, {"build": 3.0, "write": 1.0,
                                                         "total": 4.0}]
    md = bench_grid.render_markdown({
        "cells": 50, "tests": 2000, "budget": 2.0, "runs": runs,
        "median": {"build": 2.0, "write": 0.75, "total": 2.75}, "worst": 4.0, "ok": False,
        "sizes": {"json": 2_000_000, "md": 100_000, "html": 3_500_000}})
    assert "| 1 | 1.00 | 0.50 | 1.50 |" in md and "| 2 | 3.00 | 1.00 | 4.00 |" in md
    assert "| median | 2.00 | 0.75 | 2.75 |" in md
    assert "Worst run 4.00 s against a 2 s budget: NOT met." in md
    assert "grid.json 2.00 MB, grid.md 0.10 MB, grid.html 3.50 MB" in md


@pytest.mark.parametrize("argv", [["--cells", "0"], ["--cells", "9999"], ["--tests", "0"],
                                  ["--repeat", "0"]])
def test_counts_out_of_range_exit_2(argv: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "grid", *argv, "--out", ""]) == 2
    assert "accelgrid bench: --" in capsys.readouterr().err


def test_library_raises_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="between 1 and 108"):
        bench_grid.run(bench_grid.max_cells() + 1, 10, out=None)


def test_synthesize_writes_a_realistic_mix(tmp_path: Path) -> None:
    folders = bench_grid.synthesize(tmp_path, cells=4, tests=500)
    assert [f.name for f in folders] == ["cpu-2.5", "cpu-2.6", "cpu-2.7", "cpu-2.8"]
    assert not (folders[-1] / results.TESTS).exists()  # the errored cell
    recs = [json.loads(line) for line in (folders[0] / results.TESTS).open()]
    assert len(recs) == 500 and len({r["nodeid"] for r in recs}) == 500
    seen = {r["outcome"] for r in recs}
    assert {"passed", "failed", "skipped", "xfailed"} <= seen
    # Seeded: the same folders every time.
    again = bench_grid.synthesize(tmp_path / "again", cells=4, tests=500)
    assert (again[0] / results.TESTS).read_text() == (folders[0] / results.TESTS).read_text()
