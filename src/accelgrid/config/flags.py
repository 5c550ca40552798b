"""Env-flag rules: which values a profile's flags may hold, and which device reads a flag.

Flags such as ``PYTORCH_DEBUG_XPU_FALLBACK`` are read by torch as integers at import
time; anything but ``0``/``1`` can break ``import torch``, so the matrix checks them up
front (and refuse a flag set for a device whose runtime never reads it).
"""

from __future__ import annotations

from .. import devices
from ..base.torchflags import INTEGER_FLAGS


def flag_value_problem(name: str, value: str) -> str | None:
    """Why ``value`` is not acceptable for env var ``name``, or None."""
    if "\x00" in value:
        return f"{name} contains a NUL character, which no environment variable can hold"
    if name in INTEGER_FLAGS and value not in ("0", "1"):
        return (
            f"{name} is read by torch as an integer when it loads; "
            f"use 0 or 1, not {value!r}"
        )
    return None


# Flags that only one device's runtime reads (each device module's ``flags``): set for
# another device they do nothing, which makes a cell claim a configuration it never had.


def flag_device(name: str) -> str | None:
    """The device whose runtime reads env var ``name`` (``xpu`` for ZE_/IGC_/SYCL_ and
    PYTORCH_*XPU*, ``mps`` for PYTORCH_*MPS*, ``cuda`` for PYTORCH_*CUDA*/CUBLAS_/CUDNN_),
    or None for a flag every device may use."""
    for kind in devices.TYPES.values():
        if kind.reads_flag(name):
            return kind.name
    return None
