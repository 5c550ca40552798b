"""Op-coverage pages: per cell ``ops.json``/``ops.md``/``ops.html`` (ops x workloads, with
the kernels fallback messages named and the missing ops); across cells
``ops-grid.json``/``.md``/``.html`` (ops x cells, the torch version where an op stopped
falling back, and each xpu cell's observed statuses beside the prediction for its
release); and ``ops-predicted.json``/``.md``/``.html`` (a cell's captured ops predicted
per XPU release, :func:`predict`). The models are :mod:`accelgrid.ops` and
:mod:`accelgrid.ops.xpu_prediction`; the HTML comes from ``templates/ops.html.j2``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import ops
from ..base import contract, outputs
from ..base.errors import InvalidInput
from ..base.jsonio import safe_dumps
from ..ops import xpu_prediction
from ._common import templates
from .render_markdown import _md

CELL_FILES = (contract.OPS_FILE, "ops.md", "ops.html")
CROSS_FILES = ("ops-grid.json", "ops-grid.md", "ops-grid.html")
PREDICTED_FILES = ("ops-predicted.json", "ops-predicted.md", "ops-predicted.html")
FIXED_HEADER = "stopped falling back in"
MESSAGES_HEADER = "messages named"
HOW = {"not-implemented": "not implemented", "fell-back": "fell back"}
FALLBACK_KIND = {False: "registered fallback", True: "missing, fell back"}


def _page(title: str, sections: list[dict[str, Any]], intro: list[str] | None = None) -> str:
    return templates().get_template("ops.html.j2").render(
        title=title, intro=intro or [], sections=sections) + "\n"


def _section(header: list[str], rows: list[dict[str, Any]], heading: str = "",
             notes: list[str] | None = None) -> dict[str, Any]:
    return {"heading": heading, "notes": notes or [], "header": header, "rows": rows}


def _md_table(header: list[str], rows: list[list[str]], code: bool = True) -> list[str]:
    """A Markdown table; each row's first cell is an op name, set in code when ``code``."""
    # Every cell escaped as grid.md's are (render_markdown._md): workload names come from
    # test ids, and GitHub renders raw HTML in Markdown. A code span shows its text as
    # it is, so there only a backtick or a pipe could break out.
    out = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + " --- |" * len(header)]
    out += [f"| {_code(r[0]) if code else _md(r[0])} | " + " | ".join(_md(c) for c in r[1:])
            + " |" for r in rows]
    return out


def _code(text: Any) -> str:
    return "`" + str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def _html_rows(rows: list[list[Any]]) -> list[dict[str, Any]]:
    """Rows of (class, text) pairs or plain text after the op, for the template."""
    # "routed: cuda" -> class "routed"
    return [{"op": r[0], "cells": [{"cls": c[0].split(":")[0], "text": c[1]}
                                   if isinstance(c, tuple)
                                   else {"cls": "", "text": c} for c in r[1:]]}
            for r in rows]


def _short(kernel: str) -> str:
    return kernel.removeprefix("aten::")


def _names(names: Any) -> str:
    return ", ".join(sorted(names)) if names else ""


# --- one cell --------------------------------------------------------------------------

def _status_text(entry: dict[str, Any]) -> str:
    how = ops.missing_how(entry)
    return f"{entry['status']} ({HOW[how]})" if how else entry["status"]


def _messages(entry: dict[str, Any]) -> list[str]:
    return sorted({*entry.get("fallback_seen", {}), *entry.get("missing_seen", {})})


def _cell_tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]], str]]:
    """(heading, header, rows, note) of each table of a cell's page; rows are lists whose
    first item is the op and whose others are text or (class, text)."""
    wls = data["workloads"]
    with_messages = any(_messages(e) for e in data["ops"].values())
    header = ["op", "status", *([MESSAGES_HEADER] if with_messages else []), *wls]
    rows = []
    for op, e in data["ops"].items():
        extra = [", ".join(_messages(e))] if with_messages else []
        rows.append([op, (e["status"], _status_text(e)), *extra,
                     *(str(e["workloads"].get(w, "")) for w in wls)])
    tables = [("", header, rows, "")]
    seen = data.get("fallback_seen") or []
    if seen:
        tables.append((
            "CPU fallbacks seen", ["kernel", "kind", "captured ops", "workloads"],
            [[f["kernel"], FALLBACK_KIND[bool(f.get("missing_fell_back"))],
              _names(f["ops"]) or "(no captured call)", ", ".join(f["workloads"])]
             for f in seen],
            "Kernels named by the device's CPU-fallback messages, next to the captured calls "
            "they belong to (same base op). \"missing, fell back\": the device has no kernel "
            "for it; it ran on the CPU only because PYTORCH_ENABLE_XPU_FALLBACK=1 let it."))
    missing = data.get("missing") or []
    if missing:
        tables.append((
            "Missing", ["op", "how", "captured ops", "workloads"],
            [[m["op"], HOW.get(m.get("how", "not-implemented"), m.get("how")),
              _names(m.get("ops")) or "(no captured call)", ", ".join(m["workloads"])]
             for m in missing],
            "\"not implemented\": the call raised; \"fell back\": it ran on the CPU through "
            "the enable flag's catch-all fallback."))
    return tables


def _cell_intro(data: dict[str, Any]) -> list[str]:
    counts = ", ".join(f"{n} {s}" for s, n in data["counts"].items() if n)
    fell = sum(1 for e in data["ops"].values() if ops.missing_how(e) == "fell-back")
    if fell:
        counts += f" (of the missing, {fell} fell back)"
    out = [counts]
    if data.get("hf_ops"):
        out.append(f"Ops Hugging Face's own tests (suites/hf_tests) found not implemented or "
                   f"falling back, with the tests that hit each: {data['hf_ops']} (beside this "
                   "page).")
    if data.get("generic_fallback_notice"):
        out.append("XPU printed its once-per-process fallback notice: run the "
                   "`fallback-debug` or `fallback-survey` profile to name every op.")
    return out


def _text(cell: Any) -> str:
    return cell[1] if isinstance(cell, tuple) else str(cell)


def cell_markdown(data: dict[str, Any]) -> str:
    """Laid out like the seed's hand-made table: op, status, then one column per workload;
    the kernels fallback messages named and the missing ops below."""
    lines = [f"# Op coverage: {_md(data['cell'])} ({_md(data['device_type'])}, torch "
             f"{_md(data['torch'])})", ""]
    for line in _cell_intro(data):
        lines += [line, ""]
    for heading, header, rows, note in _cell_tables(data):
        if heading:
            lines += ["", f"## {heading}", "", note, ""]
        lines += _md_table(header, [[_text(c) for c in r] for r in rows])
    return "\n".join(lines) + "\n"


def cell_html(data: dict[str, Any]) -> str:
    """The same tables as :func:`cell_markdown`, statuses coloured."""
    sections = [_section(header, _html_rows(rows), heading, [note] if note else [])
                for heading, header, rows, note in _cell_tables(data)]
    return _page(f"Op coverage: {data['cell']}", sections, _cell_intro(data))


def _write_pages(out: Path, stem: str, data: dict[str, Any], markdown: str,
                 html: str) -> dict[str, Path]:
    """``out/<stem>.json`` / ``.md`` / ``.html``; returns their paths."""
    written = outputs.replace_files(
        Path(out), {f"{stem}.json": safe_dumps(data, indent=2, sort_keys=False) + "\n",
                    f"{stem}.md": markdown, f"{stem}.html": html},
        stem, f"accelgrid ops ({stem}.*)", own_folder=stem == "ops")  # ops.*: a cell's folder
    return {"json": written[f"{stem}.json"], "md": written[f"{stem}.md"],
            "html": written[f"{stem}.html"]}


def write_cell(folder: Path, data: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Write ops.json / ops.md / ops.html into a cell's results folder; returns ops.json's
    content, or None (nothing written) when the cell captured no ops. ``data``: the
    folder's :func:`accelgrid.ops.aggregate`, when the caller has it."""
    data = ops.aggregate(folder) if data is None else data
    if data is None:
        return None
    if (folder / "hf_ops.md").is_file():  # written in the cell by suites/hf_tests
        data = {**data, "hf_ops": "hf_ops.md"}
    _write_pages(folder, "ops", data, cell_markdown(data), cell_html(data))
    return data


# --- across cells ----------------------------------------------------------------------

def _fixed(view: dict[str, Any], op: str, prefix: str = "") -> str:
    return ", ".join(f"{d}: {prefix}{v}"
                     for d, v in view["stopped_falling_back"].get(op, {}).items())


def _observed(view: dict[str, Any], op: str, cell: str) -> tuple[str, str]:
    status = view["ops"][op].get(cell) or ""
    how = view.get("missing_how", {}).get(op, {}).get(cell)
    kernels = view.get("fallback_seen", {}).get(op, {}).get(cell)
    if how:
        return status, f"{status} ({HOW[how]})"
    if status == "fallback" and kernels:
        return status, f"{status} ({', '.join(_short(k) for k in kernels)})"
    return status, status


def _predicted_header(view: dict[str, Any], cell: str) -> str:
    check = view["predicted"][cell]
    return f"{cell} predicted ({check.get('branch') or 'no data'})"


def _cross_rows(view: dict[str, Any], prefix: str) -> tuple[list[str], list[list[Any]]]:
    predicted = view.get("predicted", {})
    header = ["op"]
    for c in view["cells"]:
        header.append(c)
        if c in predicted:
            header.append(_predicted_header(view, c))
    header.append(FIXED_HEADER)
    wrong = {(d["cell"], d["op"]) for d in view.get("disagreements", [])}
    rows = []
    for op in view["ops"]:
        row: list[Any] = [op]
        for c in view["cells"]:
            row.append(_observed(view, op, c))
            if c in predicted:
                guess = predicted[c]["predicted"].get(op) or ""
                row.append((f"{guess} disagree", f"{guess} ≠") if (c, op) in wrong
                           else (guess, guess))
        row.append(_fixed(view, op, prefix))
        rows.append(row)
    return header, rows


def check_lines(view: dict[str, Any]) -> list[str]:
    """Per xpu cell of an op x cell view: how its observations compare with the prediction."""
    out = []
    for cell, check in view.get("predicted", {}).items():
        n = check["counts"]
        if check.get("error"):
            out.append(f"{cell}: {check['error']}; nothing predicted.")
            continue
        out.append(f"{cell} observed vs predicted from torch-xpu-ops {check['branch']}: "
                   f"{n['agree']} agree, {n['disagree']} disagree, {n['not_compared']} not "
                   "compared (unknown or routed on either side).")
    return out


PREDICTED_NOTE = ("Predicted: torch-xpu-ops' registrations for the cell's release applied to "
                  "the ops it captured; it cannot see runtime routing or driver bugs. "
                  "\"≠\": observed and predicted disagree.")


def cross_markdown(view: dict[str, Any]) -> str:
    """Op x cell statuses (:func:`accelgrid.ops.cross_cell`) as a Markdown table; an xpu
    cell's column has its predicted column beside it, disagreements marked and listed."""
    header, rows = _cross_rows(view, "torch ")
    lines = ["# Op coverage across cells", ""]
    if view.get("predicted"):
        lines += [PREDICTED_NOTE, ""]
    lines += _md_table(header, [[_text(c) for c in r] for r in rows])
    if view.get("predicted"):
        lines += ["", "## Observed vs predicted", ""]
        lines += [f"- {line}" for line in check_lines(view)]
        if view["disagreements"]:
            lines += [""] + _md_table(["op", "cell", "observed", "predicted"], [
                [d["op"], d["cell"], d["observed"], d["predicted"]]
                for d in view["disagreements"]])
    return "\n".join(lines) + "\n"


def cross_html(view: dict[str, Any]) -> str:
    """The same tables as :func:`cross_markdown`, statuses coloured."""
    header, rows = _cross_rows(view, "")
    sections = [_section(header, _html_rows(rows),
                         notes=[PREDICTED_NOTE] if view.get("predicted") else [])]
    if view.get("predicted"):
        sections.append(_section(
            ["op", "cell", "observed", "predicted"] if view["disagreements"] else [],
            _html_rows([[d["op"], d["cell"], (d["observed"], d["observed"]),
                         (f"{d['predicted']} disagree", d["predicted"])]
                        for d in view["disagreements"]]),
            "Observed vs predicted", check_lines(view)))
    return _page("Op coverage across cells", sections)


def write_cross(view: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ops-grid.json / .md / .html into ``out``; returns their paths."""
    return _write_pages(out, "ops-grid", view, cross_markdown(view), cross_html(view))


# --- predicted per XPU release ---------------------------------------------------------

PREDICTED_INTRO = (
    "Predicted, not observed: intel/torch-xpu-ops' registrations for each release (its XPU "
    "kernels and its CPU-fallback list, accelgrid.ops.xpu_prediction) applied to the ops "
    "captured here. It cannot see runtime routing (an XPU run may call other ops than the "
    "capturing device did), driver bugs, or kernels registered after the data was read; "
    "an xpu cell's own run is what observes them.")
OK_STATUSES = ("native", "decomposed")


def _series_label(doc: dict[str, Any], series: str) -> str:
    rel = doc["releases"][series]
    return f"{rel['branch']} @ {rel['commit'][:12]}"


def _predicted_cell(entry: dict[str, Any], series: str) -> tuple[str, str]:
    """(status class, text) of an op's prediction for ``series``; a routed op's text names
    the op XPU calls instead and its status (``routed: cpu → aten::_weight_int4pack_mm:
    native``)."""
    status = entry["predicted"][series]
    calls = (entry.get("xpu_calls") or {}).get(series)
    return status, (f"{status} → {calls}" if calls else status)


def _predicted_tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]], str]]:
    """(heading, header, rows, note) for each table of ops-predicted.md/.html."""
    order, wls = doc["series"], doc["workloads"]
    tables = []
    tables.append((
        "Per series", ["series", "release", *xpu_prediction.STATUSES],
        [[s, _series_label(doc, s), *(str(doc["counts"][s][st])
                                      for st in xpu_prediction.STATUSES)] for s in order],
        f"{len(doc['ops'])} captured ops: how many of them each release would run so."))
    bad = {op: e for op, e in doc["ops"].items()
           if any(v not in OK_STATUSES for v in e["predicted"].values())}
    fixed = doc["stopped_falling_back"]
    tables.append((
        "Op x series: where each op stopped falling back or being missing",
        ["op", *order, "no longer falls back / missing from"],
        [[op, *(_predicted_cell(e, s) for s in order),
          ((fixed[op] or "not yet") if op in fixed else "")] for op, e in bad.items()],
        f"Ops native or decomposed in every series are left out "
        f"({len(doc['ops']) - len(bad)} of {len(doc['ops'])}; ops-predicted.json has them)."))
    for s in order:
        rows = [[op, _predicted_cell(e, s), e["captured"] or "",
                 *(str(e["workloads"].get(w, "")) for w in wls)]
                for op, e in doc["ops"].items() if e["predicted"][s] not in OK_STATUSES]
        c = doc["counts"][s]
        tables.append((
            f"torch {s} for XPU ({_series_label(doc, s)})",
            ["op", "predicted", f"captured ({doc['captured'].get('device_type')})", *wls]
            if rows else [], rows,
            ", ".join(f"{c[st]} {st}" for st in xpu_prediction.STATUSES)
            + (": the ops that would fall back, be missing or cannot be predicted, with their "
               "calls per workload."
               if rows else ": every captured op would run natively or decomposed.")))
    seed = doc.get("seed")
    if seed:
        tables.append((
            f"The seed's table, predicted for {seed['series']}",
            ["seed row", "seed saw", "captured calls", f"predicted ({seed['series']})",
             "agrees", "reason"],
            [[r["op"], f"{r['seed']} ({r['expected']})", ", ".join(r["captured"]) or "—",
              r["predicted"] or "—", {True: "yes", False: "no", None: "—"}[r["agree"]],
              r["reason"]] for r in seed["rows"]],
            seed["agreement"]))
    return tables


def _predicted_title(doc: dict[str, Any]) -> str:
    cap = doc["captured"]
    return (f"XPU op coverage predicted: {cap.get('cell')} ({cap.get('device_type')}, "
            f"torch {cap.get('torch')})")


def predicted_markdown(doc: dict[str, Any]) -> str:
    """ops-predicted.md: counts per series, the op x series view, then per series the ops
    that would fall back or be missing (the seed's table, predicted), and the seed's rows
    when its series is included."""
    sources = ", ".join(f"`{s}`" for s in doc["captured"].get("sources", []))
    lines = [f"# {_predicted_title(doc)}", "", f"Captured ops from {sources}." if sources else "",
             "", PREDICTED_INTRO]
    for heading, header, rows, note in _predicted_tables(doc):
        lines += ["", f"## {heading}", "", note]
        if header:
            lines += [""] + _md_table(header, [[_text(c) for c in r] for r in rows],
                                      code=header[0] != "series")
    return "\n".join(lines) + "\n"


def predicted_html(doc: dict[str, Any]) -> str:
    """The same tables as :func:`predicted_markdown`, statuses coloured."""
    sources = ", ".join(doc["captured"].get("sources", []))
    sections = [_section(header, _html_rows(rows), heading, [note])
                for heading, header, rows, note in _predicted_tables(doc)]
    intro = ([f"Captured ops from {sources}."] if sources else []) + [PREDICTED_INTRO]
    return _page(_predicted_title(doc), sections, intro)


def write_predicted(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ops-predicted.json / .md / .html into ``out``; returns their paths."""
    return _write_pages(out, "ops-predicted", doc, predicted_markdown(doc),
                        predicted_html(doc))


def _load_all(inputs: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each input's captured ops. One input must have them; of several (``results/*``), a
    plain file that is no ops.json (the grids) is passed over silently and a folder
    without captured ops with a note, as long as one input has them."""
    if len(inputs) == 1:
        return [ops.load_captured(inputs[0])], []
    loaded: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in inputs:
        try:
            loaded.append(ops.load_captured(path))
        except InvalidInput as exc:
            if not path.exists():
                raise
            if not path.is_file():
                notes.append(f"{exc}; left out")
    if not loaded:
        raise InvalidInput("no captured ops in " + " ".join(map(str, inputs)))
    return loaded, notes


def default_predicted_out(inputs: list[Path]) -> Path:
    """Beside the one input (in a cell's folder, or beside an ops.json); ``results/`` for
    several."""
    if len(inputs) != 1:
        return Path("results")
    path = Path(inputs[0])
    return path if path.is_dir() else path.parent


@dataclass
class PredictedReport:
    """What :func:`predict` predicted and wrote."""

    doc: dict[str, Any]
    paths: dict[str, Path]
    notes: list[str]

    def lines(self) -> list[str]:
        """What ``accelgrid ops predict`` prints: the input, the counts per series, files."""
        cap = self.doc["captured"]
        out = [f"captured: {', '.join(cap['sources'])}: {cap['cell']} ({cap['device_type']}, "
               f"torch {cap['torch']}), {len(self.doc['ops'])} ops"]
        for s, c in self.doc["counts"].items():
            out.append(f"xpu {s} ({self.doc['releases'][s]['branch']}): "
                       + ", ".join(f"{c[st]} {st}" for st in xpu_prediction.STATUSES))
        if self.doc.get("seed"):
            out.append(self.doc["seed"]["agreement"] + f" (series {self.doc['seed']['series']})")
        out.append("wrote " + ", ".join(str(p) for p in self.paths.values()))
        return out


def predict(inputs: list[Path], series: list[str] | None = None, all_series: bool = False,
            cells: Iterable[Any] | None = None, out: Path | None = None) -> PredictedReport:
    """``accelgrid ops predict``: read each input's captured ops (a results/<cell>/ folder
    or an ops.json; several are merged), predict them for the chosen XPU series
    (:func:`accelgrid.ops.xpu_prediction.choose_series`: ``series``, every series with
    ``all_series``, else the xpu series of the matrix's ``cells``) and write
    ops-predicted.json/.md/.html into ``out`` (default :func:`default_predicted_out`)."""
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise InvalidInput("name a results/<cell>/ folder or an ops.json")
    loaded, skipped = _load_all(inputs)
    captured = ops.merge(loaded)
    chosen, notes = xpu_prediction.choose_series(series, cells, all_series)
    notes = [*skipped, *notes]
    doc = xpu_prediction.predicted_view(captured, chosen)
    paths = write_predicted(doc, Path(out) if out else default_predicted_out(inputs))
    return PredictedReport(doc, paths, notes)
