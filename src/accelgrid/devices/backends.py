"""Device dispatch tables: one table per device API, from device type to implementation.

In the style of transformers' ``testing_utils`` (``BACKEND_MANUAL_SEED`` and friends): each
table maps a device type to either a dotted attribute path under ``torch`` (resolved lazily,
so a missing API is reported with its exact name, e.g. ``torch.xpu.memory_allocated`` on
torch 2.4 — pytorch/pytorch#127929), a callable, or ``None`` when the device does not claim
the feature. ``"default"`` is used for device types not listed. The entries come from the
device modules (:mod:`accelgrid.devices`, ``DeviceType.apis``); a device registered from a
spec file later is found there.

Suites call :func:`dispatch`; it raises :class:`NotClaimed` (tests turn that into a skip)
or :class:`MissingAPI` (tests turn that into a failure naming the API).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .. import devices

Impl = devices.Impl


class NotClaimed(Exception):
    """The device does not claim this feature (the test should be skipped)."""


class MissingAPI(AttributeError):
    """The device claims the feature but the installed torch lacks the API."""


# What a device that does not list an API gets.
DEFAULTS: dict[str, Impl] = {**{api: None for api in devices.APIS},
                              "manual_seed": "torch.manual_seed"}

TABLES: dict[str, dict[str, Impl]] = {
    api: {**{d.name: d.apis[api] for d in devices.BUILTIN if api in d.apis},
          "default": DEFAULTS[api]}
    for api in devices.APIS
}


def impl(api: str, dtype: str) -> Impl:
    """The table entry of ``api`` for device type ``dtype`` (None: not claimed)."""
    table = TABLES[api]
    if dtype in table:
        return table[dtype]
    kind = devices.find(dtype)  # a device registered from a spec file
    if kind is not None and api in kind.apis:
        return kind.apis[api]
    return table.get("default")


def device_type(device: Any) -> str:
    """``"cuda:1"`` / ``torch.device("cuda", 1)`` -> ``"cuda"``."""
    return str(device).split(":", 1)[0]


def resolve(api: str, device: Any) -> Callable[..., Any]:
    """The implementation of ``api`` for ``device``; raises NotClaimed / MissingAPI."""
    dtype = device_type(device)
    found = impl(api, dtype)
    if found is None:
        raise NotClaimed(f"{dtype} does not claim {api}")
    if callable(found):
        return found
    module_path, _, attr = found.rpartition(".")
    owner: object | None
    try:
        owner = importlib.import_module(module_path)
    except ImportError:
        # torch.xpu / torch.mps may be absent as modules on old builds.
        owner = importlib.import_module(module_path.rpartition(".")[0])
        owner = getattr(owner, module_path.rpartition(".")[2], None)
    fn: Callable[..., Any] | None = getattr(owner, attr, None) if owner is not None else None
    if fn is None:
        raise MissingAPI(f"{found} is missing in this torch build")
    return fn


def dispatch(api: str, device: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``api`` for ``device``: ``dispatch("memory_allocated", "xpu")``."""
    return resolve(api, device)(*args, **kwargs)


def claims(api: str, device: Any) -> bool:
    """Whether the device type claims ``api`` at all (regardless of torch version)."""
    return impl(api, device_type(device)) is not None
