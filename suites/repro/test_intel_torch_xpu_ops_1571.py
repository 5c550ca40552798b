"""intel/torch-xpu-ops#1571: "ValueError: Cannot use ReduceOp.PREMUL_SUM with XCCL" (FSDP2's
reduce-scatter with a gradient divide factor). Open. The smallest trigger: an all-reduce
with ``ReduceOp.PREMUL_SUM(factor)`` on a one-rank group of the device's backend.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from accelgrid import devices
from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("intel/torch-xpu-ops#1571")


def _premul_sum(factor: float) -> object:
    """``ReduceOp.PREMUL_SUM(factor)`` (callable in recent torch, as FSDP2 calls it), else
    the older ``_make_nccl_premul_sum``."""
    op = dist.ReduceOp.PREMUL_SUM
    if callable(op):
        return op(factor)
    return dist._make_nccl_premul_sum(factor)  # type: ignore[attr-defined]


@only_on("cuda", "xpu", reason="PREMUL_SUM is a NCCL-style reduction; gloo refuses it")
def test_all_reduce_premul_sum(device: str) -> None:
    backend = devices.get(torch.device(device).type).collective_backend
    if backend is None:
        pytest.skip(f"no collective backend for {device}")
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device(device))
    try:
        t = torch.full((8,), 3.0, device=device)
        dist.all_reduce(t, op=_premul_sum(0.5))
        assert t.cpu().tolist() == [1.5] * 8
    finally:
        dist.destroy_process_group()
