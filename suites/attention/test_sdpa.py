"""torch.nn.functional.scaled_dot_product_attention on the cell's device against a float64
CPU reference (forward and dQ, dK, dV), across fp32 / bf16 / fp16, no mask, causal and a
boolean [B,1,1,S] key mask, at odd lengths; and which kernel a forward pass ran, against
the expectation for the device and torch series (sdpa_checks.expected_kernels): a fall
back to the math path where a fused kernel is expected fails.

Each test records the kernels it saw (``kernels``; the expectation test ``expected`` too)
as its record's properties. docs/suites/attention.md.
"""

from __future__ import annotations

import pytest
import sdpa_checks as sc
import torch
import torch.nn.functional as F

from accelgrid.testing import device_type, dtypes, not_run

# Odd lengths, head dims a multiple of 8 (every fused kernel's alignment): 37 keys with
# 16-wide heads, 129 keys with 64-wide heads (one past a 128 block).
SHAPES = {"s37": (2, 3, 37, 16), "s129": (1, 2, 129, 64)}


def series() -> str:
    """The running torch's series (``2.13`` of ``2.13.0+cpu``)."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def _record(request: pytest.FixtureRequest, **values: object) -> None:
    # user_properties, not record_property: that one warns under junit_family xunit2.
    for key, value in values.items():
        request.node.user_properties.append((key, value))


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None,
          mask: str) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=mask == "causal")


@dtypes("float32", "bfloat16", "float16")
@pytest.mark.parametrize("mask", sc.MASKS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_sdpa_matches_fp64_reference(device: str, dtype: torch.dtype, mask: str, shape: str,
                                     request: pytest.FixtureRequest) -> None:
    q, k, v, dout, keep = sc.inputs(SHAPES[shape], dtype, mask)
    qd, kd, vd = (t.to(device).requires_grad_() for t in (q, k, v))
    keep_d = None if keep is None else keep.to(device)
    box: list[torch.Tensor] = []
    ran = sc.profiled_kernels(lambda: box.append(_sdpa(qd, kd, vd, keep_d, mask)))
    out = box[0]
    out.backward(dout.to(device))
    ref_out, ref_grads = sc.reference(q, k, v, dout, keep, mask == "causal")
    _record(request, kernels=sorted(ran))
    problems = sc.close_problems(out, [qd.grad, kd.grad, vd.grad], ref_out, ref_grads, v,
                                 dtype, f"{device} {dtype} {mask} {shape}")
    assert not problems, "\n".join(problems)


def _expected(device: str, dtype: torch.dtype, mask: str) -> frozenset[str]:
    expected = sc.expected_kernels(device_type(device), series(), dtype, mask)
    if expected is None:
        not_run(f"no SDPA kernel expectation for {device_type(device)} with torch "
                f"{series()} (sdpa_checks.expected_kernels)")
    return expected


@dtypes("float32", "bfloat16", "float16")
@pytest.mark.parametrize("mask", sc.MASKS)
def test_sdpa_runs_the_expected_kernel(device: str, dtype: torch.dtype, mask: str,
                                       request: pytest.FixtureRequest) -> None:
    """A forward pass without gradients (inference) runs the kernel the table expects."""
    expected = _expected(device, dtype, mask)
    q, k, v, _, keep = sc.inputs(SHAPES["s37"], dtype, mask)
    q, k, v = (t.to(device) for t in (q, k, v))
    keep = None if keep is None else keep.to(device)
    with torch.no_grad():
        ran = sc.profiled_kernels(lambda: _sdpa(q, k, v, keep, mask))
    _record(request, kernels=sorted(ran), expected=sorted(expected))
    problems = sc.kernel_problems(ran, expected, f"{device} {dtype} {mask}")
    assert not problems, "\n".join(problems)


def test_kernel_check_catches_a_math_fallback(device: str) -> None:
    """The plant: the math path forced (torch.nn.attention.sdpa_kernel) where the table
    expects a fused kernel: the profile shows math and the check fails, naming it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    expected = _expected(device, torch.float32, "none")
    if sc.MATH in expected:
        pytest.skip(f"the table expects the math path here ({device_type(device)}, torch "
                    f"{series()}): nothing to fall back from")
    q, k, v, _, _ = sc.inputs(SHAPES["s37"], torch.float32, "none")
    q, k, v = (t.to(device) for t in (q, k, v))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        ran = sc.profiled_kernels(lambda: _sdpa(q, k, v, None, "none"))
    assert ran == {sc.MATH}, f"premise: forcing the math path ran {sorted(ran)}"
    [line] = sc.kernel_problems(ran, expected, "planted")
    assert "fell back to the math path" in line, line
