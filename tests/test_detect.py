"""Device presence probes (accelgrid.detect), without importing torch."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from accelgrid import detect


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
