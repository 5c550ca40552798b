"""NVIDIA GPUs (CUDA)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from .base import HOST_TOOLS, DeviceType, not_implemented_message, tool_lines

DRIVER_PROC = "/proc/driver/nvidia/version"
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." (or "... Open Kernel
# Module for x86_64  580.159.04 ...").
_NVRM_VERSION = re.compile(r"^NVRM version:.*?Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\s",
                           re.MULTILINE)


def driver_version(proc_file: str = DRIVER_PROC) -> str | None:
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


def _available(torch: Any) -> bool:
    return bool(torch.cuda.is_available())


def _torch_devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    if not _available(torch):
        return [], None
    found = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        found.append({"index": i, "name": props.name, "memory_bytes": props.total_memory,
                      "capability": f"{props.major}.{props.minor}"})
    return found, driver_version()


def nvidia_ids() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists, numbered as CUDA_VISIBLE_DEVICES counts them."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def host_ids(_env: Mapping[str, str], _python: str | None, _torch_version: str | None
             ) -> tuple[list[str], str]:
    return nvidia_ids(), HOST_TOOLS


def memory_gib() -> list[float]:
    """Each GPU's memory in GiB, as nvidia-smi reports it (MiB)."""
    lines = tool_lines(["nvidia-smi", "--query-gpu=memory.total",
                        "--format=csv,noheader,nounits"])
    try:
        return [round(float(x) / 1024, 1) for x in lines]
    except ValueError:
        return []


DEVICE = DeviceType(
    name="cuda",
    dispatch_key="CUDA",
    apis={
        "manual_seed": "torch.cuda.manual_seed",
        "synchronize": "torch.cuda.synchronize",
        "device_count": "torch.cuda.device_count",
        "device_name": "torch.cuda.get_device_name",
        "memory_allocated": "torch.cuda.memory_allocated",
        "max_memory_allocated": "torch.cuda.max_memory_allocated",
        "reset_peak_memory_stats": "torch.cuda.reset_peak_memory_stats",
        "empty_cache": "torch.cuda.empty_cache",
        "Stream": "torch.cuda.Stream",
        "Event": "torch.cuda.Event",
        "is_bf16_supported": "torch.cuda.is_bf16_supported",
    },
    visibility_var="CUDA_VISIBLE_DEVICES",
    hide={"CUDA_VISIBLE_DEVICES": ""},   # empty: no GPU
    # Time-shared between processes; a GPU set to an exclusive compute mode is not
    # (ACCELGRID_SERIAL_PASSES=1 there).
    shared_by_processes=True,
    flags=re.compile(r"^(PYTORCH_\w*CUDA\w*|CUBLAS_\w+|CUDNN_\w+)$"),
    missing_messages=(not_implemented_message("CUDA"),),
    runtime_attr="cuda",
    torch_devices=_torch_devices,
    available=_available,
    host_ids=host_ids,
    host_memory_gib=memory_gib,
    collective_backend="nccl",
    offload=True,
    # docker: the NVIDIA runtime hook; podman/buildah: CDI (nvidia-ctk cdi generate).
    container_args={"docker": ("--gpus", "all"), "default": ("--device", "nvidia.com/gpu=all")},
    source=__name__,
)
