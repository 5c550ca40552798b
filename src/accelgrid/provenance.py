"""Provenance of a cell run (``env.json``): what ran, on what, with which flags.

Runs inside the cell's interpreter (stdlib only, torch imported lazily), after the
profile's flags are in the environment.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from . import environment

PACKAGES = (
    "torch", "torchao", "transformers", "accelerate", "torchvision", "triton",
    "pytorch-triton-xpu", "intel-sycl-rt", "numpy", "scipy", "pillow", "tokenizers",
    "pytest", "pytest-xdist", "pytest-timeout",
)


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def torch_facts(device_type: str) -> dict[str, Any]:
    """torch's version and build, and the devices of ``device_type`` it sees."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is itself a fact
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda_runtime": getattr(torch.version, "cuda", None),
        "xpu_runtime": getattr(torch.version, "xpu", None),
        "debug": getattr(torch.version, "debug", None),
    }
    devices: list[dict[str, Any]] = []
    driver = None
    try:
        if device_type == "cuda" and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                devices.append({"index": i, "name": props.name,
                                "memory_bytes": props.total_memory,
                                "capability": f"{props.major}.{props.minor}"})
            driver = _nvidia_driver()
        elif device_type == "xpu" and hasattr(torch, "xpu") and torch.xpu.is_available():
            for i in range(torch.xpu.device_count()):
                props = torch.xpu.get_device_properties(i)
                devices.append({"index": i, "name": props.name,
                                "memory_bytes": getattr(props, "total_memory", None)})
                driver = getattr(props, "driver_version", driver)
        elif device_type == "mps" and torch.backends.mps.is_available():
            devices.append({"index": 0, "name": f"Apple {platform.machine()}"})
            driver = platform.mac_ver()[0] or None
        elif device_type == "cpu":
            devices.append({"index": 0, "name": platform.processor() or platform.machine(),
                            "threads": torch.get_num_threads()})
    except Exception as exc:  # noqa: BLE001 - record, don't fail the run over provenance
        facts["device_error"] = f"{type(exc).__name__}: {exc}"
    facts["device_count"] = len(devices)
    facts["devices"] = devices
    facts["driver"] = driver
    return facts


def collect(cell: str, device_type: str, with_torch: bool = True) -> dict[str, Any]:
    """Everything env.json records at the start of a run (``torch`` facts only with
    ``with_torch``: importing torch takes seconds, callers may add them later)."""
    return {
        "cell": cell,
        "device_type": device_type,
        "start": now(),
        "end": None,
        "status": "running",
        "torch": torch_facts(device_type) if with_torch else {"pending": True},
        "python": {"version": platform.python_version(), "implementation":
                   platform.python_implementation(), "executable": sys.executable},
        "packages": package_versions(),
        "env": environment.recorded_env(),
        "host": {"name": socket.gethostname(), "system": platform.system(),
                 "release": platform.release(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "project": {"commit": os.environ.get("ACCELGRID_COMMIT"),
                    "dirty": os.environ.get("ACCELGRID_DIRTY") == "1"},
    }
