"""Op-coverage pages: per cell ``ops.json``/``ops.md``/``ops.html`` (ops x workloads) and,
across cells, ``ops-grid.json``/``.md``/``.html`` (ops x cells, and the torch version
where an op stopped falling back). The model is :mod:`accelgrid.ops`; the HTML comes from
``templates/ops.html.j2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import ops
from ..results import write_json
from ._common import templates

CELL_FILES = ("ops.json", "ops.md", "ops.html")
CROSS_FILES = ("ops-grid.json", "ops-grid.md", "ops-grid.html")
FIXED_HEADER = "stopped falling back in"


def _page(title: str, header: list[str], rows: list[dict[str, Any]]) -> str:
    return templates().get_template("ops.html.j2").render(title=title, header=header,
                                                          rows=rows) + "\n"


# --- one cell --------------------------------------------------------------------------

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


def cell_html(data: dict[str, Any]) -> str:
    """The same table as :func:`cell_markdown`, statuses coloured."""
    wls = data["workloads"]
    rows = [{"op": op, "cells": [{"cls": e["status"], "text": e["status"]}]
             + [{"cls": "", "text": str(e["workloads"].get(w, ""))} for w in wls]}
            for op, e in data["ops"].items()]
    return _page(f"Op coverage: {data['cell']}", ["op", "status", *wls], rows)


def write_cell(folder: Path) -> dict[str, Any] | None:
    """Write ops.json / ops.md / ops.html into a cell's results folder; returns ops.json's
    content, or None (nothing written) when the cell captured no ops."""
    data = ops.aggregate(folder)
    if data is None:
        return None
    write_json(folder / "ops.json", data)
    (folder / "ops.md").write_text(cell_markdown(data), encoding="utf-8")
    (folder / "ops.html").write_text(cell_html(data), encoding="utf-8")
    return data


# --- across cells ----------------------------------------------------------------------

def _fixed(view: dict[str, Any], op: str, prefix: str = "") -> str:
    return ", ".join(f"{d}: {prefix}{v}"
                     for d, v in view["stopped_falling_back"].get(op, {}).items())


def cross_markdown(view: dict[str, Any]) -> str:
    """Op x cell statuses (:func:`accelgrid.ops.cross_cell`) as a Markdown table."""
    cells = view["cells"]
    lines = ["# Op coverage across cells", "",
             "| op | " + " | ".join(cells) + f" | {FIXED_HEADER} |",
             "|" + " --- |" * (len(cells) + 2)]
    for op, row in view["ops"].items():
        lines.append(f"| `{op}` | " + " | ".join(row.get(c) or "" for c in cells)
                     + f" | {_fixed(view, op, 'torch ')} |")
    return "\n".join(lines) + "\n"


def cross_html(view: dict[str, Any]) -> str:
    """The same table as :func:`cross_markdown`, statuses coloured."""
    rows = [{"op": op, "cells": [{"cls": s or "", "text": s or ""}
                                 for s in (row.get(c) for c in view["cells"])]
             + [{"cls": "", "text": _fixed(view, op)}]}
            for op, row in view["ops"].items()]
    return _page("Op coverage across cells", ["op", *view["cells"], FIXED_HEADER], rows)


def write_cross(view: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ops-grid.json / .md / .html into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ops-grid.json", "md": out / "ops-grid.md",
             "html": out / "ops-grid.html"}
    write_json(paths["json"], view)
    paths["md"].write_text(cross_markdown(view), encoding="utf-8")
    paths["html"].write_text(cross_html(view), encoding="utf-8")
    return paths
