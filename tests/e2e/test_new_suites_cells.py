"""The attention, low-bit and compile suites in the real cpu-2.13 cell (its own uv env,
the one CI builds for its cpu-2.13 run and the slow set reuses: tests/helpers/mini_projects.py's
cell_envdir), then the run's grid: outcomes, what each test recorded, and those records
in grid.json and grid.md.

The cheapest selection that covers each suite's recording: the whole attention suite
(28 tests, 8 s), one low-bit optimizer's state size (torchao compiles its step: 41 s cold,
1 s once inductor's cache in the env holds it, as after CI's cpu-2.13 run) and one
compiled MLP step (5 s cold). Measured on the 2-core box (load about 5): 55 s of tests
cold, 13 s warm, plus the env's build when it is not there yet (40 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import cli, results

ROOT = Path(__file__).resolve().parents[2]
STATE = "suites/lowbit/test_lowbit_optim.py::test_state_is_smaller_than_adamw[AdamW8bit]"
MLP = "suites/compile/test_compile.py::test_mlp[fp32]"
KERNEL = "suites/attention/test_sdpa.py::test_sdpa_runs_the_expected_kernel"


@pytest.mark.slow
def test_attention_lowbit_and_compile_record_their_numbers_in_the_cpu_cell(
        tmp_path: Path, outside_envdir: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "cpu-2.13", "--",
         "suites/attention/test_sdpa.py", STATE, MLP],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "ACCELGRID_RESULTS_DIR": str(out)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = results.last_run(out / "cpu-2.13")[1]
    recs, problems = results.read_records(folder / "tests.jsonl")
    assert problems == []
    by = {r["nodeid"]: r for r in recs}
    assert {r["outcome"] for r in recs} == {"passed"} and len(recs) == 30

    # torch 2.13's CPU runs its flash kernel for every dtype and mask (sdpa_checks).
    kernel = [r for n, r in by.items() if n.startswith(KERNEL)]
    assert len(kernel) == 9
    assert all(r["properties"] == {"kernels": ["flash_cpu"], "expected": ["flash_cpu"]}
               for r in kernel)
    state = by[STATE]["properties"]
    assert state["state_bytes"] < state["adamw_state_bytes"]
    assert state["state_ratio"] == round(state["state_bytes"] / state["adamw_state_bytes"], 4)
    assert 0 < state["state_ratio"] <= 0.30     # the suite's bound for AdamW8bit
    mlp = by[MLP]["properties"]
    assert mlp["graph_breaks"] == 0 and mlp["recompiles"] == 0 and mlp["graphs"] >= 1
    assert mlp["compile_s"] >= 0 and mlp["eager_step_ms"] > 0 and mlp["compiled_step_ms"] > 0

    # The run's grid: each result with what it recorded; grid.md names the kernel.
    grid_dir = tmp_path / "grid"
    assert cli.main(["grid", str(folder), "--out", str(grid_dir)]) == 0
    grid = json.loads((grid_dir / "grid.json").read_text())
    cells = {r["nodeid"]: r["cells"]["cpu-2.13"] for r in grid["rows"]}
    assert cells[STATE]["properties"] == state and cells[MLP]["properties"] == mlp
    md = (grid_dir / "grid.md").read_text()
    assert md.count("| ✅ `flash_cpu` |") == 9 + 18   # the expectation and reference tests
