"""Op coverage: a cell's ops (``ops.json``'s content) and the op x cell view.

    aggregate.py       one cell's captured ops (:func:`aggregate`), cells side by side
                       (:func:`cross_cell`), captured ops merged as a prediction's input
    recording.py       what a cell records, by its env flags (:func:`records`)
    xpu_prediction.py  XPU op statuses predicted per release from torch-xpu-ops' data

The input is ``results/<cell>/ops-raw/*.jsonl``, written by the recording plugin when a
run captures ops (``ACCELGRID_CAPTURE_OPS=1``, e.g. the ``op-capture``, ``fallback-debug``
and ``fallback-survey`` profiles); the pages (ops.md/.html, ops-grid.*, ops-predicted.*)
are rendered by :mod:`accelgrid.report.ops_pages`:

    accelgrid ops build results/cpu-2.13          # ops.json, ops.md, ops.html in the folder
    accelgrid ops grid results/* --out results    # ops-grid.md/.html: op x cell, and when
                                                  # each op stopped falling back
    accelgrid ops predict results/cuda-2.11-op-capture   # ops-predicted.*: per XPU release
"""

from .aggregate import (
    BAD,
    SCHEMA_VERSION,
    SEVERITY,
    aggregate,
    capture_folder,
    cross_cell,
    folder_check,
    load_captured,
    merge,
    missing_how,
)
from .recording import ALWAYS_RECORDED, RECORDS, records

__all__ = ["ALWAYS_RECORDED", "BAD", "RECORDS", "SCHEMA_VERSION", "SEVERITY", "aggregate",
           "capture_folder", "cross_cell", "folder_check", "load_captured", "merge",
           "missing_how", "records"]
