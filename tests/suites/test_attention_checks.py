"""The attention suite's checks (suites/attention/sdpa_checks.py), each pinned from both
sides: a plant just past a bound fails, the same plant just inside passes, NaN and Inf
fail; the kernel check fails on a math fallback (planted in a real CPU run, the math path
forced); and the suite's XPU table says what accelgrid's XPU prediction says, per series.
The real runs on the cell's device are the suite's own tests (the slow set)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from accelgrid.ops import xpu_prediction
from suites.attention import sdpa_checks as sc

JUST = 0.1
PAST, INSIDE = 1 + JUST, 1 - JUST
# The bounds as sdpa_checks.py documents them, written here rather than read from the
# module: a widened or narrowed constant would otherwise pass its own plant.
OUT = {torch.float32: 16.0, torch.bfloat16: 4.0, torch.float16: 4.0}
GRAD = {torch.float32: 64.0, torch.bfloat16: 4.0, torch.float16: 4.0}
GRAD_FLOOR = 0.1
DTYPES = pytest.mark.parametrize("dtype", list(OUT), ids=["fp32", "bf16", "fp16"])
NON_FINITE = pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf],
                                     ids=["nan", "inf", "-inf"])


def case(dtype: torch.dtype, shape: tuple[int, ...] = (2, 2, 7, 8), mask: str = "causal"):
    q, k, v, dout, keep = sc.inputs(shape, dtype, mask, seed=3)
    ref_out, ref_grads = sc.reference(q, k, v, dout, keep, mask == "causal")
    return v, ref_out, ref_grads


def planted(t: torch.Tensor, by: float, at: int = 0) -> torch.Tensor:
    out = t.clone()
    out.view(-1)[at] += by
    return out


@DTYPES
def test_the_output_is_held_to_its_epsilons_of_max_v(dtype: torch.dtype) -> None:
    v, ref_out, _ = case(dtype)
    bound = OUT[dtype] * torch.finfo(dtype).eps * float(v.double().abs().max())
    [line] = sc.close_problems(planted(ref_out, PAST * bound), None, ref_out, None, v, dtype,
                               "plant")
    assert line.startswith("plant output: 1 of"), line
    assert sc.close_problems(planted(ref_out, INSIDE * bound), None, ref_out, None, v, dtype,
                             "plant") == []


@DTYPES
def test_a_gradient_is_held_to_its_epsilons_of_its_largest(dtype: torch.dtype) -> None:
    v, ref_out, ref_grads = case(dtype)
    eps = torch.finfo(dtype).eps
    top = max(float(g.abs().max()) for g in ref_grads)
    dk = ref_grads[1]
    bound = GRAD[dtype] * eps * max(float(dk.abs().max()), GRAD_FLOOR * top)
    for by, problems in ((PAST, 1), (INSIDE, 0)):
        grads = [ref_grads[0], planted(dk, by * bound), ref_grads[2]]
        found = sc.close_problems(ref_out, grads, ref_out, ref_grads, v, dtype, "plant")
        assert len(found) == problems, found
        assert not found or found[0].startswith("plant dK: 1 of"), found


def test_a_zero_gradient_is_held_to_a_tenth_of_the_largest() -> None:
    """One key: dQ and dK are zero in exact arithmetic; their allowance is the floor."""
    dtype = torch.float32
    v, ref_out, ref_grads = case(dtype, shape=(1, 1, 1, 8), mask="none")
    assert float(ref_grads[0].abs().max()) == 0.0  # premise
    top = max(float(g.abs().max()) for g in ref_grads)
    bound = GRAD[dtype] * torch.finfo(dtype).eps * GRAD_FLOOR * top
    for by, n in ((PAST, 1), (INSIDE, 0)):
        grads = [planted(ref_grads[0], by * bound), *ref_grads[1:]]
        assert len(sc.close_problems(ref_out, grads, ref_out, ref_grads, v, dtype, "p")) == n


@NON_FINITE
def test_a_non_finite_output_or_gradient_fails(value: float) -> None:
    dtype = torch.bfloat16
    v, ref_out, ref_grads = case(dtype)
    bad_out = ref_out.clone()
    bad_out.view(-1)[3] = value
    assert sc.close_problems(bad_out, None, ref_out, None, v, dtype, "plant")
    bad_dv = ref_grads[2].clone()
    bad_dv.view(-1)[0] = value
    assert sc.close_problems(ref_out, [*ref_grads[:2], bad_dv], ref_out, ref_grads, v, dtype,
                             "plant")


def test_the_reference_is_softmax_attention() -> None:
    """The reference against torch's own math path in float64 (a reference that is
    wrong would pass a wrong kernel)."""
    for mask in sc.MASKS:
        q, k, v, dout, keep = sc.inputs((2, 3, 9, 8), torch.float64, mask)
        ref, _ = sc.reference(q, k, v, dout, keep, mask == "causal")
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                                 is_causal=mask == "causal")
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


# --- the kernel check -----------------------------------------------------------------------


def test_kernel_names_from_a_profile() -> None:
    names = ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math",
             "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]
    assert sc.kernels_in(names) == {"math"}


def test_a_math_fallback_where_fused_is_expected_fails() -> None:
    [line] = sc.kernel_problems({"math"}, frozenset({"flash", "cudnn"}), "plant")
    assert "fell back to the math path" in line
    assert sc.kernel_problems({"cudnn"}, frozenset({"flash", "cudnn"}), "p") == []
    assert sc.kernel_problems({"efficient"}, frozenset({"flash", "cudnn"}), "p")
    assert sc.kernel_problems(set(), frozenset({"flash"}), "p")       # nothing seen
    assert sc.kernel_problems({"flash", "efficient"}, frozenset({"flash", "efficient"}), "p")
    assert sc.kernel_problems({"math"}, frozenset({"math"}), "p") == []  # xpu before 2.7


def test_a_real_cpu_math_fallback_fails_and_the_flash_kernel_passes() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, _, _ = sc.inputs((2, 3, 37, 16), torch.float32, "none")
    expected = sc.expected_kernels("cpu", "2.13", torch.float32, "none")
    assert expected == {"flash_cpu"}
    with torch.no_grad():
        ran = sc.profiled_kernels(lambda: F.scaled_dot_product_attention(q, k, v))
        assert sc.kernel_problems(ran, expected, "cpu") == [], ran
        with sdpa_kernel(SDPBackend.MATH):
            forced = sc.profiled_kernels(lambda: F.scaled_dot_product_attention(q, k, v))
    assert forced == {"math"}
    assert "fell back" in sc.kernel_problems(forced, expected, "planted")[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask", sc.MASKS)
def test_cuda_never_expects_math_and_fp32_is_efficient(dtype: torch.dtype, mask: str) -> None:
    expected = sc.expected_kernels("cuda", "2.11", dtype, mask)
    assert expected and "math" not in expected
    if dtype == torch.float32:
        assert expected == {"efficient"}
    elif mask == "padding":
        assert "flash" not in expected  # flash takes no attn_mask (check_for_attn_mask)


def test_the_xpu_table_is_the_xpu_prediction() -> None:
    """Per series of the prediction's data: the op it routes SDPA to on XPU is the
    kernel the suite expects there."""
    upstream = xpu_prediction.load_upstream()
    labels = {op: label for op, label in sc.KERNEL_OPS.items()}
    seen = set()
    for series in xpu_prediction.series_names(upstream):
        detail = xpu_prediction.predict_detail(
            ["_scaled_dot_product_flash_attention_for_cpu"], series, upstream=upstream)
        op = detail["_scaled_dot_product_flash_attention_for_cpu"]["xpu_op"]
        assert sc.xpu_kernel(series) == labels[op], (series, op)
        assert sc.expected_kernels("xpu", series, torch.bfloat16, "padding") == {labels[op]}
        seen.add(labels[op])
    assert seen == {"math", "overrideable", "flash"}
