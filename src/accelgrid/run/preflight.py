"""Can this cell run here: the interpreter's torch, the device, its runtime and
hardware, the registry.
"""

from __future__ import annotations

import subprocess

from ..matrix import Cell
from ..versions import version_key


def installed_version(python: str, package: str = "torch") -> str | None:
    """``package``'s version in ``python``'s environment, without importing it."""
    code = ("import importlib.metadata as m, sys\n"
            f"try: print(m.version({package!r}))\n"
            "except m.PackageNotFoundError: sys.exit(3)\n")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def torch_mismatch(cell: Cell, python: str) -> str | None:
    """Why ``python``'s torch cannot run ``cell`` (wrong or missing), or None."""
    version = installed_version(python)
    if version is None:
        return f"{cell.name}: torch is not installed for {python}"
    if version_key(version).release[:2] != version_key(cell.torch).release[:2]:
        return (f"{cell.name}: {python} has torch {version}, the cell needs torch "
                f"{cell.torch}.x (pin {cell.torch_requirement})")
    return None
