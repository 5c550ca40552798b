"""HF's own tests (suites/hf_tests) across cells: counts per upstream test file, every
failure with the reference cell's outcome of the same test beside it (a cuda cell of the
run, else a cpu cell: a failure that fails there too is not the device's), and each cell's
not-implemented / fell-back ops table (``hf_ops.json``, written in the cell by the suite).
Written as ``hf-tests.md`` / ``hf-tests.json`` by ``accelgrid hf-tests``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import outcomes
from ..results import CellResults, discover, read_cell, write_json

PREFIX = "suites/hf_tests/"
REFERENCE_DEVICES = ("cuda", "cpu")


def test_file(nodeid: str) -> str:
    """``suites/hf_tests/transformers/models/vit/test_modeling_vit.py::A::t`` -> the
    file part without the suite prefix (``transformers/models/vit/test_modeling_vit.py``)."""
    return nodeid.split("::", 1)[0].removeprefix(PREFIX)


def _device(cell: CellResults) -> str:
    return str(cell.env.get("device_type") or cell.name.split("-", 1)[0])


def reference_of(cells: list[CellResults], cell: CellResults) -> CellResults | None:
    """The reference for ``cell``: a cuda cell of the run, else a cpu cell (not itself)."""
    for device in REFERENCE_DEVICES:
        for other in cells:
            if other is not cell and _device(other) == device and not other.error:
                return other
    return None


def summary(folders: Iterable[Path]) -> dict[str, Any]:
    """The model: per cell its counts per file, its failures with the reference's
    outcome, and its ops table."""
    found, notes = discover(folders)
    cells = [read_cell(f) for f in found]
    out: dict[str, Any] = {"schema": 1, "cells": [], "notes": notes}
    for cell in cells:
        entry: dict[str, Any] = {"cell": cell.name, "error": cell.error, "files": {},
                                 "failures": [], "ops": {}}
        ref = reference_of(cells, cell)
        entry["reference"] = ref.name if ref else None
        per_file: dict[str, Counter] = {}
        for nodeid, rec in sorted(cell.tests.items()):
            if not nodeid.startswith(PREFIX):
                continue
            outcome = rec.get("outcome") or outcomes.ERROR
            per_file.setdefault(test_file(nodeid), Counter())[outcome] += 1
            if outcome in outcomes.BAD:
                theirs = (ref.tests.get(nodeid) or {}).get("outcome") if ref else None
                entry["failures"].append({
                    "nodeid": nodeid, "outcome": outcome,
                    "message": str(rec.get("message") or "")[:300],
                    "duration": rec.get("duration"),
                    "reference": theirs or ("not in the reference cell" if ref else None)})
        entry["files"] = {f: dict(c) for f, c in sorted(per_file.items())}
        entry["duration_s"] = round(sum(float(r.get("duration") or 0) for n, r in
                                        cell.tests.items() if n.startswith(PREFIX)), 1)
        ops_file = cell.path / "hf_ops.json"
        if ops_file.is_file():
            try:
                entry["ops"] = json.loads(ops_file.read_text(encoding="utf-8")).get("ops", {})
            except (OSError, ValueError) as exc:
                entry["ops_error"] = f"{ops_file}: {exc}"
        out["cells"].append(entry)
    return out


def markdown(model: dict[str, Any]) -> str:
    """The model as Markdown."""
    lines = ["# Hugging Face's own tests (suites/hf_tests)", ""]
    for cell in model["cells"]:
        lines += [f"## {cell['cell']}", ""]
        if cell["error"]:
            lines += [f"Unusable: {cell['error']}", ""]
            continue
        lines += ["| file | " + " | ".join(outcomes.ALL) + " |",
                  "|---|" + "---|" * len(outcomes.ALL)]
        for name, counts in cell["files"].items():
            lines.append(f"| `{name}` | " + " | ".join(str(counts.get(o, 0) or "")
                                                       for o in outcomes.ALL) + " |")
        lines += ["", f"Summed test durations: {cell['duration_s']} s.", ""]
        ref = cell["reference"] or "none in this run"
        if cell["failures"]:
            lines += [f"Failures, with the reference cell's ({ref}) outcome:", "",
                      "| test | outcome | reference | message |", "|---|---|---|---|"]
            for f in cell["failures"]:
                msg = f["message"].replace("|", "\\|").replace("\n", " ")[:160]
                lines.append(f"| `{f['nodeid'].removeprefix(PREFIX)}` | {f['outcome']} | "
                             f"{f['reference'] or '-'} | {msg} |")
        else:
            lines.append("No failures.")
        lines.append("")
        if cell["ops"]:
            lines += ["Ops that were not implemented or fell back to the CPU:", "",
                      "| op | how | tests |", "|---|---|---|"]
            for op, e in sorted(cell["ops"].items()):
                lines.append(f"| `{op}` | {e['kind']} | {len(e['tests'])}: "
                             + ", ".join(f"`{t.removeprefix(PREFIX)}`" for t in e["tests"][:5])
                             + (" ..." if len(e["tests"]) > 5 else "") + " |")
        else:
            lines.append("No op was reported not implemented or falling back.")
        lines.append("")
    return "\n".join(lines)


def write(folders: Iterable[Path], out: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """Build the model and write ``hf-tests.json`` / ``hf-tests.md`` into ``out``."""
    model = summary(folders)
    paths = {"json": Path(out) / "hf-tests.json", "md": Path(out) / "hf-tests.md"}
    write_json(paths["json"], model)
    paths["md"].write_text(markdown(model), encoding="utf-8")
    return model, paths
