"""Provenance of a cell run (``env.json``): what ran, on what, with which flags.

Its "env" holds the variables under :data:`RECORDED_PREFIXES`, with their values only
where the allowlist says so (:func:`value_recorded`), all of them redacted
(:mod:`accelgrid.base.redact`); its "ci" the CI run's variables (:data:`CI_RUN_VARS`).
Runs inside the cell's interpreter (stdlib only, torch imported lazily), after the
profile's flags are in the environment.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import devices
from ..base import contract
from ..base.clock import iso as iso  # re-exported: provenance.iso and .now, as ever
from ..base.clock import now as now
from ..base.redact import REDACTED, redact
from ..base.torchflags import INTEGER_FLAGS
from ..base.versions import installed_version
from . import plan

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


# --- env.json's "env": which variables, and which values (the allowlist) ---------------
# Env vars worth recording in provenance (the flags that change what torch does).
RECORDED_PREFIXES = (
    contract.PREFIX, "PYTORCH_", "TORCH_", "CUDA_", "CUBLAS_", "NCCL_", "ZE_", "SYCL_", "IGC_",
    "ONEAPI_", "OverrideDefault", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "KMP_", "PIP_", "UV_",
)
# Variables under a recorded prefix whose values env.json records whoever set them: which
# devices a test process sees, its threads, the offline switches, the index strategy. Any
# other one the cell did not set is recorded by name only (a host's HF_HUB_BEARER or
# PYTORCH_NOTIFY webhook is a credential no name or shape rule can know).
RECORDED_VALUES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "ZE_AFFINITY_MASK",
    "ZE_FLAT_DEVICE_HIERARCHY", "ONEAPI_DEVICE_SELECTOR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
    "UV_INDEX_STRATEGY", "UV_COMPILE_BYTECODE", "UV_LINK_MODE", "TORCH_SHOW_CPP_STACKTRACES",
    *INTEGER_FLAGS,
})
# accelgrid's own variables (every ACCELGRID_* name the contract defines): the runner's
# and the user's settings, recorded with their values (a URL's password still goes).
OWN_VARS = frozenset(v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)
                     and v.startswith(contract.PREFIX) and v != contract.PREFIX)
# Not inputs of the cell: the recorder's pid marks its own process tree (nested pytests
# record nothing) and differs every run; the list of what the cell set is said by the values.
_NOT_RECORDED = frozenset({contract.RECORDER_PID, contract.SET_VARS})


def set_by_cell(env: Mapping[str, str]) -> frozenset[str]:
    """The names ``env``'s :data:`~accelgrid.base.contract.SET_VARS` lists (the runner's
    :func:`accelgrid.run.cellenv.cell_env` sets it)."""
    return frozenset(n.strip() for n in env.get(contract.SET_VARS, "").split(",") if n.strip())


def value_recorded(name: str, cell_set: frozenset[str] = frozenset()) -> bool:
    """Whether env.json records ``name``'s value (else its name only): the cell set it
    (``cell_set``), it is accelgrid's own, on :data:`RECORDED_VALUES`, or a flag of a device
    type (its visibility and hiding variables, its ``flags``). A secret-looking name or
    value is redacted all the same (:func:`~accelgrid.base.redact.redact`)."""
    if name in cell_set or name in OWN_VARS or name in RECORDED_VALUES:
        return True
    return any(name == kind.visibility_var or name in kind.hide or kind.reads_flag(name)
               for kind in devices.TYPES.values())


def recorded_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables under :data:`RECORDED_PREFIXES` in ``env`` (default: os.environ):
    the values of those :func:`value_recorded` allows, :data:`REDACTED` for the others;
    then :func:`~accelgrid.base.redact.redact` (by name and by shape) over all of them."""
    env = os.environ if env is None else env
    cell_set = set_by_cell(env)
    picked = {k: (v if value_recorded(k, cell_set) else REDACTED) for k, v in env.items()
              if k.startswith(RECORDED_PREFIXES) and k not in _NOT_RECORDED}
    return dict(sorted(redact(picked).items()))


# --- env.json's "ci": the CI run ------------------------------------------------------
# The CI run a cell ran in, recorded in env.json's "ci" (not in "env": they change every
# run, and "env" is an input of the history's flaky rule). GitHub Actions sets them on every
# job (docs.github.com/en/actions/reference/variables-reference); the site's runs x cells
# page links each result to its run with them (ci_run_url).
CI_RUN_VARS = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT",
               "RUNNER_NAME")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


def ci_run(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`CI_RUN_VARS` set in ``env`` (default: os.environ), redacted as any."""
    env = os.environ if env is None else env
    return redact({k: env[k] for k in CI_RUN_VARS if env.get(k)})


def ci_run_url(ci: Mapping[str, Any] | None) -> str | None:
    """The CI run's page (``<server>/<owner>/<repo>/actions/runs/<id>[/attempts/<n>]``) from
    env.json's "ci", or None when it names none or a part is not what GitHub sets (an
    http(s) server without credentials, owner/name, numbers): the value becomes a link."""
    ci = ci or {}
    server = str(ci.get("GITHUB_SERVER_URL") or "").rstrip("/")
    repo, run = str(ci.get("GITHUB_REPOSITORY") or ""), str(ci.get("GITHUB_RUN_ID") or "")
    attempt = str(ci.get("GITHUB_RUN_ATTEMPT") or "")
    parts = urllib.parse.urlsplit(server)
    if (parts.scheme not in ("https", "http") or not parts.hostname or parts.username
            or parts.password or parts.query or parts.fragment
            or not _REPOSITORY.fullmatch(repo) or ".." in repo or not run.isdigit()
            or (attempt and not attempt.isdigit())):
        return None
    return (f"{server}/{repo}/actions/runs/{run}"
            + (f"/attempts/{attempt}" if attempt else ""))


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
        "env": recorded_env(),
        "host": {"name": socket.gethostname(), "system": platform.system(),
                 "release": platform.release(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "project": {"commit": os.environ.get(contract.COMMIT),
                    "dirty": os.environ.get(contract.DIRTY) == "1"},
        "ci": ci_run(),
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

