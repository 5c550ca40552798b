"""The compile suite's checks (suites/compile/compile_checks.py), each pinned from both
sides: a plant just past a bound fails, just inside passes, NaN and Inf fail; dynamo's
counters read from real dynamo runs (backend "eager": no compiler, under a second) with a
planted graph break and a planted recompile. The real compiled runs are the suite's own
tests in a cell (the slow set)."""

from __future__ import annotations

import math

import pytest
import torch

from suites.compile import compile_checks as cc

JUST = 0.1
PAST, INSIDE = 1 + JUST, 1 - JUST
# The bounds as compile_checks.py documents them, written here rather than read from it.
TOL = {torch.float32: 1e-5, torch.bfloat16: 4 * 2.0**-7, torch.float16: 4 * 2.0**-10}
MODEL_FLOOR = 0.1
DTYPES = pytest.mark.parametrize("dtype", list(TOL), ids=["fp32", "bf16", "fp16"])


def grads() -> dict[str, torch.Tensor]:
    return {"w": torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64),
            "b": torch.tensor([1e-9, -2e-9], dtype=torch.float64)}


def off(t: dict[str, torch.Tensor], name: str, i: int, by: float) -> dict[str, torch.Tensor]:
    out = {n: v.clone() for n, v in t.items()}
    out[name][i] += by
    return out


@DTYPES
def test_a_tensor_is_held_to_its_largest_times_the_tolerance(dtype: torch.dtype) -> None:
    ref = grads()
    bound = TOL[dtype] * 1.0
    [line] = cc.close_problems(off(ref, "w", 2, PAST * bound), ref, dtype, "plant")
    assert line.startswith("plant w: 1 of 3 elements off eager"), line
    assert cc.close_problems(off(ref, "w", 2, INSIDE * bound), ref, dtype, "plant") == []


def test_a_noise_tensor_is_held_to_a_tenth_of_the_models_largest() -> None:
    ref, dtype = grads(), torch.float32
    bound = TOL[dtype] * MODEL_FLOOR * 1.0
    assert cc.close_problems(off(ref, "b", 0, PAST * bound), ref, dtype, "p")
    assert cc.close_problems(off(ref, "b", 0, INSIDE * bound), ref, dtype, "p") == []


@DTYPES
def test_a_parameter_is_held_to_lr_times_the_gradient_bound_plus_one_ulp(
        dtype: torch.dtype) -> None:
    lr = 0.1
    before = {"w": torch.tensor([0.75, -0.3], dtype=torch.float64)}
    after = {"w": before["w"] - lr * torch.tensor([1.0, 0.5], dtype=torch.float64)}
    p = float(after["w"][1].abs())
    ulp = torch.finfo(dtype).eps * 2.0 ** (math.frexp(p)[1] - 1)
    bound = TOL[dtype] * 1.0 * lr + ulp
    assert cc.close_problems(off(after, "w", 1, PAST * bound), after, dtype, "p", lr=lr,
                             before=before)
    assert cc.close_problems(off(after, "w", 1, INSIDE * bound), after, dtype, "p", lr=lr,
                             before=before) == []


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_values_fail(value: float) -> None:
    ref = grads()
    bad = {n: v.clone() for n, v in ref.items()}
    bad["w"][0] = value
    assert cc.close_problems(bad, ref, torch.bfloat16, "compiled")
    [line] = cc.close_problems(ref, bad, torch.bfloat16, "compiled")
    assert "eager itself is not finite" in line


def test_missing_or_reshaped_tensors_fail() -> None:
    ref = grads()
    assert cc.close_problems({"w": ref["w"]}, ref, torch.float32, "p")
    assert cc.close_problems({**ref, "w": ref["w"][:2]}, ref, torch.float32, "p")


# --- dynamo's counters, from real (eager-backend) dynamo runs ------------------------------


def test_a_graph_break_is_counted_and_fails_where_none_is_allowed() -> None:
    import torch._dynamo

    torch._dynamo.reset()

    def broken(x: torch.Tensor) -> torch.Tensor:
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    def whole(x: torch.Tensor) -> torch.Tensor:
        return (x + 1) * 2

    x = torch.ones(3)
    start = cc.dynamo_stats()
    torch.compile(whole, backend="eager")(x)
    clean = cc.dynamo_stats() - start
    assert clean.graph_breaks == 0 and cc.graph_break_problems(clean, 0, "whole") == []
    start = cc.dynamo_stats()
    torch.compile(broken, backend="eager")(x)
    stats = cc.dynamo_stats() - start
    assert stats.graph_breaks == 1, stats
    [line] = cc.graph_break_problems(stats, 0, "broken")
    assert line.startswith("broken: 1 graph breaks, at most 0 expected"), line
    assert cc.graph_break_problems(stats, 1, "broken") == []


def test_a_recompile_on_the_same_shapes_fails() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    state = {"calls": 0}

    def drifting(x: torch.Tensor) -> torch.Tensor:  # guards on a Python int that changes
        state["calls"] += 1
        return x * state["calls"]

    def steady(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    x = torch.ones(3)
    for fn, recompiles in ((steady, False), (drifting, True)):
        compiled = torch.compile(fn, backend="eager")
        compiled(x)
        mark = cc.dynamo_stats()
        compiled(x)
        compiled(x)
        problems = cc.recompile_problems(cc.dynamo_stats() - mark, fn.__name__)
        assert bool(problems) == recompiles, problems


def test_no_compiler_is_found_where_none_is_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "cxx", (None, "accelgrid-no-such-c++"))
    assert cc.cpp_compiler() == (None, ["accelgrid-no-such-c++"])
    monkeypatch.setattr(config.cpp, "cxx", (None, "sh"))  # any program on PATH
    found, _ = cc.cpp_compiler()
    assert found and found.endswith("/sh")
