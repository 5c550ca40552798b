"""The matrix runs test_float64_math with and without the fp64 emulation flags on the same
card and torch series: xpu-2.13 takes them from an ATS-M / Arc A-series host's hardware,
xpu-2.13-fp64-no-emulation sets them to 0 there (docs/devices/xpu.md, "fp64 emulation"). Neither
has run here (no Intel GPU): this checks the env each would run with."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.fake_hosts import fake_gpu

from accelgrid.config.matrix import load_matrix
from accelgrid.host import detect

FLAGS = ("OverrideDefaultFP64Settings", "IGC_EnableDPEmulation")


@pytest.mark.parametrize("pci_id,family", [(0x56C0, "ats-m"), (0x56A0, "arc")])
def test_with_and_without_the_flags_on_one_card(tmp_path: Path, pci_id: int, family: str):
    fake_gpu(tmp_path, 128, 0x8086, pci_id)
    matrix = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml")
    seen = {}
    for name in ("xpu-2.13", "xpu-2.13-fp64-no-emulation"):
        cell = matrix.cell(name)
        choice = detect.resolve_hardware(cell, {}, root=tmp_path)
        assert choice.family == family and choice.problem is None
        env = {**cell.env, **choice.env(cell)}
        seen[name] = tuple(env.get(f) for f in FLAGS)
    assert seen == {"xpu-2.13": ("1", "1"), "xpu-2.13-fp64-no-emulation": ("0", "0")}
