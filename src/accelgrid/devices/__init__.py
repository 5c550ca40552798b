"""The device types accelgrid knows, one module each, in one typed table (:data:`TYPES`).

``devices.get("xpu").visibility_var`` instead of a ``{"cuda": ..., "xpu": ...}`` dict in
every module that needs a fact: docs/guides/adding-a-device.md says how a fifth one comes in
(a module here, listed in :mod:`.registry`'s ``BUILTIN``, or a spec file the matrix names:
:mod:`.spec`).

    base.py                    DeviceType: every fact of a device type, and its APIS
    cpu.py, cuda.py, xpu.py, mps.py   the built-in types, one ``DEVICE`` each
    registry.py                the table of this process's types, looked up by name
    spec.py                    a type declared by a spec file
    pci.py, backends.py        sysfs GPUs and Intel's families; dispatch tables by type
"""

from .base import APIS, DeviceType, Impl
from .registry import (
    BUILTIN,
    TYPES,
    UnknownDevice,
    find,
    from_env,
    get,
    hidden_accelerators,
    load_spec,
    register,
)
from .spec import SpecError

__all__ = ["APIS", "BUILTIN", "TYPES", "DeviceType", "Impl", "SpecError", "UnknownDevice",
           "find", "from_env", "get", "hidden_accelerators", "load_spec", "register"]
