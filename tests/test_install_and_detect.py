"""Install plans (index, pins) and device presence probes."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from accelgrid import detect, install
from accelgrid.matrix import load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml")


def test_xpu_plan_takes_torch_from_its_index_then_pins_it(matrix) -> None:
    plan = install.plan(matrix.cell("xpu-2.5"), uv_env={})
    first, second = plan.steps
    assert first.args == ("--extra-index-url", "https://download.pytorch.org/whl/xpu",
                          "torch==2.5.1+xpu")
    assert second.args[0] == "torch==2.5.1+xpu"  # step 2 can never swap the torch build
    assert "--extra-index-url" not in second.args
    assert {"torchao==0.11.0", "transformers==4.57.5", "accelerate==1.12.0"} <= set(second.args)


def test_cpu_plan_uses_only_the_default_index(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.13"), uv_env={})
    assert plan.index == "default"
    assert all("--extra-index-url" not in s.args and "--index-url" not in s.args
               for s in plan.steps)


def test_torch_index_override(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.13"), torch_index="https://download.pytorch.org/whl/cpu",
                        uv_env={})
    assert plan.steps[0].args[:2] == ("--extra-index-url", "https://download.pytorch.org/whl/cpu")


def test_unreachable_index_is_one_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    msg = install.index_problem(f"http://127.0.0.1:{port}/whl/xpu", timeout=5)
    assert msg is not None and "\n" not in msg
    assert msg.startswith(f"package index http://127.0.0.1:{port}/whl/xpu cannot be reached")
    assert install.index_problem("default") is None


def _fake_command(folder: Path, name: str, rc: int) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_detect_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect.absent_reason("cpu", {"always": True}) is None
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]})
    assert reason == "cuda not present: none of nvidia-smi is on PATH and working"
    _fake_command(tmp_path, "nvidia-smi", 9)  # present but broken driver
    assert detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]}) is not None
    _fake_command(tmp_path, "nvidia-smi", 0)
    assert detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]}) is None
    dri = tmp_path / "dri"
    dri.mkdir()
    rules = {"paths_any": [str(dri / "renderD*")], "commands_any": ["sycl-ls", "xpu-smi"]}
    assert "none of" in detect.absent_reason("xpu", rules)
    (dri / "renderD128").write_text("")
    assert "sycl-ls, xpu-smi" in detect.absent_reason("xpu", rules)
    _fake_command(tmp_path, "xpu-smi", 0)
    assert detect.absent_reason("xpu", rules) is None
    other = "Darwin" if os.uname().sysname != "Darwin" else "Linux"
    assert detect.absent_reason("mps", {"system": other}).startswith(f"mps needs a {other} host")
