"""A device type declared by a spec file: an out-of-tree (PrivateUse1) backend, or any
device outside the four modules of this package.

The file follows the two upstream conventions for bringing a device into a test suite:

- transformers' ``TRANSFORMERS_TEST_DEVICE_SPEC`` (``src/transformers/testing_utils.py``
  at v5.17.0 and v5.24.0): a Python file with ``DEVICE_NAME`` (required) and hook
  functions ``MANUAL_SEED_FN``, ``EMPTY_CACHE_FN``, ``DEVICE_COUNT_FN``; a hook the file
  lacks falls back to the table's default. A transformers spec file is a valid accelgrid
  spec as it is.
- PyTorch's ``TORCH_TEST_DEVICES`` (``torch/testing/_internal/common_device_type.py``,
  2.13.0: "Note [How to extend DeviceTypeTestBase to add new test device]"): the file is
  run with ``runpy.run_path`` (not imported from ``sys.path``), and the device is whatever
  one top-level name holds. Importing the backend's own package in the file (``import
  torch_npu``) is how it registers itself, as ``TRANSFORMERS_TEST_BACKEND`` does.

accelgrid reads, beside those: one ``<API>_FN`` per API of :data:`~.base.APIS` (e.g.
``SYNCHRONIZE_FN``, ``MEMORY_ALLOCATED_FN``) and the optional facts of :data:`FACTS`.
"""

from __future__ import annotations

import re
import runpy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import APIS, DeviceType

# Spec name -> (DeviceType field, the type its value must have).
FACTS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "TORCH_DEVICE": ("torch_device", str),          # where tensors go (default DEVICE_NAME)
    "DISPATCH_KEY": ("dispatch_key", str),          # default PrivateUse1
    "VISIBILITY_VAR": ("visibility_var", str),
    "HIDE": ("hide", dict),
    "SHARED_BY_PROCESSES": ("shared_by_processes", bool),
    "FLAGS": ("flags", str),                        # a regular expression of env var names
    "FALLBACK_FLAG": ("fallback_flag", str),
    "COLLECTIVE_BACKEND": ("collective_backend", str),
    "OFFLOAD": ("offload", bool),
    "FLOAT64": ("float64", bool),
}
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SpecError(ValueError):
    """A spec file that cannot declare a device (one line, naming the file)."""


def hook_name(api: str) -> str:
    """``manual_seed`` -> ``MANUAL_SEED_FN`` (transformers' spelling)."""
    return f"{api.upper()}_FN"


def from_namespace(ns: Mapping[str, Any], source: str) -> DeviceType:
    """The device type a spec file's top-level names declare."""
    name = ns.get("DEVICE_NAME")
    if not isinstance(name, str) or not NAME.match(name):
        raise SpecError(f"{source}: DEVICE_NAME must be a lower-case device type name "
                        f"(e.g. 'npu'), got {name!r}")
    apis = {}
    for api in APIS:
        hook = ns.get(hook_name(api))
        if hook is None:
            continue
        if not callable(hook):
            raise SpecError(f"{source}: {hook_name(api)} must be callable, got {hook!r}")
        apis[api] = hook
    facts: dict[str, Any] = {}
    for key, (field, kind) in FACTS.items():
        if key not in ns:
            continue
        value = ns[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise SpecError(f"{source}: {key} must be a {kind.__name__}, got {value!r}")
        facts[field] = re.compile(value) if field == "flags" else value
    facts.setdefault("dispatch_key", "PrivateUse1")
    return DeviceType(name=name, apis=apis, source=source, **facts)


def load(path: str | Path) -> DeviceType:
    """Run the spec file ``path`` and return the device type it declares."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise SpecError(f"{path}: a device spec is a Python file (.py); none is there")
    try:
        ns = runpy.run_path(str(path), run_name=f"accelgrid_device_spec_{path.stem}")
    except Exception as exc:  # noqa: BLE001 - whatever the file raises, said in one line
        raise SpecError(f"{path}: running the device spec failed: "
                        f"{type(exc).__name__}: {exc}") from exc
    return from_namespace(ns, str(path))
