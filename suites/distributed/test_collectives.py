"""Collectives across the host's devices, started with torchrun: all-reduce, broadcast and
a two-step DDP training, through the device's backend (nccl / xccl / gloo).

Runs in the cell's all-devices pass (marker multi_device), so it sees every device of the
run: the runner sets CUDA_VISIBLE_DEVICES / ZE_AFFINITY_MASK to them (a subset chosen with
ACCELGRID_DEVICES included), and the world is the number of devices torch sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from accelgrid import devices
from accelgrid.base import lifetime
from accelgrid.devices import backends

pytestmark = pytest.mark.multi_device

WORKER = Path(__file__).with_name("dist_worker.py")
CPU_WORLD = 2  # gloo on CPU needs no devices: two processes prove the path


def _backend(device: str) -> str:
    """The device module's collective backend (accelgrid.devices), where this torch has it."""
    kind = devices.get(device)
    if kind.collective_backend is None:
        pytest.skip(f"no collective backend for {device}")
    if kind.collective_check and not getattr(dist, kind.collective_check, lambda: False)():
        pytest.skip(f"torch {torch.__version__} has no {kind.collective_backend} backend "
                    f"for {device}")
    return kind.collective_backend


def _world(device: str) -> int:
    """One rank per device this process may use: torch counts only the visible ones."""
    if device == "cpu":
        return CPU_WORLD
    count = backends.dispatch("device_count", device)
    var = devices.get(device).visibility_var
    visible = [d for d in os.environ.get(var or "", "").split(",") if d.strip()]
    # A visibility list torch does not honour would put ranks on devices not chosen.
    assert not visible or count <= len(visible), (
        f"{var}={os.environ[var]} but torch sees {count} {device} devices")
    if count < 2:
        pytest.skip(f"one {device} device visible here: collectives need at least two")
    return count


def test_collectives_and_ddp(device: str, tmp_path: Path) -> None:
    backend = _backend(device)
    world = _world(device)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={world}", str(WORKER), device, backend]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "ranks"
    out.mkdir()
    # SIGTERM when this test's process dies: torchrun then stops its ranks itself.
    proc = subprocess.run(lifetime.with_death_signal([*cmd, str(out)], signal.SIGTERM),
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    ranks = [json.loads(f.read_text(encoding="utf-8"))
             for f in sorted(out.glob("rank-*.json"))]
    assert sorted(r["rank"] for r in ranks) == list(range(world))
    assert all(r["world"] == world for r in ranks)
    var = devices.get(device).visibility_var
    # Shown by -rA: the world and where its ranks ran, in the run's visible devices.
    print(f"world {world} on {sorted(r['device'] for r in ranks)}"
          + (f" with {var}={os.environ.get(var)}" if var else ""))
    total = world * (world + 1) / 2
    for r in ranks:
        assert r["all_reduce"] == [total] * 4
        assert r["broadcast"] == [100.0, 101.0, 102.0]
    check_ddp_weights(ranks)
    if device != "cpu":
        assert len({r["device"] for r in ranks}) == world  # one device per rank


STEPS, LR = 2, 0.1   # as dist_worker.py


def expected_weights(initial: list[float], world: int) -> torch.Tensor:
    """What DDP must leave: SGD on the gradient averaged over the ranks' data (rank r draws
    its inputs from a CPU generator seeded with r, as dist_worker.py does), in float64."""
    w = torch.tensor(initial, dtype=torch.float64)
    gens = [torch.Generator().manual_seed(r) for r in range(world)]
    for _ in range(STEPS):
        grads = []
        for gen in gens:
            inp = torch.randn(16, 8, generator=gen).double()
            weight = w[:16].view(2, 8).clone().requires_grad_(True)
            bias = w[16:].clone().requires_grad_(True)
            (inp @ weight.T + bias).pow(2).mean().backward()
            grads.append(torch.cat([weight.grad.flatten(), bias.grad]))
        w = w - LR * torch.stack(grads).mean(0)
    return w


def check_ddp_weights(ranks: list[dict]) -> None:
    """Every rank ends with the same weights, and they are the averaged-gradient SGD
    update of the initial ones (an optimizer that does nothing, or ranks that do not
    average, fail)."""
    first = torch.tensor(ranks[0]["weights"])
    for r in ranks[1:]:
        torch.testing.assert_close(torch.tensor(r["weights"]), first)
    want = expected_weights(ranks[0]["initial"], len(ranks)).float()
    assert not torch.equal(first, torch.tensor(ranks[0]["initial"])), "DDP never stepped"
    # fp32 on the device vs a float64 reference of two steps: 1e-4 covers TF32-free
    # reduction order; a missed step moves weights by ~LR * |grad| ~ 1e-2.
    torch.testing.assert_close(first, want, rtol=1e-4, atol=1e-5)


def _fake_ranks(world: int, step: bool = True, average: bool = True) -> list[dict]:
    initial = torch.randn(18, generator=torch.Generator().manual_seed(7)).tolist()
    if not step:
        return [{"initial": initial, "weights": initial} for _ in range(world)]
    if average:
        w = expected_weights(initial, world).float().tolist()
        return [{"initial": initial, "weights": w} for _ in range(world)]
    return [{"initial": initial, "weights": expected_weights(initial, 1).float().tolist()}
            for _ in range(world)]


def test_ddp_check_catches_an_optimizer_that_does_nothing() -> None:
    check_ddp_weights(_fake_ranks(2))
    with pytest.raises(AssertionError, match="never stepped"):
        check_ddp_weights(_fake_ranks(2, step=False))


def test_ddp_check_catches_ranks_that_do_not_average() -> None:
    with pytest.raises(AssertionError):   # each rank stepped on rank 0's data alone
        check_ddp_weights(_fake_ranks(2, average=False))


# The bounds of check_ddp_weights, from both sides: against the float64 reference
# (rtol=1e-4, atol=1e-5) and between the ranks (assert_close's float32 defaults).
DDP_RTOL, DDP_ATOL = 1e-4, 1e-5
RANKS_RTOL, RANKS_ATOL = 1.3e-6, 1e-5


def _with(ranks: list[dict], rank: int | None, i: int, value: float | None = None,
          by: float = 0.0) -> list[dict]:
    """``ranks`` with weight ``i`` set to ``value`` or moved by ``by`` (in every rank when
    ``rank`` is None)."""
    out = [dict(r, weights=list(r["weights"])) for r in ranks]
    for r in (out if rank is None else [out[rank]]):
        r["weights"][i] = value if value is not None else r["weights"][i] + by
    return out


@pytest.mark.parametrize(("times", "fails"), [(1.1, True), (0.9, False)],
                         ids=["just-past", "just-inside"])
def test_ddp_check_holds_the_reference_bound(times: float, fails: bool) -> None:
    ranks = _fake_ranks(2)
    w = ranks[0]["weights"][3]
    planted = _with(ranks, None, 3, by=times * (DDP_ATOL + DDP_RTOL * abs(w)))
    if fails:
        with pytest.raises(AssertionError):
            check_ddp_weights(planted)
    else:
        check_ddp_weights(planted)


@pytest.mark.parametrize(("times", "fails"), [(1.1, True), (0.9, False)],
                         ids=["just-past", "just-inside"])
def test_ddp_check_holds_the_ranks_to_each_other(times: float, fails: bool) -> None:
    ranks = _fake_ranks(2)
    w = ranks[0]["weights"][5]
    planted = _with(ranks, 1, 5, by=times * (RANKS_ATOL + RANKS_RTOL * abs(w)))
    if fails:
        with pytest.raises(AssertionError):
            check_ddp_weights(planted)
    else:
        check_ddp_weights(planted)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("rank", [None, 1], ids=["every-rank", "one-rank"])
def test_ddp_check_catches_non_finite_weights(value: float, rank: int | None) -> None:
    with pytest.raises(AssertionError):
        check_ddp_weights(_with(_fake_ranks(2), rank, 0, value=value))


def _trained_as_the_worker_trains(world: int) -> list[dict]:
    """The ranks' reports, made in this process the way dist_worker.py makes them (its
    Linear(8, 2), weights from seed 0, rank r's batches of 16 from a generator seeded r,
    SGD lr=0.1, 2 steps: written out here, not taken from STEPS/LR), with DDP's gradient
    all-reduce done by hand: DDP averages the gradients over the ranks (the
    DistributedDataParallel documentation: gradients are averaged across processes)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    initial = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gens = [torch.Generator().manual_seed(r) for r in range(world)]
    for _ in range(2):
        grads = []
        for gen in gens:
            opt.zero_grad()
            model(torch.randn(16, 8, generator=gen)).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, *per_rank in zip(model.parameters(), *grads, strict=True):
            p.grad = torch.stack(per_rank).mean(0)
        opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    return [{"initial": initial, "weights": weights} for _ in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_check_accepts_ranks_trained_as_the_worker_trains_them(world: int) -> None:
    check_ddp_weights(_trained_as_the_worker_trains(world))
