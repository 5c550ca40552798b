"""suites/lowbit's checkers (lowbit_helpers.py), each bound pinned from both sides (just
past fails, just inside passes, NaN fails) and its guards planted; no torchao, no device
(the CPU's int4-packed kernel once, as a real input). The bounds are written here, not
read from lowbit_helpers: a plant derived from the checked numbers would move with them."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

# The suite's helpers by path: the suite folder is not a package (its resume subprocess
# imports the helpers as a top-level module, as suites/offload does).
_PATH = Path(__file__).resolve().parents[2] / "suites" / "lowbit" / "lowbit_helpers.py"
_SPEC = importlib.util.spec_from_file_location("lowbit_helpers", _PATH)
assert _SPEC and _SPEC.loader
h = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("lowbit_helpers", h)
_SPEC.loader.exec_module(h)

UPDATE = {"AdamW8bit": 0.04, "AdamW4bit": 0.5, "AdamWFp8": 0.07}
MEMORY = {"AdamW8bit": 0.30, "AdamW4bit": 0.17, "AdamWFp8": 0.30}
GEMM = 0.01
JUST = 0.1


def test_the_tables_hold_every_optimizer() -> None:
    assert set(h.UPDATE_BOUND) == set(h.MEMORY_BOUND) == set(UPDATE) == set(h.OPTIMIZERS)


def _updates(rel: float) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """before, actual, expected: the actual update off the expected by ``rel`` of its norm."""
    gen = torch.Generator().manual_seed(0)
    before = [torch.randn(300, generator=gen)]
    de = torch.randn(300, generator=gen) * 1e-3
    noise = torch.randn(300, generator=gen)
    noise = noise / noise.norm() * de.norm() * rel
    return before, [before[0] + de + noise], [before[0] + de]


@pytest.mark.parametrize("name", h.OPTIMIZERS)
@pytest.mark.parametrize(("times", "fails"), [(1 + JUST, True), (1 - JUST, False)],
                         ids=["just-past", "just-inside"])
def test_update_check_holds_its_bound(name: str, times: float, fails: bool) -> None:
    errors = h.update_errors(*_updates(UPDATE[name] * times))
    assert bool(h.update_problems(name, errors)) is fails


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_update_check_catches_non_finite(value: float) -> None:
    before, actual, expected = _updates(0.0)
    actual[0][7] = value
    assert h.update_problems("AdamW4bit", h.update_errors(before, actual, expected))


def test_update_check_catches_no_step_and_double_lr() -> None:
    before, _, expected = _updates(0.0)
    assert h.update_errors(before, before, expected) == [pytest.approx(1.0)]
    doubled = [before[0] + 2 * (expected[0] - before[0])]
    assert h.update_problems("AdamW4bit", h.update_errors(before, doubled, expected))


@pytest.mark.parametrize("name", h.OPTIMIZERS)
@pytest.mark.parametrize(("times", "fails"), [(1 + JUST, True), (1 - JUST, False)],
                         ids=["just-past", "just-inside"])
def test_memory_check_holds_its_bound(name: str, times: float, fails: bool) -> None:
    assert bool(h.memory_problems(name, MEMORY[name] * times)) is fails


def test_memory_check_catches_nan_and_full_precision_state() -> None:
    assert h.memory_problems("AdamW8bit", math.nan)
    assert h.memory_problems("AdamW8bit", 1.0)  # the state kept in fp32


def test_state_bytes_counts_inner_tensors_and_skips_the_step() -> None:
    """A plain AdamW's state is 8 bytes per element (exp_avg, exp_avg_sq in fp32)."""
    p = torch.nn.Parameter(torch.zeros(1000))
    opt = torch.optim.AdamW([p])
    p.grad = torch.ones(1000)
    opt.step()
    assert h.state_bytes(opt) == 8000
    t = torch.zeros(10, dtype=torch.uint8)
    assert h.tensor_bytes(t) == 10


@pytest.mark.parametrize(("times", "fails"), [(1 + JUST, True), (1 - JUST, False)],
                         ids=["just-past", "just-inside"])
def test_gemm_check_holds_its_bound(times: float, fails: bool) -> None:
    ref = torch.linspace(-2, 4, 64).view(8, 8)
    out = ref.clone()
    out[3, 3] += GEMM * times * 4.0  # 4.0: the reference's largest magnitude
    assert bool(h.gemm_problems(out, ref, GEMM)) is fails


def test_gemm_check_catches_nan_and_shape() -> None:
    ref = torch.ones(4, 4)
    bad = ref.clone()
    bad[0, 0] = math.nan
    assert h.gemm_problems(bad, ref, GEMM)
    assert h.gemm_problems(torch.ones(4, 3), ref, GEMM)


def test_int4_reference_catches_a_wrong_group_scale() -> None:
    """#4765's fault: every group read with group 0's scale and zero (the M=1 kernel bug,
    intel/torch-xpu-ops PR #5001) is far outside the GEMM bound; the right ones inside."""
    case = h.int4_case(1, group=128)
    right = case.reference()
    wrong = h.Int4Case(case.a, case.q, case.scales_and_zeros[:1].expand_as(
        case.scales_and_zeros).contiguous(), case.group)
    assert h.gemm_problems(right, right, GEMM) == []
    assert h.gemm_problems(wrong.reference(), right, GEMM)


def test_int4_cpu_kernel_against_the_reference_on_this_host() -> None:
    """The CPU's int4-packed kernel meets the reference (the check can pass on real data)
    and a planted wrong group size does not."""
    case = h.int4_case(1, group=128)
    got = h.int4_matmul(case, "cpu")
    assert h.gemm_problems(got, case.reference(), GEMM) == []
    assert h.gemm_problems(got, h.Int4Case(case.a, case.q, case.scales_and_zeros,
                                           case.group).reference() * 1.05, GEMM)
