"""The XPU prediction per torch series: which series to predict (:func:`choose_series`),
a cell's captured ops predicted for each (ops-predicted.json, :func:`predicted_view`),
where each op stopped falling back, an xpu cell's observations against its series'
prediction (:func:`observed_vs_predicted`), and the Markdown tables of
docs/devices/xpu-prediction.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..base.errors import InvalidInput
from .xpu_data import (
    core_for,
    data_horizon,
    load_core,
    load_torch,
    load_upstream,
    series_key,
    series_names,
    series_of,
)
from .xpu_rules import BAD, COMPARED, DEVICE, STATUSES, predict, predict_detail
from .xpu_seed import SEED_SERIES, agreement_line, compare_with_seed


def stopped_falling_back(predictions: Mapping[str, Mapping[str, str]]) -> dict[str, str | None]:
    """Per op that falls back or is missing in some series: the first series from which on
    it no longer does (None while it still does in the newest one). Ops never bad are left
    out. ``predictions`` is :func:`predict_all`'s result: the op x series view."""
    order = sorted(predictions, key=series_key)
    ops = sorted({op for s in order for op in predictions[s]})
    out: dict[str, str | None] = {}
    for op in ops:
        seq = [(s, predictions[s].get(op)) for s in order if op in predictions[s]]
        bad = [i for i, (_, status) in enumerate(seq) if status in BAD]
        if bad:
            last = bad[-1]
            out[op] = seq[last + 1][0] if last + 1 < len(seq) else None
    return out


def series_counts(predictions: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """``{series: {status: number of ops}}`` over :data:`STATUSES`."""
    return {s: {st: sum(1 for v in p.values() if v == st) for st in STATUSES}
            for s, p in sorted(predictions.items(), key=lambda kv: series_key(kv[0]))}


def matrix_series(cells: Iterable[Any]) -> list[str]:
    """The torch series of a matrix's xpu cells (``Cell.device``/``.torch``), oldest first."""
    return sorted({c.torch for c in cells if c.device == DEVICE}, key=series_key)


def choose_series(requested: Iterable[str] | None = None, cells: Iterable[Any] | None = None,
                  all_series: bool = False, upstream: Mapping[str, Any] | None = None
                  ) -> tuple[list[str], list[str]]:
    """The series to predict, oldest first, and notes: every series in the data with
    ``all_series``, else those ``requested``, else the matrix's xpu series (``cells``).
    A requested series without data is an :class:`InvalidInput`; a matrix series without
    data is left out with a note (one past the data says the data's last date)."""
    upstream = load_upstream() if upstream is None else upstream
    have = series_names(upstream)
    if all_series:
        return have, []
    if requested:
        wanted = list(dict.fromkeys(requested))
        unknown = [s for s in wanted if s not in upstream["series"]]
        if unknown:
            raise InvalidInput(f"no torch-xpu-ops data for series {', '.join(unknown)}; "
                               f"have {', '.join(have)}")
        return sorted(wanted, key=series_key), []
    from_matrix = matrix_series(cells or ())
    last, branch, date = data_horizon(upstream)
    notes = []
    for s in from_matrix:
        if s in upstream["series"]:
            continue
        if series_key(s) > series_key(last):
            notes.append(f"the matrix's xpu series {s} is past the last torch-xpu-ops data "
                         f"({branch}, {date}): unknown; left out")
        else:
            notes.append(f"the matrix's xpu series {s} has no torch-xpu-ops data; left out")
    chosen = [s for s in from_matrix if s in upstream["series"]]
    if not chosen:
        raise InvalidInput("the matrix has no xpu cell with torch-xpu-ops data: name "
                           "--series or use --all-series")
    return chosen, notes


def _release_facts(upstream: Mapping[str, Any], series: str,
                   torch_data: Mapping[str, Any],
                   core: Mapping[str, Any] | None = None) -> dict[str, Any]:
    e = upstream["series"][series]
    src = torch_data.get("series", {}).get(series, {}).get("source", {})
    return {"branch": e["branch"], "commit": e["commit"], "date": e.get("date"),
            "kernel_list_from": e.get("native_commit") or e["commit"],
            "torch_wheel": src.get("wheel"), "torch_wheel_sha256": src.get("sha256"),
            "core_registrations": core_for(core or {}, series)[1]}


def predicted_view(captured: Mapping[str, Any], series: Iterable[str],
                   upstream: Mapping[str, Any] | None = None,
                   core: Mapping[str, Any] | None = None,
                   torch_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """ops-predicted.json's content: a cell's captured ops (ops.json's content) predicted
    for each of ``series``, with per-series counts, the op x series view (``predicted``
    per op, ``xpu_op`` for routed ones) and where each op stopped falling back or being
    missing; the seed's rows when :data:`SEED_SERIES` is among ``series``."""
    upstream = load_upstream() if upstream is None else upstream
    core = load_core() if core is None else core
    torch_data = load_torch() if torch_data is None else torch_data
    order = sorted(dict.fromkeys(series), key=series_key)
    ops = captured.get("ops", {})
    details = {s: predict_detail(ops, s, upstream, core, torch_data) for s in order}
    preds = {s: {op: d["status"] for op, d in details[s].items()} for s in order}
    fixed = stopped_falling_back(preds)
    out_ops: dict[str, dict[str, Any]] = {}
    for op in sorted(ops):
        rec = ops[op] if isinstance(ops[op], Mapping) else {}
        entry = {"captured": _status_of(ops[op]), "workloads": dict(rec.get("workloads", {})),
                 "predicted": {s: preds[s][op] for s in order}}
        routed = {s: f"{details[s][op]['xpu_op']}: {details[s][op]['xpu_status']}"
                  for s in order if "xpu_op" in details[s][op]}
        if routed:
            entry["xpu_calls"] = routed
        if op in fixed:
            entry["stopped_falling_back"] = fixed[op]
        out_ops[op] = entry
    doc: dict[str, Any] = {
        "schema": 1,
        "captured": {k: captured.get(k) for k in ("cell", "device_type", "torch")}
        | {"sources": list(captured.get("sources") or [])},
        "series": order,
        "releases": {s: _release_facts(upstream, s, torch_data, core) for s in order},
        "workloads": list(captured.get("workloads") or sorted(
            {w for e in out_ops.values() for w in e["workloads"]})),
        "counts": series_counts(preds),
        "stopped_falling_back": fixed,
        "ops": out_ops,
        "seed": None,
    }
    if SEED_SERIES in order:
        rows = compare_with_seed(ops, SEED_SERIES, upstream, core=core, torch_data=torch_data)
        doc["seed"] = {"series": SEED_SERIES, "rows": rows, "agreement": agreement_line(rows)}
    return doc


def observed_vs_predicted(cell: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None,
                          torch_data: Mapping[str, Any] | None = None
                          ) -> dict[str, Any] | None:
    """For an xpu cell's ops.json content: the prediction for its torch series next to what
    it observed, and every disagreement (an op observed native but predicted fallback,
    ...). None for other devices. Ops where either side is outside :data:`COMPARED` are
    counted as not compared. A series without data gets ``error`` instead (past the data:
    its last date)."""
    if cell.get("device_type") != DEVICE:
        return None
    upstream = load_upstream() if upstream is None else upstream
    series = series_of(cell.get("torch"))
    if series is None or series not in upstream["series"]:
        why = f"no torch-xpu-ops data for torch {cell.get('torch')}"
        last, branch, date = data_horizon(upstream)
        if series and series_key(series) > series_key(last):
            why += f" (the last is {branch}, {date}): predicted unknown"
        return {"series": series, "error": why, "predicted": {}, "disagreements": [],
                "counts": {"agree": 0, "disagree": 0, "not_compared": len(cell.get("ops", {}))}}
    ops = cell.get("ops", {})
    predicted = predict(ops, series, upstream, core, torch_data)
    disagreements = []
    counts = {"agree": 0, "disagree": 0, "not_compared": 0}
    for op in sorted(ops):
        observed, guess = _status_of(ops[op]), predicted[op]
        if observed not in COMPARED or guess not in COMPARED:
            counts["not_compared"] += 1
        elif observed == guess:
            counts["agree"] += 1
        else:
            counts["disagree"] += 1
            disagreements.append({"op": op, "observed": observed, "predicted": guess})
    return {"series": series, "branch": upstream["series"][series]["branch"],
            "predicted": predicted, "disagreements": disagreements, "counts": counts}


def _status_of(record: Any) -> str | None:
    if isinstance(record, Mapping):
        return record.get("status")
    return record if isinstance(record, str) else None


def extraction_table(upstream: Mapping[str, Any]) -> str:
    """Series, branch, commit, date, number of kernel and fallback entries."""
    lines = ["| series | branch | commit | date | XPU kernels | fallback list | kernel list from |",
             "| --- | --- | --- | --- | ---: | ---: | --- |"]
    for s in series_names(upstream):
        e = upstream["series"][s]
        src = (f"`{e['native_commit'][:12]}` ({e.get('native_date', '')})"
               if e.get("native_commit") else "branch head")
        lines.append(f"| {s} | `{e['branch']}` | `{e['commit'][:12]}` | {e['date']} | "
                     f"{len(e['native'])} | {len(e['fallback'])} | {src} |")
    return "\n".join(lines) + "\n"


def prediction_table(predictions: Mapping[str, Mapping[str, str]],
                     only_interesting: bool = True) -> str:
    """Op x series statuses (ops native or decomposed in every series left out unless
    ``only_interesting`` is False), with the series each op stopped falling back in."""
    order = sorted(predictions, key=series_key)
    fixed = stopped_falling_back(predictions)
    ops = sorted({op for p in predictions.values() for op in p})
    lines = ["| op | " + " | ".join(order) + " | no longer falls back / missing from |",
             "| --- |" + " --- |" * (len(order) + 1)]
    for op in ops:
        row = [predictions[s].get(op, "") for s in order]
        if only_interesting and all(v in ("native", "decomposed") for v in row):
            continue
        since = (fixed[op] or "not yet") if op in fixed else ""
        lines.append(f"| `{op}` | " + " | ".join(row) + f" | {since} |")
    return "\n".join(lines) + "\n"


def counts_table(predictions: Mapping[str, Mapping[str, str]]) -> str:
    """Per series, how many captured ops get each status."""
    counts = series_counts(predictions)
    lines = ["| series | " + " | ".join(STATUSES) + " |", "| --- |" + " ---: |" * len(STATUSES)]
    for s, c in counts.items():
        lines.append(f"| {s} | " + " | ".join(str(c[st]) for st in STATUSES) + " |")
    return "\n".join(lines) + "\n"
