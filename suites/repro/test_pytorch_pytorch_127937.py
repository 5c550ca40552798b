"""pytorch/pytorch#127937: ``nll_loss2d_forward/backward`` not implemented for XPU (DETR,
segmentation losses). Fixed in 2.5.

``cross_entropy`` on a 3-D ``(N, C, L)`` or 4-D ``(N, C, H, W)`` input goes through
nll_loss2d; loss and gradient on the device must match the CPU's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.upstream("pytorch/pytorch#127937")
# The aten ops each case reaches on XPU (tests/ops/test_repro_prediction.py checks the
# registry's scope against accelgrid's per-release prediction for them).
XPU_CALLS = {
    "3d": ["aten::nll_loss2d_forward.default", "aten::nll_loss2d_backward.default"],
    "4d": ["aten::nll_loss2d_forward.default", "aten::nll_loss2d_backward.default"],
}


@pytest.mark.parametrize("shape", [(4, 5, 7), (2, 5, 3, 4)], ids=["3d", "4d"])
def test_cross_entropy_nd_forward_backward(device: str, shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(*shape, generator=gen)
    target = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=gen)
    target.view(-1)[::5] = -100  # ignore_index entries, as segmentation masks have
    ref = logits.clone().requires_grad_()
    ref_loss = F.cross_entropy(ref, target, ignore_index=-100)
    ref_loss.backward()
    on = logits.to(device).requires_grad_()
    loss = F.cross_entropy(on, target.to(device), ignore_index=-100)
    loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), ref_loss.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(on.grad.cpu(), ref.grad, rtol=1e-4, atol=1e-5)
