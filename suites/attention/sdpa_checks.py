"""The attention suite's checks: scaled dot-product attention against a float64 CPU
reference within dtype-aware bounds, and which kernel ran against the device's and torch
series' expectation.

Torch only (tests/suites/test_attention_checks.py imports it for the planted faults; the compile
suite's flex_attention test for the reference).

Bounds (:func:`close_problems`). The output is a convex combination of V's rows, so its
error is held to ``OUT_TOLERANCE[dtype] * eps * max|V|``; a gradient to
``GRAD_TOLERANCE[dtype] * eps`` times its largest reference value, or a tenth of the
largest of dQ, dK, dV where that is more (with one key, dQ and dK are zero in exact
arithmetic and what a kernel returns there is rounding noise of dV's size). The inputs
are drawn in the dtype and the reference computes on those very values, so input
rounding is not in the error. Measured on the cpu-2.13 cell (torch 2.13.0+cpu, both CPU
kernels: the flash kernel and, forced, the math path), 6 seeds x shapes (2,3,37,16),
(1,2,129,64), (2,2,1,32) x no mask / causal / [B,1,1,S] boolean mask, worst over all, in
epsilons of the dtype: output fp32 1.53, bf16 0.27, fp16 0.24; gradients fp32 14.4,
bf16 1.28, fp16 1.07.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

# In epsilons of the dtype. Output: fp32 16 (10x the 1.53 measured), bf16 / fp16 4 (15x
# and 16x: a GPU kernel may round the probabilities to the dtype before P @ V, which
# costs up to one epsilon of max|V|). Gradients: fp32 64 (4.4x the 14.4 measured),
# bf16 / fp16 4 (3.1x and 3.7x).
OUT_TOLERANCE = {torch.float32: 16.0, torch.bfloat16: 4.0, torch.float16: 4.0}
GRAD_TOLERANCE = {torch.float32: 64.0, torch.bfloat16: 4.0, torch.float16: 4.0}
GRAD_FLOOR = 0.1

MASKS = ("none", "causal", "padding")   # padding: a boolean [B,1,1,S] key mask


def inputs(shape: Sequence[int], dtype: torch.dtype, mask: str, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                      torch.Tensor | None]:
    """q, k, v, an upstream gradient and the boolean mask (``padding``: keys dropped at
    random per batch row, the first key always kept so that no row is all masked), on
    the CPU, drawn in float32 and rounded to ``dtype``."""
    b, _, s, _ = shape
    gen = torch.Generator().manual_seed(seed)
    q, k, v, dout = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(4))
    keep = None
    if mask == "padding":
        keep = torch.rand(b, 1, 1, s, generator=gen) > 0.3
        keep[..., 0] = True
    return q, k, v, dout, keep


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
              keep: torch.Tensor | None, causal: bool
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """softmax(Q K^T / sqrt(d) masked) V and its gradients for ``dout``, in float64 on the
    CPU, written out (no attention kernel computes its own reference)."""
    q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    scores = q64 @ k64.transpose(-2, -1) / math.sqrt(q.shape[-1])
    rows, cols = scores.shape[-2:]
    if causal:
        scores = scores.masked_fill(~torch.ones(rows, cols, dtype=torch.bool).tril(),
                                    -math.inf)
    if keep is not None:
        scores = scores.masked_fill(~keep.cpu(), -math.inf)
    out = torch.softmax(scores, dim=-1) @ v64
    out.backward(dout.detach().cpu().double())
    return out.detach(), [t.grad for t in (q64, k64, v64)]


def _bound_problems(got: torch.Tensor, ref: torch.Tensor, bound: float, what: str
                    ) -> list[str]:
    err = (got.detach().double().cpu() - ref).abs()
    bad = ~(err <= bound)  # "not within": NaN is off too
    if not bad.any():
        return []
    i = int(torch.where(err.isnan(), math.inf, err).flatten().argmax())
    return [f"{what}: {int(bad.sum())} of {ref.numel()} elements off the float64 reference; "
            f"worst {got.flatten()[i].item():.6g} vs {ref.flatten()[i].item():.6g} (error "
            f"{err.flatten()[i].item():.3g}, bound {bound:.3g})"]


def close_problems(out: torch.Tensor, grads: Sequence[torch.Tensor] | None,
                   ref_out: torch.Tensor, ref_grads: Sequence[torch.Tensor] | None,
                   v: torch.Tensor, dtype: torch.dtype, what: str) -> list[str]:
    """The output (and, given, the gradients dQ, dK, dV) against the reference, within
    the bounds of the module docstring."""
    eps = torch.finfo(dtype).eps
    v_max = float(v.detach().double().abs().max())
    problems = _bound_problems(out, ref_out, OUT_TOLERANCE[dtype] * eps * v_max,
                               f"{what} output")
    if grads is not None and ref_grads is not None:
        top = max(float(r.abs().max()) for r in ref_grads)
        for name, g, r in zip(("dQ", "dK", "dV"), grads, ref_grads, strict=True):
            scale = max(float(r.abs().max()), GRAD_FLOOR * top)
            problems += _bound_problems(g, r, GRAD_TOLERANCE[dtype] * eps * scale,
                                        f"{what} {name}")
    return problems


# --- which kernel ran ----------------------------------------------------------------------

# The aten op each kernel runs as (the profiler's event names): the op SDPA dispatches to.
KERNEL_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash_cpu",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math_mps",
}
MATH = "math"


def kernels_in(event_names: Iterable[str]) -> set[str]:
    """The kernels whose ops are among a profile's event names."""
    return {KERNEL_OPS[n] for n in event_names if n in KERNEL_OPS}


def _series(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split(".")[:2])


# XPU: the op torch's native_functions.yaml gives an XPU kernel, newest first; before
# the oldest, the math path. The same facts as accelgrid's XPU prediction
# (accelgrid.ops.xpu_rules' _SDPA_FUSED, from each release's yaml); a quick test
# (tests/suites/test_attention_checks.py) holds the two together for every series it knows.
XPU_FUSED_SINCE = (("2.10", "flash"), ("2.7", "overrideable"))
# CPU: sdp_utils_cpp.cpp's order is flash, then math; flash takes fp32, fp64, bf16 and
# fp16, boolean and float masks, dense 4-d inputs with equal head dims (pytorch/pytorch
# aten/src/ATen/native/transformers/sdp_utils_cpp.cpp at 02315a4, use_flash_attention_cpp);
# measured on torch 2.13.0+cpu for every case of this suite. Older series: not checked
# here (no table: the expectation test is not-run there).
CPU_FLASH_SINCE = "2.13"


def xpu_kernel(series: str) -> str:
    """The kernel SDPA takes on XPU in ``series`` per the XPU prediction's data."""
    for since, kernel in XPU_FUSED_SINCE:
        if _series(series) >= _series(since):
            return kernel
    return MATH


def expected_kernels(device_type: str, series: str, dtype: torch.dtype, mask: str
                     ) -> frozenset[str] | None:
    """The kernels SDPA may run for a forward pass of this suite's inputs (head dim a
    multiple of 8 and at most 256, equal query and key lengths, no dropout) on
    ``device_type`` with torch ``series``; None where no table says.

    cuda (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, pytorch/pytorch at
    001f694; sm80 or newer): flash and cuDNN take fp16 / bf16 only
    (check_dtypes_low_precision), flash no attn_mask (check_for_attn_mask); cuDNN comes
    first on sm90 / sm10x with cuDNN newer than 9.15 (check_prefer_cudnn_attention),
    else flash, then memory-efficient, which takes fp32 too. So fp16 / bf16 without a
    mask: flash or cuDNN; with the boolean mask: cuDNN or efficient; fp32: efficient.
    Never math."""
    if device_type == "cpu":
        return frozenset({"flash_cpu"}) if _series(series) >= _series(CPU_FLASH_SINCE) \
            else None
    if device_type == "cuda":
        if dtype == torch.float32:
            return frozenset({"efficient"})
        return frozenset({"cudnn", "efficient"} if mask == "padding" else {"flash", "cudnn"})
    if device_type == "xpu":
        kernel = xpu_kernel(series)
        if kernel == "flash" and dtype == torch.float32:
            # Not in the prediction's data: which fused op an fp32 call takes where
            # flash has an XPU key; either is fused, math is not.
            return frozenset({"flash", "overrideable"})
        return frozenset({kernel})
    return None


def kernel_problems(ran: set[str], expected: frozenset[str], what: str) -> list[str]:
    """A forward pass ran exactly one SDPA kernel, one of ``expected``; math where a fused
    kernel was expected is said as the fallback it is."""
    if not ran:
        return [f"{what}: no SDPA kernel in the profile (looked for "
                f"{', '.join(sorted(KERNEL_OPS))})"]
    if MATH in ran and MATH not in expected:
        return [f"{what}: fell back to the math path where {' or '.join(sorted(expected))} "
                f"was expected (ran: {', '.join(sorted(ran))})"]
    if not ran <= expected or len(ran) > 1:
        return [f"{what}: ran {', '.join(sorted(ran))}; expected one of "
                f"{', '.join(sorted(expected))}"]
    return []


def profiled_kernels(fn: object) -> set[str]:
    """The SDPA kernels a call of ``fn()`` ran, from torch.profiler's CPU events (every
    aten op, composite ones like the math path included, is recorded on the CPU side)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()  # type: ignore[operator]
    return kernels_in(e.name for e in prof.events())
