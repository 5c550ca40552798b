"""Grids from real recorded results (and broken ones), and the CLI's behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from accelgrid import grid, results
from accelgrid.cli import main


def _write_cell(folder: Path, name: str, outcomes: dict[str, str], torch: str = "2.13.0+cpu"
                ) -> Path:
    cell = folder / name
    cell.mkdir(parents=True)
    results.write_json(cell / results.ENV, {
        "cell": name, "device_type": name.split("-")[0], "start": "s", "end": "e",
        "status": "finished", "torch": {"version": torch, "devices": [{"name": "Box"}],
                                        "device_count": 1}, "host": {"name": "h"}})
    for nodeid, outcome in outcomes.items():
        results.append_record(cell / results.TESTS, {"nodeid": nodeid, "outcome": outcome,
                                                     "message": f"why {outcome}"})
    return cell


def test_grid_rows_columns_counts(tmp_path: Path) -> None:
    a = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed",
                                           "suites/smoke/t.py::b": "failed"})
    b = _write_cell(tmp_path, "cpu-2.4", {"suites/smoke/t.py::a": "passed",
                                          "suites/offload/t.py::c": "skipped"}, torch="2.4.1")
    model = grid.build([a, b])
    assert [c["name"] for c in model["columns"]] == ["cpu-2.4", "cpu-2.13"]  # version order
    assert [r["nodeid"] for r in model["rows"]] == [
        "suites/offload/t.py::c", "suites/smoke/t.py::a", "suites/smoke/t.py::b"]
    assert model["columns"][1]["counts"]["failed"] == 1
    md = grid.render_markdown(model)
    assert "| cpu-2.13 | 2.13.0+cpu | Box | 1 | 1 |" in md
    html = grid.render_html(model)
    assert html.count('class="o failed"') == 1 and "why failed" in html


def test_broken_cells_show_as_errored(tmp_path: Path) -> None:
    good = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    empty = tmp_path / "cpu-2.6"
    empty.mkdir()
    corrupt = _write_cell(tmp_path, "cpu-2.8", {"suites/smoke/t.py::a": "passed"})
    with open(corrupt / results.TESTS, "a") as fh:
        fh.write('{"nodeid": "suites/smoke/t.py::b", "outc')  # killed mid-write
    (corrupt / results.ENV).write_text("{not json")
    model = grid.build([good, empty, corrupt])
    cols = {c["name"]: c for c in model["columns"]}
    assert cols["cpu-2.6"]["error"].startswith("no tests.jsonl")
    assert cols["cpu-2.8"]["error"] is None and cols["cpu-2.8"]["counts"]["passed"] == 1
    assert any("unreadable line" in p for p in cols["cpu-2.8"]["problems"])
    assert cols["cpu-2.13"]["counts"]["passed"] == 1


def test_markdown_stays_under_summary_budget(tmp_path: Path) -> None:
    cells = [_write_cell(tmp_path, f"cpu-2.{i}", {f"suites/s/t.py::test_{n}": "passed"
                                                  for n in range(400)}) for i in range(20)]
    model = grid.build(cells)
    assert len(grid.render_markdown(model).encode()) > 16 * 1024  # would not fit otherwise
    md = grid.render_markdown(model, limit=16 * 1024)
    assert len(md.encode()) <= 16 * 1024 and "truncated" in md


def test_cli_grid_writes_files_and_step_summary(tmp_path: Path, monkeypatch) -> None:
    cell = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["grid", str(cell), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "grid.json").read_text())["schema"] == 1
    assert "cpu-2.13" in summary.read_text()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelgrid", *args], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1])


def test_help_explains_commands() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    for word in ("validate", "cells", "plan", "run", "grid", "bench", "matrix.yaml"):
        assert word in proc.stdout


def test_cells_json_and_filters() -> None:
    proc = _cli("cells", "--json", "--device", "cuda", "--torch", "2.11")
    data = json.loads(proc.stdout)
    assert [c["name"] for c in data] == ["cuda-2.11"]
    assert data[0]["pins"]["torchao"] == "0.17.0"
    assert _cli("cells", "--device", "tpu").returncode == 1


def test_plan_prints_everything_without_doing_it() -> None:
    proc = _cli("plan", "xpu-2.5-fallback-debug")
    assert proc.returncode == 0
    out = proc.stdout
    assert "torch==2.5.1+xpu from https://download.pytorch.org/whl/xpu" in out
    assert "PYTORCH_DEBUG_XPU_FALLBACK=1" in out
    assert "self-hosted, linux, x64, intel-gpu" in out
    assert "60 min for the cell" in out
    unknown = _cli("plan", "xpu-2.55")
    assert unknown.returncode == 2 and "did you mean 'xpu-2.5'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
