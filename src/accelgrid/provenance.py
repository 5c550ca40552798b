"""Provenance of a cell run (``env.json``): what ran, on what, with which flags.

Runs inside the cell's interpreter (stdlib only, torch imported lazily), after the
profile's flags are in the environment.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

from . import contract, environment

PACKAGES = (
    "torch", "torchao", "transformers", "accelerate", "torchvision", "triton",
    "pytorch-triton-xpu", "intel-sycl-rt", "numpy", "scipy", "pillow", "tokenizers",
    "pytest", "pytest-xdist", "pytest-timeout",
)


def now() -> str:
    # timezone.utc, not UTC (3.11+): this runs on the cell's Python, which may be older.
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")  # noqa: UP017


def iso(epoch: float) -> str:
    """``epoch`` (seconds) as UTC ISO 8601 to the millisecond: a pass's start."""
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(  # noqa: UP017
        timespec="milliseconds")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


NVIDIA_DRIVER_PROC = "/proc/driver/nvidia/version"
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." (or "... Open Kernel
# Module for x86_64  580.159.04 ...").
_NVRM_VERSION = re.compile(r"^NVRM version:.*?Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\s",
                           re.MULTILINE)


def _nvidia_driver(proc_file: str = NVIDIA_DRIVER_PROC) -> str | None:
    """The NVIDIA kernel driver's version: from the kernel's own file (no process), else
    from nvidia-smi, whose NVML start-up takes up to seconds on a multi-GPU host and
    every test process of a run would pay it at once."""
    try:
        with open(proc_file, encoding="utf-8", errors="replace") as fh:
            found = _NVRM_VERSION.search(fh.read(4096))
        if found:
            return found.group(1)
    except OSError:
        pass
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
    """Everything env.json records at the start of a run. Without ``with_torch`` the
    ``torch`` section is left pending: the test processes, which import torch anyway,
    report it (:func:`worker_torch_report`) and it is merged at the end."""
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
        "project": {"commit": os.environ.get(contract.COMMIT),
                    "dirty": os.environ.get(contract.DIRTY) == "1"},
    }


TORCH_REPORT_GLOB = "torch-*.json"


def worker_torch_report(device_type: str) -> dict[str, Any]:
    """torch facts as one test process sees them; a pinned worker notes its device index
    (it sees one device, numbered 0 in its own view)."""
    facts = torch_facts(device_type)
    facts["pinned_index"] = os.environ.get(contract.DEVICE_INDEX)
    return facts


def merge_torch_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``torch`` section from every test process's report: the build facts of the
    first, and the union of the devices they saw, in the host's numbering."""
    if not reports:
        return {"pending": True}
    merged = {k: v for k, v in reports[0].items() if k not in ("devices", "pinned_index")}
    devices: dict[Any, dict[str, Any]] = {}
    for report in reports:
        # The host indices of the devices this process saw, in its own order (its view
        # numbers them 0, 1, ...): "1" for a pinned worker, "1,3" for the all-devices pass
        # of a run on a chosen subset.
        pinned = report.get("pinned_index")
        host = str(pinned).split(",") if pinned is not None else []
        seen = report.get("devices") or []
        for dev in seen:
            local = dev.get("index")
            index = (host[local] if len(host) == len(seen) and isinstance(local, int)
                     and 0 <= local < len(host) else local)
            if len(host) == 1 and len(seen) == 1:
                index = pinned
            devices.setdefault(str(index), {**dev, "index": index})
        merged["driver"] = merged.get("driver") or report.get("driver")
    merged["devices"] = sorted(devices.values(), key=lambda d: str(d["index"]))
    merged["device_count"] = len(merged["devices"])
    return merged
