"""The vocabulary suites use: one module to import (docs/guides/writing-a-test.md).

    from accelgrid.testing import dtypes, needs_devices, not_run, only_on, skip_on

    @only_on("xpu", reason="XPU-to-CPU fallback is an xpu matter")
    def test_no_fallback(device): ...

    @only_on(offload=True)              # a fact of the device module (accelgrid.devices)
    @needs_devices(2)
    @dtypes("float32", "bfloat16")      # parametrizes ``dtype``; unsupported ones skip
    def test_x(device, dtype): ...

The marks are evaluated by accelgrid's plugin before the test (a skip, with the reason and
the cell's device in its message), so a test never starts on a device it does not claim.
A device type matches by the cell's name or, for a spec device that runs on another type's
kernels (``TORCH_DEVICE``), by that type too. Runs inside the cell: torch and pytest only.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Sequence
from typing import Any

import pytest

from .. import devices
from ..base.outcomes import not_run
from ..devices.backends import MissingAPI, NotClaimed, claims, device_type, dispatch, resolve

__all__ = ["MissingAPI", "NotClaimed", "claims", "device_type", "dispatch", "dtypes",
           "needs_devices", "not_run", "only_on", "resolve", "skip_on"]

ONLY_ON, SKIP_ON, NEEDS_DEVICES, NEEDS_DTYPE = "only_on", "skip_on", "needs_devices", "needs_dtype"
# The markers accelgrid's plugin registers for these helpers (pytest --markers shows them).
MARKERS = {
    ONLY_ON: "only_on(*device_types, reason='', **facts): run only on these device types, "
             "or where the device module's facts hold (offload=True, float64=True ...)",
    SKIP_ON: "skip_on(*device_types, reason='', **facts): skip on these device types, or "
             "where the device module's facts hold",
    NEEDS_DEVICES: "needs_devices(n): skip unless this process sees n devices of the cell's type",
    NEEDS_DTYPE: "needs_dtype(name): skip where the device cannot hold the dtype "
                 "(set by accelgrid.testing.dtypes)",
}
# The DeviceType fields a mark may test (the yes/no ones).
FACTS = ("accelerator", "offload", "float64", "shared_by_processes")
# dtype name -> the id its parameter gets (as suites spelled them before).
DTYPE_IDS = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16",
             "int8": "int8", "int32": "int32", "int64": "int64", "bool": "bool"}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _mark(kind: str, types: tuple[str, ...], reason: str, facts: dict[str, Any]
          ) -> pytest.MarkDecorator:
    bad = [t for t in types if not isinstance(t, str) or not _NAME.match(t)]
    if bad:
        raise ValueError(f"{kind}: {bad[0]!r} is not a device type name (cpu, cuda, ...)")
    unknown = sorted(set(facts) - set(FACTS))
    if unknown:
        raise ValueError(f"{kind}: no device fact {unknown[0]!r}; known: {', '.join(FACTS)}")
    if not types and not facts:
        raise ValueError(f"{kind} needs a device type or a fact")
    mark: pytest.MarkDecorator = getattr(pytest.mark, kind)
    return mark(*types, reason=reason, **facts)


def only_on(*types: str, reason: str = "", **facts: bool) -> pytest.MarkDecorator:
    """Run only on ``types`` (any of them) and where every fact in ``facts`` holds."""
    return _mark(ONLY_ON, types, reason, facts)


def skip_on(*types: str, reason: str = "", **facts: bool) -> pytest.MarkDecorator:
    """Skip on ``types`` and where any fact in ``facts`` holds."""
    return _mark(SKIP_ON, types, reason, facts)


def needs_devices(n: int) -> pytest.MarkDecorator:
    """Skip unless this process sees at least ``n`` devices of the cell's type."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"needs_devices: n must be a positive int, got {n!r}")
    mark: pytest.MarkDecorator = getattr(pytest.mark, NEEDS_DEVICES)
    return mark(n)


def dtypes(*names: str, argname: str = "dtype") -> pytest.MarkDecorator:
    """Parametrize ``argname`` over torch dtypes by name; each parameter's id is its short
    name (``fp32``, ``bf16``) and it skips where the device cannot hold it."""
    import torch

    params = []
    for name in names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtypes: torch has no dtype {name!r}")
        params.append(pytest.param(dtype, id=DTYPE_IDS.get(name, name),
                                   marks=getattr(pytest.mark, NEEDS_DTYPE)(name)))
    return pytest.mark.parametrize(argname, params)


def _type_matches(mark: pytest.Mark, kinds: list[devices.DeviceType]) -> bool:
    return any(k.name in mark.args for k in kinds)


def _facts(mark: pytest.Mark, kind: devices.DeviceType) -> list[bool]:
    return [getattr(kind, k) == v for k, v in mark.kwargs.items() if k in FACTS]


def _dtype_problem(name: str, kind: devices.DeviceType, device: str) -> str | None:
    if name == "float64" and not kind.float64:
        return f"{kind.name} cannot hold torch.float64 tensors"
    if name == "bfloat16" and claims("is_bf16_supported", device):
        try:
            if not dispatch("is_bf16_supported", device):
                return f"{device} reports no bf16 support"
        except MissingAPI:
            return None
    return None


def skip_reason(node: Any, cell_type: str, device: str) -> str | None:
    """Why the test ``node`` does not run on this cell's device (None: it runs)."""
    kind = devices.get(cell_type)
    kinds = [kind]
    on = device_type(device)  # a spec device on another type's kernels matches that type too
    if on != kind.name and devices.find(on) is not None:
        kinds.append(devices.get(on))
    for mark in node.iter_markers(ONLY_ON):
        if (mark.args and not _type_matches(mark, kinds)) or not all(_facts(mark, kind)):
            wanted = ", ".join([*mark.args, *(f"{k}={v}" for k, v in mark.kwargs.items()
                                              if k in FACTS)])
            why = mark.kwargs.get("reason") or f"runs on {wanted} only"
            return f"{why}; this cell is {cell_type}"
    for mark in node.iter_markers(SKIP_ON):
        if _type_matches(mark, kinds) or any(_facts(mark, kind)):
            why = mark.kwargs.get("reason") or f"skipped on {', '.join(mark.args) or 'it'}"
            return f"{why}; this cell is {cell_type}"
    for mark in node.iter_markers(NEEDS_DTYPE):
        why = _dtype_problem(mark.args[0], kind, device)
        if why:
            return why
    for mark in node.iter_markers(NEEDS_DEVICES):
        try:
            count = int(dispatch("device_count", device))
        except (NotClaimed, MissingAPI):
            count = 1
        if count < mark.args[0]:
            return f"needs {mark.args[0]} {cell_type} devices, this process sees {count}"
    return None


class Unavailable(ImportError):
    """A package is absent, or has the name asked for in none of the modules tried."""


def import_first(name: str, modules: Sequence[str],
                 unavailable: type[Unavailable] = Unavailable) -> Any:
    """``name`` from the first of ``modules`` (one package's paths across its versions,
    e.g. ``("torchao.optim", "torchao.prototype.low_bit_optim")``) that has it.

    Only a missing module counts as unavailable (``unavailable`` is raised, saying what was
    tried); any other import error (a package built for another torch) propagates, so a
    broken install is not hidden."""
    package = modules[0].split(".")[0]
    if importlib.util.find_spec(package) is None:
        raise unavailable(f"{package} is not installed")
    tried = []
    for path in modules:
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (path == exc.name or path.startswith(exc.name + ".")):
                raise
            tried.append(f"{path}: no such module")
            continue
        found = getattr(module, name, None)
        if found is not None:
            return found
        tried.append(f"{path}: no {name}")
    version = getattr(importlib.import_module(package), "__version__", "?")
    raise unavailable(f"{package} {version} has no {name} ({'; '.join(tried)})")
