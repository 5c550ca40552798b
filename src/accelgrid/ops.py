"""Op coverage: a cell's ops (``ops.json``'s content) and the op x cell view.

Input: ``results/<cell>/ops-raw/*.jsonl``, written by the recording plugin when a run
captures ops (``ACCELGRID_CAPTURE_OPS=1``, e.g. the ``op-capture`` and
``fallback-debug`` profiles). Each line is one test's ops with their status on the
cell's device (classified in the cell's own interpreter by accelgrid.opcapture).
:func:`aggregate` merges one cell's, :func:`cross_cell` compares cells; the pages
(ops.md/.html, ops-grid.*) are rendered by :mod:`accelgrid.report.ops_pages`:

    accelgrid ops build results/cpu-2.13          # ops.json, ops.md, ops.html in the folder
    accelgrid ops grid results/* --out results    # ops-grid.md/.html: op x cell, and when
                                                  # each op stopped falling back
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.version import Version

from .results import clean_env, read_json, read_jsonl
from .versions import version_key

SCHEMA_VERSION = 1
# When tests disagree about an op, the worst status wins.
SEVERITY = {"missing": 4, "fallback": 3, "unknown": 2, "decomposed": 1, "native": 0}
BAD = ("missing", "fallback")


def aggregate(folder: Path) -> dict[str, Any] | None:
    """ops.json's content for one cell folder, or None if it captured no ops."""
    raw = folder / "ops-raw"
    files = sorted(raw.glob("*.jsonl")) if raw.is_dir() else []
    if not files:
        return None
    env, _ = read_json(folder / "env.json")
    env, _ = clean_env(env if isinstance(env, dict) else {})
    ops: dict[str, dict[str, Any]] = {}
    missing: dict[str, set[str]] = {}
    workloads: set[str] = set()
    device_type = None
    notice = False
    for f in files:
        records, _ = read_jsonl(f)
        for rec in filter(_usable, records):
            wl = rec.get("workload") or "?"
            workloads.add(wl)
            device_type = device_type or rec.get("device_type")
            notice = notice or bool(rec.get("generic_fallback_notice"))
            for op in rec.get("missing", []):
                missing.setdefault(op, set()).add(wl)
            for op, info in rec.get("ops", {}).items():
                entry = ops.setdefault(op, {"status": info["status"], "count": 0,
                                            "phases": {}, "workloads": {}})
                if SEVERITY.get(info["status"], 2) > SEVERITY.get(entry["status"], 2):
                    entry["status"] = info["status"]
                entry["count"] += info.get("count", 0)
                for phase, n in info.get("phases", {}).items():
                    entry["phases"][phase] = entry["phases"].get(phase, 0) + n
                entry["workloads"][wl] = entry["workloads"].get(wl, 0) + info.get("count", 0)
    counts = {s: sum(1 for e in ops.values() if e["status"] == s) for s in SEVERITY}
    return {
        "schema": SCHEMA_VERSION,
        "cell": env.get("cell") or folder.name,
        "device_type": device_type or env.get("device_type"),
        "torch": (env.get("torch") or {}).get("version"),
        "workloads": sorted(workloads),
        "counts": counts,
        "generic_fallback_notice": notice,
        "missing": [{"op": op, "workloads": sorted(wls)} for op, wls in sorted(missing.items())],
        "ops": dict(sorted(ops.items(), key=lambda kv: (-SEVERITY.get(kv[1]["status"], 2), kv[0]))),
    }


def _usable(rec: dict[str, Any]) -> bool:
    """Whether an ops-raw record has the shape :func:`aggregate` reads (records come from
    CI artifacts too: a damaged one is skipped rather than stop every cell's pages)."""
    def count(n: Any) -> bool:
        return isinstance(n, int) and not isinstance(n, bool)

    ops, missing = rec.get("ops", {}), rec.get("missing", [])
    return (
        isinstance(rec.get("workload") or "?", str)
        and isinstance(rec.get("device_type") or "", str)
        and isinstance(missing, list) and all(isinstance(op, str) for op in missing)
        and isinstance(ops, dict)
        and all(isinstance(info, dict) and isinstance(info.get("status"), str)
                and count(info.get("count", 0))
                and isinstance(info.get("phases", {}), dict)
                and all(count(n) for n in info.get("phases", {}).values())
                for info in ops.values())
    )


def _series(cell: dict[str, Any]) -> Version:
    return version_key(cell.get("torch"))


def cross_cell(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Op x cell statuses, and per device the torch version where an op stopped falling
    back (or stopped being missing)."""
    cells = sorted(cells, key=lambda c: (c["device_type"] or "", _series(c), c["cell"]))
    ops = sorted({op for c in cells for op in c["ops"]})
    table = {op: {c["cell"]: c["ops"].get(op, {}).get("status") for c in cells} for op in ops}
    fixed_in: dict[str, dict[str, str]] = {}
    for op in ops:
        for device in sorted({c["device_type"] for c in cells}):
            seq = [c for c in cells if c["device_type"] == device and op in c["ops"]]
            for before, after in zip(seq, seq[1:], strict=False):
                if before["ops"][op]["status"] in BAD and after["ops"][op]["status"] not in BAD:
                    fixed_in.setdefault(op, {})[device] = after["torch"]
    return {"schema": SCHEMA_VERSION, "cells": [c["cell"] for c in cells], "ops": table,
            "stopped_falling_back": fixed_in}
