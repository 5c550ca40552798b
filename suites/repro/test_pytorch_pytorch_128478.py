"""pytorch/pytorch#128478: reentrant gradient checkpointing takes the CUDA path on
non-CUDA devices (``loss.backward()`` fails on XPU). Fixed in 2.5.

Checkpointed forward + backward (with dropout, so the RNG state must be stashed and
restored on the right device) must give the plain run's gradients, and must not touch
CUDA when the tensors are elsewhere.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

pytestmark = pytest.mark.upstream("pytorch/pytorch#128478")


def test_reentrant_checkpoint_backward(device: str) -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to(device)
    x = torch.randn(8, 16, device=device, requires_grad=True)

    def block(inp: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.tanh(lin(inp)), p=0.25, training=True)

    cuda_before = torch.cuda.is_initialized()
    torch.manual_seed(1)
    checkpoint(block, x, use_reentrant=True).sum().backward()
    got = (x.grad.clone(), lin.weight.grad.clone())
    x.grad, lin.weight.grad, lin.bias.grad = None, None, None
    torch.manual_seed(1)
    block(x).sum().backward()
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], lin.weight.grad)
    if device != "cuda":
        assert torch.cuda.is_initialized() == cuda_before, (
            f"checkpointing {device} tensors initialised CUDA (took the CUDA path)")
