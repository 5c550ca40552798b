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
``SYNCHRONIZE_FN``, ``MEMORY_ALLOCATED_FN``) and every other fact a built-in device type
has, under the names of :data:`FACTS` (docs/guides/adding-a-device.md lists them).

Outside the cell (the runner, ``plan``) the matrix's spec device is :func:`resolve`'d: the
file is run there too; where it cannot run (it imports a backend accelgrid's own
environment lacks), its literal facts (``VISIBILITY_VAR = "..."``, ``SHARED_BY_PROCESSES =
True``, ...) are read from it without running it, and its functions are not known there.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import runpy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

from .base import APIS, DeviceType

# A function-valued fact is checked with isinstance against the ABC; mypy reads
# collections.abc.Callable as a special form, not the class it is at run time.
_FUNCTION = cast(type, Callable)

# Spec name -> (DeviceType field, the type its value must have). A function's arguments
# are those of the field (devices/base.py): TORCH_DEVICES_FN(torch), AVAILABLE_FN(torch),
# HOST_IDS_FN(env, python, torch_version), HOST_MEMORY_GIB_FN(), HOST_HARDWARE_FN(root),
# HOST_INVENTORY_FN().
FACTS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "TORCH_DEVICE": ("torch_device", str),          # where tensors go (default DEVICE_NAME)
    "DISPATCH_KEY": ("dispatch_key", str),          # default PrivateUse1
    "ACCELERATOR": ("accelerator", bool),
    "VISIBILITY_VAR": ("visibility_var", str),
    "HIDE": ("hide", dict),                         # env var -> value
    "SHARED_BY_PROCESSES": ("shared_by_processes", bool),
    "FLAGS": ("flags", str),                        # a regular expression of env var names
    "FALLBACK_FLAG": ("fallback_flag", str),
    "FALLBACK_NOTICE": ("fallback_notice", str),
    "FALLBACK_MESSAGES": ("fallback_messages", (list, tuple)),   # regexes, group 1: the op
    "MISSING_MESSAGES": ("missing_messages", (list, tuple)),     # regexes, group 1: the op
    "RUNTIME_ATTR": ("runtime_attr", str),
    "TORCH_DEVICES_FN": ("torch_devices", _FUNCTION),
    "AVAILABLE_FN": ("available", _FUNCTION),
    "HOST_IDS_FN": ("host_ids", _FUNCTION),
    "HOST_MEMORY_GIB_FN": ("host_memory_gib", _FUNCTION),
    "HOST_HARDWARE_FN": ("host_hardware", _FUNCTION),
    "HOST_INVENTORY_FN": ("host_inventory", _FUNCTION),
    "COLLECTIVE_BACKEND": ("collective_backend", str),
    "COLLECTIVE_CHECK": ("collective_check", str),
    "OFFLOAD": ("offload", bool),
    "FLOAT64": ("float64", bool),
    "CONTAINER_ARGS": ("container_args", dict),     # engine ("default": any) -> arguments
}
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SpecError(ValueError):
    """A spec file that cannot declare a device (one line, naming the file)."""


class SpecDidNotRun(SpecError):
    """Running the spec file raised (its backend is not installed here, ...)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


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
            raise SpecError(f"{source}: {key} must be a {_type_name(kind)}, got {value!r}")
        facts[field] = _converted(key, value, source)
    facts.setdefault("dispatch_key", "PrivateUse1")
    return DeviceType(name=name, apis=apis, source=source, **facts)


def _type_name(kind: type | tuple[type, ...]) -> str:
    if kind is _FUNCTION:
        return "function"
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def _pattern(key: str, text: Any, source: str, groups: int = 0) -> re.Pattern[str]:
    if not isinstance(text, str):
        raise SpecError(f"{source}: {key} holds regular expressions (str), got {text!r}")
    try:
        rx = re.compile(text)
    except re.error as exc:
        raise SpecError(f"{source}: {key}: {text!r} is not a regular expression: {exc}") \
            from exc
    if rx.groups < groups:
        raise SpecError(f"{source}: {key}: {text!r} needs a group for the op's name")
    return rx


def _converted(key: str, value: Any, source: str) -> Any:
    """A spec value as the DeviceType field holds it (compiled, tuples); a value of the
    right type but the wrong content is a SpecError."""
    if key == "FLAGS":
        return _pattern(key, value, source)
    if key in ("FALLBACK_MESSAGES", "MISSING_MESSAGES"):
        return tuple(_pattern(key, v, source, groups=1) for v in value)
    if key in ("HIDE", "CONTAINER_ARGS"):
        if not all(isinstance(k, str) for k in value):
            raise SpecError(f"{source}: {key}'s keys must be str, got {value!r}")
        if key == "HIDE":
            if not all(isinstance(v, str) for v in value.values()):
                raise SpecError(f"{source}: HIDE's values must be str, got {value!r}")
            return dict(value)
        if not all(isinstance(v, (list, tuple)) and all(isinstance(a, str) for a in v)
                   for v in value.values()):
            raise SpecError(f"{source}: CONTAINER_ARGS maps an engine to a list of "
                            f"arguments (str), got {value!r}")
        return {k: tuple(v) for k, v in value.items()}
    return value


def load(path: str | Path) -> DeviceType:
    """Run the spec file ``path`` and return the device type it declares."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise SpecError(f"{path}: a device spec is a Python file (.py); none is there")
    real_exit = os._exit

    def exit_at_import(status: int) -> NoReturn:
        raise _ExitAtImport(status)

    # A spec that ends its process at import (sys.exit, os._exit) would end the runner
    # loading the matrix, or every test process, with no word of why (exit 0 included).
    os._exit = exit_at_import
    try:
        ns = runpy.run_path(str(path), run_name=f"accelgrid_device_spec_{path.stem}")
    except _ExitAtImport as exc:
        why = f"it calls os._exit({exc.code!r}) at import"
        raise SpecDidNotRun(f"{path}: running the device spec failed: {why}", why) from None
    except SystemExit as exc:
        why = f"it exits at import (SystemExit: {exc.code!r})"
        raise SpecDidNotRun(f"{path}: running the device spec failed: {why}", why) from None
    except Exception as exc:  # noqa: BLE001 - whatever the file raises, said in one line
        why = f"{type(exc).__name__}: {exc}"
        raise SpecDidNotRun(f"{path}: running the device spec failed: {why}", why) from exc
    finally:
        os._exit = real_exit
    return from_namespace(ns, str(path))


class _ExitAtImport(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def literal_facts(path: str | Path) -> dict[str, Any]:
    """The spec file's top-level names bound to a literal (``X = "..."``, ``Y = True``,
    ``Z = {...}``), read without running it."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise SpecError(f"{path}: cannot read the device spec: {exc}") from exc
    ns: dict[str, Any] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            try:
                ns[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:   # a function, an expression: known where the file runs
                ns.pop(node.targets[0].id, None)
    return ns


def resolve(path: str | Path) -> DeviceType:
    """The device type a spec file declares, outside the cell: the file run (:func:`load`);
    where running it fails here, the device its literal facts declare (no functions),
    its ``source`` saying why."""
    try:
        return load(path)
    except SpecDidNotRun as exc:
        kind = from_namespace(literal_facts(path), str(path))
        return dataclasses.replace(kind, source=f"{path} (its literal facts: {exc.why})")
