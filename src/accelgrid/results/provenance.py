"""Provenance of a cell run (``env.json``): what ran, on what, with which flags.

Runs inside the cell's interpreter (stdlib only, torch imported lazily), after the
profile's flags are in the environment.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import devices
from ..base import contract
from ..base.clock import iso as iso  # re-exported: provenance.iso and .now, as ever
from ..base.clock import now as now
from ..base.versions import installed_version
from . import environment, plan

PACKAGES = (
    "torch", "torchao", "transformers", "accelerate", "torchvision", "triton",
    "pytorch-triton-xpu", "intel-sycl-rt", "numpy", "scipy", "pillow", "tokenizers",
    "pytest", "pytest-xdist", "pytest-timeout",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    return {name: found for name in names if (found := installed_version(name)) is not None}


def torch_facts(device_type: str) -> dict[str, Any]:
    """torch's version and build, and the devices of ``device_type`` it sees."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is itself a fact
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        # torch.version.cuda / .xpu: the runtime the build is for (device modules' runtime_attr)
        **{f"{d.runtime_attr}_runtime": getattr(torch.version, d.runtime_attr, None)
           for d in devices.TYPES.values() if d.runtime_attr},
        "debug": getattr(torch.version, "debug", None),
    }
    found: list[dict[str, Any]] = []
    driver = None
    try:
        kind = devices.find(device_type)
        if kind is not None:
            found, driver = kind.torch_devices(torch)
    except Exception as exc:  # noqa: BLE001 - record, don't fail the run over provenance
        facts["device_error"] = f"{type(exc).__name__}: {exc}"
    facts["device_count"] = len(found)
    facts["devices"] = found
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
        # The cell's pinned packages too (results.plan: the names the runner gave).
        "packages": package_versions(tuple(dict.fromkeys((*PACKAGES, *plan.pinned_names())))),
        "env": environment.recorded_env(),
        "host": {"name": socket.gethostname(), "system": platform.system(),
                 "release": platform.release(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "project": {"commit": os.environ.get(contract.COMMIT),
                    "dirty": os.environ.get(contract.DIRTY) == "1"},
        "ci": environment.ci_run(),
    }


TORCH_REPORT_GLOB = "torch-*.json"


def worker_torch_report(device_type: str, imported: bool = True) -> dict[str, Any]:
    """torch facts as one test process sees them; a pinned worker notes its device index
    (it sees one device, numbered 0 in its own view). Not ``imported``: the process's
    tests have not imported torch, and importing it only for this report would cost
    seconds of CPU per process (most of a small cell run: docs/design/testing.md), so the report
    holds the installed version from the package's metadata alone."""
    if imported:
        facts = torch_facts(device_type)
    else:
        version = installed_version("torch")
        facts = ({"version": version, "imported": False} if version is not None
                 else {"error": "torch is not installed", "imported": False})
    facts["pinned_index"] = os.environ.get(contract.DEVICE_INDEX)
    return facts


def merge_torch_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``torch`` section from every test process's report: the build facts of the
    first, and the union of the devices they saw, in the host's numbering."""
    if not reports:
        return {"pending": True}
    # A process that imported torch knows its build and devices; one whose tests did not,
    # only the version: the build facts come from the first that did.
    reports = sorted(reports, key=lambda r: r.get("imported") is False)
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


def project_commit(root: Path) -> tuple[str | None, bool]:
    """HEAD of the project and whether the tree has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=False)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, False
    if head.returncode != 0:
        return None, False
    return head.stdout.strip(), bool(status.stdout.strip())

