"""Intel GPUs (XPU: SYCL / Level Zero): the device type, how many this host has without
torch (sysfs, sycl-ls, the cell env's own torch), and what its runtime prints when ops
fall back to the CPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import HOST_TOOLS, DeviceType, not_implemented_message, tool_lines
from .pci import DISCRETE, PciGpu, intel_gpus, wsl2_line

# From torch 2.7 torch.xpu drops integrated GPUs when a discrete one is present
# (pytorch/pytorch#144378), after Level Zero enumerated them.
DROPS_INTEGRATED_FROM = (2, 7)
FLAT_HIERARCHY = "ZE_FLAT_DEVICE_HIERARCHY"

# Exact upstream texts (torch-xpu-ops src/ATen/native/xpu/XPUFallback.template), parsed by
# accelgrid.testing.opcapture. The once-per-process notice (torch >= 2.5; silent on 2.4)
# prints "happends" and a trailing space.
FALLBACK_NOTICE = (
    "Aten Op fallback from XPU to CPU happends. This may have performance implications. "
    "If need debug the fallback ops please set environment variable "
    "`PYTORCH_DEBUG_XPU_FALLBACK=1` "
)
# With PYTORCH_DEBUG_XPU_FALLBACK=1, once per call (no closing quote after the op); and an
# op forced to fall back by PYTORCH_XPU_FALLBACK_OP (named as written there).
FALLBACK_MESSAGES = (
    re.compile(r"The operator '(aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?) on the XPU backend "
               r"is falling back to run on the CPU\."),
    re.compile(r"The operator '([A-Za-z0-9_:.]+)' registered to be forced to fallback to CPU\."),
)


def _torch_devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    if not _available(torch):
        return [], None
    found, driver = [], None
    for i in range(torch.xpu.device_count()):
        props = torch.xpu.get_device_properties(i)
        found.append({"index": i, "name": props.name,
                      "memory_bytes": getattr(props, "total_memory", None)})
        driver = getattr(props, "driver_version", driver)
    return found, driver


def _available(torch: Any) -> bool:
    return bool(hasattr(torch, "xpu") and torch.xpu.is_available())


@dataclass(frozen=True)
class XpuDevice:
    """One device as Level Zero enumerates it, and whether torch uses it."""

    index: int           # Level Zero's number (ZE_AFFINITY_MASK's)
    gpu: PciGpu
    tile: int | None     # the stack, where FLAT makes each stack a device
    used: bool           # torch.xpu counts it
    why_not: str = ""


def _version_tuple(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m[1]), int(m[2])) if m else None


def xpu_devices(root: str | Path | None = None, env: Mapping[str, str] | None = None,
                torch_version: str | None = None) -> list[XpuDevice]:
    """The devices torch.xpu would see here, from sysfs: with ``ZE_FLAT_DEVICE_HIERARCHY``
    FLAT (Level Zero's default, and matrix.yaml's) each stack of a multi-stack card (a
    2-stack Max 1550) is a device, with COMPOSITE / COMBINED each card is one; from torch
    2.7 (``torch_version``; None: the newest) integrated GPUs are dropped when a discrete
    one is present. In a cell, ``torch.xpu.device_count()`` is the authority: this is what
    the host says before torch is installed."""
    env = os.environ if env is None else env
    flat = (env.get(FLAT_HIERARCHY) or "FLAT").strip().upper() == "FLAT"
    gpus = intel_gpus(root)
    version = _version_tuple(torch_version)
    drop = any(g.discrete for g in gpus) and (version is None or version >= DROPS_INTEGRATED_FROM)
    out: list[XpuDevice] = []
    for g in gpus:
        for tile in (range(g.tiles) if flat and g.tiles > 1 else [None]):
            used = g.discrete or not drop
            why = "" if used else "integrated GPU beside a discrete one (torch >= 2.7)"
            out.append(XpuDevice(len(out), g, tile, used, why))
    return out


def sysfs_ids() -> list[str]:
    """Level Zero's numbering (ZE_AFFINITY_MASK's): every stack under FLAT; an integrated
    GPU beside a discrete one is left out (torch >= 2.7 would not use it)."""
    return [str(d.index) for d in xpu_devices() if d.used]


def inventory(root: str | Path | None = None, tools: bool = True) -> dict[str, Any]:
    """What this host has for xpu cells: its Intel GPUs from sysfs (node, PCI id, family,
    name), and, when installed, what ``sycl-ls`` and ``xpu-smi discovery`` say."""
    report: dict[str, Any] = {"gpus": [g.as_dict() for g in intel_gpus(root)]}
    found = xpu_devices(root)
    report["devices"] = {"count": sum(1 for d in found if d.used),
                         FLAT_HIERARCHY: os.environ.get(FLAT_HIERARCHY) or "FLAT (default)",
                         "not_used": [f"{d.gpu.node}: {d.why_not}" for d in found
                                      if not d.used]}
    wsl = wsl2_line(root)
    if wsl:
        report["note"] = wsl
    if tools:
        report["sycl-ls"] = tool_lines(["sycl-ls"], "level_zero")
        report["xpu-smi"] = tool_lines(["xpu-smi", "discovery"])
    return report


def hardware(root: str | Path | None = None) -> list[tuple[str, bool]]:
    """The family of each of this host's Intel GPUs of a known family, and whether it is
    discrete."""
    return [(g.family, g.family in DISCRETE) for g in intel_gpus(root) if g.family]


# What the cell's own torch counts, run with the cell's env (its ZE_FLAT_DEVICE_HIERARCHY,
# ONEAPI_DEVICE_SELECTOR...): the authority for how many devices its tests see. A torch
# built without XPU (torch.xpu._is_compiled(), in every series from 2.4) cannot say: it
# prints no number and the next source answers.
TORCH_XPU_COUNT = ("import torch; print(torch.xpu.device_count() if torch.xpu._is_compiled()"
                   " else 'torch built without XPU')")
# One sycl-ls line per device, "[backend:type][backend:N] platform, device version [driver]"
# (e.g. "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) A770
# Graphics 1.3 [1.3.29735]", intel/intel-extension-for-pytorch#702); Level Zero GPUs only,
# as torch enumerates them.
_SYCL_LS_L0_GPU = re.compile(r"^\s*\[(?:ext_oneapi_)?level_zero:gpu[\]:]")


def sycl_ls_gpus(text: str) -> list[str]:
    """The Level Zero GPU lines of ``sycl-ls`` output (OpenCL and CPU lines left out)."""
    return [ln.strip() for ln in text.splitlines() if _SYCL_LS_L0_GPU.match(ln)]


def _run_count(cmd: list[str], env: Mapping[str, str]) -> tuple[int | None, str]:
    """(stdout's last line as an int, or None; why not) of ``cmd`` run with ``env``."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                              env=dict(env), check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{cmd[0]} did not run: {exc}"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines or not lines[-1].strip().isdigit():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        last = lines[-1][:200] if lines and not proc.returncode else last
        return None, f"exit {proc.returncode}: {last}"
    return int(lines[-1]), ""


def cell_xpu_ids(python: str | None, env: Mapping[str, str] | None = None,
                 root: str | Path | None = None, torch_version: str | None = None
                 ) -> tuple[list[str], str]:
    """The xpu device ids a cell's tests will see, and one line saying how that is known:
    ``torch.xpu.device_count()`` run by the cell env's ``python`` with the cell's ``env``;
    else the Level Zero GPUs ``sycl-ls`` lists in that env (less the integrated ones
    torch >= 2.7 drops beside a discrete GPU, :func:`xpu_devices`); else sysfs alone.
    Where the count agrees with sysfs, sysfs's Level Zero numbering is kept (an iGPU's
    index stays skipped); where it differs, the count wins (ids 0..N-1), said so."""
    env = dict(os.environ if env is None else env)
    sysfs = xpu_devices(root, env, torch_version)
    used = [str(d.index) for d in sysfs if d.used]
    count, how = None, ""
    if python:
        count, why = _run_count([str(python), "-c", TORCH_XPU_COUNT], env)
        how = (f"torch.xpu.device_count() in the cell env: {count}" if count is not None
               else f"torch.xpu.device_count() in the cell env: no count ({why})")
    if count is None:
        exe = shutil.which("sycl-ls", path=env.get("PATH"))
        if exe:
            try:
                out = subprocess.run([exe], capture_output=True, text=True, timeout=60,
                                     env=env, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                out = None
            if out is not None:
                dropped = sum(1 for d in sysfs if not d.used)
                count = max(len(sycl_ls_gpus(out)) - dropped, 0)
                how = ((how + "; " if how else "") + f"sycl-ls: {len(sycl_ls_gpus(out))} "
                       "Level Zero GPUs" + (f", {dropped} integrated dropped" if dropped
                                            else ""))
    if count is None:
        return used, ((how + "; " if how else "") + f"sysfs: {len(used)} devices")
    if count == len(used):
        return used, how + " (sysfs agrees)"
    return [str(i) for i in range(count)], how + f" (sysfs sees {len(used)}: the count wins)"


def host_ids(env: Mapping[str, str], python: str | None, torch_version: str | None
             ) -> tuple[list[str], str]:
    """With the cell env's ``python``: what that env counts (:func:`cell_xpu_ids`); else
    sysfs (:func:`sysfs_ids`)."""
    if python:
        return cell_xpu_ids(python, env, torch_version=torch_version)
    return sysfs_ids(), HOST_TOOLS


DEVICE = DeviceType(
    name="xpu",
    dispatch_key="XPU",
    apis={
        "manual_seed": "torch.xpu.manual_seed",
        "synchronize": "torch.xpu.synchronize",
        "device_count": "torch.xpu.device_count",
        "device_name": "torch.xpu.get_device_name",
        # torch.xpu.memory_allocated is missing on torch 2.4 (pytorch/pytorch#127929).
        "memory_allocated": "torch.xpu.memory_allocated",
        "max_memory_allocated": "torch.xpu.max_memory_allocated",
        "reset_peak_memory_stats": "torch.xpu.reset_peak_memory_stats",
        "empty_cache": "torch.xpu.empty_cache",
        "Stream": "torch.xpu.Stream",
        "Event": "torch.xpu.Event",
        "is_bf16_supported": "torch.xpu.is_bf16_supported",
    },
    visibility_var="ZE_AFFINITY_MASK",   # Level Zero's numbering
    # torch enumerates Level Zero GPUs only (c10/xpu/XPUFunctions.cpp), and a discarding
    # ONEAPI_DEVICE_SELECTOR filter drops them all (an empty ZE_AFFINITY_MASK means "all").
    hide={"ONEAPI_DEVICE_SELECTOR": "!level_zero:gpu"},
    shared_by_processes=True,   # time-shared between processes
    flags=re.compile(r"^(PYTORCH_\w*XPU\w*|ZE_\w+|IGC_\w+|SYCL_\w+|"
                     r"OverrideDefaultFP64Settings|NEOReadDebugKeys)$"),
    # XPUFallback.template: the boxed TORCH_LIBRARY_IMPL(_, XPU, m) fallback.
    fallback_flag="PYTORCH_ENABLE_XPU_FALLBACK",
    fallback_notice=FALLBACK_NOTICE,
    fallback_messages=FALLBACK_MESSAGES,
    missing_messages=(not_implemented_message("XPU"),),
    runtime_attr="xpu",
    torch_devices=_torch_devices,
    available=_available,
    host_ids=host_ids,
    host_hardware=hardware,
    host_inventory=inventory,
    # xccl: torch.distributed's XPU backend, in the builds that have it.
    collective_backend="xccl",
    collective_check="is_xccl_available",
    offload=True,
    container_args={"default": ("--device", "/dev/dri")},
    source=__name__,
)
