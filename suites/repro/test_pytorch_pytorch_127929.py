"""pytorch/pytorch#127929: torch.xpu.memory_allocated, max_memory_allocated and
reset_peak_memory_stats missing (Trainer memory metrics, speech-pretraining). Fixed in 2.5.

The API is missing from the ``torch.xpu`` module itself, so its absence shows on any host
(test_xpu_memory_api_exists); the behaviour is checked on cuda/xpu devices.
"""

from __future__ import annotations

import pytest
import torch

from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("pytorch/pytorch#127929")

API = ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats")


def test_xpu_memory_api_exists() -> None:
    missing = [name for name in API if not hasattr(torch.xpu, name)]
    assert not missing, f"torch {torch.__version__}: torch.xpu lacks {', '.join(missing)}"


@only_on("cuda", "xpu", reason="device memory stats are a cuda/xpu API")
def test_memory_stats_track_allocations(device: str) -> None:
    mod = getattr(torch, device)
    mod.synchronize()
    mod.reset_peak_memory_stats()
    before = mod.memory_allocated()
    x = torch.empty(4 * 1024 * 1024, dtype=torch.uint8, device=device)
    mod.synchronize()
    during = mod.memory_allocated()
    peak = mod.max_memory_allocated()
    assert during - before >= x.numel(), f"memory_allocated grew by {during - before} bytes"
    assert peak >= during
    del x
    mod.synchronize()
    mod.reset_peak_memory_stats()
    assert mod.max_memory_allocated() < peak
