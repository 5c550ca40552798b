"""CPUOffloadOptimizer makes the same updates as the same optimizer run on the device.

Follows upstream's test_optim_cpu_offload_correctness (pytorch/ao test/test_low_bit_optim.py):
2 steps, cosine LR schedule, a frozen layer, params on both sides of ``minimal_size``,
(offload_gradients, grad_accum) in (False, 1), (False, 2), (True, 1). Extended here to bf16,
to base optimizers other than AdamW, to BF16 mixed precision (autocast) and torch.compile
(the modes ao PR #1324 verified on XPU), and to a 20-step run with gradient accumulation
compared step by step, which gives the race between the parameters' host->device copies
and the next forward (torchao synchronises the copy stream at the end of ``step``) twenty
chances instead of two.

Every step's update (the parameters after it minus before it) is compared with the
reference run's update of that step (:func:`offload_helpers.assert_pair_close`): in bf16 a
parameter comparison cannot see a skipped lr = 1e-3 step on any element above ~0.06. The
tolerances (``offload_helpers.TOLERANCES``) and that each planted fault fails them are
checked in test_offload_checks.py, in every cell.
"""

from __future__ import annotations

from typing import Any

import offload_helpers as h
import pytest
import torch

from accelgrid.testing import device_type, dtypes, not_run

# offload_gradients frees device grads after each backward, so it cannot accumulate.
CONFIGS = [(False, 1), (False, 2), (True, 1)]

BASE_OPTIMIZERS: dict[str, tuple[type, dict[str, Any]]] = {
    "AdamW": (torch.optim.AdamW, {}),
    "Adam": (torch.optim.Adam, {}),
    "SGD-momentum": (torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9}),
}

# (parameter dtype, autocast dtype, compiled): full bf16 eager is test_matches_on_device_*.
VARIANTS: dict[str, tuple[torch.dtype, torch.dtype | None, bool]] = {
    "amp-eager": (torch.float32, torch.bfloat16, False),
    "amp-compiled": (torch.float32, torch.bfloat16, True),
    "bf16-compiled": (torch.bfloat16, None, True),
}


def _run_pair(
    offload_cls: type,
    device: str,
    dtype: torch.dtype,
    base: str,
    offload_gradients: bool,
    grad_accum: int,
    *,
    schedule: bool,
    steps: int = 2,
    autocast: torch.dtype | None = None,
    compiled: bool = False,
    long: bool = False,
) -> None:
    """Train upstream's model twice — plain on-device optimizer, then CPUOffloadOptimizer —
    on identical data, and compare every step's updates."""
    optimizer_class, kwargs = BASE_OPTIMIZERS[base]
    torch.manual_seed(0)
    model = h.upstream_model(device, dtype)
    assert any(not p.requires_grad for p in model.parameters()), "premise: a frozen layer"
    scheduler = None
    if schedule:
        scheduler = lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, 100)  # noqa: E731
    pair = h.run_pair(
        model,
        lambda params: optimizer_class(params, **kwargs),
        lambda params: offload_cls(
            params, optimizer_class, offload_gradients=offload_gradients, **kwargs
        ),
        h.seeded_inputs(device, dtype, steps=steps, grad_accum=grad_accum),
        autocast=autocast,
        compiled=compiled,
        scheduler=scheduler,
    )
    if h.has_minimal_size(offload_cls):
        # Premise: both paths ran (small biases on device, the rest offloaded).
        state = pair.actual_optimizer.state_dict()
        assert state["offloaded"] and "on-device" in state, sorted(state)
    tolerances = h.LONG_TOLERANCES if long else h.TOLERANCES
    h.assert_pair_close(pair, tolerances[h.precision(dtype, autocast)])


@pytest.mark.parametrize(
    "offload_gradients,grad_accum", CONFIGS, ids=[f"offload_grad={g}-accum={a}" for g, a in CONFIGS]
)
@pytest.mark.parametrize("base", list(BASE_OPTIMIZERS))
@dtypes("float32", "bfloat16")
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


@dtypes("float32", "bfloat16")
def test_matches_on_device_optimizer_constant_lr(
    offload_cls: type, device: str, dtype: torch.dtype
) -> None:
    """Without a scheduler, so torchao versions whose optimizer schedulers reject are
    still checked for correctness."""
    _run_pair(offload_cls, device, dtype, "AdamW", False, 1, schedule=False)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_on_device_optimizer_amp_and_compiled(
    offload_cls: type, device: str, variant: str
) -> None:
    """BF16 mixed precision (fp32 parameters and optimizer, forward and backward under
    ``torch.autocast(dtype=torch.bfloat16)``) eager and through torch.compile, and full
    bf16 through torch.compile: gradients arrive through compiled backward graphs, and
    torchao's post-accumulate-grad hooks must still fire for every offloaded parameter."""
    dtype, autocast, compiled = VARIANTS[variant]
    why = h.compile_unavailable(device_type(device)) if compiled else None
    if why:
        pytest.skip(why)
    _run_pair(
        offload_cls,
        device,
        dtype,
        "AdamW",
        False,
        2,
        schedule=False,
        autocast=autocast,
        compiled=compiled,
    )


@pytest.mark.parametrize("mode", ["fp32", "bf16", "amp"])
def test_long_run_matches_step_by_step(offload_cls: type, device: str, mode: str) -> None:
    """20 steps of 2 accumulated micro-batches, every step's update compared: a parameter
    whose host->device copy had not landed when the next forward read it shows up as a
    wrong update at that step (test_offload_checks.py plants exactly that)."""
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    autocast = torch.bfloat16 if mode == "amp" else None
    _run_pair(
        offload_cls,
        device,
        dtype,
        "AdamW",
        False,
        2,
        schedule=False,
        steps=20,
        autocast=autocast,
        long=True,
    )
