"""The host CPU: always present; its cells hide every accelerator from their tests."""

from __future__ import annotations

import platform
from typing import Any

from .base import DeviceType


def _torch_devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    return [{"index": 0, "name": platform.processor() or platform.machine(),
             "threads": torch.get_num_threads()}], None


DEVICE = DeviceType(
    name="cpu",
    dispatch_key="CPU",
    apis={
        "synchronize": "torch.cpu.synchronize",
        "device_count": "torch.cpu.device_count",
        "is_bf16_supported": lambda: True,
    },
    accelerator=False,
    torch_devices=_torch_devices,
    available=lambda _torch: True,
    collective_backend="gloo",
    source=__name__,
)
