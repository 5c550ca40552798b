"""pytorch/ao#958: torchao's CPUOffloadOptimizer refuses anything but CUDA/XPU.

Correct behaviour: offloading optimizer state to host memory works whatever the device
(the CPU itself, MPS). Since ao PR #1324 (torchao 0.7) the constructor picks cuda, else
xpu, and asserts one is present: ``AssertionError: CPU Offload currently only supports
CUDA & XPU`` on a CPU-only or MPS host, so this reproduces on cpu and mps cells and
passes on cuda/xpu cells.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util

import pytest
import torch

from accelgrid.testing import not_run

pytestmark = pytest.mark.upstream("pytorch/ao#958")


def _offload_class() -> type:
    if importlib.util.find_spec("torchao") is None:
        not_run("torchao is not installed")
    # torchao.optim from torchao 0.10; torchao.prototype.low_bit_optim in 0.5-0.9.
    for name in ("torchao.optim", "torchao.prototype.low_bit_optim"):
        try:
            cls = getattr(importlib.import_module(name), "CPUOffloadOptimizer", None)
        except ModuleNotFoundError:
            continue
        if cls is not None:
            return cls
    not_run("this torchao has no CPUOffloadOptimizer")
    raise AssertionError("unreachable")


def test_cpu_offload_optimizer_on_any_device(device: str) -> None:
    cls = _offload_class()
    torch.manual_seed(0)
    # 64*128 = 8192 weights: above torchao's minimal_size (4096), so really offloaded.
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 8)).to(device)
    ref = copy.deepcopy(model)
    opt = cls(model.parameters(), torch.optim.AdamW, lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x = torch.randn(16, 64, device=device)
    for net, optim in ((model, opt), (ref, ref_opt)):
        net(x).square().mean().backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    if device in ("cuda", "xpu"):
        getattr(torch, device).synchronize()  # params come back on a side stream
    for got, want in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(got, want)
