"""flex_attention (torch >= 2.5), compiled as it is meant to run, against the attention
suite's float64 CPU reference (suites/attention/sdpa_checks.py: its bounds, its inputs):
a causal block mask and a key-padding mask at an odd length. In the compile suite, not
the attention suite: each mask compiles a kernel (16-43 s cold on the 2-core cpu-2.13
host; the attention suite runs in every default cell in seconds)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from accelgrid.testing import dtypes, not_run

ATTENTION = str(Path(__file__).resolve().parents[1] / "attention")
if ATTENTION not in sys.path:
    sys.path.insert(0, ATTENTION)
import sdpa_checks as sc  # noqa: E402

SHAPE = (2, 2, 37, 16)


@dtypes("float32", "bfloat16")
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("mask", ["causal", "padding"])
def test_flex_attention_matches_fp64_reference(device: str, dtype: torch.dtype, mask: str,
                                               grad: bool, inductor: str) -> None:
    """The output, and with ``backward`` dQ, dK, dV too (a skip, with torch's own
    message, where flex_attention has no backward: the CPU in torch 2.13)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        not_run(f"torch {torch.__version__} has no flex_attention (torch >= 2.5)")
    q, k, v, dout, keep = sc.inputs(SHAPE, dtype, mask)
    b, _, s, _ = SHAPE
    if mask == "causal":
        def mask_mod(_b, _h, qi, ki):  # noqa: ANN001, ANN202 (flex's signature)
            return qi >= ki
        batch = None
    else:
        keep_d = keep.reshape(b, s).to(device)

        def mask_mod(bi, _h, _qi, ki):  # noqa: ANN001, ANN202
            return keep_d[bi, ki]
        batch = b
    block_mask = create_block_mask(mask_mod, batch, None, s, s, device=device)
    qd, kd, vd = (t.to(device).requires_grad_(grad) for t in (q, k, v))
    try:
        out = torch.compile(flex_attention, backend=inductor)(qd, kd, vd,
                                                              block_mask=block_mask)
    except NotImplementedError as exc:
        if grad and "backward" in str(exc):
            pytest.skip(f"flex_attention on {device}: {exc}")
        raise
    if grad:
        out.backward(dout.to(device))
    ref_out, ref_grads = sc.reference(q, k, v, dout, keep, mask == "causal")
    problems = sc.close_problems(out, [qd.grad, kd.grad, vd.grad] if grad else None, ref_out,
                                 ref_grads, v, dtype, f"flex_attention {device} {dtype} {mask}")
    assert not problems, "\n".join(problems)
