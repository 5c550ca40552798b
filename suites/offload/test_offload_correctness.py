"""CPUOffloadOptimizer gives the same parameters as the same optimizer run on the device.

Follows upstream's test_optim_cpu_offload_correctness (pytorch/ao test/test_low_bit_optim.py):
2 steps, cosine LR schedule, a frozen layer, params on both sides of ``minimal_size``,
(offload_gradients, grad_accum) in (False, 1), (False, 2), (True, 1). Extended here to bf16
and to base optimizers other than AdamW.
"""

from __future__ import annotations

import copy
from typing import Any

import offload_helpers as h
import pytest
import torch

from accelgrid.outcomes import not_run

# offload_gradients frees device grads after each backward, so it cannot accumulate.
CONFIGS = [(False, 1), (False, 2), (True, 1)]

BASE_OPTIMIZERS: dict[str, tuple[type, dict[str, Any]]] = {
    "AdamW": (torch.optim.AdamW, {}),
    "Adam": (torch.optim.Adam, {}),
    "SGD-momentum": (torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9}),
}

TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    # Upstream compares fp32 with assert_close's defaults (rtol 1.3e-6, atol 1e-5).
    torch.float32: {},
    # bf16: the reference runs the device's multi-tensor kernels, the offloaded params a CPU
    # kernel (fused AdamW computes in fp32 and rounds once; foreach rounds each op to bf16).
    # After a step the parameters may differ by one bf16 rounding: rtol 1.6e-2 (= 2 * 2**-7,
    # two ulps over the two steps); near zero the rounding of the update itself (a few bf16
    # eps of lr = 1e-3) dominates: atol 1e-4. A skipped or doubled step moves most elements
    # by ~lr, far outside this.
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-4},
}

# bf16: those one-ulp differences change the step-2 forward, and where a gradient is near
# zero (inputs of almost-dead ReLU units) it can even change sign. Adam normalises it to a
# full +-lr step either way: with the real CPU kernels (fused vs per-op AdamW, this model)
# 19 of 4.2 M elements of 0.weight ended 2**-9 ~ 2 * lr apart; SGD does not amplify (2 of
# 4.2 M elements 1.5e-4 apart on an H200). So a few elements per 10^4 may differ by up to
# 2 * lr per step for the two steps (|Adam step| <= ~lr); the rest must meet TOLERANCES.
BF16_OUTLIERS = {"outlier_fraction": 1e-4, "outlier_atol": 2 * 2 * 1e-3}


def _run_pair(
    offload_cls: type,
    device: str,
    dtype: torch.dtype,
    base: str,
    offload_gradients: bool,
    grad_accum: int,
    schedule: bool,
) -> None:
    """Train the upstream model twice — plain on-device optimizer vs CPUOffloadOptimizer —
    on identical data, one after the other (running them interleaved would give the offload
    copies extra time and hide missing synchronisation), and compare."""
    optimizer_class, kwargs = BASE_OPTIMIZERS[base]
    torch.manual_seed(0)
    ref_model = h.upstream_model(device, dtype)
    off_model = copy.deepcopy(ref_model)
    before = h.snapshot(ref_model)
    frozen = [n for n, p in ref_model.named_parameters() if not p.requires_grad]
    assert frozen, "premise: the model has a frozen layer"

    ref_opt = optimizer_class(ref_model.parameters(), **kwargs)
    off_opt = offload_cls(
        off_model.parameters(), optimizer_class, offload_gradients=offload_gradients, **kwargs
    )
    ref_sched = off_sched = None
    if schedule:
        ref_sched = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, 100)
        off_sched = torch.optim.lr_scheduler.CosineAnnealingLR(off_opt, 100)

    inputs = h.seeded_inputs(device, dtype, steps=2, grad_accum=grad_accum)
    h.train(ref_model, ref_opt, inputs, ref_sched)
    h.train(off_model, off_opt, inputs, off_sched)

    if h.has_minimal_size(offload_cls):
        # Premise: both paths ran (small biases on device, the rest offloaded).
        state = off_opt.state_dict()
        assert state["offloaded"] and "on-device" in state, sorted(state)

    expected = h.snapshot(ref_model)
    h.assert_trained(before, expected, frozen)
    outliers = BF16_OUTLIERS if dtype == torch.bfloat16 else {}
    h.assert_params_close(h.snapshot(off_model), expected, **TOLERANCES[dtype], **outliers)


@pytest.mark.parametrize(
    "offload_gradients,grad_accum", CONFIGS, ids=[f"offload_grad={g}-accum={a}" for g, a in CONFIGS]
)
@pytest.mark.parametrize("base", list(BASE_OPTIMIZERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_matches_on_device_optimizer(
    offload_cls: type,
    device: str,
    dtype: torch.dtype,
    base: str,
    offload_gradients: bool,
    grad_accum: int,
) -> None:
    """With a cosine LR schedule, as upstream."""
    if not h.is_torch_optimizer(offload_cls):
        not_run(
            "this torchao's CPUOffloadOptimizer is not a torch.optim.Optimizer, so LR "
            "schedulers reject it (newer torchao subclasses it)"
        )
    _run_pair(offload_cls, device, dtype, base, offload_gradients, grad_accum, schedule=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_matches_on_device_optimizer_constant_lr(
    offload_cls: type, device: str, dtype: torch.dtype
) -> None:
    """Without a scheduler, so torchao versions whose optimizer schedulers reject are
    still checked for correctness."""
    _run_pair(offload_cls, device, dtype, "AdamW", False, 1, schedule=False)
