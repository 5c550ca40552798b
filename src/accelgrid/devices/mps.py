"""Apple silicon GPUs (Metal Performance Shaders): one device, not shared by processes."""

from __future__ import annotations

import platform
import re
from typing import Any

from .base import DeviceType, not_implemented_message

# PyTorch's MPSFallback.mm, with PYTORCH_ENABLE_MPS_FALLBACK=1: one warning per process
# (group 1: the op); without it the op raises "not currently implemented".
FALLBACK_MESSAGES = (
    re.compile(r"The operator '(aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)' is not currently "
               r"supported on the MPS backend and will fall back to run on the CPU\."),
)


def _available(torch: Any) -> bool:
    return bool(torch.backends.mps.is_available())


def _torch_devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    if not _available(torch):
        return [], None
    return [{"index": 0, "name": f"Apple {platform.machine()}"}], platform.mac_ver()[0] or None


DEVICE = DeviceType(
    name="mps",
    dispatch_key="MPS",
    apis={
        "manual_seed": "torch.mps.manual_seed",
        "synchronize": "torch.mps.synchronize",
        "device_count": lambda: 1,
        "memory_allocated": "torch.mps.current_allocated_memory",
        "empty_cache": "torch.mps.empty_cache",
        "Event": "torch.mps.event.Event",
    },
    # No variable hides MPS: a cpu cell on Apple silicon still sees it.
    shared_by_processes=False,   # one device
    flags=re.compile(r"^(PYTORCH_\w*MPS\w*|MTL_\w+)$"),
    fallback_flag="PYTORCH_ENABLE_MPS_FALLBACK",   # MPSFallback.mm
    fallback_messages=FALLBACK_MESSAGES,
    missing_messages=(not_implemented_message("MPS"),),
    torch_devices=_torch_devices,
    available=_available,
    float64=False,   # torch.float64 tensors are refused on the MPS device
    source=__name__,
)
