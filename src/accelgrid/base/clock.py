"""Timestamps as accelgrid writes them: UTC, ISO 8601 (importable alone: the run's lock
takes one before anything else of accelgrid is loaded, run.headstart.relaunch)."""

from __future__ import annotations

import datetime as _dt


def now() -> str:
    # timezone.utc, not UTC (3.11+): this runs on the cell's Python, which may be older.
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")  # noqa: UP017


def iso(epoch: float) -> str:
    """``epoch`` (seconds) as UTC ISO 8601 to the millisecond: a pass's start."""
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(  # noqa: UP017
        timespec="milliseconds")
