"""grid.json: the grid model without tracebacks (docs/reference/grid-schema.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.jsonio import dumps
from ..results.records import Grid, Result, Row


def render(model: Grid) -> str:
    """grid.json: the model without tracebacks (they stay in the HTML)."""
    def dump(value: Any) -> str:
        return dumps(value, ensure_ascii=False)

    # One column, row or change per line: readable and diffable, and json's C encoder
    # (indent= would fall back to the pure-Python one, 10x slower on big grids).
    out = []
    fields: Mapping[str, Any] = model  # each key dumped by its kind, in the model's order
    for key, value in fields.items():
        if key in ("columns", "rows") or (key == "baseline" and value):
            if key == "rows":
                items = [_without_longrepr(r) for r in value]
            elif key == "baseline":
                items = value["changes"]
                head = dump({k: v for k, v in value.items() if k != "changes"})[:-1]
                out.append(f'{dump(key)}: {head}, "changes": [\n  '
                           + ",\n  ".join(map(dump, items)) + "\n ]}")
                continue
            else:
                items = value
            out.append(f"{dump(key)}: [\n  " + ",\n  ".join(map(dump, items)) + "\n ]"
                       if items else f"{dump(key)}: []")
        else:
            out.append(f"{dump(key)}: {dump(value)}")
    return "{\n " + ",\n ".join(out) + "\n}\n"


def _without_longrepr(row: Row) -> Row:
    """``row`` with its results' tracebacks left out; only results that have one are
    copied (a few percent: copying all 100,000 of a big grid cost more than dumping it)."""
    cells = row["cells"]
    if not any("longrepr" in c for c in cells.values()):
        return row
    return {**row, "cells": {k: c if "longrepr" not in c else _no_longrepr(c)
                             for k, c in cells.items()}}


def _no_longrepr(result: Result) -> Result:
    out = result.copy()
    del out["longrepr"]
    return out
