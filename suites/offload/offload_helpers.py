"""Shared pieces of the CPU-offload suite, also imported by the resume subprocess and,
by path, by ``accelgrid bench offload`` (its model and its torchao import).

Imports only torch (never accelgrid or torchao at import time) so that the fresh
interpreter started by the cross-process test can use it as-is.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import importlib
import importlib.util
import inspect
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelgrid.testing import Unavailable, import_first

# Which devices CPUOffloadOptimizer accepts is the device types' ``offload``
# (accelgrid.devices): torchao picks cuda, else xpu, and asserts one of them is present
# ("CPU Offload currently only supports CUDA & XPU").
AO_958 = "https://github.com/pytorch/ao/issues/958"

# Where CPUOffloadOptimizer lives: torchao >= 0.10, then 0.5-0.9.
IMPORT_PATHS = ("torchao.optim", "torchao.prototype.low_bit_optim")


def skip_reason(device_type: str) -> str:
    """Upstream's skip reason (test/test_low_bit_optim.py) plus the tracking issue."""
    return f"optim CPU offload requires CUDA or XPU, not {device_type} ({AO_958})"


class OffloadUnavailable(Unavailable):
    """torchao is absent, or provides CPUOffloadOptimizer in none of IMPORT_PATHS."""


def import_cpu_offload() -> type:
    """The installed torchao's CPUOffloadOptimizer class (a broken install raises on:
    :func:`accelgrid.testing.import_first`)."""
    return import_first("CPUOffloadOptimizer", IMPORT_PATHS, OffloadUnavailable)


def has_minimal_size(cls: type) -> bool:
    """Whether small params stay on an on-device optimizer (``minimal_size``, torchao >= 0.10).

    Older versions offload every trainable param and their ``state_dict()`` is a list.
    """
    return "minimal_size" in inspect.signature(cls.__init__).parameters


def is_torch_optimizer(cls: type) -> bool:
    """LR schedulers only accept ``torch.optim.Optimizer`` instances (torchao >= 0.10)."""
    return issubclass(cls, torch.optim.Optimizer)


def offloaded_states(state_dict: Any) -> list[dict[str, Any]]:
    """The per-param CPU optimizer states of a CPUOffloadOptimizer state dict, in order.

    ``{"offloaded": [...], "on-device": ...}`` from torchao 0.10; a bare list before.
    """
    return state_dict["offloaded"] if isinstance(state_dict, dict) else list(state_dict)


UPSTREAM_HIDDEN = 131072


def upstream_model(
    device: str, dtype: torch.dtype = torch.float32, *, hidden: int = UPSTREAM_HIDDEN
) -> nn.Sequential:
    """The model of upstream's correctness test.

    The first two layers have a poor arithmetic density (long transfers, little compute),
    which makes missing synchronisation show up as wrong numbers. Layer 2 is frozen.
    With ``minimal_size=4096`` the small biases (64, 128) stay on device and the rest is
    offloaded, so both paths are exercised. ``hidden`` narrows the wide layers (the
    checker tests, which run on the CPU too, use a narrower copy of the same shape).
    """
    model = nn.Sequential(
        nn.Linear(32, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 128),
    ).to(device=device, dtype=dtype)
    model[2].requires_grad_(False)
    return model


def mlp(
    width: int,
    depth: int,
    device: str,
    dtype: torch.dtype = torch.float32,
    *,
    in_features: int | None = None,
    bias: bool = False,
) -> nn.Sequential:
    """A plain stack of square Linear layers, built directly on ``device``.

    No activation functions: each layer then saves only its input for backward, which
    keeps activation memory small next to the parameters in the memory test.
    """
    layers = [
        nn.Linear(
            in_features if (i == 0 and in_features) else width,
            width,
            bias=bias,
            device=device,
            dtype=dtype,
        )
        for i in range(depth)
    ]
    return nn.Sequential(*layers)


def bench_mlp(
    width: int,
    depth: int,
    device: str,
    dtype: torch.dtype = torch.float32,
    *,
    gelu: bool = False,
) -> nn.Sequential:
    """The plain-stack model of ``accelgrid bench offload``: :func:`mlp` (``depth``
    bias-free ``width x width`` layers) with weights drawn with std ``width**-0.5``, so
    activations neither vanish nor blow up through a deep linear stack (Linear's default
    init shrinks them by about sqrt(3) per layer).

    ``gelu``: the denormal case (``mlp-gelu``): Linear's default init (each layer shrinks
    the stream about sqrt(3)-fold) and a GELU between the layers (about half again), with
    nothing renormalising it, so activations and gradients shrink layer after layer; with
    :func:`denormal_depth` layers, :data:`DENORMAL_BATCH` rows and :func:`bench_loss`'s
    mean of squares nearly every squared gradient is a denormal float: the case that makes
    the CPU optimizer step slow (see :func:`flush_denormals`)."""
    model = mlp(width, depth, device, dtype)
    if not gelu:
        with torch.no_grad():
            for layer in model:
                layer.weight.normal_(0.0, width**-0.5)
        return model
    layers: list[nn.Module] = []
    for i, layer in enumerate(model):
        layers += [layer] if i == depth - 1 else [layer, nn.GELU()]
    return nn.Sequential(*layers)


class TransformerBlock(nn.Module):
    """A pre-LayerNorm transformer block: ``x + attn(LN(x))`` (causal self-attention,
    head size 128), then ``x + fc2(GELU(fc1(LN(x))))`` with a 4x wide MLP. About
    ``12 * width**2`` parameters, biases included."""

    def __init__(self, width: int, device: str, dtype: torch.dtype) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.heads = max(1, width // 128)
        self.ln1 = nn.LayerNorm(width, **kw)
        self.qkv = nn.Linear(width, 3 * width, **kw)
        self.proj = nn.Linear(width, width, **kw)
        self.ln2 = nn.LayerNorm(width, **kw)
        self.fc1 = nn.Linear(width, 4 * width, **kw)
        self.fc2 = nn.Linear(4 * width, width, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = (
            self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        )
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


BENCH_MODELS = ("transformer", "mlp", "mlp-gelu")
# mlp-gelu at every size: bias-free layers, 64 rows, loss out.pow(2).mean(), the width
# scaled to the size, the depth from the width. Each layer more shrinks the gradients
# 9.3-12.4x, each doubling of the width 2.0-2.35x, and the share of squared gradients that
# are denormal jumps within one layer (CPU, fp32, Linear's init, seed 0: 128 wide 16 / 17 /
# 18 layers 17.3 / 94.4 / 100 %; 512 wide 16 / 17: 66.5 / 100 %; 1024: 91.5 / 100 %; 2048:
# 15 / 16: 31.5 / 99.5 %; 4096: 57.1 / 99.98 %). 15 x Linear(8192) gave 84.3 % on an H200
# (docs/suites/offload.md), short of DENORMAL_MIN: 15 layers is one too few at every width up to
# 8192. So every stack is at least as deep, in those terms, as the measured reference
# DENORMAL_REF_DEPTH x Linear(DENORMAL_REF_WIDTH), with the factors that give the most
# layers, rounded up; and never shallower than the reference (wider stacks would need
# fewer by these factors, but nothing measured says so). The bench fails a run whose share
# is below DENORMAL_MIN: the model stopped being the denormal case.
DENORMAL_REF_WIDTH = 2048
DENORMAL_REF_DEPTH = 16
DENORMAL_GRAD_PER_LAYER = 9.0
DENORMAL_GRAD_PER_DOUBLING = 2.35
DENORMAL_BATCH = 64
DENORMAL_MIN = 0.9


def denormal_depth(width: int) -> int:
    """Layers of an ``mlp-gelu`` ``width`` wide: :data:`DENORMAL_REF_DEPTH`, and for a
    stack narrower than :data:`DENORMAL_REF_WIDTH` its larger gradients paid for in layers
    (:data:`DENORMAL_GRAD_PER_DOUBLING` per halving against
    :data:`DENORMAL_GRAD_PER_LAYER` per layer), rounded up."""
    doublings = max(0.0, math.log2(DENORMAL_REF_WIDTH / width))
    layers = DENORMAL_REF_DEPTH + doublings * (
        math.log(DENORMAL_GRAD_PER_DOUBLING) / math.log(DENORMAL_GRAD_PER_LAYER))
    return math.ceil(round(layers, 9))


BENCH_SEQ = 256  # tokens per sequence of the transformer's batch


def bench_params_per_layer(kind: str, width: int) -> int:
    """Parameters of one layer (transformer: one block) of a bench model."""
    return 12 * width * width + 13 * width if kind == "transformer" else width * width


def bench_shape(kind: str, size_b: float, width: int, tokens: int) -> tuple[int, int, int]:
    """``(width, depth, rows of input)`` of a bench model of ``size_b`` billion parameters:
    ``mlp-gelu`` takes :data:`DENORMAL_BATCH` rows at every size and scales its width (a
    multiple of 64), with :func:`denormal_depth` layers; the others keep ``width`` and
    ``tokens`` and take as many layers as the size needs."""
    if kind == "mlp-gelu":
        wide = max(64, round((size_b * 1e9 / DENORMAL_REF_DEPTH) ** 0.5 / 64) * 64)
        wide = max(64, round((size_b * 1e9 / denormal_depth(wide)) ** 0.5 / 64) * 64)
        return wide, denormal_depth(wide), DENORMAL_BATCH
    return width, max(1, round(size_b * 1e9 / bench_params_per_layer(kind, width))), tokens


def bench_loss(kind: str, out: torch.Tensor) -> torch.Tensor:
    """The loss a bench step backpropagates: ``mlp-gelu``'s mean of squares (its gradient
    shrinks with the output, which is what keeps it denormal), else the sum."""
    return out.pow(2).mean() if kind == "mlp-gelu" else out.sum()


def bench_model(
    kind: str, width: int, depth: int, device: str, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """A model of ``accelgrid bench offload``: ``transformer`` (``depth`` blocks of
    :class:`TransformerBlock`), ``mlp`` (:func:`bench_mlp`) or ``mlp-gelu``."""
    if kind == "transformer":
        return nn.Sequential(*(TransformerBlock(width, device, dtype) for _ in range(depth)))
    if kind in ("mlp", "mlp-gelu"):
        return bench_mlp(width, depth, device, dtype, gelu=kind == "mlp-gelu")
    raise ValueError(f"unknown bench model {kind!r}; choose from {', '.join(BENCH_MODELS)}")


def bench_input(
    kind: str, tokens: int, width: int, device: str, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``tokens`` rows of input: ``(tokens, width)``, for the transformer
    ``(tokens // BENCH_SEQ, BENCH_SEQ, width)`` (one sequence when fewer tokens)."""
    x = torch.randn(tokens, width, device=device, dtype=dtype)
    if kind != "transformer":
        return x
    seq = min(BENCH_SEQ, tokens)
    return x[: tokens - tokens % seq].view(-1, seq, width)


def _autocast(device_type: str, dtype: torch.dtype | None) -> Any:
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type, dtype=dtype)


def trainable_copies(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the trainable parameters, by name, where they are (on the device, so that
    taking them after each step adds no host synchronisation to the run)."""
    return {n: p.detach().clone() for n, p in _named(model) if p.requires_grad}


def train(
    model: nn.Module,
    optimizer: Any,
    inputs: Iterable[list[torch.Tensor]],
    scheduler: Any = None,
    *,
    autocast: torch.dtype | None = None,
    trajectory: list[dict[str, torch.Tensor]] | None = None,
) -> None:
    """One optimizer step per item of ``inputs``; each item is a list of micro-batches whose
    gradients accumulate before the step.

    ``autocast``: run forward and loss under ``torch.autocast`` with that dtype (mixed
    precision: parameters keep their dtype). ``trajectory``: append
    :func:`trainable_copies` after every step, without synchronising anything: the copy of
    step k runs on the compute stream just before step k+1's forward, so parameters that
    had not arrived on the device when the forward starts are recorded as they were read.
    """
    for micro_batches in inputs:
        for x in micro_batches:
            with _autocast(x.device.type, autocast):
                loss = model(x).sum()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
        if trajectory is not None:
            trajectory.append(trainable_copies(model))


def seeded_inputs(
    device: str,
    dtype: torch.dtype,
    *,
    steps: int,
    grad_accum: int = 1,
    shape: tuple[int, ...] = (4, 32),
    seed: int = 42,
) -> list[list[torch.Tensor]]:
    """The same inputs every call (materialised up front so two runs see identical data)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return [
        [torch.randn(shape, device=device, generator=gen).to(dtype) for _ in range(grad_accum)]
        for _ in range(steps)
    ]


def _named(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """named_parameters of the module itself, also through a torch.compile wrapper (whose
    names would carry an ``_orig_mod.`` prefix)."""
    return getattr(model, "_orig_mod", model).named_parameters()


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of all parameters, by name."""
    return {name: p.detach().to("cpu", copy=True) for name, p in _named(model)}


def assert_params_close(
    actual: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    *,
    outlier_fraction: float = 0.0,
    outlier_atol: float = 0.0,
    **tolerances: Any,
) -> None:
    """``torch.testing.assert_close`` per named parameter, naming the one that differs.

    With ``outlier_fraction``, up to that fraction of each tensor's elements (at least one)
    may miss ``rtol``/``atol`` as long as they stay within ``rtol``/``outlier_atol``. The
    outlier bound applies to each tensor on its own: every tensor is checked against the
    same ``rtol``/``atol`` first.
    """
    assert actual.keys() == expected.keys()
    for name in expected:
        a, e = actual[name], expected[name]
        limits = tolerances
        if outlier_fraction:
            assert a.shape == e.shape and a.dtype == e.dtype, (name, a.shape, e.shape)
            a, e = a.float(), e.float()
            misses = int(
                (~torch.isclose(a, e, rtol=tolerances["rtol"], atol=tolerances["atol"])).sum()
            )
            allowed = math.ceil(e.numel() * outlier_fraction)
            assert misses <= allowed, (
                f"parameter {name}: {misses} of {e.numel()} elements outside "
                f"rtol={tolerances['rtol']} atol={tolerances['atol']} (at most {allowed} may be)"
            )
            limits = {**tolerances, "atol": outlier_atol}
        torch.testing.assert_close(
            a, e, msg=lambda m, name=name: f"parameter {name}: {m}", **limits
        )


# --- comparing updates -------------------------------------------------------------------


def spacing(magnitude: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The gap between adjacent ``dtype`` values at each element's ``magnitude`` (one ulp;
    the smallest normal number's gap below it), as float32."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(magnitude.float().abs().clamp_min(info.tiny))
    return torch.ldexp(torch.full(exponent.shape, info.eps), exponent - 1)


@dataclass(frozen=True)
class UpdateTolerance:
    """How far a step's parameter update may be from the reference's update, per element:

        |update - reference update| <= atol + rtol * |reference update| + ulps * spacing

    where ``spacing`` is one ulp of the parameter's dtype at the parameter's magnitude
    (the two runs round the updated parameter separately; in bf16 an ulp of a parameter of
    0.2 is about one whole lr = 1e-3 step, so a parameter comparison cannot see a skipped
    step there, an update comparison still sees it on every smaller element).

    Up to ``outlier_fraction`` of a tensor's elements (at least one, when not zero) may
    miss that, as long as each stays within ``outlier_scale`` times the tensor's largest
    reference update (an Adam step whose near-zero gradient changed sign between the runs
    lands a whole step away on the other side). A tensor the reference did not move must
    not move at all.
    """

    rtol: float
    ulps: float
    atol: float = 0.0
    outlier_fraction: float = 0.0
    outlier_scale: float = 3.0


def update_problems(
    before: dict[str, torch.Tensor],
    actual: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    tol: UpdateTolerance,
    *,
    expected_before: dict[str, torch.Tensor] | None = None,
) -> list[str]:
    """One line per parameter whose update (``actual - before``) is not within ``tol`` of
    the reference's (``expected - expected_before``; ``expected_before`` defaults to
    ``before``); empty when all are. Parameters are compared by the names in ``expected``."""
    expected_before = before if expected_before is None else expected_before
    problems = []
    for name in expected:
        e1, a1 = expected[name].detach().cpu(), actual[name].detach().cpu()
        assert a1.shape == e1.shape and a1.dtype == e1.dtype, (name, a1.shape, e1.shape)
        a0, e0 = before[name].detach().cpu().float(), expected_before[name].detach().cpu().float()
        da, de = a1.float() - a0, e1.float() - e0
        if not torch.any(de):
            if torch.any(da):
                problems.append(
                    f"parameter {name}: the reference did not move it, it moved by up to "
                    f"{da.abs().max().item():.3g}"
                )
            continue
        diff = (da - de).abs()
        magnitude = torch.stack([a0.abs(), e0.abs(), a1.float().abs(), e1.float().abs()]).amax(0)
        slack = tol.rtol * de.abs() + tol.ulps * spacing(magnitude, e1.dtype)
        # Written as "not within" so that a NaN (which compares False) is a miss, and one
        # beyond every bound: a non-finite update never passes.
        misses = ~(diff <= tol.atol + slack)
        n = int(misses.sum())
        allowed = math.ceil(de.numel() * tol.outlier_fraction) if tol.outlier_fraction else 0
        bound = tol.outlier_scale * de.abs().max().item()
        wild = int((misses & ~(diff <= bound + slack)).sum())
        if n <= allowed and not wild:
            continue
        i = int(torch.where(diff.isnan(), math.inf, diff - slack).argmax())
        ratio = (da.norm() / de.norm()).item()
        bad = int((~da.isfinite()).sum())
        problems.append(
            f"parameter {name}: {n} of {de.numel()} elements' updates off the reference's "
            f"(at most {allowed} may be, each within {bound:.3g}; {wild} beyond that"
            + (f", {bad} not finite" if bad else "") + "); "
            f"|update| / |reference update| = {ratio:.3f}; worst element {i}: update "
            f"{da.flatten()[i].item():.4g} vs {de.flatten()[i].item():.4g} (before "
            f"{a0.flatten()[i].item():.4g}), allowed {tol.atol + slack.flatten()[i].item():.3g}"
        )
    return problems


def assert_updates_close(
    before: dict[str, torch.Tensor],
    actual: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    tol: UpdateTolerance,
) -> None:
    """Both runs started from ``before``: their updates (after - before) agree within
    ``tol`` (:func:`update_problems`), every parameter named."""
    problems = update_problems(before, actual, expected, tol)
    assert not problems, "updates differ from the reference:\n" + "\n".join(problems)


def assert_trajectory_close(
    before: dict[str, torch.Tensor],
    actual: list[dict[str, torch.Tensor]],
    expected: list[dict[str, torch.Tensor]],
    tol: UpdateTolerance,
) -> None:
    """Step by step: the update each step made (the step's parameters minus the previous
    step's, in each run) agrees with the reference run's update of the same step. Names
    the first step that differs and every parameter that differs there."""
    assert len(actual) == len(expected), (len(actual), len(expected))
    prev_a = prev_e = before
    for step, (a, e) in enumerate(zip(actual, expected, strict=True), 1):
        problems = update_problems(prev_a, a, e, tol, expected_before=prev_e)
        assert not problems, (
            f"step {step} of {len(expected)}: updates differ from the reference:\n"
            + "\n".join(problems)
        )
        prev_a, prev_e = a, e


# Tolerances of the offload-vs-on-device comparisons, calibrated with the checker tests
# (test_offload_checks.py: CPU fused AdamW, as torchao runs it, against multi-tensor
# kernels) and upstream's model: fp32 differs by a few ulps at most; bf16 parameters round
# separately in the two runs (an ulp each) and the bf16 state makes an update differ by
# up to ~1 % (SGD's momentum buffer); near-zero gradients that change sign after step 1
# flip a few Adam updates (in 2 steps 1.5e-5 of 4.2 M elements, in 20 steps with
# accumulation up to 3e-3 of a tensor in bf16, 8e-6 in fp32). Mixed precision keeps fp32
# parameters but computes gradients in bf16. A skipped, doubled or zero-gradient step is
# 30-100 % off the reference update on most elements of the tensor. On an H200 (torch
# 2.11, torchao 0.17) bf16 SGD with momentum and accumulation put 2 of 4,096 elements of
# one tensor 15 % off after 2 steps (CUDA's on-device kernel vs the CPU one): bf16 and
# mixed precision allow 1e-3 of a tensor (4 of 4,096), still far below a planted fault's
# 19-43 % of the tensor.
TOLERANCES: dict[str, UpdateTolerance] = {
    "fp32": UpdateTolerance(rtol=1e-3, ulps=2, outlier_fraction=1e-4),
    "bf16": UpdateTolerance(rtol=0.05, ulps=2, outlier_fraction=1e-3),
    "amp": UpdateTolerance(rtol=0.05, ulps=2, outlier_fraction=1e-3),
}
# Long runs (20 steps): the trajectories drift apart and more Adam updates flip.
LONG_TOLERANCES: dict[str, UpdateTolerance] = {
    "fp32": UpdateTolerance(rtol=1e-3, ulps=2, outlier_fraction=1e-4),
    "bf16": UpdateTolerance(rtol=0.05, ulps=2, outlier_fraction=1.5e-2),
    "amp": UpdateTolerance(rtol=0.05, ulps=2, outlier_fraction=2e-3),
}


def precision(dtype: torch.dtype, autocast: torch.dtype | None = None) -> str:
    """The tolerance key of a run: ``amp`` (fp32 parameters under bf16 autocast), else the
    parameters' dtype (``fp32``, ``bf16``)."""
    if autocast is not None:
        return "amp"
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]


@dataclass
class Pair:
    """Two runs of the same model on the same data: ``expected`` (the reference
    optimizer) and ``actual`` (the optimizer under test). Trajectories hold the trainable
    parameters after every step; ``*_final`` all parameters at the end, on the CPU."""

    before: dict[str, torch.Tensor]
    frozen: list[str]
    expected: list[dict[str, torch.Tensor]]
    actual: list[dict[str, torch.Tensor]]
    expected_final: dict[str, torch.Tensor]
    actual_final: dict[str, torch.Tensor]
    expected_optimizer: Any = None
    actual_optimizer: Any = None


def run_pair(
    model: nn.Module,
    make_reference: Any,
    make_actual: Any,
    inputs: list[list[torch.Tensor]],
    *,
    autocast: torch.dtype | None = None,
    compiled: bool = False,
    scheduler: Any = None,
) -> Pair:
    """Train ``model`` with ``make_reference(params)``'s optimizer, then a copy of it (as
    it was) with ``make_actual(params)``'s, one run after the other: run interleaved, the
    second run would give the first's host->device copies extra time and hide missing
    synchronisation. ``scheduler(optimizer)`` makes an LR scheduler for each run;
    ``compiled`` trains through ``torch.compile`` of each model."""
    second = copy.deepcopy(model)
    before = snapshot(model)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    runs = []
    for net in (model, second):
        optimizer = (make_reference if net is model else make_actual)(net.parameters())
        trajectory: list[dict[str, torch.Tensor]] = []
        sched = scheduler(optimizer) if scheduler is not None else None
        train(
            torch.compile(net) if compiled else net,
            optimizer,
            inputs,
            sched,
            autocast=autocast,
            trajectory=trajectory,
        )
        runs.append((trajectory, snapshot(net), optimizer))
    (exp_t, exp_f, exp_o), (act_t, act_f, act_o) = runs
    return Pair(before, frozen, exp_t, act_t, exp_f, act_f, exp_o, act_o)


def assert_pair_close(pair: Pair, tol: UpdateTolerance) -> None:
    """The runs made the same updates step by step (:func:`assert_trajectory_close`), the
    reference trained every trainable parameter and neither touched a frozen one."""
    trainable = {n: pair.before[n] for n in pair.expected[0]}
    assert_trajectory_close(trainable, pair.actual, pair.expected, tol)
    assert_trained(pair.before, pair.expected_final, pair.frozen)
    for name in pair.frozen:
        assert torch.equal(pair.actual_final[name], pair.before[name]), f"frozen {name} changed"


def assert_trained(
    before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], frozen: Iterable[str]
) -> None:
    """Every trainable parameter moved and every frozen one did not: guards the comparison
    against passing because neither optimizer did anything."""
    frozen = set(frozen)
    for name, p0 in before.items():
        moved = not torch.equal(p0, after[name])
        if name in frozen:
            assert not moved, f"frozen parameter {name} changed"
        else:
            assert moved, f"trainable parameter {name} did not change"


# --- torch.compile -------------------------------------------------------------------------


def compile_unavailable(device_type: str) -> str | None:
    """Why ``torch.compile`` (inductor) cannot compile for ``device_type`` here; None if
    it can: dynamo must support this Python, and inductor needs triton for cuda/xpu and a
    C++ compiler for the cpu."""
    dynamo = importlib.import_module("torch._dynamo")
    supported = getattr(dynamo, "is_dynamo_supported", None)
    if supported is not None and not supported():
        v = sys.version_info
        return (
            f"torch {torch.__version__}'s torch.compile does not support Python {v.major}.{v.minor}"
        )
    if device_type in ("cuda", "xpu"):
        try:
            from torch.utils._triton import has_triton
        except ImportError:
            return None
        if not has_triton():
            return f"torch.compile's inductor needs triton for {device_type}; none usable here"
        return None
    if device_type == "cpu":
        import shutil

        if not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cl")):
            return "torch.compile's inductor needs a C++ compiler for the cpu; none on PATH"
        return None
    return f"torch.compile is not checked on {device_type} by this suite"


# --- denormal floats in the CPU optimizer ----------------------------------------------------


# Bit layouts: (same-size integer type, all bits but the sign, the exponent bits).
_LAYOUT: dict[torch.dtype, tuple[torch.dtype, int, int]] = {
    torch.float32: (torch.int32, 0x7FFFFFFF, 0x7F800000),
    torch.bfloat16: (torch.int16, 0x7FFF, 0x7F80),
    torch.float16: (torch.int16, 0x7FFF, 0x7C00),
    torch.float64: (torch.int64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}


def denormal_fraction(tensors: Iterable[torch.Tensor], *, squared: bool = False) -> float:
    """Share of the elements of ``tensors`` that are denormal floats (exponent bits zero,
    mantissa not); ``squared``: share of non-zero elements whose square is below the
    dtype's smallest normal number (what a gradient becomes in Adam's second moment:
    |g| < 1.1e-19 in fp32 and bf16). Read from the bit patterns, so a flush-to-zero
    setting of the calling thread does not change the count."""
    hits = total = 0
    for t in tensors:
        t = t.detach()
        if t.dtype not in _LAYOUT or t.numel() == 0:
            continue
        itype, magnitude, exponent = _LAYOUT[t.dtype]
        bits = t.contiguous().view(itype)
        nonzero = (bits & magnitude) != 0
        if squared:
            hit = nonzero & (t.abs() < math.sqrt(torch.finfo(t.dtype).tiny))
        else:
            hit = nonzero & ((bits & exponent) == 0)
        hits += int(hit.sum())
        total += t.numel()
    return hits / total if total else 0.0


def _openmp_runtime() -> Any:
    """The OpenMP runtime torch's intra-op pool runs on (libgomp, or LLVM/Intel's, which
    export the same GOMP_ entry points), from this process's loaded libraries; None if
    there is none (not Linux, or torch built without OpenMP)."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = {
        line.split()[-1]
        for line in maps.splitlines()
        if re.search(r"/lib(gomp|omp|iomp5)[^/]*\.so", line)
    }
    for path in sorted(paths):
        lib = ctypes.CDLL(path)  # already loaded: the same instance torch uses
        if hasattr(lib, "GOMP_parallel"):
            return lib
    return None


_FLUSH_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _set_flush_in_every_thread(lib: Any, enabled: bool, threads: int) -> None:
    """Run ``torch.set_flush_denormal(enabled)`` in each thread of an OpenMP team of
    ``threads``: the pool at::parallel_for uses (libgomp keeps its threads and their
    floating-point control registers between parallel regions)."""

    @_FLUSH_CALLBACK
    def set_here(_data: Any) -> None:
        torch.set_flush_denormal(enabled)

    lib.GOMP_parallel.argtypes = [_FLUSH_CALLBACK, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    lib.GOMP_parallel.restype = None
    lib.GOMP_parallel(set_here, None, threads, 0)


def flushed_share() -> float:
    """Share of a parallel multiply's denormal results that came out as zero: 1.0 when
    every intra-op thread flushes denormals, 1/threads when only the calling one does."""
    threads = torch.get_num_threads()
    x = torch.full((max(threads, 1) * 2**18,), 1e-20)
    return float(((x * x).view(torch.int32) == 0).float().mean())  # 1e-40: denormal


@dataclass(frozen=True)
class FlushReport:
    """What :func:`flush_denormals` did."""

    enabled: bool
    method: str  # "openmp-team": every thread of the OpenMP pool; "calling-thread"; "unsupported"
    threads: int
    flushed_share: float  # :func:`flushed_share` afterwards


def flush_denormals(enabled: bool) -> FlushReport:
    """Flush denormal floats to zero (FTZ/DAZ) in every thread that runs torch's CPU
    intra-op work, or stop doing so.

    ``torch.set_flush_denormal`` sets the control register of the calling thread only;
    the fused CPU AdamW that CPUOffloadOptimizer runs is split over the OpenMP pool by
    at::parallel_for, so flushing only there leaves (threads - 1) / threads of the work
    on slow denormal arithmetic. Here the call also runs inside every thread of the pool,
    through the OpenMP runtime's GOMP_parallel entry (a ctypes callback), and a parallel
    probe (:func:`flushed_share`) reports whether it took. Threads the pool starts later
    inherit the setting from the thread that starts them. Without an OpenMP runtime only
    the calling thread is set (method ``calling-thread``)."""
    if not torch.set_flush_denormal(enabled):
        return FlushReport(enabled, "unsupported", torch.get_num_threads(), flushed_share())
    lib = _openmp_runtime()
    method = "calling-thread"
    if lib is not None:
        _set_flush_in_every_thread(lib, enabled, torch.get_num_threads())
        method = "openmp-team"
    return FlushReport(enabled, method, torch.get_num_threads(), flushed_share())


# --- profiler traces -----------------------------------------------------------------------

# Device->host copy names: CUDA/CUPTI "Memcpy DtoH (Device -> Pinned)", XPU/PTI
# "Memcpy D2H (Device -> Host)"-style names. Matched loosely so both spellings pass.
_D2H = re.compile(r"\b(DtoH|D2H|D2M)\b|Device -> (Pinned|Host|Pageable|Memory)", re.IGNORECASE)


@dataclass(frozen=True)
class DeviceEvent:
    """A device-side activity from a chrome trace (times in microseconds)."""

    name: str
    cat: str
    stream: Any
    start: float
    end: float

    @property
    def is_d2h_copy(self) -> bool:
        return self.cat == "gpu_memcpy" and bool(_D2H.search(self.name))

    @property
    def is_kernel(self) -> bool:
        return self.cat == "kernel"


def load_device_events(trace_path: str | Path) -> list[DeviceEvent]:
    """Kernels and memcpys from a ``prof.export_chrome_trace`` file.

    The stream is ``args.stream`` (CUDA), else ``args["sycl queue"]`` (XPU), else the
    event's ``tid`` — kineto puts one stream per ``tid`` row in every version.
    """
    data = json.loads(Path(trace_path).read_text())
    raw = data["traceEvents"] if isinstance(data, dict) else data
    events = []
    for ev in raw:
        if ev.get("ph") != "X" or ev.get("cat") not in ("kernel", "gpu_memcpy"):
            continue
        args = ev.get("args") or {}
        stream = args.get("stream", args.get("sycl queue", ev.get("tid")))
        start = float(ev["ts"])
        events.append(
            DeviceEvent(ev.get("name", ""), ev["cat"], stream, start, start + float(ev["dur"]))
        )
    return events


def overlaps(
    events: list[DeviceEvent],
) -> Iterator[tuple[DeviceEvent, DeviceEvent, float]]:
    """(D2H copy, kernel on another stream, overlap in us) for each overlapping pair."""
    copies = [e for e in events if e.is_d2h_copy]
    kernels = [e for e in events if e.is_kernel]
    for c in copies:
        for k in kernels:
            if k.stream == c.stream:
                continue
            overlap = min(c.end, k.end) - max(c.start, k.start)
            if overlap > 0:
                yield c, k, overlap


def checkpoint_model(device: str, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """Upstream's save/load model; its biases (1024, 128 elements) stay on device, its
    weights are offloaded. Shared with the resume subprocess so both build the same."""
    model = nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 128))
    return model.to(device=device, dtype=dtype)
