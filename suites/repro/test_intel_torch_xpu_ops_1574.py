"""intel/torch-xpu-ops#1574: "The operator 'aten::_grouped_mm' is not currently implemented
for the XPU device" (MoE GEMMs). Open for an XPU kernel; from torch 2.9 PyTorch's own yaml
gives ``_grouped_mm`` a CompositeExplicitAutograd kernel that runs on XPU (accelgrid ops
predict: missing on 2.8, decomposed from 2.9).
"""

from __future__ import annotations

import pytest
import torch

from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("intel/torch-xpu-ops#1574")
XPU_CALLS = {"2d-3d": ["aten::_grouped_mm.default"]}


@only_on("xpu", reason="the missing kernel is XPU's")
@pytest.mark.parametrize("case", ["2d-3d"])
def test_grouped_mm(device: str, case: str) -> None:
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(2, 32, 8, dtype=torch.bfloat16)
    offs = torch.tensor([6, 16], dtype=torch.int32)
    y = torch._grouped_mm(x.to(device), w.to(device), offs=offs.to(device))
    ref = torch.cat([x[:6].float() @ w[0].float(), x[6:].float() @ w[1].float()])
    torch.testing.assert_close(y.float().cpu(), ref, rtol=2e-2, atol=2e-2)
