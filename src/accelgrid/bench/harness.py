"""What every benchmark needs besides its own measurement: stopping on a signal (closing
its results within :data:`STOP_GRACE_S`), the machine a timing was taken on
(:func:`machine`, :func:`load_average`) and its outputs written (:func:`write_outputs`).
The checkout's benchmarks of accelgrid itself use them too (tools/selfbench).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from ..base.jsonio import write_json

# Stopping on a signal lives in base.lifetime (publish uses it too); named here as before.
from ..base.lifetime import STOP_SIGNALS as STOP_SIGNALS
from ..base.lifetime import Stopped as Stopped
from ..base.lifetime import stoppable as stoppable

__all__ = ["STOP_GRACE_S", "STOP_SIGNALS", "Stopped", "load_average", "machine", "stoppable",
           "write_outputs"]

STOP_GRACE_S = 15.0   # a stopped command's time to close its results, then it is killed


def write_outputs(out: str | Path, stem: str, report: dict, markdown: str) -> Path:
    """``out/<stem>.json`` (the report, atomically) and ``out/<stem>.md``; returns ``out``."""
    out = Path(out)
    write_json(out / f"{stem}.json", report)   # makes the folder too
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    return out


def machine() -> dict[str, Any]:
    """What a timing depends on: host, CPUs (and how many this process may use), CPU
    model, memory, OS and Python."""
    model = platform.processor() or platform.machine()
    try:  # Linux names the CPU model here; platform.processor() often says only x86_64
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), model)
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (AttributeError, ValueError, OSError):
        memory = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpus_usable": usable,
            "cpu_model": model, "memory_gib": round(memory, 1) if memory else None,
            "os": platform.platform(terse=True), "machine": platform.machine(),
            "python": f"{platform.python_implementation()} {platform.python_version()}"}


def load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): other work on the machine
    stretches wall times."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None
