"""suites/distributed/test_fsdp2.py's check (check_fsdp) with planted faults: just past and
just inside its bound, NaN and inf, ranks that disagree, no step, a sum instead of the
average, an ignored divide factor, the mixed-precision policy not applied. Built from the
reference it checks against (no ranks, no device)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

_DIR = Path(__file__).resolve().parents[2] / "suites" / "distributed"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _DIR / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


_load("test_collectives")  # test_fsdp2 imports it as a top-level module
f = _load("test_fsdp2")
check_fsdp, reference, SIZES = f.check_fsdp, f.reference, f.SIZES
# check_fsdp's bound as its comment documents it, written here: a plant derived from the
# checked numbers would move with them.
RTOL, ATOL = 2e-3, 5e-4



def _trained(world: int = 2, divide: float | None = None, **change: object) -> list[dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
                                torch.nn.Linear(SIZES[1], SIZES[2]))
    initial = [p.detach().flatten().tolist() for p in model.parameters()]
    weights = [t.tolist() for t in reference(initial, world, divide)]
    rank = {"initial": initial, "weights": weights, "out_dtype": "torch.bfloat16",
            "shard_dtype": "torch.float32"} | change
    return [json.loads(json.dumps(rank)) for _ in range(world)]


def _moved(ranks: list[dict], by: float, rank: int | None = None, value: float | None = None
           ) -> list[dict]:
    """Parameter 0's element 3 moved by ``by`` x its bound (or set to ``value``)."""
    for i, r in enumerate(ranks):
        if rank is None or i == rank:
            x = r["weights"][0][3]
            r["weights"][0][3] = value if value is not None else x + by * (ATOL + RTOL * abs(x))
    return ranks


def test_fsdp_check_accepts_the_reference() -> None:
    check_fsdp(_trained())
    check_fsdp(_trained(divide=3.0), divide=3.0)


@pytest.mark.parametrize(("times", "fails"), [(1.1, True), (0.9, False)],
                         ids=["just-past", "just-inside"])
def test_fsdp_check_holds_its_bound(times: float, fails: bool) -> None:
    planted = _moved(_trained(), times)
    if fails:
        with pytest.raises(AssertionError):
            check_fsdp(planted)
    else:
        check_fsdp(planted)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_fsdp_check_catches_non_finite_weights(value: float) -> None:
    with pytest.raises(AssertionError):
        check_fsdp(_moved(_trained(), 0, value=value))


def test_fsdp_check_catches_ranks_that_disagree() -> None:
    with pytest.raises(AssertionError):
        check_fsdp(_moved(_trained(), 0.01, rank=1))


def test_fsdp_check_catches_no_step_no_average_and_no_policy() -> None:
    ranks = _trained()
    for r in ranks:
        r["weights"] = r["initial"]
    with pytest.raises(AssertionError, match="never stepped"):
        check_fsdp(ranks)
    with pytest.raises(AssertionError):  # summed, not averaged over the 2 ranks
        check_fsdp(_trained(divide=1.0))
    with pytest.raises(AssertionError):  # the divide factor ignored
        check_fsdp(_trained(), divide=3.0)
    with pytest.raises(AssertionError, match="forward ran in torch.float32"):
        check_fsdp(_trained(out_dtype="torch.float32"))
    with pytest.raises(AssertionError, match="shards held in torch.bfloat16"):
        check_fsdp(_trained(shard_dtype="torch.bfloat16"))
