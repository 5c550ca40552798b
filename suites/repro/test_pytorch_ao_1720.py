"""pytorch/ao#1720 (torchao 0.10: small parameters stay on an on-device optimizer): its
``load_state_dict`` loads the offloaded states first and the on-device state last, so a
state the on-device optimizer rejects (``ValueError``: another number of parameters) has
already overwritten the offloaded states when the error is raised.

Correct behaviour: a rejected load leaves the optimizer as it was. Code (torchao 0.18):
https://github.com/pytorch/ao/blob/cee38d8c026261e92f1df9bb46266da5d7759574/torchao/optim/cpu_offload.py#L169-L180
The optimizer needs CUDA or XPU (pytorch/ao#958): skipped on other devices.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util

import pytest
import torch

from accelgrid.testing import not_run, only_on

pytestmark = pytest.mark.upstream("pytorch/ao#1720")


def _offload_class(device: str) -> type:
    """The optimizer class (the test's only_on mark has kept it to CUDA and XPU)."""
    if importlib.util.find_spec("torchao") is None:
        not_run("torchao is not installed")
    try:
        return importlib.import_module("torchao.optim").CPUOffloadOptimizer
    except (ModuleNotFoundError, AttributeError):
        not_run("this torchao has no torchao.optim.CPUOffloadOptimizer (on-device part: 0.10+)")
    raise AssertionError("unreachable")


def _model(depth: int, device: str) -> torch.nn.Sequential:
    # 128 x 128 weights are offloaded, the 128-element biases stay on the device.
    return torch.nn.Sequential(*(torch.nn.Linear(128, 128) for _ in range(depth))).to(device)


def _stepped(cls: type, model: torch.nn.Module, device: str) -> object:
    opt = cls(model.parameters(), torch.optim.AdamW)
    model(torch.randn(4, 128, device=device)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return opt


@only_on(offload=True, reason="CPUOffloadOptimizer needs CUDA or XPU (pytorch/ao#958)")
def test_rejected_load_changes_nothing(device: str) -> None:
    cls = _offload_class(device)
    torch.manual_seed(0)
    saved = _stepped(cls, _model(3, device), device)
    new = _stepped(cls, _model(2, device), device)
    own = copy.deepcopy(new.state_dict()["offloaded"][0]["state"][0]["exp_avg"])
    with pytest.raises(ValueError):
        new.load_state_dict(saved.state_dict())
    now = new.state_dict()["offloaded"][0]["state"][0]["exp_avg"]
    assert torch.equal(now, own), (
        "load_state_dict raised, but only after it partially loaded the state: the first "
        "offloaded state was overwritten"
    )
