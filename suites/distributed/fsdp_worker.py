"""Run by torchrun from test_fsdp2.py: FSDP2 (``fully_shard``) with a bf16
``MixedPrecisionPolicy`` (fp32 gradient reduction) trains a small MLP for a few SGD steps.

    python -m torch.distributed.run ... fsdp_worker.py DEVICE BACKEND OUT [DIVIDE_FACTOR]

Each rank writes ``<out>/rank-<rank>.json`` (dist_worker.write_report): the initial and final
full parameters, each rank's inputs coming from a CPU generator seeded with its rank, so the
test can train a single-process reference on the same data. DIVIDE_FACTOR sets FSDP2's
gradient divide factor: one other than the world size makes it reduce-scatter with
``ReduceOp.PREMUL_SUM(1 / factor)`` (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
torch 2.13).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from dist_worker import _exit_now, join_group, write_report

from accelgrid.base import lifetime

# As test_fsdp2.py's reference: 3 SGD steps of lr 0.5 on batches of 8.
STEPS, LR, BATCH, SIZES = 3, 0.5, 8, (16, 32, 8)


def fsdp_api() -> tuple:
    """(fully_shard, MixedPrecisionPolicy): the public path from torch 2.6, the composable
    one before (torch 2.4/2.5 have only ``torch.distributed._composable.fsdp``)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import (  # type: ignore[no-redef]
            MixedPrecisionPolicy,
            fully_shard,
        )
    return fully_shard, MixedPrecisionPolicy


def build(device: torch.device) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
                               torch.nn.Linear(SIZES[1], SIZES[2])).to(device)


def main() -> None:
    lifetime.die_with_parent()
    device_type, backend, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    divide = float(sys.argv[4]) if len(sys.argv) > 4 else None
    device, rank, world, _ = join_group(device_type, backend)

    fully_shard, policy = fsdp_api()
    model = build(device)
    initial = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
    mp = policy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    sharded = (model[0], model[2], model)   # the layers first, the root last
    for module in sharded:
        fully_shard(module, mp_policy=mp)
    if divide is not None:
        # Each fully_shard module reduces its own parameters' gradients with its own factor
        # and the setter sets its module's alone (pytorch/pytorch#129286; read in torch 2.11
        # and 2.13): on the root alone, which holds no parameter here, it was ignored.
        for module in sharded:
            # Renamed from set_reduce_scatter_divide_factor (torch 2.6-2.7) in 2.8.
            setter = (getattr(module, "set_gradient_divide_factor", None)
                      or module.set_reduce_scatter_divide_factor)
            setter(divide)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(rank)
    out_dtype = None
    for _ in range(STEPS):
        inp = torch.randn(BATCH, SIZES[0], generator=gen).to(device)
        y = model(inp)
        out_dtype = str(y.dtype)
        loss = y.float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = [p.full_tensor().detach().float().cpu().flatten().tolist()
             for p in model.parameters()]
    shard = [p.to_local().dtype for p in model.parameters()]
    write_report(out, rank, {"rank": rank, "world": world, "initial": initial,
                             "weights": final, "out_dtype": out_dtype,
                             "shard_dtype": str(shard[0]), "device": str(device)})
    del opt, model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    _exit_now()
