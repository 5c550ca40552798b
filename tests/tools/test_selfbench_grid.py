"""``python -m tools.selfbench grid``: small real runs (a few synthetic cells, a tmp output
folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelgrid.base import contract
from accelgrid.base.errors import InvalidInput
from tools.selfbench import grid as bench_grid
from tools.selfbench.__main__ import main


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_tiny_run_reports_and_writes_bench_grid_json_and_md(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = bench_grid.run(3, 40, repeat=2, budget=60.0, out=tmp_path / "docs")
    out = capsys.readouterr().out
    assert "synthesized 3 cells x 40 tests" in out
    assert "run 1: build" in out and "run 2: build" in out and "within the 60 s budget" in out
    assert "(CPU " in out and "sizes: grid.json " in out
    assert len(report["runs"]) == 2 and report["ok"]
    assert report["worst"] == max(r["total"] for r in report["runs"])
    assert report["median"]["total"] <= report["worst"]
    for run in report["runs"]:
        assert 0 < run["build_cpu"] and 0 < run["write_cpu"]
        assert run["cpu"] == pytest.approx(run["build_cpu"] + run["write_cpu"])
    assert set(report["sizes"]) == {"json", "md", "html"}
    assert all(size > 0 for size in report["sizes"].values())
    assert report["machine"]["cpus"] >= 1 and report["machine"]["python"]
    assert report["command"] == ("python -m tools.selfbench grid --cells 3 --tests 40 --repeat 2 "
                                 f"--budget 60 --out {tmp_path / 'docs'}")
    # The JSON is the report, the Markdown is rendered from it.
    data = json.loads((tmp_path / "docs" / "bench-grid.json").read_text(encoding="utf-8"))
    assert data["runs"] == report["runs"] and data["sizes"] == report["sizes"]
    md = (tmp_path / "docs" / "bench-grid.md").read_text(encoding="utf-8")
    assert md == bench_grid.render_markdown(data)
    assert "synthetic results of 3 cells × 40 tests" in md
    assert f"Command: `{report['command']}`" in md and "Machine: " in md
    assert "| 2 |" in md and "| median |" in md and "Load average" in md
    assert "against a 60 s budget: met." in md


def test_steps_and_profile_without_the_machines_paths(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Enough rows that accelgrid's own functions are among them whatever the box's load
    # (on a loaded one, the top 8 of a 2 x 30 grid were all system calls).
    report = bench_grid.run(2, 30, repeat=1, budget=60.0, out=None, profile=40)
    assert [s["stage"].split(" (")[0] for s in report["stages"]] == [
        "grid model", "baseline comparison", "grid.json", "grid.md", "grid.html",
        "writing the three files", "of the model: reading the results folders"]
    assert all(s["seconds"] > 0 and s["cpu"] >= 0 for s in report["stages"])
    assert len(report["profile"]) == 40
    shares = [p["share"] for p in report["profile"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1
    for p in report["profile"]:
        assert not p["function"].startswith("/") and str(Path.home()) not in p["function"]
        assert " at 0x" not in p["function"]
    assert any(p["function"].startswith("accelgrid/") for p in report["profile"])
    md = bench_grid.render_markdown(report)
    assert "| step | wall (s) | CPU (s) |" in md and "| function | calls |" in md
    assert "| baseline comparison (report.compare.mark) |" in md
    out = capsys.readouterr().out
    assert report["profile"][0]["function"] in out and "grid.html (report." in out


def test_over_budget_exits_1_and_empty_out_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["grid", "--cells", "2", "--tests", "10", "--repeat", "1",
               "--budget", "0", "--out", ""])
    assert rc == 1
    assert "OVER the 0 s budget" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_markdown_from_a_given_report() -> None:
    runs = [{"build": 1.0, "write": 0.5, "total": 1.5, "cpu": 1.25, "load": 0.5},
            {"build": 3.0, "write": 1.0, "total": 4.0, "cpu": 2.5, "load": 3.25},
            {"build": 2.0, "write": 1.0, "total": 3.0, "cpu": 2.0, "load": 1.0}]
    md = bench_grid.render_markdown({
        "cells": 50, "tests": 2000, "budget": 2.0, "runs": runs,
        "median": {"build": 2.0, "write": 1.0, "total": 3.0, "cpu": 2.0}, "worst": 4.0,
        "ok": False, "sizes": {"json": 2_000_000, "md": 100_000, "html": 3_500_000},
        "command": "python -m tools.selfbench grid --out docs", "commit": "0123456789abcdef",
        "dirty": True, "date": "2026-12-01T10:00:00+00:00", "load_after": 2.5,
        "machine": {"host": "vm", "cpus": 2, "cpus_usable": 1, "cpu_model": "AMD EPYC",
                    "memory_gib": 23.5, "os": "Linux-6", "python": "CPython 3.11.7"}})
    assert "| 1 | 1.00 | 0.50 | 1.50 | 1.25 | 0.5 |" in md
    assert "| 2 | 3.00 | 1.00 | 4.00 | 2.50 | 3.25 |" in md
    assert "| median | 2.00 | 1.00 | 3.00 | 2.00 | |" in md
    assert "Median run 3.00 s (worst 4.00 s) against a 2 s budget: NOT met." in md
    assert "grid.json 2.00 MB, grid.md 0.10 MB, grid.html 3.50 MB" in md
    assert ("Command: `python -m tools.selfbench grid --out docs`, on accelgrid 0123456789ab with "
            "uncommitted changes, 2026-12-01T10:00:00+00:00.") in md
    assert "Machine: vm, 2 CPUs (1 usable), AMD EPYC, 23.5 GiB, Linux-6, CPython 3.11.7." in md
    assert "before each run: 0.5 to 3.25; after: 2.5." in md
    assert "| function |" not in md  # no profile asked


@pytest.mark.parametrize("argv", [["--cells", "0"], ["--cells", "9999"], ["--tests", "0"],
                                  ["--repeat", "0"], ["--profile", "-1"]])
def test_counts_out_of_range_exit_2(argv: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", *argv, "--out", ""]) == 2
    assert "python -m tools.selfbench grid: --" in capsys.readouterr().err


def test_library_raises_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="between 1 and 108"):
        bench_grid.run(bench_grid.max_cells() + 1, 10, out=None)


def test_synthesize_writes_a_realistic_mix(tmp_path: Path) -> None:
    folders = bench_grid.synthesize(tmp_path, cells=4, tests=500)
    assert [f.name for f in folders] == ["cpu-2.5", "cpu-2.6", "cpu-2.7", "cpu-2.8"]
    assert not (folders[-1] / contract.TESTS_FILE).exists()  # the errored cell
    recs = [json.loads(line) for line in (folders[0] / contract.TESTS_FILE).open()]
    assert len(recs) == 500 and len({r["nodeid"] for r in recs}) == 500
    seen = {r["outcome"] for r in recs}
    assert {"passed", "failed", "skipped", "xfailed"} <= seen
    # Seeded: the same folders every time.
    again = bench_grid.synthesize(tmp_path / "again", cells=4, tests=500)
    assert ((again[0] / contract.TESTS_FILE).read_text()
            == (folders[0] / contract.TESTS_FILE).read_text())
