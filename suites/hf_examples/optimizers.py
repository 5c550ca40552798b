"""The three implementations of ``torch.optim.AdamW`` as a test dimension.

``torch.optim.AdamW`` runs one of three code paths, each with its own aten ops:

  fused     one ``_fused_adamw_`` kernel per device/dtype group (``fused=True``);
            transformers >= 4.57 on torch >= 2.8 picks it (``optim="adamw_torch_fused"``
            is the default there)
  foreach   ``_foreach_lerp_`` / ``_foreach_mul_`` / ``_foreach_addcmul_`` /
            ``_foreach_sqrt`` / ``_foreach_div_`` / ``_foreach_addcdiv_`` over the
            whole group (``foreach=True``); torch's default on cuda/xpu when nothing is
            asked, so what the seed's XPU runs of 2024 hit
  forloop   one ``lerp_`` / ``mul_`` / ``addcmul_`` / ``sqrt`` / ``addcdiv_`` ... per
            parameter (``foreach=False, fused=False``); torch's default on CPU

Trainer's ``optim="adamw_torch"`` leaves ``foreach``/``fused`` to torch and
``optim_args`` is ignored for it (transformers 4.57 and 5.x alike), so the only way to
choose a path through Trainer is ``optimizer_cls_and_kwargs`` (both versions) or a
ready optimizer in ``optimizers``. Only torch is imported here, so the helpers can be
tested without the cell's packages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

# implementation -> AdamW flags; both flags are always given so torch's device-based
# default (_default_to_fused_or_foreach) never decides.
ADAMW_IMPLS: dict[str, dict[str, bool]] = {
    "fused": {"fused": True, "foreach": False},
    "foreach": {"fused": False, "foreach": True},
    "forloop": {"fused": False, "foreach": False},
}
# The reference the others are compared with: per-parameter plain tensor ops.
REFERENCE_IMPL = "forloop"
# clip_grad_norm_'s path in a run with each implementation: the multi-tensor one
# (``_foreach_norm``, what Trainer gets on cuda/xpu) beside the multi-tensor optimizers,
# the per-tensor one (``linalg_vector_norm``) beside the for-loop, so the implementation
# dimension covers both norms.
CLIP_FOREACH: dict[str, bool] = {"fused": True, "foreach": True, "forloop": False}

# One AdamW update moves a parameter by about lr (1e-3 here); implementations differ
# only in rounding (fused kernels, op order, FMA), a few fp32 ulps of the parameter.
# rtol 1e-5 / atol 1e-7 bound that at ~1% of one update, while a wrong kernel (bias
# correction, a lost step, the wrong moment) is off by a whole update.
PARAM_RTOL, PARAM_ATOL = 1e-5, 1e-7


def adamw_flags(impl: str) -> dict[str, bool]:
    try:
        return dict(ADAMW_IMPLS[impl])
    except KeyError:
        raise ValueError(
            f"unknown AdamW implementation {impl!r}: one of {list(ADAMW_IMPLS)}"
        ) from None


def unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer under accelerate's ``AcceleratedOptimizer`` (``.optimizer``)."""
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


def impl_of(optimizer: Any) -> str:
    """Which implementation an AdamW (possibly wrapped) was asked for, read back from
    every param group (torch copies the constructor's flags into each group):
    ``fused``, ``foreach``, ``forloop``, or ``torch-default`` when neither flag was
    given and torch picks by device at each step."""
    opt = unwrap(optimizer)
    found = set()
    for group in opt.param_groups:
        fused, foreach = group.get("fused"), group.get("foreach")
        if fused:
            found.add("fused")
        elif foreach:
            found.add("foreach")
        elif foreach is False:
            found.add("forloop")
        else:
            found.add("torch-default")
    if len(found) != 1:
        raise AssertionError(f"param groups disagree on the implementation: {sorted(found)}")
    return found.pop()


# Step i uses the gradients times GRAD_SCALES[i % len]: with the same gradient at every
# step Adam's bias-corrected moments are exactly g and g*g whatever the betas, so a wrong
# beta or moment update would go unseen.
GRAD_SCALES = (1.0, -0.5, 2.0, 0.25)


def adamw_steps(
    params: Mapping[str, torch.Tensor], grads: Mapping[str, torch.Tensor], device: str,
    impl: str, steps: int, **adamw_kwargs: Any,
) -> dict[str, torch.Tensor]:
    """``steps`` AdamW steps on ``device`` with ``impl``, from ``params`` with ``grads``
    scaled by :data:`GRAD_SCALES`; returns the parameters (those with a gradient) on the
    CPU. Same inputs, so any difference between two calls is the implementation's (and
    the device's) arithmetic."""
    tensors = {
        name: params[name].detach().clone().to(device).requires_grad_(True) for name in grads
    }
    base = {name: grads[name].detach().to(device) for name in grads}
    opt = torch.optim.AdamW(list(tensors.values()), **{**adamw_kwargs, **adamw_flags(impl)})
    assert impl_of(opt) == impl
    for step in range(steps):
        scale = GRAD_SCALES[step % len(GRAD_SCALES)]
        for name, tensor in tensors.items():
            tensor.grad = base[name] * scale
        opt.step()
    return {name: tensor.detach().cpu() for name, tensor in tensors.items()}


def assert_params_close(
    got: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor], *, what: str,
) -> None:
    assert got.keys() == ref.keys()
    for name, r in ref.items():
        torch.testing.assert_close(
            got[name], r, rtol=PARAM_RTOL, atol=PARAM_ATOL,
            msg=lambda m, n=name: f"{what}: parameter {n}: {m}",
        )
