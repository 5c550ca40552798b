"""Run by torchrun from test_collectives.py: all-reduce, broadcast and two DDP steps.

Each rank writes what it saw to its own file, ``<out>/rank-<rank>.json`` (atomically): the
ranks share one stdout, where their lines can interleave. The test checks the files.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from accelgrid.base import lifetime


def join_group(device_type: str, backend: str) -> tuple[torch.device, int, int, int]:
    """This rank's device (torchrun's LOCAL_RANK of ``device_type``, made current), rank,
    world size and local rank, once it has joined the process group over ``backend``."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    if device_type == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(device_type, local)
        getattr(torch, device_type).set_device(device)
    dist.init_process_group(backend=backend)
    return device, rank, world, local


def write_report(out: Path, rank: int, report: dict) -> None:
    """``out/rank-<rank>.json``, complete or absent: written aside, then renamed."""
    tmp = out / f".rank-{rank}.json.tmp"
    tmp.write_text(json.dumps(report), encoding="utf-8")
    os.replace(tmp, out / f"rank-{rank}.json")


def main() -> None:
    # torch starts each rank in a session of its own: die with torchrun, not after it.
    lifetime.die_with_parent()
    device_type, backend, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    device, rank, world, local = join_group(device_type, backend)

    x = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(x)  # sum of 1..world
    y = torch.arange(3, dtype=torch.float32, device=device) + (100 if rank == 0 else 0)
    dist.broadcast(y, src=0)

    torch.manual_seed(rank)  # different data per rank; DDP must keep weights equal
    model = torch.nn.Linear(8, 2).to(device)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    initial = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if device_type == "cpu" else [local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(2):
        inp = torch.randn(16, 8, generator=gen).to(device)
        loss = ddp(inp).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    write_report(out, rank, {"rank": rank, "world": world, "all_reduce": x.cpu().tolist(),
                             "broadcast": y.cpu().tolist(), "weights": weights.tolist(),
                             "initial": initial.tolist(),
                             "device": str(device)})
    del opt, ddp
    dist.barrier()
    dist.destroy_process_group()


def _exit_now() -> None:
    """Leave without running C++ static destructors: on torch 2.13 CPU (gloo, torchrun)
    about one rank exit in ten aborted *after* main() returned ("terminate called without
    an active exception", faulthandler: no Python frame), with every report already
    written; the work this test checks is done and on disk by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    _exit_now()
