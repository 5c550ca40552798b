"""XPU op coverage predicted from upstream facts, for hosts without an Intel GPU.

Why: the question "which ops of our workloads fall back to the CPU, or are missing, on
torch X.Y for XPU" has a factual answer that needs no XPU: intel/torch-xpu-ops' branch
``release/X.Y`` lists the ops it has kernels for and the ops it sends to the CPU on
purpose. ``data/xpu_ops.json`` holds those lists per series (``tools/extract_xpu_ops.py``);
``data/xpu_core_ops.json`` the few XPU kernels that live in PyTorch itself (oneDNN matmul
and convolution). Combined with the ops a workload calls, captured on any device (a CUDA
run's ``ops.json``), they predict each op's status on every XPU release.

Matching rules (names differ on each side, see :func:`accelgrid.opcapture.base_op`):

* A fallback entry names a kernel (``linspace.out``, ``topk.values``); the program calls
  the functional op (``linspace.default``), which reaches that kernel. So an op whose
  *base op* is on the release's fallback list falls back, whatever overload it calls.
* Except where the same base op also has XPU kernels (2.4's ``random_``: ``random_`` and
  ``random_.from`` native, ``random_.to`` on the list): then the called overload's family
  (:func:`accelgrid.opcapture.overload_family`) decides; it is native only if a kernel of
  that family exists and no fallback entry has it.
* Native: a kernel of the called family exists, or the base op has a kernel for its
  default/out overload (other overloads are mostly routed to it). A base op whose kernels
  are all *other* named overloads is implemented per overload: ``_foreach_mul.Scalar`` had
  an XPU kernel in 2.5 but ``_foreach_mul.Tensor`` did not (it came in 2.6).
* Otherwise the capture's own classification decides: ``decomposed`` there (a composite
  kernel, no device kernel needed) is decomposed on XPU too; an op that needed a device
  kernel there is ``missing`` on XPU, or ``unknown`` where the release's kernel list is
  older than its branch head (2.14, whose registrations moved into PyTorch).
* ``cuda-only``: cuDNN / MIOpen ops (``cudnn_batch_norm``) are what CUDA routes the call
  to; an XPU run calls something else, which the capture cannot tell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .errors import InvalidInput
from .opcapture import base_op, overload_family

__all__ = [
    "COMPARED", "SEED_SERIES", "STATUSES", "agreement_line", "base_op", "choose_series",
    "compare_with_seed", "counts_table", "extraction_table", "load_core", "load_seed",
    "load_upstream", "matrix_series", "observed_vs_predicted", "overload_family", "predict",
    "predict_all", "predicted_view", "prediction_table", "seed_series_agreement",
    "seed_table", "series_counts", "series_names", "series_of", "stopped_falling_back",
]

STATUSES = ("native", "decomposed", "fallback", "missing", "cuda-only", "unknown")
# Statuses an observed xpu cell and a prediction can be compared on; "unknown" and
# "cuda-only" say the prediction (or the observation) cannot tell.
COMPARED = ("native", "decomposed", "fallback", "missing")
BAD = ("fallback", "missing")
# Worst first, for a seed row exercised by several captured overloads.
SEVERITY = {"missing": 5, "fallback": 4, "unknown": 3, "cuda-only": 2, "decomposed": 1,
            "native": 0}
SEED_EXPECTS = {"explicit": "fallback", "manual": "missing"}
# The seed ran pytorch/pytorch@21144ce (June 2024, before 2.4). torch-xpu-ops' release/2.4
# branched from its main on 2024-05-18 and ends 2024-06-04 (head 97d692e, "Add CPU fallback
# for GradScaler"): the state PyTorch pinned for 2.4, the only branch from that time.
# seed_series_agreement() backs this up: 2.4 is the series that agrees best with the seed.
SEED_SERIES = "2.4"
_CUDA_ONLY = re.compile(r"^_?(cudnn|miopen)_")
_NEEDS_KERNEL = ("native", "fallback", "missing")


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("accelgrid").joinpath("data", name)
                      .read_text(encoding="utf-8"))


def load_upstream() -> dict[str, Any]:
    """The packaged per-series extraction: ``{"series": {"2.4": {"branch", "commit",
    "native", "fallback", "sources", ...}}, ...}`` (see tools/extract_xpu_ops.py)."""
    return _read("xpu_ops.json")


def load_core() -> dict[str, Any]:
    """XPU kernels PyTorch itself registers (not in torch-xpu-ops), with their sources."""
    return _read("xpu_core_ops.json")


def load_seed() -> dict[str, Any]:
    """The seed's ops x examples table as extracted facts, with its provenance."""
    return _read("seed_000_ops.json")


def series_names(upstream: Mapping[str, Any]) -> list[str]:
    """The series in ``upstream``, oldest first ("2.10" after "2.9")."""
    return sorted(upstream["series"], key=lambda s: tuple(int(x) for x in s.split(".")))


@dataclass(frozen=True)
class _Release:
    native: dict[str, set[str]]  # base op -> overload families with an XPU kernel
    fallback: dict[str, set[str]]  # base op -> families on the fallback list
    composite: frozenset[str]  # base ops that run as composites on XPU
    complete: bool  # the kernel list was read at the branch head


def _families(names: Iterable[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in names:
        out.setdefault(base_op(name), set()).add(overload_family(name))
    return out


def _release(upstream: Mapping[str, Any], series: str, core: Mapping[str, Any]) -> _Release:
    try:
        entry = upstream["series"][series]
    except KeyError:
        raise KeyError(f"no upstream data for series {series!r}; have "
                       f"{', '.join(series_names(upstream))}") from None
    native = list(entry["native"])
    composite: set[str] = set()
    if _version(series) >= _version(core.get("applies_from", "0")):
        native += [e["op"] for e in core.get("native", [])]
        composite = {base_op(e["op"]) for e in core.get("composite", [])}
    complete = entry.get("native_commit", entry["commit"]) == entry["commit"]
    return _Release(_families(native), _families(entry["fallback"]), frozenset(composite),
                    complete)


def _version(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split(".") if x.isdigit())


def _status_of(record: Any) -> str | None:
    if isinstance(record, Mapping):
        return record.get("status")
    return record if isinstance(record, str) else None


def _predict_one(name: str, captured_status: str | None, rel: _Release) -> str:
    base, family = base_op(name), overload_family(name)
    if _CUDA_ONLY.match(base):
        return "cuda-only"
    native = rel.native.get(base, set())
    if base in rel.fallback:
        if family in native and family not in rel.fallback[base]:
            return "native"  # a mixed base op whose called overload has a kernel
        return "fallback"
    if family in native or "default" in native:
        return "native"
    if base in rel.composite or captured_status == "decomposed":
        return "decomposed"
    if captured_status in _NEEDS_KERNEL:
        return "missing" if rel.complete else "unknown"
    return "unknown"


def predict(captured: Mapping[str, Any] | Iterable[str], series: str,
            upstream: Mapping[str, Any] | None = None,
            core: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Each captured op's predicted status on torch ``series`` for XPU.

    ``captured``: op names as a TorchDispatchMode sees them (``aten::linspace.default``,
    ``aten::_foreach_mul_.Scalar``), mapped to their ops.json record or status on the
    capturing device (needed to tell decomposed from missing); a bare list of names can
    still be native or fallback, else "unknown". Rules: the module docstring."""
    upstream = load_upstream() if upstream is None else upstream
    rel = _release(upstream, series, load_core() if core is None else core)
    items = (captured.items() if isinstance(captured, Mapping)
             else ((name, None) for name in captured))
    return {name: _predict_one(name, _status_of(record), rel) for name, record in items}


def predict_all(ops_json_data: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                core: Mapping[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """``{series: {op: status}}`` for every series in the upstream data, from a cell's
    ops.json content (its ``ops`` records carry the capturing device's status)."""
    upstream = load_upstream() if upstream is None else upstream
    core = load_core() if core is None else core
    ops = ops_json_data.get("ops", ops_json_data)
    return {s: predict(ops, s, upstream, core) for s in series_names(upstream)}


def stopped_falling_back(predictions: Mapping[str, Mapping[str, str]]) -> dict[str, str | None]:
    """Per op that falls back or is missing in some series: the first series from which on
    it no longer does (None while it still does in the newest one). Ops never bad are left
    out. ``predictions`` is :func:`predict_all`'s result: the op x series view."""
    order = sorted(predictions, key=_version)
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
            for s, p in sorted(predictions.items(), key=lambda kv: _version(kv[0]))}


def series_of(version: str | None) -> str | None:
    """The series of a torch version: ``2.5.1+xpu`` -> ``2.5``; None if it has none."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return f"{m[1]}.{m[2]}" if m else None


def matrix_series(cells: Iterable[Any]) -> list[str]:
    """The torch series of a matrix's xpu cells (``Cell.device``/``.torch``), oldest first."""
    return sorted({c.torch for c in cells if c.device == "xpu"}, key=_version)


def choose_series(requested: Iterable[str] | None = None, cells: Iterable[Any] | None = None,
                  all_series: bool = False, upstream: Mapping[str, Any] | None = None
                  ) -> tuple[list[str], list[str]]:
    """The series to predict, oldest first, and notes: every series in the data with
    ``all_series``, else those ``requested``, else the matrix's xpu series (``cells``).
    A requested series without data is an :class:`InvalidInput`; a matrix series without
    data is left out with a note."""
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
        return sorted(wanted, key=_version), []
    from_matrix = matrix_series(cells or ())
    notes = [f"the matrix's xpu series {s} has no torch-xpu-ops data; left out"
             for s in from_matrix if s not in upstream["series"]]
    chosen = [s for s in from_matrix if s in upstream["series"]]
    if not chosen:
        raise InvalidInput("the matrix has no xpu cell with torch-xpu-ops data: name "
                           "--series or use --all-series")
    return chosen, notes


def _release_facts(upstream: Mapping[str, Any], series: str) -> dict[str, Any]:
    e = upstream["series"][series]
    return {"branch": e["branch"], "commit": e["commit"], "date": e.get("date"),
            "kernel_list_from": e.get("native_commit") or e["commit"]}


def predicted_view(captured: Mapping[str, Any], series: Iterable[str],
                   upstream: Mapping[str, Any] | None = None,
                   core: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """ops-predicted.json's content: a cell's captured ops (ops.json's content) predicted
    for each of ``series``, with per-series counts, the op x series view (``predicted``
    per op) and where each op stopped falling back or being missing; the seed's rows
    when :data:`SEED_SERIES` is among ``series``."""
    upstream = load_upstream() if upstream is None else upstream
    core = load_core() if core is None else core
    order = sorted(dict.fromkeys(series), key=_version)
    ops = captured.get("ops", {})
    preds = {s: predict(ops, s, upstream, core) for s in order}
    fixed = stopped_falling_back(preds)
    out_ops: dict[str, dict[str, Any]] = {}
    for op in sorted(ops):
        rec = ops[op] if isinstance(ops[op], Mapping) else {}
        entry = {"captured": _status_of(ops[op]), "workloads": dict(rec.get("workloads", {})),
                 "predicted": {s: preds[s][op] for s in order}}
        if op in fixed:
            entry["stopped_falling_back"] = fixed[op]
        out_ops[op] = entry
    doc: dict[str, Any] = {
        "schema": 1,
        "captured": {k: captured.get(k) for k in ("cell", "device_type", "torch")}
        | {"sources": list(captured.get("sources") or [])},
        "series": order,
        "releases": {s: _release_facts(upstream, s) for s in order},
        "workloads": list(captured.get("workloads") or sorted(
            {w for e in out_ops.values() for w in e["workloads"]})),
        "counts": series_counts(preds),
        "stopped_falling_back": fixed,
        "ops": out_ops,
        "seed": None,
    }
    if SEED_SERIES in order:
        rows = compare_with_seed(ops, SEED_SERIES, upstream, core=core)
        doc["seed"] = {"series": SEED_SERIES, "rows": rows, "agreement": agreement_line(rows)}
    return doc


def observed_vs_predicted(cell: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """For an xpu cell's ops.json content: the prediction for its torch series next to what
    it observed, and every disagreement (an op observed native but predicted fallback,
    ...). None for other devices. Ops where either side is outside :data:`COMPARED` are
    counted as not compared. A series without data gets ``error`` instead."""
    if cell.get("device_type") != "xpu":
        return None
    upstream = load_upstream() if upstream is None else upstream
    series = series_of(cell.get("torch"))
    if series not in upstream["series"]:
        return {"series": series, "error": f"no torch-xpu-ops data for torch {cell.get('torch')}",
                "predicted": {}, "disagreements": [],
                "counts": {"agree": 0, "disagree": 0, "not_compared": len(cell.get("ops", {}))}}
    ops = cell.get("ops", {})
    predicted = predict(ops, series, upstream, core)
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


# --- the seed's table ------------------------------------------------------------------

def _disagreement(expected: str, predicted: str) -> str:
    """Why a prediction differs from what the seed saw, as a category."""
    if predicted == "native":
        return "kernel-in-series"  # the release has a kernel the seed's build lacked
    if predicted == "decomposed":
        return "decomposed-in-capture"  # the capturing torch decomposes the call
    if predicted == "fallback":
        return "on-fallback-list-in-series"  # seed: missing; the release lists it
    if predicted == "missing":
        return "not-on-fallback-list-in-series"  # seed: fell back; the release has no entry
    return "not-predictable"  # cuda-only / unknown


def compare_with_seed(captured: Mapping[str, Any] | Iterable[str], series: str = SEED_SERIES,
                      upstream: Mapping[str, Any] | None = None,
                      seed: Mapping[str, Any] | None = None,
                      core: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per seed row: the captured calls that exercise it, the prediction for ``series``,
    and whether it agrees with what the seed saw (explicit = fallback, manual = missing).

    A row is exercised by captured ops with its base op; where several rows share a base op
    (``_foreach_mul.Scalar`` / ``.Tensor``) the overload family must match too. A row hit
    by several calls takes their worst prediction. Unexercised rows get ``agree: None``
    and reason ``not-exercised``; they do not count in :func:`agreement_line`."""
    seed = load_seed() if seed is None else seed
    records = dict(captured.items()) if isinstance(captured, Mapping) else dict.fromkeys(captured)
    predicted = predict(records, series, upstream, core)
    rows = seed["rows"]
    per_base: dict[str, int] = {}
    for row in rows:
        per_base[base_op(row["op"])] = per_base.get(base_op(row["op"]), 0) + 1
    out = []
    for row in rows:
        base, family = base_op(row["op"]), overload_family(row["op"])
        hits = sorted(op for op in records if base_op(op) == base
                      and (per_base[base] == 1 or overload_family(op) == family))
        expected = SEED_EXPECTS[row["status"]]
        result: dict[str, Any] = {"op": row["op"], "seed": row["status"], "expected": expected,
                                  "examples": row["examples"], "captured": hits,
                                  "predictions": {op: predicted[op] for op in hits}}
        if not hits:
            result.update(predicted=None, agree=None, reason="not-exercised")
        else:
            worst = max((predicted[op] for op in hits), key=SEVERITY.__getitem__)
            agree = worst == expected
            result.update(predicted=worst, agree=agree,
                          reason="agree" if agree else _disagreement(expected, worst))
        out.append(result)
    return out


def agreement_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """``Agreement with the seed's table: N of M rows (P %)`` over the exercised rows."""
    judged = [r for r in rows if r.get("agree") is not None]
    n, m = sum(1 for r in judged if r["agree"]), len(judged)
    pct = round(100 * n / m) if m else 0
    return f"Agreement with the seed's table: {n} of {m} rows ({pct} %)"


def seed_series_agreement(upstream: Mapping[str, Any] | None = None,
                          seed: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None) -> dict[str, tuple[int, int]]:
    """Per series, how many of the seed's rows its lists reproduce: ``(agree, rows)``.

    Each row's own name is predicted as a call that needed an XPU kernel (the seed saw it
    reach the XPU key). Evidence for which release stands for the seed's nightly."""
    upstream = load_upstream() if upstream is None else upstream
    seed = load_seed() if seed is None else seed
    names = {row["op"]: "native" for row in seed["rows"]}
    out = {}
    for s in series_names(upstream):
        rows = compare_with_seed(names, s, upstream, seed, core)
        out[s] = (sum(1 for r in rows if r["agree"]), len(rows))
    return out


# --- Markdown tables for docs/xpu-prediction.md -----------------------------------------

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
    order = sorted(predictions, key=_version)
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


def seed_table(rows: Iterable[Mapping[str, Any]], series: str) -> str:
    """The seed's rows: what it saw, the captured calls, the prediction, agree or why not."""
    lines = [f"| seed row | seed saw | captured calls | predicted ({series}) | agrees | reason |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        calls = ", ".join(f"`{op}`" for op in r["captured"]) or "—"
        agrees = {True: "yes", False: "no", None: "—"}[r["agree"]]
        lines.append(f"| `{r['op']}` | {r['seed']} ({r['expected']}) | {calls} | "
                     f"{r['predicted'] or '—'} | {agrees} | {r['reason']} |")
    return "\n".join(lines) + "\n"
