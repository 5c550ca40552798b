"""Env-flag rules (accelgrid.config.flags): which values a profile's flags may hold."""

from __future__ import annotations

from accelgrid.config import flags


def test_integer_flags_need_0_or_1() -> None:
    assert flags.flag_value_problem("PYTORCH_DEBUG_XPU_FALLBACK", "1") is None
    assert flags.flag_value_problem("IGC_EnableDPEmulation", "0") is None
    msg = flags.flag_value_problem("PYTORCH_ENABLE_XPU_FALLBACK", "true")
    assert msg and "use 0 or 1, not 'true'" in msg
    assert flags.flag_value_problem("ZE_AFFINITY_MASK", "0.1") is None
