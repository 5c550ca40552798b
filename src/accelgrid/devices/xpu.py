"""Intel GPUs (XPU: SYCL / Level Zero)."""

from __future__ import annotations

import re
from typing import Any

from .base import DeviceType


def _torch_devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return [], None
    found, driver = [], None
    for i in range(torch.xpu.device_count()):
        props = torch.xpu.get_device_properties(i)
        found.append({"index": i, "name": props.name,
                      "memory_bytes": getattr(props, "total_memory", None)})
        driver = getattr(props, "driver_version", driver)
    return found, driver


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
    runtime_attr="xpu",
    torch_devices=_torch_devices,
    # xccl: torch.distributed's XPU backend, in the builds that have it.
    collective_backend="xccl",
    collective_check="is_xccl_available",
    offload=True,
    container_args={"default": ("--device", "/dev/dri")},
    source=__name__,
)
