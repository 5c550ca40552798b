"""The CLI's behaviour (grid tests are in tests/test_grid.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelgrid", *args], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1])


def test_help_explains_commands() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    for word in ("validate", "cells", "plan", "run", "grid", "bench", "matrix.yaml"):
        assert word in proc.stdout


def test_cells_json_and_filters() -> None:
    proc = _cli("cells", "--json", "--device", "cuda", "--torch", "2.11", "--profile", "default")
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


def test_run_takes_options_after_the_cell_and_pytest_args_after_dashes() -> None:
    proc = _cli("run", "cpu-2.11", "--no-venv", "--", "-k", "matmul")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "the cell needs torch 2.11.x" in out  # --no-venv reached nox; torch is 2.13 here
    bad = _cli("cells", "--", "-x")
    assert bad.returncode == 2 and "only for `run`" in bad.stderr


def test_run_container_refuses_a_cell_without_image() -> None:
    proc = _cli("run", "mps-2.13", "--container")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "mps-2.13" in proc.stderr

