"""Op coverage: a cell's ops (``ops.json``'s content, :func:`aggregate`) and the op x cell
view (:func:`cross_cell`).

Input: ``results/<cell>/ops-raw/*.jsonl``, written by the recording plugin when a run
captures ops (``ACCELGRID_CAPTURE_OPS=1``). Each line is one test's ops with their status
on the cell's device (classified in the cell's own interpreter by accelgrid.testing.opcapture)
and what the device's messages named. :func:`aggregate` merges one cell's, :func:`cross_cell`
compares cells (an xpu cell against the prediction for its release), :func:`load_captured`
and :func:`merge` feed a prediction (accelgrid.ops.xpu_prediction).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..base import contract
from ..base.errors import InvalidInput
from ..base.jsonio import read_json, read_jsonl
from ..base.versions import version_key
from ..results.cellresults import clean_env
from ..results.folders import last_run
from ..testing.opcapture import base_op
from . import xpu_prediction

__all__ = ["BAD", "SCHEMA_VERSION", "SEVERITY", "aggregate", "capture_folder", "cross_cell",
           "folder_check", "load_captured", "merge", "missing_how"]

SCHEMA_VERSION = 1
# When tests disagree about an op, the worst status wins.
SEVERITY = {"missing": 4, "fallback": 3, "unknown": 2, "decomposed": 1, "native": 0}
BAD = ("missing", "fallback")


def _matching(name: str, ops: Iterable[str]) -> list[str]:
    """The captured ops a message's kernel name belongs to (same base op)."""
    base = base_op(name)
    return sorted(op for op in ops if base_op(op) == base)


def _captured(folder: Path) -> bool:
    raw = folder / contract.OPS_RAW_DIR
    return (raw.is_dir() and any(raw.glob("*.jsonl"))) or (folder / contract.OPS_FILE).is_file()


def capture_folder(folder: Path) -> Path:
    """Where a results/<cell>/ folder's latest captured ops are: its latest run's folder
    (last-run.json: a selected run writes runs/<id>/) when that run captured ops, else the
    folder itself when its last whole run did, else its newest run under runs/ that did;
    the folder itself when none did (the caller then says nothing was captured)."""
    folder = Path(folder)
    latest = last_run(folder)[1]
    if _captured(latest) or _captured(folder):
        return latest if _captured(latest) else folder
    runs = folder / contract.RUNS_DIR
    older = sorted((p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()),
                   key=lambda p: p.stat().st_mtime, reverse=True) if runs.is_dir() else []
    return next((p for p in older if _captured(p)), folder)


def aggregate(folder: Path) -> dict[str, Any] | None:
    """ops.json's content for one cell folder, or None if it captured no ops.

    Besides each op's status, count, phases and workloads it keeps what the messages said,
    per op and workload: ``fallback_seen`` (the kernels CPU-fallback messages named,
    ``{"aten::linspace.out": [workloads]}`` on the captured ``aten::linspace.default``),
    ``missing_seen`` (named by "not currently implemented") and ``missing_fell_back``
    (fallback kernels the device had no kernel for: they ran on the CPU only because
    PYTORCH_ENABLE_XPU_FALLBACK=1 let them). Top level, ``fallback_seen`` lists each kernel
    with the ops it matched, and ``missing`` each missing op with ``how`` it was seen:
    ``not-implemented`` or ``fell-back``."""
    raw = folder / contract.OPS_RAW_DIR
    files = sorted(raw.glob("*.jsonl")) if raw.is_dir() else []
    if not files:
        return None
    env, _ = read_json(folder / "env.json")
    env, _ = clean_env(env if isinstance(env, dict) else {})
    ops: dict[str, dict[str, Any]] = {}
    # (name, how) -> {"workloads", "ops"}; kernel -> {"workloads", "ops", "fell_back"}
    missing: dict[tuple[str, str], dict[str, set[str]]] = {}
    fallbacks: dict[str, dict[str, Any]] = {}
    per_op: dict[str, dict[str, dict[str, set[str]]]] = {}  # op -> field -> name -> wls
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
            rec_ops = rec.get("ops", {})
            _add_ops(ops, rec_ops, wl)
            fell_back = set(rec.get("missing_fell_back", []))
            named = [("fallback_seen", k) for k in rec.get("fallback_seen", [])]
            named += [("missing_seen", k) for k in rec.get("missing", [])]
            named += [("missing_fell_back", k) for k in sorted(fell_back)]
            for field, name in named:
                matched = _matching(name, rec_ops)
                for op in matched:
                    per_op.setdefault(op, {}).setdefault(field, {}).setdefault(
                        name, set()).add(wl)
                if field == "fallback_seen":
                    e = fallbacks.setdefault(name, {"workloads": set(), "ops": set(),
                                                    "fell_back": False})
                    e["fell_back"] = e["fell_back"] or name in fell_back
                else:
                    how = "not-implemented" if field == "missing_seen" else "fell-back"
                    e = missing.setdefault((name, how), {"workloads": set(), "ops": set()})
                e["workloads"].add(wl)
                e["ops"].update(matched)
    for op, fields in per_op.items():
        if op not in ops:
            continue
        for field, names in sorted(fields.items()):
            ops[op][field] = {n: sorted(w) for n, w in sorted(names.items())}
    counts = {s: sum(1 for e in ops.values() if e["status"] == s) for s in SEVERITY}
    return {
        "schema": SCHEMA_VERSION,
        "cell": env.get("cell") or folder.name,
        "device_type": device_type or env.get("device_type"),
        "torch": (env.get("torch") or {}).get("version"),
        "workloads": sorted(workloads),
        "counts": counts,
        "generic_fallback_notice": notice,
        "fallback_seen": [{"kernel": k, "ops": sorted(e["ops"]),
                           "workloads": sorted(e["workloads"]),
                           "missing_fell_back": e["fell_back"]}
                          for k, e in sorted(fallbacks.items())],
        "missing": [{"op": name, "how": how, "ops": sorted(e["ops"]),
                     "workloads": sorted(e["workloads"])}
                    for (name, how), e in sorted(missing.items())],
        "ops": dict(sorted(ops.items(), key=lambda kv: (-SEVERITY.get(kv[1]["status"], 2), kv[0]))),
    }


def _add_ops(ops: dict[str, dict[str, Any]], rec_ops: Mapping[str, Any], wl: str) -> None:
    """One record's ops (of workload ``wl``) into :func:`aggregate`'s ``ops``: the worst
    status wins; counts, phases and the workload's count add up."""
    for op, info in rec_ops.items():
        entry = ops.setdefault(op, {"status": info["status"], "count": 0,
                                    "phases": {}, "workloads": {}})
        if SEVERITY.get(info["status"], 2) > SEVERITY.get(entry["status"], 2):
            entry["status"] = info["status"]
        entry["count"] += info.get("count", 0)
        for phase, n in info.get("phases", {}).items():
            entry["phases"][phase] = entry["phases"].get(phase, 0) + n
        entry["workloads"][wl] = entry["workloads"].get(wl, 0) + info.get("count", 0)


def missing_how(entry: Mapping[str, Any]) -> str | None:
    """How an op record of ops.json came to be missing: ``not-implemented`` (it raised),
    ``fell-back`` (it ran on the CPU through the enable flag's catch-all), else None."""
    if entry.get("status") != "missing":
        return None
    if entry.get("missing_seen"):
        return "not-implemented"
    return "fell-back" if entry.get("missing_fell_back") else None


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
        and all(isinstance(rec.get(k, []), list)
                and all(isinstance(x, str) for x in rec.get(k, []))
                for k in ("fallback_seen", "missing_fell_back"))
        and isinstance(ops, dict)
        and all(isinstance(info, dict) and isinstance(info.get("status"), str)
                and count(info.get("count", 0))
                and isinstance(info.get("phases", {}), dict)
                and all(count(n) for n in info.get("phases", {}).values())
                for info in ops.values())
    )


def _series(cell: dict[str, Any]) -> Version:
    return version_key(cell.get("torch"))


def cross_cell(cells: list[dict[str, Any]], upstream: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
    """Op x cell statuses, and per device the torch version where an op stopped falling
    back (or stopped being missing).

    Beside ``ops`` (op -> cell -> status): ``fallback_seen`` (op -> cell -> the kernels
    fallback messages named) and ``missing_how`` (op -> cell -> ``not-implemented`` or
    ``fell-back``). For each xpu cell, ``predicted[cell]`` is
    :func:`accelgrid.ops.xpu_prediction.observed_vs_predicted` for its torch series (its
    ``predicted`` statuses, ``counts`` and ``disagreements``), and ``disagreements`` lists
    them all with the cell named. ``upstream``: the torch-xpu-ops data (the packaged one)."""
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
    seen: dict[str, dict[str, list[str]]] = {}
    how: dict[str, dict[str, str]] = {}
    for c in cells:
        for op, entry in c["ops"].items():
            if entry.get("fallback_seen"):
                seen.setdefault(op, {})[c["cell"]] = sorted(entry["fallback_seen"])
            if how_missing := missing_how(entry):
                how.setdefault(op, {})[c["cell"]] = how_missing
    predicted: dict[str, dict[str, Any]] = {}
    disagreements: list[dict[str, str]] = []
    if any(c["device_type"] == xpu_prediction.DEVICE for c in cells):
        upstream = xpu_prediction.load_upstream() if upstream is None else upstream
        for c in cells:
            check = xpu_prediction.observed_vs_predicted(c, upstream)
            if check is not None:
                predicted[c["cell"]] = check
                disagreements += [{"cell": c["cell"], **d} for d in check["disagreements"]]
    return {"schema": SCHEMA_VERSION, "cells": [c["cell"] for c in cells], "ops": table,
            "stopped_falling_back": fixed_in, "fallback_seen": seen, "missing_how": how,
            "predicted": predicted, "disagreements": disagreements}


def folder_check(folder: Path) -> dict[str, Any] | None:
    """For an xpu cell's results folder with an ops.json: its observed statuses against the
    prediction for its torch series, as ``{"series", "branch", "agree", "disagree",
    "not_compared"}`` (``error`` instead when the series has no data); else None."""
    data, problem = read_json(Path(folder) / contract.OPS_FILE)
    if problem or not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
        return None
    check = xpu_prediction.observed_vs_predicted(data)
    if check is None:
        return None
    if check.get("error"):
        return {"series": check["series"], "error": check["error"]}
    return {"series": check["series"], "branch": check["branch"], **check["counts"]}


# --- captured ops as input to a prediction ---------------------------------------------

def load_captured(path: Path) -> dict[str, Any]:
    """A cell's captured ops from ``path``: a results/<cell>/ folder (aggregated from its
    ops-raw/, else its ops.json) or an ops.json file; ``sources`` names ``path``.
    Anything else is an :class:`InvalidInput`."""
    path = Path(path)
    if path.is_dir():
        path = capture_folder(path)
        data = aggregate(path)
        if data is None and (path / contract.OPS_FILE).is_file():
            return load_captured(path / contract.OPS_FILE)
        if data is None:
            raise InvalidInput(f"{path}: no captured ops (no ops-raw/*.jsonl nor ops.json; "
                               f"run the cell with {contract.CAPTURE_OPS}=1)")
    elif path.is_file():
        data, problem = read_json(path)
        if problem or not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
            raise InvalidInput(f"{path}: not an ops.json ({problem or 'no ops in it'})")
    else:
        raise InvalidInput(f"{path}: no such file or folder")
    return {**data, "sources": [str(path)]}


def merge(datas: list[dict[str, Any]]) -> dict[str, Any]:
    """Several cells' captured ops as one: every op any of them called, with the worst
    status any saw (a composite seen anywhere stays decomposed over native), counts and
    workloads added up."""
    if len(datas) == 1:
        return datas[0]
    ops: dict[str, dict[str, Any]] = {}
    for data in datas:
        for op, rec in data["ops"].items():
            entry = ops.setdefault(op, {"status": rec.get("status", "unknown"), "count": 0,
                                        "phases": {}, "workloads": {}})
            if SEVERITY.get(rec.get("status"), 2) > SEVERITY.get(entry["status"], 2):
                entry["status"] = rec["status"]
            entry["count"] += rec.get("count", 0)
            for key in ("phases", "workloads"):
                for k, n in rec.get(key, {}).items():
                    entry[key][k] = entry[key].get(k, 0) + n
    devices = sorted({str(d.get("device_type")) for d in datas})
    return {"schema": SCHEMA_VERSION, "cell": " + ".join(str(d.get("cell")) for d in datas),
            "device_type": ", ".join(devices),
            "torch": ", ".join(sorted({str(d.get("torch")) for d in datas})),
            "workloads": sorted({w for d in datas for w in d.get("workloads", [])}),
            "sources": [s for d in datas for s in d.get("sources", [])],
            "ops": dict(sorted(ops.items()))}

