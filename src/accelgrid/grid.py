"""Grids: tests x cells from any number of results folders, as JSON, Markdown and HTML.

``build(folders)`` reads each cell's results (missing or corrupt parts make that cell an
errored column with the reason; nothing else is lost) into one model; ``render_*`` turn
the model into ``grid.json`` (schema documented in docs/grid-schema.md, versioned by
``schema``), ``grid.md`` (fits a GitHub job summary) and ``grid.html`` (self-contained).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from . import outcomes
from .compat import version_tuple
from .results import CellResults, load_cell

SCHEMA_VERSION = 1
SYMBOL = {
    outcomes.PASSED: "✅", outcomes.FAILED: "❌", outcomes.ERROR: "💥",
    outcomes.SKIPPED: "⏭️", outcomes.XFAILED: "🟡", outcomes.XPASSED: "❗",
    outcomes.TIMEOUT: "⏱️", outcomes.CRASHED: "☠️", outcomes.NOT_RUN: "➖",
}
GITHUB_SUMMARY_LIMIT = 1024 * 1024


def _suite_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]


def _column(cell: CellResults) -> dict[str, Any]:
    env = cell.env or {}
    torch = env.get("torch") or {}
    devices = torch.get("devices") or []
    build = torch.get("version") or "?"
    runtime = torch.get("cuda_runtime") and f"CUDA {torch['cuda_runtime']}" or (
        torch.get("xpu_runtime") and f"XPU {torch['xpu_runtime']}")
    counts = {o: 0 for o in outcomes.ALL}
    for rec in cell.tests.values():
        counts[rec["outcome"]] = counts.get(rec["outcome"], 0) + 1
    name = cell.name
    device, _, rest = name.partition("-")
    series, _, profile = rest.partition("-")
    return {
        "name": name,
        "device": env.get("device_type") or device,
        "torch_series": series,
        "profile": profile or "default",
        "torch_build": build + (f" ({runtime})" if runtime else ""),
        "device_name": devices[0]["name"] if devices else None,
        "device_count": torch.get("device_count"),
        "driver": torch.get("driver"),
        "host": (env.get("host") or {}).get("name"),
        "commit": (env.get("project") or {}).get("commit"),
        "start": env.get("start"),
        "end": env.get("end"),
        "counts": counts,
        "error": cell.error,
        "problems": cell.problems,
        "path": str(cell.path),
    }


def _sort_key(col: dict[str, Any]) -> tuple:
    return (col["device"], version_tuple(col["torch_series"] or "0"), col["profile"] != "default",
            col["profile"])


def build(folders: Iterable[Path]) -> dict[str, Any]:
    """The grid model from results folders (each ``results/<cell>/``)."""
    cells = [load_cell(Path(f)) for f in folders]
    columns = sorted((_column(c) for c in cells), key=_sort_key)
    by_name = {c.name: c for c in cells}
    rows: dict[str, dict[str, Any]] = {}
    for col in columns:
        for nodeid, rec in by_name[col["name"]].tests.items():
            row = rows.setdefault(nodeid, {"nodeid": nodeid, "suite": _suite_of(nodeid),
                                           "cells": {}})
            row["cells"][col["name"]] = {
                k: rec.get(k) for k in ("outcome", "message", "duration", "worker", "device",
                                        "issue", "longrepr") if rec.get(k) not in (None, "")
            }
    ordered = sorted(rows.values(), key=lambda r: (r["suite"], r["nodeid"]))
    return {"schema": SCHEMA_VERSION, "columns": columns, "rows": ordered,
            "outcomes": list(outcomes.ALL)}


def render_json(model: dict[str, Any]) -> str:
    slim = {**model, "rows": [
        {**r, "cells": {k: {f: v for f, v in c.items() if f != "longrepr"}
                        for k, c in r["cells"].items()}} for r in model["rows"]]}
    return json.dumps(slim, indent=1, default=str) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(model: dict[str, Any], limit: int = GITHUB_SUMMARY_LIMIT // 2) -> str:
    """Markdown for a GitHub job summary: counts per cell, then the grid per suite, each
    suite folded in <details>; truncated with a note if it would pass ``limit`` bytes."""
    cols = model["columns"]
    out = ["# accelgrid results", ""]
    head = "| cell | torch build | device | " + " | ".join(o for o in outcomes.ALL) + " |"
    out += [head, "|" + " --- |" * (3 + len(outcomes.ALL))]
    for c in cols:
        dev = c["device_name"] or c["device"]
        if c["error"]:
            out.append(f"| {c['name']} | {c['torch_build']} | {_md_escape(dev)} | "
                       f"errored: {_md_escape(c['error'])} |")
            continue
        counts = " | ".join(str(c["counts"].get(o, 0) or "") for o in outcomes.ALL)
        out.append(f"| {c['name']} | {c['torch_build']} | {_md_escape(dev)} | {counts} |")
    out += ["", "Legend: " + ", ".join(f"{SYMBOL[o]} {o}" for o in outcomes.ALL), ""]
    suites: dict[str, list[dict[str, Any]]] = {}
    for row in model["rows"]:
        suites.setdefault(row["suite"], []).append(row)
    body: list[str] = []
    for suite, rows in suites.items():
        bad = sum(1 for r in rows for c in r["cells"].values() if c["outcome"] in outcomes.BAD)
        body += [f"<details{' open' if bad else ''}><summary><b>{html.escape(suite)}</b>: "
                 f"{len(rows)} tests, {bad} bad results</summary>", ""]
        body.append("| test | " + " | ".join(c["name"] for c in cols) + " |")
        body.append("|" + " --- |" * (1 + len(cols)))
        for row in rows:
            name = row["nodeid"].split("::", 1)[-1]
            cells = []
            for c in cols:
                rec = row["cells"].get(c["name"])
                cells.append(SYMBOL[rec["outcome"]] if rec else "")
            body.append(f"| `{_md_escape(name)}` | " + " | ".join(cells) + " |")
        body += ["", "</details>", ""]
    text = "\n".join(out + body)
    if len(text.encode()) > limit:
        note = (f"\n\n_Grid truncated to fit the {limit // 1024} KiB summary budget: see the "
                "HTML grid artifact for all rows._\n")
        text = text.encode()[: limit - len(note.encode())].decode(errors="ignore")
        text = text[: text.rfind("\n")] + note
    return text


def render_html(model: dict[str, Any]) -> str:
    env = Environment(loader=PackageLoader("accelgrid", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    template = env.get_template("grid.html.j2")
    return template.render(model=model, symbol=SYMBOL, outcomes=outcomes.ALL,
                           bad=outcomes.BAD,
                           )


def write(model: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "grid.json", "md": out / "grid.md", "html": out / "grid.html"}
    paths["json"].write_text(render_json(model), encoding="utf-8")
    paths["md"].write_text(render_markdown(model), encoding="utf-8")
    paths["html"].write_text(render_html(model), encoding="utf-8")
    return paths
