"""What a cell records: the env flags (a device's, a profile's) that make a run record more
than outcomes and provenance (:data:`RECORDS`), as `accelgrid plan CELL` prints them
(:func:`records`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import contract
from ..testing.opcapture import flag_on

__all__ = ["ALWAYS_RECORDED", "RECORDS", "records"]


# Env flag (on when "1") -> what a cell with it records, the flags it needs beside it for
# that, and what it does without them. `accelgrid plan CELL` prints :func:`records`.
RECORDS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (contract.CAPTURE_OPS, "aten ops per test and how the device runs each (capture)", (), ""),
    ("PYTORCH_DEBUG_XPU_FALLBACK", "every CPU fallback by op (PYTORCH_DEBUG_XPU_FALLBACK=1)",
     (contract.CAPTURE_OPS,),
     "CPU fallbacks named in the log only (PYTORCH_DEBUG_XPU_FALLBACK=1, no capture)"),
    ("PYTORCH_ENABLE_XPU_FALLBACK",
     "unimplemented ops fall back instead of failing, recorded as missing-but-fell-back",
     (contract.CAPTURE_OPS, "PYTORCH_DEBUG_XPU_FALLBACK"),
     "unimplemented ops fall back instead of failing, not named (that needs capture and "
     "PYTORCH_DEBUG_XPU_FALLBACK=1)"),
    ("PYTORCH_ENABLE_MPS_FALLBACK",
     "unimplemented ops fall back instead of failing, recorded as missing-but-fell-back",
     (contract.CAPTURE_OPS,),
     "unimplemented ops fall back instead of failing, not recorded (that needs capture)"),
    ("IGC_EnableDPEmulation", "outcomes with FP64 emulated in software (IGC_EnableDPEmulation=1)",
     (), ""),
)
ALWAYS_RECORDED = "test outcomes and provenance"


def records(env: Mapping[str, str]) -> list[str]:
    """What a cell with ``env`` (its device and profile flags) records, one item each."""
    on = {k for k, v in env.items() if flag_on(v)}
    out = [ALWAYS_RECORDED]
    for flag, text, needs, without in RECORDS:
        if flag in on:
            out.append(text if set(needs) <= on else without)
    return out
