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

from ..base import contract, outcomes, outputs
from ..base.jsonio import read_jsonl, safe_dumps
from ..ops import xpu_prediction
from ..results.cellresults import CellResults, discover, read_cell

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


RISKY = ("missing", "fallback")  # the XPU statuses a test would hit, worst first


def captured_ops(cell: CellResults) -> dict[str, set[str]]:
    """Per HF test, the aten ops it called, from the cell's op capture (``ops-raw/``,
    written in the op-capture profile); {} when the cell did not capture."""
    out: dict[str, set[str]] = {}
    for f in sorted((cell.path / contract.OPS_RAW_DIR).glob("*.jsonl")):
        records, _ = read_jsonl(f)
        for rec in records:
            nodeid, ops = rec.get("nodeid"), rec.get("ops")
            if isinstance(nodeid, str) and nodeid.startswith(PREFIX) and isinstance(ops, dict):
                out.setdefault(nodeid, set()).update(o for o in ops if isinstance(o, str))
    return out


def xpu_risk(per_test: dict[str, set[str]], series: Iterable[str] | None = None
             ) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Per HF test, the XPU releases on which it would hit a missing op or a CPU fallback
    (:func:`accelgrid.ops.xpu_prediction.predict`, from ops any device captured):
    ``{nodeid: {series: {"missing": [ops], "fallback": [ops]}}}``, only tests and series
    with some. Each op is predicted once per series."""
    names = sorted(set().union(*per_test.values())) if per_test else []
    upstream = xpu_prediction.load_upstream()  # read once, not once per series
    core, torch_data = xpu_prediction.load_core(), xpu_prediction.load_torch()
    chosen = list(series) if series is not None else xpu_prediction.series_names(upstream)
    verdicts = {s: xpu_prediction.predict(names, s, upstream, core, torch_data)
                for s in chosen}
    out: dict[str, dict[str, dict[str, list[str]]]] = {}
    for nodeid, ops in sorted(per_test.items()):
        for s in chosen:
            hit = {k: sorted(o for o in ops if verdicts[s].get(o) == k) for k in RISKY}
            hit = {k: v for k, v in hit.items() if v}
            if hit:
                out.setdefault(nodeid, {})[s] = hit
    return out


def _xpu_predictions(cells: list[CellResults]) -> dict[str, Any]:
    """The risk of every captured HF test, with what an xpu cell of the run observed."""
    per_test: dict[str, set[str]] = {}
    sources = []
    for cell in cells:
        if _device(cell) == xpu_prediction.DEVICE:
            continue  # the prediction is for XPU; an xpu cell's capture is its observation
        got = captured_ops(cell)
        if got:
            sources.append(cell.name)
            for nodeid, ops in got.items():
                per_test.setdefault(nodeid, set()).update(ops)
    risk = xpu_risk(per_test)
    observed = {c.name: c for c in cells if _device(c) == xpu_prediction.DEVICE and not c.error}
    tests = {}
    for nodeid, by_series in risk.items():
        tests[nodeid] = {"series": by_series, "observed": {
            name: _outcome(c, nodeid) or "not in the cell"
            for name, c in sorted(observed.items())}}
    _, _, date = xpu_prediction.data_horizon()
    return {"from": sources, "captured_tests": len(per_test), "data_date": date,
            "tests": tests}


def _outcome(cell: CellResults, nodeid: str) -> str | None:
    rec = cell.tests.get(nodeid)
    return rec["outcome"] if rec is not None else None


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
        per_file: dict[str, Counter[str]] = {}
        for nodeid, rec in sorted(cell.tests.items()):
            if not nodeid.startswith(PREFIX):
                continue
            outcome = rec.get("outcome") or outcomes.ERROR
            per_file.setdefault(test_file(nodeid), Counter())[outcome] += 1
            if outcome in outcomes.BAD:
                theirs = _outcome(ref, nodeid) if ref else None
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
    out["xpu_prediction"] = _xpu_predictions(cells)
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
    lines += _prediction_markdown(model.get("xpu_prediction") or {})
    return "\n".join(lines)


def _prediction_markdown(pred: dict[str, Any]) -> list[str]:
    lines = ["## Predicted on XPU, per test", ""]
    if not pred.get("from"):
        return lines + ["No cell of these results captured its ops (the op-capture "
                        "profile), so nothing is predicted per test.", ""]
    observed = sorted({c for t in pred["tests"].values() for c in t["observed"]})
    lines += [f"From the ops {pred['captured_tests']} tests called in "
              f"{', '.join(pred['from'])} (op capture), each op predicted per XPU release "
              f"(`accelgrid.ops.xpu_prediction`, upstream data of {pred['data_date']}): the "
              "releases on which a test would hit a missing op or a CPU fallback.", ""]
    if not pred["tests"]:
        return lines + ["None would, on any release.", ""]
    lines += ["| test | missing on | falls back on | " + "".join(f"{c} | " for c in observed),
              "|---|---|---|" + "---|" * len(observed)]
    for nodeid, t in pred["tests"].items():
        def on(kind: str, t: dict[str, Any] = t) -> str:
            return ", ".join(f"{s} ({', '.join(f'`{o}`' for o in v[kind][:3])}"
                             + (" ..." if len(v[kind]) > 3 else "") + ")"
                             for s, v in t["series"].items() if kind in v) or "-"
        lines.append(f"| `{nodeid.removeprefix(PREFIX)}` | {on('missing')} | "
                     f"{on('fallback')} | " + "".join(f"{t['observed'][c]} | "
                                                      for c in observed))
    return lines + [""]


def write(folders: Iterable[Path], out: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """Build the model and write ``hf-tests.json`` / ``hf-tests.md`` into ``out``."""
    model = summary(folders)
    written = outputs.replace_files(
        Path(out), {"hf-tests.json": safe_dumps(model, indent=2, sort_keys=False) + "\n",
                    "hf-tests.md": markdown(model)}, "hf-tests", "accelgrid hf-tests")
    return model, {"json": written["hf-tests.json"], "md": written["hf-tests.md"]}
