"""Device dispatch tables: one table per device API, from device type to implementation.

In the style of transformers' ``testing_utils`` (``BACKEND_MANUAL_SEED`` and friends): each
table maps a device type to either a dotted attribute path under ``torch`` (resolved lazily,
so a missing API is reported with its exact name, e.g. ``torch.xpu.memory_allocated`` on
torch 2.4 — pytorch/pytorch#127929), a callable, or ``None`` when the device does not claim
the feature. ``"default"`` is used for device types not listed.

Suites call :func:`dispatch`; it raises :class:`NotClaimed` (tests turn that into a skip)
or :class:`MissingAPI` (tests turn that into a failure naming the API).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Impl = str | Callable[..., Any] | None


class NotClaimed(Exception):
    """The device does not claim this feature (the test should be skipped)."""


class MissingAPI(AttributeError):
    """The device claims the feature but the installed torch lacks the API."""


def _cpu_memory_unsupported(*_: Any) -> Any:
    raise NotClaimed("cpu does not track device memory allocations")


TABLES: dict[str, dict[str, Impl]] = {
    "manual_seed": {
        "cuda": "torch.cuda.manual_seed",
        "xpu": "torch.xpu.manual_seed",
        "mps": "torch.mps.manual_seed",
        "default": "torch.manual_seed",
    },
    "synchronize": {
        "cuda": "torch.cuda.synchronize",
        "xpu": "torch.xpu.synchronize",
        "mps": "torch.mps.synchronize",
        "cpu": "torch.cpu.synchronize",
        "default": None,
    },
    "device_count": {
        "cuda": "torch.cuda.device_count",
        "xpu": "torch.xpu.device_count",
        "cpu": "torch.cpu.device_count",
        "mps": lambda: 1,
        "default": None,
    },
    "device_name": {
        "cuda": "torch.cuda.get_device_name",
        "xpu": "torch.xpu.get_device_name",
        "default": None,
    },
    "memory_allocated": {
        "cuda": "torch.cuda.memory_allocated",
        "xpu": "torch.xpu.memory_allocated",
        "mps": "torch.mps.current_allocated_memory",
        "default": None,
    },
    "max_memory_allocated": {
        "cuda": "torch.cuda.max_memory_allocated",
        "xpu": "torch.xpu.max_memory_allocated",
        "default": None,
    },
    "reset_peak_memory_stats": {
        "cuda": "torch.cuda.reset_peak_memory_stats",
        "xpu": "torch.xpu.reset_peak_memory_stats",
        "default": None,
    },
    "empty_cache": {
        "cuda": "torch.cuda.empty_cache",
        "xpu": "torch.xpu.empty_cache",
        "mps": "torch.mps.empty_cache",
        "default": None,
    },
    "Stream": {
        "cuda": "torch.cuda.Stream",
        "xpu": "torch.xpu.Stream",
        "default": None,
    },
    "Event": {
        "cuda": "torch.cuda.Event",
        "xpu": "torch.xpu.Event",
        "mps": "torch.mps.event.Event",
        "default": None,
    },
    "is_bf16_supported": {
        "cuda": "torch.cuda.is_bf16_supported",
        "xpu": "torch.xpu.is_bf16_supported",
        "cpu": lambda: True,
        "default": None,
    },
}


def device_type(device: Any) -> str:
    """``"cuda:1"`` / ``torch.device("cuda", 1)`` -> ``"cuda"``."""
    return str(device).split(":", 1)[0]


def resolve(api: str, device: Any) -> Callable[..., Any]:
    """The implementation of ``api`` for ``device``; raises NotClaimed / MissingAPI."""
    table = TABLES[api]
    dtype = device_type(device)
    impl = table.get(dtype, table.get("default"))
    if impl is None:
        raise NotClaimed(f"{dtype} does not claim {api}")
    if callable(impl):
        return impl
    module_path, _, attr = impl.rpartition(".")
    try:
        owner = importlib.import_module(module_path)
    except ImportError:
        # torch.xpu / torch.mps may be absent as modules on old builds.
        owner = importlib.import_module(module_path.rpartition(".")[0])
        owner = getattr(owner, module_path.rpartition(".")[2], None)
    fn = getattr(owner, attr, None) if owner is not None else None
    if fn is None:
        raise MissingAPI(f"{impl} is missing in this torch build")
    return fn


def dispatch(api: str, device: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``api`` for ``device``: ``dispatch("memory_allocated", "xpu")``."""
    return resolve(api, device)(*args, **kwargs)


def claims(api: str, device: Any) -> bool:
    """Whether the device type claims ``api`` at all (regardless of torch version)."""
    table = TABLES[api]
    return table.get(device_type(device), table.get("default")) is not None
