"""Is a device present on this host? Answered from matrix.yaml's ``detect`` rules,
without importing torch (so it is cheap and works before anything is installed).

Rules (all given ones must hold): ``always``; ``system`` / ``machine`` (platform);
``paths_any`` (any glob matches, e.g. ``/dev/dri/renderD*``); ``commands_any`` (any
command on PATH that runs successfully, e.g. ``nvidia-smi``).
"""

from __future__ import annotations

import glob
import platform
import shutil
import subprocess
from typing import Any


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
