"""pytorch/ao#584 (the PR that added CPUOffloadOptimizer, torchao 0.5): its
``load_state_dict`` pairs the saved per-param states with its own by position and hands
each to a stock torch optimizer, which checks counts but not shapes — so a state saved
for other parameters loads silently.

Correct behaviour: a state whose parameters do not fit (another number of them, another
shape) is rejected with an error. Code (torchao 0.18):
https://github.com/pytorch/ao/blob/cee38d8c026261e92f1df9bb46266da5d7759574/torchao/optim/cpu_offload.py#L169-L180
The optimizer needs CUDA or XPU (pytorch/ao#958): skipped on other devices.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch

from accelgrid.testing import not_run, only_on

pytestmark = pytest.mark.upstream("pytorch/ao#584")


def _offload_class(device: str) -> type:
    """The optimizer class (the test's only_on mark has kept it to CUDA and XPU)."""
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


def _stepped(cls: type, model: torch.nn.Module, device: str) -> object:
    opt = cls(model.parameters(), torch.optim.AdamW)
    model(torch.randn(4, model.in_features, device=device)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return opt


@only_on(offload=True, reason="CPUOffloadOptimizer needs CUDA or XPU (pytorch/ao#958)")
def test_load_rejects_a_state_of_another_shape(device: str) -> None:
    cls = _offload_class(device)
    torch.manual_seed(0)
    # 128 x 256 and 128 x 128 weights: both above minimal_size (4096), so offloaded.
    saved = _stepped(cls, torch.nn.Linear(256, 128, bias=False).to(device), device)
    new = _stepped(cls, torch.nn.Linear(128, 128, bias=False).to(device), device)
    try:
        new.load_state_dict(saved.state_dict())
    except Exception:
        return  # rejected: fixed
    pytest.fail(
        "load_state_dict accepted a state of shape (128, 256) for a (128, 128) parameter, silently",
        pytrace=False,
    )
