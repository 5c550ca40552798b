"""Benchmarks behind ``accelgrid bench``: library functions, no option parsing.

- :mod:`.overhead`: a warm cell run against bare pytest, and env creation (uv, virtualenv)
- :mod:`.offload`: torchao's CPUOffloadOptimizer on a CUDA/XPU device (memory, step time)
- :mod:`.grid`: building and writing grids for a large synthetic matrix
- :mod:`.ops`: what op capture (``ACCELGRID_CAPTURE_OPS=1``) costs

Each ``run(...)`` prints its progress, writes its JSON/Markdown outputs and returns the
report; invalid arguments raise :class:`~accelgrid.errors.InvalidInput`. The options live
in :mod:`accelgrid.cli.bench`. Submodules are imported on use (``from accelgrid.bench
import grid``), so importing this package costs nothing.
"""

from __future__ import annotations

from pathlib import Path

from ..results import write_json


def write_outputs(out: str | Path, stem: str, report: dict, markdown: str) -> Path:
    """``out/<stem>.json`` (the report, atomically) and ``out/<stem>.md``; returns ``out``."""
    out = Path(out)
    write_json(out / f"{stem}.json", report)   # makes the folder too
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    return out
