"""Shared pieces of the CPU-offload suite, also imported by the resume subprocess and,
by path, by ``accelgrid bench offload`` (its model and its torchao import).

Imports only torch (never accelgrid or torchao at import time) so that the fresh
interpreter started by the cross-process test can use it as-is.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Devices CPUOffloadOptimizer accepts: torchao picks cuda, else xpu, and asserts one of
# them is present ("CPU Offload currently only supports CUDA & XPU").
SUPPORTED_DEVICES: tuple[str, ...] = ("cuda", "xpu")
AO_958 = "https://github.com/pytorch/ao/issues/958"

# Where CPUOffloadOptimizer lives: torchao >= 0.10, then 0.5-0.9.
IMPORT_PATHS = ("torchao.optim", "torchao.prototype.low_bit_optim")


def skip_reason(device_type: str) -> str:
    """Upstream's skip reason (test/test_low_bit_optim.py) plus the tracking issue."""
    return f"optim CPU offload requires CUDA or XPU, not {device_type} ({AO_958})"


class OffloadUnavailable(ImportError):
    """torchao is absent, or provides CPUOffloadOptimizer in none of IMPORT_PATHS."""


def import_cpu_offload() -> type:
    """The installed torchao's CPUOffloadOptimizer class.

    Only a missing module is treated as "unavailable"; any other import error (e.g. a
    torchao built for another torch) propagates, so a broken install is not hidden.
    """
    if importlib.util.find_spec("torchao") is None:
        raise OffloadUnavailable("torchao is not installed")
    tried = []
    for name in IMPORT_PATHS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise
            tried.append(f"{name}: no such module")
            continue
        cls = getattr(module, "CPUOffloadOptimizer", None)
        if cls is not None:
            return cls
        tried.append(f"{name}: no CPUOffloadOptimizer")
    version = getattr(importlib.import_module("torchao"), "__version__", "?")
    raise OffloadUnavailable(f"torchao {version} has no CPUOffloadOptimizer ({'; '.join(tried)})")


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


def upstream_model(device: str, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """The model of upstream's correctness test.

    The first two layers have a poor arithmetic density (long transfers, little compute),
    which makes missing synchronisation show up as wrong numbers. Layer 2 is frozen.
    With ``minimal_size=4096`` the small biases (64, 128) stay on device and the rest is
    offloaded, so both paths are exercised.
    """
    model = nn.Sequential(
        nn.Linear(32, 131072),
        nn.ReLU(),
        nn.Linear(131072, 64),
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
    width: int, depth: int, device: str, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """The model of ``accelgrid bench offload``: :func:`mlp` (``depth`` bias-free
    ``width x width`` layers) with weights drawn with std ``width**-0.5``, so activations
    neither vanish nor blow up through a deep linear stack (Linear's default init shrinks
    them by about sqrt(3) per layer)."""
    model = mlp(width, depth, device, dtype)
    with torch.no_grad():
        for layer in model:
            layer.weight.normal_(0.0, width**-0.5)
    return model


def train(
    model: nn.Module,
    optimizer: Any,
    inputs: Iterable[list[torch.Tensor]],
    scheduler: Any = None,
) -> None:
    """One optimizer step per item of ``inputs``; each item is a list of micro-batches whose
    gradients accumulate before the step."""
    for micro_batches in inputs:
        for x in micro_batches:
            model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()


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


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of all parameters, by name."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


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
    may miss ``rtol``/``atol`` as long as they stay within ``rtol``/``outlier_atol``.
    """
    assert actual.keys() == expected.keys()
    for name in expected:
        a, e = actual[name], expected[name]
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
            tolerances = {**tolerances, "atol": outlier_atol}
        torch.testing.assert_close(
            a, e, msg=lambda m, name=name: f"parameter {name}: {m}", **tolerances
        )


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


def checkpoint_model(device: str) -> nn.Sequential:
    """Upstream's save/load model; its biases (1024, 128 elements) stay on device, its
    weights are offloaded. Shared with the resume subprocess so both build the same."""
    return nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 128)).to(device)
