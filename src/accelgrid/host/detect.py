"""Is a device present on this host? Answered from matrix.yaml's ``detect`` rules,
without importing torch (so it is cheap and works before anything is installed).

Rules (all given ones must hold): ``always``; ``system`` / ``machine`` (platform);
``paths_any`` (any glob matches); ``commands_any`` (any command on PATH that runs
successfully, e.g. ``nvidia-smi``); ``pci_vendor`` (a display-class PCI device of that
vendor behind a DRM render node, e.g. ``"0x8086"`` for Intel GPUs:
:func:`accelgrid.devices.pci.vendor_problem`).

How many devices of a type this host has, their memory, hardware families and inventory
are the device type's own (``DeviceType.host_ids`` and friends, :mod:`accelgrid.devices`);
this module adds what holds for every type: a chosen subset (``ACCELGRID_DEVICES``), an
already-set visibility variable, the hardware family a cell runs on here.

The Deep Learning Essentials check for torch series whose wheels do not bring the SYCL
runtime is :func:`runtime_problem`.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import contract
from ..config.model import Cell
from ..devices import DeviceType, pci


def _command_works(command: str) -> bool:
    exe = shutil.which(command)
    if not exe:
        return False
    try:
        return subprocess.run([exe], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def absent_reason(device: str, rules: Mapping[str, Any], root: str | Path | None = None
                  ) -> str | None:
    """None when the device is present, else a one-line reason it is not (``root``: see
    :func:`accelgrid.devices.pci.host_root`)."""
    if rules.get("always"):
        return None
    system = rules.get("system")
    if system and platform.system() != system:
        return f"{device} needs a {system} host, this is {platform.system()}"
    machine = rules.get("machine")
    if machine and platform.machine().lower() not in (machine.lower(), _alias(machine)):
        return f"{device} needs a {machine} machine, this is {platform.machine()}"
    paths = rules.get("paths_any") or []
    if paths and not any(glob.glob(p) for p in paths):
        return f"{device} not present: none of {', '.join(paths)} exists"
    commands = rules.get("commands_any") or []
    if commands and not any(_command_works(c) for c in commands):
        return f"{device} not present: none of {', '.join(commands)} is on PATH and working"
    vendor = rules.get("pci_vendor")
    if vendor:
        return pci.vendor_problem(device, int(str(vendor), 16), root,
                                  bool(rules.get("unknown_family")))
    return None


def _alias(machine: str) -> str:
    return {"arm64": "aarch64", "aarch64": "arm64", "x64": "x86_64"}.get(machine.lower(), "")


def present_devices(devices: dict[str, Any]) -> list[str]:
    """Names of the matrix's devices present here (``devices``: name -> Device)."""
    return [name for name, dev in devices.items() if absent_reason(name, dev.detect) is None]


def _library_on_path(name: str, search_path: str) -> bool:
    return any(d and (Path(d) / name).exists() for d in search_path.split(os.pathsep))


def runtime_problem(cell: Cell, env: Mapping[str, str] | None = None) -> str | None:
    """One line when ``cell``'s torch needs a runtime bundle (``devices.<d>.runtime``) that
    is not sourced in ``env`` (default: this process's environment), else None. Sourced
    means: the check variable is set and the check library is in an LD_LIBRARY_PATH
    folder, as the bundle's env script leaves them. ``ACCELGRID_SKIP_RUNTIME_CHECK=1``
    skips it."""
    rt = cell.runtime
    if rt is None or rt.from_wheels:
        return None
    env = os.environ if env is None else env
    if env.get(contract.SKIP_RUNTIME_CHECK) == "1":
        return None
    why = None
    if rt.check_env and not env.get(rt.check_env):
        why = f"{rt.check_env} is not set"
    elif rt.check_library and not _library_on_path(rt.check_library,
                                                   env.get("LD_LIBRARY_PATH", "")):
        why = f"{rt.check_library} is not on LD_LIBRARY_PATH"
    if why is None:
        return None
    scripts = " && ".join(f"source {script}" for script in rt.env_scripts)
    torch = cell.torch_requirement.removeprefix("torch==")
    return (f"{cell.name}: torch {torch} needs {rt.name} {rt.version} installed and "
            f"sourced: {scripts} ({why}; see docs/devices/xpu.md)")


@dataclass(frozen=True)
class HardwareChoice:
    """Which hardware family and driver stack a cell runs on here, and how that is known."""

    family: str | None = None
    driver: str | None = None
    how: str = ""                        # "declared", "pinned" or "detected" (family)
    detected: tuple[str, ...] = ()       # the families of this host's Intel GPUs
    problem: str | None = None           # one line: a declaration that cannot be right
    note: str = ""                       # e.g. mixed families: none applied

    def env(self, cell: Cell) -> dict[str, str]:
        """The env the family and driver add to ``cell`` (its profile's own values win),
        with ACCELGRID_HARDWARE / ACCELGRID_DRIVER for the records."""
        out: dict[str, str] = {}
        for table, key in ((cell.hardware_env, self.family), (cell.driver_env, self.driver)):
            out.update(table.get(key or "", {}))
        out = {k: v for k, v in out.items() if k not in cell.env}
        if self.family:
            out[contract.HARDWARE] = self.family
        if self.driver:
            out[contract.DRIVER] = self.driver
        return out

    def describe(self) -> str:
        if not self.family and not self.driver:
            return self.note or "hardware not known"
        parts = []
        if self.family:
            parts.append(f"hardware {self.family} ({self.how})")
        if self.driver:
            parts.append(f"driver {self.driver}")
        return ", ".join(parts) + (f"; {self.note}" if self.note else "")


def resolve_hardware(cell: Cell, env: Mapping[str, str] | None = None,
                     root: str | Path | None = None) -> HardwareChoice:
    """The hardware family ``cell`` runs on here: the runner's declaration
    (``ACCELGRID_HARDWARE``), else the cell's pin (an include rule's ``hardware:``), else
    the one family of this host's Intel GPUs; and the driver stack (``ACCELGRID_DRIVER``,
    else the pin). A declaration or pin that is unknown, that contradicts the other, or
    that this host's GPUs contradict is a ``problem``. Devices without hardware families
    (``devices.<d>.hardware``) get an empty choice."""
    if not cell.hardware_env and not cell.driver_env:
        return HardwareChoice()
    env = os.environ if env is None else env
    declared = env.get(contract.HARDWARE) or None
    declared_driver = env.get(contract.DRIVER) or None
    for kind, value, table in (("hardware", declared, cell.hardware_env),
                               ("driver", declared_driver, cell.driver_env)):
        if value and value not in table:
            var = contract.HARDWARE if kind == "hardware" else contract.DRIVER
            return HardwareChoice(problem=(
                f"{cell.name}: {var}={value} is not a {cell.device} {kind} of the matrix "
                f"(known: {', '.join(table) or 'none'})"))
    for kind, value, pin in (("hardware", declared, cell.hardware),
                             ("driver", declared_driver, cell.driver)):
        if value and pin and value != pin:
            return HardwareChoice(problem=(
                f"{cell.name}: the cell is pinned to {kind} {pin}, this runner declares {value}"))
    found = cell.device_type.host_hardware(root)
    detected = tuple(dict.fromkeys(family for family, _ in found))
    discrete_families = {family for family, discrete in found if discrete}
    family, how, note = declared or cell.hardware, "declared" if declared else "pinned", ""
    if family and detected and family not in detected:
        return HardwareChoice(detected=detected, problem=(
            f"{cell.name}: hardware {family} ({how}) but this host's Intel GPUs are "
            f"{', '.join(detected)}"))
    discrete = tuple(f for f in detected if f in discrete_families)
    if not family and len(detected) == 1:
        family, how = detected[0], "detected"
    elif not family and len(discrete) == 1:
        # A dGPU beside an iGPU: torch >= 2.7 drops the iGPU; the dGPU's env applies.
        family, how = discrete[0], "detected"
        note = (f"integrated {', '.join(f for f in detected if f not in discrete_families)} "
                "beside it "
                "not used (torch >= 2.7 drops an integrated GPU when a discrete one is present)")
    elif not family and len(detected) > 1:
        how, note = "", (f"mixed Intel GPU families ({', '.join(detected)}): no family's env "
                         f"applied; declare one with {contract.HARDWARE}")
    return HardwareChoice(family if family in cell.hardware_env else None,
                          declared_driver or cell.driver, how if family else "", detected,
                          None, note)


def device_ids(kind: DeviceType, env: dict[str, str] | None = None,
               python: str | None = None, torch_version: str | None = None) -> list[str]:
    """The ids of ``kind``'s devices usable here (:func:`device_ids_how`)."""
    return device_ids_how(kind, env, python, torch_version)[0]


def device_ids_how(kind: DeviceType, env: dict[str, str] | None = None,
                   python: str | None = None, torch_version: str | None = None
                   ) -> tuple[list[str], str]:
    """The ids of ``kind``'s devices usable here, in the numbering its visibility
    variable uses, and how they are known. ``ACCELGRID_DEVICES=0,2`` picks a subset; an
    already-set visibility variable (``CUDA_VISIBLE_DEVICES`` / ``ZE_AFFINITY_MASK``)
    limits the choice to those; else the device type enumerates them (``host_ids``: xpu
    with the cell env's ``python`` counts in that env)."""
    env = dict(os.environ if env is None else env)
    chosen = env.get(contract.DEVICES)
    if chosen:
        return [x.strip() for x in chosen.split(",") if x.strip()], f"{contract.DEVICES}"
    var = kind.visibility_var
    if var and env.get(var):
        return [x.strip() for x in env[var].split(",") if x.strip()], var
    return kind.host_ids(env, python, torch_version)
