"""The compile suite's checks: compiled against eager within dtype-aware bounds, and
dynamo's counters (graph breaks, recompiles).

Torch only (tests/suites/test_compile_checks.py imports it for the planted faults).

The bound, per tensor (:func:`close_problems`): ``|compiled - eager| <= TOLERANCE[dtype] *
scale``, where ``scale`` is the tensor's largest ``|eager|`` or, where that is smaller,
:data:`MODEL_FLOOR` times the largest of the model's tensors of the same kind. Inductor
fuses and reorders (a LayerNorm's sums, a matmul's epilogue) and keeps fused
intermediates in fp32 where eager rounds each op's result to the dtype, so the two differ
by rounding of the order of the dtype's epsilon relative to the tensor, not elementwise:
an element near zero gets the tensor's allowance. The floor is for gradients that are
zero in exact arithmetic (a key projection's bias: softmax ignores a per-query constant;
a conv bias before BatchNorm): what eager and compiled compute there is rounding noise of
the model's gradients, 1e-11 to 2e-8 in size with 60-375 % relative differences, and of
the order of 1e-7 of the model's largest gradient.

Measured on the cpu-2.13 cell (torch 2.13.0+cpu, inductor's C++ backend, one step, SGD):
largest difference over the scale, outputs / gradients: fp32 MLP 2.5e-7 / 4.5e-7, conv
net 1.8e-7 / 1.4e-7 (the conv bias, against the model's largest), ViT 2.0e-7 / 3e-10,
BERT 1.6e-7 / 2e-12; bf16 MLP 4.6e-3 / 8.8e-3 (0.6 and 1.1 of bf16's eps); fp16 MLP
5.2e-4 / 1.6e-3 (0.5 and 1.7 of fp16's eps). Parameters after the step: the gradient's
bound times the learning rate, plus one unit in the last place of the parameter (both
sides round ``p - lr * g`` to the dtype: a gradient within its bound can move the
rounded result by one ulp).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

# |compiled - eager| <= TOLERANCE * scale. fp32: 1e-5, 20x the largest measured (4.5e-7)
# and loose enough for a GPU's other reduction orders; bf16 / fp16: four epsilons, 3.5x
# and 2.4x the largest measured (1.1 and 1.7 epsilons).
TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 1e-5,
    torch.bfloat16: 4 * torch.finfo(torch.bfloat16).eps,
    torch.float16: 4 * torch.finfo(torch.float16).eps,
}
# A tensor whose largest |eager| is below this fraction of the model's largest (of the
# same kind: outputs, gradients) is held to that fraction instead: its values are
# rounding noise of the others (module docstring).
MODEL_FLOOR = 0.1


def tolerance(dtype: torch.dtype) -> float:
    try:
        return TOLERANCE[dtype]
    except KeyError:
        raise ValueError(f"no compile tolerance for {dtype}") from None


def spacing(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at each of ``values`` (float64; the
    smallest normal's below it)."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(values.double().abs().clamp_min(info.tiny))
    return torch.ldexp(torch.full(values.shape, info.eps, dtype=torch.float64), exponent - 1)


def _finite_max(t: torch.Tensor) -> float:
    a = t.detach().double().abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def close_problems(got: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor],
                   dtype: torch.dtype, what: str, *, lr: float | None = None,
                   before: Mapping[str, torch.Tensor] | None = None) -> list[str]:
    """One line per tensor of ``got`` off ``ref`` (eager) beyond the bound (module
    docstring); a NaN or Inf where eager is finite is off, and so is a non-finite eager
    value (the reference itself is broken). ``lr`` with ``before``: the tensors are
    parameters after an SGD step of that rate; the bound is the gradient bound on the
    update (``lr`` times the scale of the update's gradient, from ``before``) plus one ulp
    of the parameter."""
    problems = []
    if set(got) != set(ref):
        return [f"{what}: compiled has {sorted(set(got) ^ set(ref))} that eager has not, "
                "or the reverse"]
    tol = tolerance(dtype)
    if lr is not None and before is not None:
        scales = {n: _finite_max(ref[n].double() - before[n].double()) / lr for n in ref}
    else:
        scales = {n: _finite_max(ref[n]) for n in ref}
    model_max = max(scales.values(), default=0.0)
    for name in ref:
        r = ref[name].detach().double().cpu()
        g = got[name].detach().double().cpu()
        if g.shape != r.shape:
            problems.append(f"{what} {name}: shape {tuple(g.shape)}, eager {tuple(r.shape)}")
            continue
        if not torch.isfinite(r).all():
            problems.append(f"{what} {name}: eager itself is not finite "
                            f"({int((~torch.isfinite(r)).sum())} of {r.numel()} elements)")
            continue
        scale = max(scales[name], MODEL_FLOOR * model_max)
        bound = torch.full_like(r, tol * scale)
        if lr is not None:
            bound = bound * lr + spacing(r, dtype)
        err = (g - r).abs()
        bad = ~(err <= bound)  # "not within": NaN is off too
        if bad.any():
            i = int(torch.where(err.isnan(), math.inf, err - bound).flatten().argmax())
            problems.append(
                f"{what} {name}: {int(bad.sum())} of {r.numel()} elements off eager; worst "
                f"{g.flatten()[i].item():.6g} vs {r.flatten()[i].item():.6g} (error "
                f"{err.flatten()[i].item():.3g}, bound {bound.flatten()[i].item():.3g} = "
                f"{tol:g} x {scale:.3g}{' x lr + 1 ulp' if lr is not None else ''})")
    return problems


# --- dynamo's counters ------------------------------------------------------------------


@dataclass
class DynamoStats:
    """What dynamo counted over a stretch of calls (:func:`dynamo_stats`)."""

    graph_breaks: int = 0      # sum of counters["graph_break"]: breaks by reason
    frames: int = 0            # counters["frames"]["total"]: frames dynamo converted
    graphs: int = 0            # counters["stats"]["unique_graphs"]: graphs compiled
    reasons: list[str] = field(default_factory=list)

    def __sub__(self, other: DynamoStats) -> DynamoStats:
        return DynamoStats(self.graph_breaks - other.graph_breaks,
                           self.frames - other.frames, self.graphs - other.graphs,
                           [r for r in self.reasons if r not in other.reasons])


def dynamo_stats() -> DynamoStats:
    """dynamo's counters now (``torch._dynamo.utils.counters``, process-wide)."""
    from torch._dynamo.utils import counters

    breaks = counters.get("graph_break", {})
    return DynamoStats(
        graph_breaks=int(sum(breaks.values())),
        frames=int(counters.get("frames", {}).get("total", 0)),
        graphs=int(counters.get("stats", {}).get("unique_graphs", 0)),
        reasons=[str(r).split("\n", 1)[0][:200] for r in breaks])


def recompile_problems(warm: DynamoStats, what: str) -> list[str]:
    """Calls with the shapes already compiled convert no frame and compile no graph:
    ``warm`` is what dynamo counted over them."""
    if warm.frames or warm.graphs:
        return [f"{what}: recompiled on a call with the same shapes and dtypes "
                f"({warm.frames} frames converted, {warm.graphs} graphs compiled)"]
    return []


def graph_break_problems(stats: DynamoStats, allowed: int, what: str) -> list[str]:
    if stats.graph_breaks > allowed:
        return [f"{what}: {stats.graph_breaks} graph breaks, at most {allowed} expected: "
                + "; ".join(stats.reasons[:3])]
    return []


# --- timing -------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    """``fn()`` and its wall seconds, the device's queue drained before and after."""
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def cpp_compiler() -> tuple[str | None, list[str]]:
    """The C++ compiler inductor's CPU backend would run (its ``config.cpp.cxx``
    candidates, ``$CXX`` or g++, looked up on PATH), and the names it tried."""
    import shutil

    from torch._inductor import config

    cxx = config.cpp.cxx
    names = [c for c in (cxx if isinstance(cxx, (list, tuple)) else (cxx,)) if c]
    for name in names:
        found = shutil.which(name)
        if found:
            return found, names
    return None, names
