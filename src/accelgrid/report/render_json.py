"""grid.json: the grid model without tracebacks (docs/grid-schema.md)."""

from __future__ import annotations

from typing import Any

from ..results import dumps


def render(model: dict[str, Any]) -> str:
    """grid.json: the model without tracebacks (they stay in the HTML)."""
    def dump(value: Any) -> str:
        return dumps(value, ensure_ascii=False)

    # One column, row or change per line: readable and diffable, and json's C encoder
    # (indent= would fall back to the pure-Python one, 10x slower on big grids).
    out = []
    for key, value in model.items():
        if key in ("columns", "rows") or (key == "baseline" and value):
            if key == "rows":
                items = [{**r, "cells": {k: {f: v for f, v in c.items() if f != "longrepr"}
                                         for k, c in r["cells"].items()}} for r in value]
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
