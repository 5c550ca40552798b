"""The device types of this process in one typed table (:data:`TYPES`): the built-in ones
(:data:`BUILTIN`, a module each) and those registered from spec files (:func:`load_spec`);
:func:`get` and :func:`from_env` look a type up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..base import contract
from . import cpu, cuda, mps, spec, xpu
from .base import DeviceType
from .spec import SpecError

__all__ = ["BUILTIN", "TYPES", "UnknownDevice", "find", "from_env", "get",
           "hidden_accelerators", "load_spec", "register"]

BUILTIN: tuple[DeviceType, ...] = (cpu.DEVICE, cuda.DEVICE, xpu.DEVICE, mps.DEVICE)
# Every device type of this process: the built-in ones and those registered from spec files.
TYPES: dict[str, DeviceType] = {d.name: d for d in BUILTIN}


class UnknownDevice(KeyError):
    """A device type no module and no loaded spec declares."""

    def __str__(self) -> str:
        return str(self.args[0])


def find(name: str) -> DeviceType | None:
    return TYPES.get(name)


def get(name: str) -> DeviceType:
    """The device type called ``name`` (``"cuda:1"`` counts as ``"cuda"``)."""
    kind = TYPES.get(str(name).split(":", 1)[0])
    if kind is None:
        raise UnknownDevice(f"unknown device type '{name}': accelgrid knows "
                            f"{', '.join(TYPES)}; another comes from a spec file "
                            "(docs/guides/adding-a-device.md)")
    return kind


def register(kind: DeviceType) -> DeviceType:
    """Add a device type to :data:`TYPES`; a built-in one cannot be replaced."""
    if kind.name in {d.name for d in BUILTIN} and TYPES[kind.name] is not kind:
        raise SpecError(f"{kind.source}: '{kind.name}' is a built-in device type; a spec "
                        "declares another name")
    TYPES[kind.name] = kind
    return kind


def load_spec(path: str | Path) -> DeviceType:
    """Run a spec file and register the device it declares."""
    return register(spec.load(path))


def from_env(env: Mapping[str, str] | None = None) -> DeviceType:
    """The cell's device type (``ACCELGRID_DEVICE``, default cpu); where the cell's device
    comes from a spec file (``ACCELGRID_DEVICE_SPEC``), that file is loaded first and must
    declare the same name."""
    env = os.environ if env is None else env
    name = env.get(contract.DEVICE) or "cpu"
    path = env.get(contract.DEVICE_SPEC)
    if path and name not in TYPES:
        declared = load_spec(path)
        if declared.name != name:
            raise SpecError(f"{path} declares DEVICE_NAME {declared.name!r} but the cell's "
                            f"device is {name!r}")
    return get(name)


def hidden_accelerators() -> dict[str, str]:
    """What hides every accelerator from a process (a cpu cell's tests): each known type's
    ``hide`` (a spec device's once its matrix is loaded), so code that picks its device from
    what the host has (torchao's CPUOffloadOptimizer) sees a CPU-only host."""
    return {k: v for d in TYPES.values() for k, v in d.hide.items()}

