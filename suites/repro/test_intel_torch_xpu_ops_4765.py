"""intel/torch-xpu-ops#4765: ``_weight_int4pack_mm`` on XPU gives wrong results for M=1 (a
single row: decoding) with a quantization group over 32. Open; the fix PR #5001 (merged
after release/2.14 was cut) says: for M == 1 every subgroup read group 0's scale and zero
point (``sg_id * (TileK / qGroupSize)`` truncated to 0), 96-98 % of the elements wrong.

The product of a 4-bit group-quantized weight with one row, against the dequantized
weight in fp32 (suites/lowbit's packing and reference, inlined here so the reproduction
stands alone).
"""

from __future__ import annotations

import pytest
import torch

from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("intel/torch-xpu-ops#4765")


@only_on("xpu", reason="the bug is in torch-xpu-ops' int4 kernel")
def test_int4pack_mm_single_row(device: str) -> None:
    n, k, group = 256, 512, 128
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(1, k, generator=gen).bfloat16()
    w = (torch.rand(n, k, generator=gen) * torch.rand(n, 1, generator=gen)).bfloat16().float()
    g = w.reshape(-1, group)
    lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    q = g.sub(lo).div(scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    sz = torch.stack([scale.view(n, -1), (lo + 8 * scale).view(n, -1)], -1).transpose(0, 1)
    sz = sz.contiguous().bfloat16()
    deq = (q.float() - 8) * sz[..., 0].float().T.repeat_interleave(group, 1) \
        + sz[..., 1].float().T.repeat_interleave(group, 1)
    ref = a.float() @ deq.T
    packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8).to(device).view(torch.int32)
    out = torch._weight_int4pack_mm(a.to(device), packed, group, sz.to(device))
    err = float((out.float().cpu() - ref).abs().max() / ref.abs().max())
    assert err <= 0.01, f"int4-packed matmul off by {err:.3g} of the largest value (M=1)"
