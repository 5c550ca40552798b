"""Is a device present on this host? Answered from matrix.yaml's ``detect`` rules,
without importing torch (so it is cheap and works before anything is installed).

Rules (all given ones must hold): ``always``; ``system`` / ``machine`` (platform);
``paths_any`` (any glob matches, e.g. ``/dev/dri/renderD*``); ``commands_any`` (any
command on PATH that runs successfully, e.g. ``nvidia-smi``).
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
from typing import Any

from . import contract


def _command_works(command: str) -> bool:
    exe = shutil.which(command)
    if not exe:
        return False
    try:
        return subprocess.run([exe], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def absent_reason(device: str, rules: dict[str, Any]) -> str | None:
    """None when the device is present, else a one-line reason it is not."""
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
    return None


def _alias(machine: str) -> str:
    return {"arm64": "aarch64", "aarch64": "arm64", "x64": "x86_64"}.get(machine.lower(), "")


def present_devices(devices: dict[str, Any]) -> list[str]:
    """Names of the matrix's devices present here (``devices``: name -> Device)."""
    return [name for name, dev in devices.items() if absent_reason(name, dev.detect) is None]


# How a process is pinned to some of the host's devices (set before torch is imported).
VISIBILITY_VAR = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


def _nvidia_ids() -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _xpu_ids() -> list[str]:
    exe = shutil.which("sycl-ls")
    if exe:
        try:
            out = subprocess.run([exe], capture_output=True, text=True, timeout=60,
                                 check=False).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        gpus = [ln for ln in out.splitlines() if "level_zero:gpu" in ln]
        if gpus:
            return [str(i) for i in range(len(gpus))]
    return [str(i) for i in range(len(glob.glob("/dev/dri/renderD*")))]


# device -> how to enumerate its devices on this host without importing torch.
DEVICE_IDS = {"cuda": _nvidia_ids, "xpu": _xpu_ids, "default": lambda: []}


def device_ids(device: str, env: dict[str, str] | None = None) -> list[str]:
    """The ids of ``device``'s devices usable here, in the numbering its visibility
    variable uses. ``ACCELGRID_DEVICES=0,2`` picks a subset; an already-set
    ``CUDA_VISIBLE_DEVICES`` / ``ZE_AFFINITY_MASK`` limits the choice to those."""
    env = dict(os.environ if env is None else env)
    chosen = env.get(contract.DEVICES)
    if chosen:
        return [x.strip() for x in chosen.split(",") if x.strip()]
    var = VISIBILITY_VAR.get(device)
    if var and env.get(var):
        return [x.strip() for x in env[var].split(",") if x.strip()]
    return DEVICE_IDS.get(device, DEVICE_IDS["default"])()
