"""Op coverage: per-cell ``ops.json`` and op x workload grids, and the op x cell view.

Input: ``results/<cell>/ops-raw/*.jsonl``, written by the recording plugin when a run
captures ops (``ACCELGRID_CAPTURE_OPS=1``, e.g. the ``op-capture`` and
``fallback-debug`` profiles). Each line is one test's ops with their status on the
cell's device (classified in the cell's own interpreter by accelgrid.opcapture).

    accelgrid ops build results/cpu-2.13          # ops.json, ops.md, ops.html in the folder
    accelgrid ops grid results/* --out results    # ops-grid.md/.html: op x cell, and when
                                                  # each op stopped falling back
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.version import Version

from .results import read_json, read_jsonl, write_json
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
    env = env if isinstance(env, dict) else {}
    ops: dict[str, dict[str, Any]] = {}
    missing: dict[str, set[str]] = {}
    workloads: set[str] = set()
    device_type = None
    notice = False
    for f in files:
        records, _ = read_jsonl(f)
        for rec in records:
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
        "ops": dict(sorted(ops.items(), key=lambda kv: (-SEVERITY[kv[1]["status"]], kv[0]))),
    }


def cell_markdown(data: dict[str, Any]) -> str:
    """Laid out like the seed's hand-made table: op, status, then one column per workload."""
    wls = data["workloads"]
    lines = [f"# Op coverage: {data['cell']} ({data['device_type']}, torch {data['torch']})", "",
             ", ".join(f"{n} {s}" for s, n in data["counts"].items() if n), ""]
    if data.get("generic_fallback_notice"):
        lines += ["XPU printed its once-per-process fallback notice: run the `fallback-debug` "
                  "profile to name every op.", ""]
    lines.append("| op | status | " + " | ".join(wls) + " |")
    lines.append("|" + " --- |" * (2 + len(wls)))
    for op, e in data["ops"].items():
        cells = [str(e["workloads"].get(w, "")) for w in wls]
        lines.append(f"| `{op}` | {e['status']} | " + " | ".join(cells) + " |")
    for m in data["missing"]:
        lines.append(f"\nMissing: `{m['op']}` (hit by {', '.join(m['workloads'])})")
    return "\n".join(lines) + "\n"


_STYLE = ("body{font:13px system-ui,sans-serif}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:2px 6px}th{background:#f4f4f4;position:sticky;top:0}"
          ".native{background:#d7f5dd}.decomposed{background:#e6f0fa}.fallback{background:#f8c9c9}"
          ".missing{background:#f3a5a5}.unknown{background:#eee}td.op{font-family:monospace}")


def _html_table(title: str, header: list[str], rows: Iterable[tuple[str, list[tuple[str, str]]]]
                ) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
           f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1><table>",
           "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for op, cells in rows:
        out.append(f"<tr><td class='op'>{html.escape(op)}</td>" + "".join(
            f"<td class='{html.escape(cls)}'>{html.escape(text)}</td>" for cls, text in cells)
            + "</tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)


def cell_html(data: dict[str, Any]) -> str:
    wls = data["workloads"]
    rows = [(op, [(e["status"], e["status"])] + [("", str(e["workloads"].get(w, "")))
                                                for w in wls]) for op, e in data["ops"].items()]
    return _html_table(f"Op coverage: {data['cell']}", ["op", "status", *wls], rows)


def build(folder: Path) -> dict[str, Any] | None:
    """Write ops.json / ops.md / ops.html into a cell's results folder."""
    data = aggregate(folder)
    if data is None:
        return None
    write_json(folder / "ops.json", data)
    (folder / "ops.md").write_text(cell_markdown(data), encoding="utf-8")
    (folder / "ops.html").write_text(cell_html(data), encoding="utf-8")
    return data


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


def cross_markdown(view: dict[str, Any]) -> str:
    cells = view["cells"]
    lines = ["# Op coverage across cells", "",
             "| op | " + " | ".join(cells) + " | stopped falling back in |",
             "|" + " --- |" * (len(cells) + 2)]
    for op, row in view["ops"].items():
        fixed = ", ".join(f"{d}: torch {v}" for d, v in view["stopped_falling_back"].get(
            op, {}).items())
        lines.append(f"| `{op}` | " + " | ".join(row.get(c) or "" for c in cells)
                     + f" | {fixed} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelgrid ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build", help="ops.json/.md/.html for each results/<cell>/ given")
    b.add_argument("results", nargs="+")
    g = sub.add_parser("grid", help="op x cell view from results folders")
    g.add_argument("results", nargs="+")
    g.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    found = []
    for path in map(Path, args.results):
        data = build(path) if path.is_dir() else None
        if data is None:
            print(f"{path}: no captured ops (run with ACCELGRID_CAPTURE_OPS=1 or the "
                  "op-capture profile)")
            continue
        found.append(data)
        print(f"{data['cell']}: " + ", ".join(f"{n} {s}" for s, n in data["counts"].items() if n))
    if args.what == "grid":
        if not found:
            return 1
        view = cross_cell(found)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "ops-grid.json", view)
        (out / "ops-grid.md").write_text(cross_markdown(view), encoding="utf-8")
        rows = [(op, [(s or "", s or "") for s in (row.get(c) for c in view["cells"])]
                 + [("", ", ".join(f"{d}: {v}" for d, v in
                                   view["stopped_falling_back"].get(op, {}).items()))])
                for op, row in view["ops"].items()]
        (out / "ops-grid.html").write_text(
            _html_table("Op coverage across cells", ["op", *view["cells"],
                                                     "stopped falling back in"], rows))
        print(f"wrote {out / 'ops-grid.md'}, {out / 'ops-grid.html'}, {out / 'ops-grid.json'}")
    return 0 if found else 1
