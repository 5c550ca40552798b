"""Grids: tests x cells from any number of results folders, as JSON, Markdown and HTML.

``build(folders, baseline_dir=None)`` finds the cell folders under ``folders`` (a cell's
``results/<cell>/`` or any folder holding many, e.g. a CI artifacts download), reads each
(missing, partial or corrupt results make that cell an errored or partial column with the
reason; nothing else is lost) into one model, and, given baselines, marks each result's
change against them. ``render_*`` turn the model into ``grid.json`` (schema in
docs/grid-schema.md, versioned by ``schema``), ``grid.md`` (fits a GitHub job summary)
and ``grid.html`` (one self-contained file); ``write`` writes all three.

Rows are tests grouped by suite (``suites/<name>/``) and workload (the parametrize id, or
the test function when not parametrized); columns are cells ordered by device, torch
version and profile.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from . import baseline as baseline_mod
from . import outcomes
from . import results as results_mod
from .provenance import now
from .results import CellResults, load_cell
from .versions import version_key

SCHEMA_VERSION = 2
SYMBOL = {
    outcomes.PASSED: "✅", outcomes.FAILED: "❌", outcomes.ERROR: "💥",
    outcomes.SKIPPED: "⏭️", outcomes.XFAILED: "🟡", outcomes.XPASSED: "❗",
    outcomes.TIMEOUT: "⏱️", outcomes.CRASHED: "☠️", outcomes.NOT_RUN: "➖",
}
# The HTML uses glyphs every system font has (headless browsers often lack emoji fonts).
GLYPH = {
    outcomes.PASSED: "✓", outcomes.FAILED: "✗", outcomes.ERROR: "E",
    outcomes.SKIPPED: "s", outcomes.XFAILED: "x", outcomes.XPASSED: "X!",
    outcomes.TIMEOUT: "T", outcomes.CRASHED: "☠", outcomes.NOT_RUN: "–",
}
# One letter per outcome / change: the HTML's rows carry these strings for fast filtering.
CODE = {
    outcomes.PASSED: "P", outcomes.FAILED: "F", outcomes.ERROR: "E", outcomes.SKIPPED: "S",
    outcomes.XFAILED: "x", outcomes.XPASSED: "X", outcomes.TIMEOUT: "T",
    outcomes.CRASHED: "C", outcomes.NOT_RUN: "N",
}
CHANGE_CODE = {
    baseline_mod.REGRESSION: "r", baseline_mod.NEW_PASS: "n",
    baseline_mod.EXPECTED_FAILURE: "e", baseline_mod.CHANGED: "c", baseline_mod.LOST: "l",
    baseline_mod.NEW: "+",
}
CHANGE_LABEL = {
    baseline_mod.REGRESSION: "regression", baseline_mod.NEW_PASS: "new pass",
    baseline_mod.EXPECTED_FAILURE: "expected failure", baseline_mod.CHANGED: "changed",
    baseline_mod.LOST: "lost", baseline_mod.NEW: "new test",
}
CHANGE_PLURAL = {
    baseline_mod.REGRESSION: "regressions", baseline_mod.NEW_PASS: "new passes",
    baseline_mod.EXPECTED_FAILURE: "expected failures", baseline_mod.CHANGED: "changed",
    baseline_mod.LOST: "lost", baseline_mod.NEW: "new tests",
}
GITHUB_SUMMARY_LIMIT = 1024 * 1024
CELL_FILES = (results_mod.TESTS, results_mod.ENV, results_mod.COLLECTED, results_mod.SUMMARY)
# Folders never searched for cells: tool state, and a cell's own per-worker folder.
SKIP_DIRS = {".git", ".nox", ".venv", "venv", "node_modules", "__pycache__",
             results_mod.RUNNING}
MAX_DEPTH = 6
RECORD_FIELDS = ("outcome", "message", "duration", "worker", "device", "issue", "longrepr")
LONGREPR_HTML_LIMIT = 8000  # characters of a traceback kept in the HTML page
MESSAGE_TITLE_LIMIT = 300
ISSUE_RE = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


# --- finding and reading cells ---------------------------------------------------------

def _is_cell(folder: Path) -> bool:
    return any((folder / name).is_file() for name in CELL_FILES)


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """Cell folders given or found under ``paths``, and a note per path that was ignored.

    A path holding tests.jsonl/env.json/collected.json/summary.json is a cell; another
    folder is searched (depth <= 6) for such folders, e.g. an artifacts download; a folder
    with none, or a path that does not exist, is kept so it shows as an errored cell.
    A file is ignored (``results/*`` also matches the grids themselves) unless it is one of
    a cell's files, which stands for its folder.
    """
    found: list[Path] = []
    notes: list[str] = []
    for path in map(Path, paths):
        if path.is_file():
            if path.name in CELL_FILES:
                found.append(path.parent)
            else:
                notes.append(f"{path}: a file, not a results folder; ignored")
        elif not path.is_dir() or _is_cell(path):
            found.append(path)
        else:
            inner = _search(path)
            found += inner or [path]
    unique: dict[Path, Path] = {}
    for folder in found:
        unique.setdefault(folder.resolve(), folder)
    return list(unique.values()), notes


def _search(top: Path) -> list[Path]:
    cells = []
    base = len(top.parts)
    for dirpath, dirnames, _ in os.walk(top):
        here = Path(dirpath)
        if here != top and _is_cell(here):
            cells.append(here)
            dirnames[:] = []  # a cell's subfolders are its own (running/)
            continue
        if len(here.parts) - base >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
    return cells


def fill_cell_name(cell: CellResults) -> None:
    """Without env.json, take the cell's name from its records (an artifact's folder is
    often named after the artifact, not the cell)."""
    if cell.env.get("cell"):
        return
    for rec in cell.tests.values():
        if isinstance(rec.get("cell"), str) and rec["cell"]:
            cell.name = rec["cell"]
            return


def _read(folder: Path) -> CellResults:
    if not folder.exists():
        cell = CellResults(name=folder.name, path=folder)
        cell.error = f"results folder {folder} does not exist"
        return cell
    cell = load_cell(folder)
    fill_cell_name(cell)
    # Records written by another version (or by hand) may carry outcomes or ids this
    # version does not know; they become errors with the reason rather than crash a grid.
    for nodeid, rec in list(cell.tests.items()):
        if rec["outcome"] not in CODE:
            cell.problems.append(f"{nodeid}: unknown outcome {rec['outcome']!r}")
            cell.tests[nodeid] = {**rec, "outcome": outcomes.ERROR,
                                  "message": f"unknown outcome {rec['outcome']!r} recorded; "
                                             f"{rec.get('message') or ''}".strip("; ")}
        if not isinstance(nodeid, str):
            cell.tests[str(nodeid)] = cell.tests.pop(nodeid)
    return cell


# --- rows and columns ------------------------------------------------------------------

def split_nodeid(nodeid: str) -> tuple[str, str, str | None]:
    """(file, test function, parametrize id or None) of a pytest node id."""
    path, _, rest = nodeid.partition("::")
    name, bracket, param = rest.partition("[")
    if bracket and param.endswith("]"):
        param = param[:-1]
    return path, name.rsplit("::", 1)[-1] or path, (param or None) if bracket else None


def _new_row(nodeid: str) -> dict[str, Any]:
    _, func, param = split_nodeid(nodeid)
    return {"nodeid": nodeid, "suite": results_mod.suite_of(nodeid), "workload": param or func,
            "test": func, "cells": {}}


def _issue(value: Any) -> dict[str, str] | None:
    """A record's ``issue`` as {id, url, title}; only http(s) links are kept."""
    if isinstance(value, str):
        m = ISSUE_RE.match(value.strip())
        if m:
            value = {"id": value.strip(),
                     "url": f"https://github.com/{m[1]}/issues/{m[2]}"}
        else:
            value = {"id": value, "url": value}
    if not isinstance(value, dict):
        return None
    url = str(value.get("url") or "")
    if not url.startswith(("https://", "http://")):
        m = ISSUE_RE.match(str(value.get("id") or ""))
        url = f"https://github.com/{m[1]}/issues/{m[2]}" if m else ""
    out = {"id": str(value.get("id") or url or "issue"), "url": url}
    if value.get("title"):
        out["title"] = str(value["title"])
    return out


def _parse_name(name: str) -> tuple[str, str, str]:
    device, _, rest = name.partition("-")
    series, _, profile = rest.partition("-")
    if series and not series[0].isdigit():  # not <device>-<torch>[-<profile>]
        series, profile = "", rest
    return device, series, profile or "default"


def _column(cell: CellResults, key: str) -> dict[str, Any]:
    env = cell.env or {}
    flags = env.get("env") if isinstance(env.get("env"), dict) else {}
    torch = env.get("torch") if isinstance(env.get("torch"), dict) else {}
    devices = [d for d in torch.get("devices") or [] if isinstance(d, dict)]
    version = torch.get("version")
    runtime = (torch.get("cuda_runtime") and f"CUDA {torch['cuda_runtime']}") or (
        torch.get("xpu_runtime") and f"XPU {torch['xpu_runtime']}")
    names = list(dict.fromkeys(str(d.get("name")) for d in devices if d.get("name")))
    counts = {o: 0 for o in outcomes.ALL}
    for rec in cell.tests.values():
        counts[rec["outcome"]] += 1
    device, series, profile = _parse_name(cell.name)
    problems = list(cell.problems)
    if torch.get("error"):
        problems.append(str(torch["error"]))
    status = "errored" if cell.error else ("partial" if problems else "ok")
    return {
        "name": key,
        "cell": cell.name,
        "device": flags.get("ACCELGRID_DEVICE") or env.get("device_type") or device,
        "torch_series": flags.get("ACCELGRID_TORCH") or series,
        "profile": flags.get("ACCELGRID_PROFILE") or profile,
        "torch_version": version,
        "torch_build": (version or "?") + (f" ({runtime})" if runtime else ""),
        "torch_git": torch.get("git_version"),
        "device_name": ", ".join(names) or None,
        "device_count": torch.get("device_count"),
        "driver": torch.get("driver"),
        "host": (env.get("host") or {}).get("name"),
        "python": (env.get("python") or {}).get("version"),
        "commit": (env.get("project") or {}).get("commit"),
        "start": env.get("start"),
        "end": env.get("end"),
        "packages": env.get("packages") or {},
        "env_flags": flags,
        "counts": counts,
        "total": len(cell.tests),
        "status": status,
        "error": cell.error,
        "problems": problems,
        "reason": cell.error or "; ".join(problems) or None,
        "path": str(cell.path),
        "baseline": None,
    }


def _sort_key(col: dict[str, Any]) -> tuple:
    series = col["torch_series"] or ""
    return (col["device"], version_key(series),
            col["profile"] != "default", col["profile"], col["name"])


def build(folders: Iterable[Path], baseline_dir: Path | None = None) -> dict[str, Any]:
    """The grid model from results folders (each ``results/<cell>/`` or a folder holding
    many); with ``baseline_dir``, every cell that has ``<dir>/<cell>.json`` is compared."""
    paths, notes = discover(folders)
    cells = [_read(p) for p in paths]
    keys: Counter[str] = Counter()
    columns, by_key = [], {}
    for cell in cells:
        keys[cell.name] += 1
        # The same cell twice (two runs, two artifacts) gets two columns, told apart.
        key = cell.name if keys[cell.name] == 1 else f"{cell.name}#{keys[cell.name]}"
        columns.append(_column(cell, key))
        by_key[key] = cell
    columns.sort(key=_sort_key)
    rows: dict[str, dict[str, Any]] = {}
    for col in columns:
        for nodeid, rec in by_key[col["name"]].tests.items():
            row = rows.get(nodeid) or rows.setdefault(nodeid, _new_row(nodeid))
            entry = {k: rec[k] for k in RECORD_FIELDS if rec.get(k) not in (None, "")}
            if isinstance(entry.get("duration"), float):
                entry["duration"] = round(entry["duration"], 4)
            if "issue" in entry:
                issue = _issue(entry.pop("issue"))
                if issue:
                    entry["issue"] = issue
            row["cells"][col["name"]] = entry
    summary = None
    if baseline_dir is not None:
        summary = _compare(columns, rows, Path(baseline_dir), notes)
    ordered = sorted(rows.values(), key=lambda r: (r["suite"], r["workload"], r["nodeid"]))
    return {"schema": SCHEMA_VERSION, "generated": now(), "outcomes": list(outcomes.ALL),
            "columns": columns, "rows": ordered, "baseline": summary, "notes": notes}


def _compare(columns: list[dict[str, Any]], rows: dict[str, dict[str, Any]], folder: Path,
             notes: list[str]) -> dict[str, Any]:
    """Mark each result of a cell with a baseline with its change; lost tests go in the
    row's ``lost``. Returns the model's ``baseline`` summary."""
    wanted = {c["cell"] for c in columns}
    baselines, problems = baseline_mod.load_dir(folder, sorted(wanted))
    notes += problems
    if not folder.is_dir():
        notes.append(f"baseline folder {folder} does not exist: nothing compared")
    totals: Counter[str] = Counter()
    changes: list[dict[str, Any]] = []
    for col in columns:
        expected = baselines.get(col["cell"])
        if expected is None:
            continue
        counts: Counter[str] = Counter()
        name = col["name"]
        for nodeid in sorted(set(expected) | {n for n, r in rows.items() if name in r["cells"]}):
            row = rows.get(nodeid) or rows.setdefault(nodeid, _new_row(nodeid))
            entry = row["cells"].get(name)
            was = expected.get(nodeid)
            change = baseline_mod.classify(was, entry["outcome"] if entry else None)
            counts[change] += 1
            if change == baseline_mod.LOST:
                row.setdefault("lost", {})[name] = was
            elif entry is not None and change != baseline_mod.UNCHANGED:
                entry["change"] = change
                if was is not None:
                    entry["expected"] = was
            if change != baseline_mod.UNCHANGED:
                changes.append({"nodeid": nodeid, "cell": name, "change": change,
                                "expected": was, "outcome": entry["outcome"] if entry else None,
                                "message": (entry or {}).get("message")})
        col["baseline"] = {"file": str(baseline_mod.path_for(folder, col["cell"])),
                           "counts": {c: counts.get(c, 0) for c in baseline_mod.CATEGORIES}}
        totals.update(counts)
    order = {c: i for i, c in enumerate(baseline_mod.CATEGORIES)}
    changes.sort(key=lambda c: (order[c["change"]], c["nodeid"], c["cell"]))
    return {"dir": str(folder), "cells": [c["name"] for c in columns if c["baseline"]],
            "counts": {c: totals.get(c, 0) for c in baseline_mod.CATEGORIES},
            "regressions": totals.get(baseline_mod.REGRESSION, 0), "changes": changes}


# --- JSON ------------------------------------------------------------------------------

def render_json(model: dict[str, Any]) -> str:
    """grid.json: the model without tracebacks (they stay in the HTML)."""
    def dump(value: Any) -> str:
        return json.dumps(value, default=str, ensure_ascii=False)

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


# --- Markdown --------------------------------------------------------------------------

def _md(text: Any) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _short(text: Any, n: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _md_changes(model: dict[str, Any], cap: int = 100) -> list[str]:
    base = model["baseline"]
    if not base:
        return []
    counts = base["counts"]
    out = [f"**Against baselines** (`{_md(base['dir'])}`, {len(base['cells'])} cells): "
           + ", ".join(f"{counts[c]} {(CHANGE_LABEL if counts[c] == 1 else CHANGE_PLURAL)[c]}"
                       for c in CHANGE_LABEL) + ".", ""]
    for change in CHANGE_LABEL:
        items = [c for c in base["changes"] if c["change"] == change]
        if not items:
            continue
        title = f"{CHANGE_PLURAL[change]} ({len(items)})".capitalize()
        if change == baseline_mod.REGRESSION:
            out += [f"### ❌ {title}", ""]
        else:
            out += [f"<details><summary><b>{title}</b></summary>", ""]
        out += ["| test | cell | baseline | now | message |", "| --- | --- | --- | --- | --- |"]
        for c in items[:cap]:
            now_ = c["outcome"] or "absent"
            out.append(f"| `{_md(c['nodeid'])}` | {_md(c['cell'])} | {c['expected'] or '—'} | "
                       f"{SYMBOL.get(now_, '')} {now_} | {_md(_short(c['message']))} |")
        if len(items) > cap:
            out.append(f"\n_…and {len(items) - cap} more: see grid.json or grid.html._")
        out += [""] if change == baseline_mod.REGRESSION else ["", "</details>", ""]
    return out


def _md_grid(model: dict[str, Any], rows: list[dict[str, Any]], open_bad: bool) -> list[str]:
    cols = model["columns"]
    suites: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        suites.setdefault(row["suite"], []).append(row)
    head = ("| workload | test | " + " | ".join(_md(c["name"]) for c in cols) + " |\n|"
            + " --- |" * (2 + len(cols)))
    body: list[str] = []
    for suite, srows in suites.items():
        bad = sum(1 for r in srows for c in r["cells"].values() if c["outcome"] in outcomes.BAD)
        body += [f"<details{' open' if bad and open_bad else ''}><summary><b>{_md(suite)}"
                 f"</b>: {len(srows)} tests, {bad} bad results</summary>", "", head]
        for row in srows:
            cells = []
            for c in cols:
                rec = row["cells"].get(c["name"])
                mark = SYMBOL[rec["outcome"]] if rec else ""
                change = (rec or {}).get("change")
                if change == baseline_mod.REGRESSION:
                    mark += " **REGRESSION**"
                elif change == baseline_mod.NEW_PASS:
                    mark += " (new pass)"
                elif c["name"] in row.get("lost", {}):
                    mark = "lost"
                if rec and rec.get("issue") and rec["issue"].get("url"):
                    mark += f" [{_md(rec['issue']['id'])}]({rec['issue']['url']})"
                cells.append(mark)
            test = row["test"] if row["test"] != row["workload"] else ""
            body.append(f"| {_md(row['workload'])} | {_md(test)} | " + " | ".join(cells) + " |")
        body += ["", "</details>", ""]
    return body


def _interesting(row: dict[str, Any]) -> bool:
    return bool(row.get("lost")) or any(
        c["outcome"] in outcomes.BAD or c.get("change") not in (None, baseline_mod.UNCHANGED)
        for c in row["cells"].values())


def render_markdown(model: dict[str, Any], limit: int = GITHUB_SUMMARY_LIMIT // 2) -> str:
    """Markdown for a GitHub job summary: changes against baselines, counts per cell with
    each cell's torch build and device, then the grid, each suite folded in <details>.
    Over ``limit`` bytes it keeps only rows with a bad result or a change, then truncates."""
    cols = model["columns"]
    out = ["# accelgrid results", "",
           f"{len(cols)} cells, {len(model['rows'])} tests."
           + (" Cells errored: " + ", ".join(c["name"] for c in cols if c["error"]) + "."
              if any(c["error"] for c in cols) else ""), ""]
    out += _md_changes(model)
    with_base = model["baseline"] is not None
    out += ["| cell | torch build | device | " + " | ".join(outcomes.ALL)
            + (" | vs baseline" if with_base else "") + " |",
            "|" + " --- |" * (3 + len(outcomes.ALL) + with_base)]
    for c in cols:
        dev = _md(c["device_name"] or c["device"])
        if c["device_count"] and c["device_count"] > 1:
            dev += f" ×{c['device_count']}"
        if c["error"]:
            cells = " | ".join([f"errored: {_md(c['error'])}"] + [""] * (len(outcomes.ALL) - 1))
        else:
            cells = " | ".join(str(c["counts"].get(o, 0) or "") for o in outcomes.ALL)
        if with_base:
            b = (c["baseline"] or {}).get("counts")
            cells += " | " + (", ".join(f"{b[k]} {CHANGE_LABEL[k]}" for k in CHANGE_LABEL
                                        if b[k] and k != baseline_mod.EXPECTED_FAILURE)
                              or "no change") if b else " | no baseline"
        out.append(f"| {_md(c['name'])} | {_md(c['torch_build'])} | {dev} | {cells} |")
    partial = [c for c in cols if c["status"] != "ok"]
    if partial:
        out += [""] + [f"- ⚠️ **{_md(c['name'])}** {c['status']}: {_md(_short(c['reason'], 400))}"
                       for c in partial]
    out += ["", "Legend: " + ", ".join(f"{SYMBOL[o]} {o}" for o in outcomes.ALL), ""]
    out += [f"- note: {_md(n)}" for n in model.get("notes", [])]
    head = "\n".join(out) + "\n"
    # Each grid cell is at least 4 bytes: skip rendering a full grid that cannot fit.
    fits = len(model["rows"]) * (len(cols) + 2) * 4 < limit
    text = head + "\n".join(["## Grid", ""] + _md_grid(model, model["rows"],
                                                        len(model["rows"]) < 300)) if fits else ""
    if not fits or len(text.encode()) > limit:
        rows = [r for r in model["rows"] if _interesting(r)]
        grid = "\n".join([
            "## Grid: rows with a bad result or a change only", "",
            f"_{len(model['rows']) - len(rows)} rows where every cell is fine are left out "
            "to fit the job summary; grid.html has them all._", ""]
            + _md_grid(model, rows, False))
        text = head + grid
    if len(text.encode()) > limit:
        note = (f"\n\n_Grid truncated to fit the {limit // 1024} KiB summary budget: see the "
                "HTML grid artifact for all rows._\n")
        text = text.encode()[: limit - len(note.encode())].decode(errors="ignore")
        text = text[: text.rfind("\n")]
        if text.count("<details") > text.count("</details>"):
            text += "\n\n</details>"  # keep the rest of the summary page outside the fold
        text += note
    return text


# --- HTML ------------------------------------------------------------------------------

def _attr(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_body(model: dict[str, Any], dev_index: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """The table body (built here, not in Jinja: 100k cells render 10x faster) and the
    per-cell details the page shows on click, keyed "row,column"."""
    cols = model["columns"]
    names = [c["name"] for c in cols]
    dclass = [f"d{dev_index[c['device']]}" for c in cols]
    details: dict[str, Any] = {}
    parts: list[str] = []
    suite = None
    width = len(cols) + 1
    for i, row in enumerate(model["rows"]):
        if row["suite"] != suite:
            suite = row["suite"]
            parts.append(f'<tr class="suite" data-s="{_attr(suite)}"><td colspan="{width}">'
                         f"{_attr(suite)}</td></tr>\n")
        codes, changes, tds = [], [], []
        lost = row.get("lost") or {}
        for j, name in enumerate(names):
            rec = row["cells"].get(name)
            if rec is None:
                codes.append(".")
                if name in lost:
                    changes.append("l")
                    tds.append(f'<td class="{dclass[j]} lost" title="lost: in the baseline as '
                               f'{_attr(lost[name])}, absent now">∅</td>')
                    details[f"{i},{j}"] = {"change": baseline_mod.LOST, "expected": lost[name]}
                else:
                    changes.append(".")
                    tds.append(f'<td class="{dclass[j]}"></td>')
                continue
            outcome = rec["outcome"]
            change = rec.get("change")
            codes.append(CODE[outcome])
            changes.append(CHANGE_CODE.get(change, "."))
            cls = f"{dclass[j]} {outcome}" + (f" ch-{change}" if change else "")
            title = ""
            msg = rec.get("message")
            device = rec.get("device") or ""
            on = f"[{device}] " if ":" in device else ""  # a pinned worker's device
            if msg or change or on:
                tip = on + (f"{CHANGE_LABEL[change]} (baseline: {rec.get('expected', '—')}) "
                            if change else "") + _short(msg, MESSAGE_TITLE_LIMIT)
                title = f' title="{_attr(tip.strip())}"'
            link = ""
            issue = rec.get("issue")
            if issue and issue.get("url"):
                label = issue["id"].rsplit("#", 1)[-1]
                link = (f' <a href="{_attr(issue["url"])}" target="_blank" rel="noopener" '
                        f'title="{_attr(issue.get("title") or issue["id"])}">#{_attr(label)}</a>')
            tds.append(f'<td class="{cls}"{title}>{GLYPH[outcome]}{link}</td>')
            if msg or rec.get("longrepr") or issue or change or outcome in outcomes.BAD:
                info = {k: rec[k] for k in ("outcome", "message", "duration", "worker",
                                            "device", "issue", "change", "expected")
                        if k in rec}
                if rec.get("longrepr"):
                    lr = str(rec["longrepr"])
                    info["longrepr"] = (lr if len(lr) <= LONGREPR_HTML_LIMIT else
                                        "…" + lr[-LONGREPR_HTML_LIMIT:])  # the end says why
                details[f"{i},{j}"] = info
        label = _attr(row["workload"])
        if row["test"] != row["workload"]:
            label += f' <span class="fn">{_attr(row["test"])}</span>'
        parts.append(f'<tr class="t" data-i="{i}" data-s="{_attr(row["suite"])}" '
                     f'data-o="{"".join(codes)}" data-c="{"".join(changes)}">'
                     f'<td class="test" title="{_attr(row["nodeid"])}">{label}</td>'
                     + "".join(tds) + "</tr>\n")
    return "".join(parts), details


def _script_json(data: Any) -> Markup:
    """JSON safe inside <script> (no "</script>" or "<!--" can end it early)."""
    text = json.dumps(data, default=str, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_html(model: dict[str, Any]) -> str:
    """grid.html: one self-contained page (inline CSS and JS, no external resources)."""
    env = Environment(loader=PackageLoader("accelgrid", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    template = env.get_template("grid.html.j2")
    cols = model["columns"]
    devices = list(dict.fromkeys(c["device"] for c in cols))
    dev_index = {d: i for i, d in enumerate(devices)}
    # Header groups: device, then torch series within it (columns are sorted that way).
    dev_groups: list[dict[str, Any]] = []
    series_groups: list[dict[str, Any]] = []
    for c in cols:
        if not dev_groups or dev_groups[-1]["device"] != c["device"]:
            dev_groups.append({"device": c["device"], "span": 0, "d": dev_index[c["device"]]})
        dev_groups[-1]["span"] += 1
        key = (c["device"], c["torch_series"])
        if not series_groups or series_groups[-1]["key"] != key:
            series_groups.append({"key": key, "series": c["torch_series"], "span": 0,
                                  "d": dev_index[c["device"]]})
        series_groups[-1]["span"] += 1
    body, details = _html_body(model, dev_index)
    provenance = [{k: c[k] for k in ("name", "cell", "device", "torch_series", "profile",
                                     "torch_build", "torch_git", "device_name", "device_count",
                                     "driver", "host", "python", "commit", "start", "end",
                                     "status", "reason", "path", "packages", "env_flags",
                                     "baseline")} for c in cols]
    suites = list(dict.fromkeys(r["suite"] for r in model["rows"]))
    return template.render(
        model=model, cols=cols, symbol=GLYPH, outcomes=outcomes.ALL, code=CODE,
        bad=outcomes.BAD, devices=devices, dev_groups=dev_groups, suites=suites,
        series_groups=series_groups, body=Markup(body), change_label=CHANGE_LABEL,
        change_plural=CHANGE_PLURAL,
        details_json=_script_json(details), columns_json=_script_json(provenance),
        code_json=_script_json({v: k for k, v in CODE.items()}),
        bad_codes="".join(CODE[o] for o in outcomes.BAD),
        dev_count=len(devices),
    )


def write(model: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write grid.json, grid.md and grid.html into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "grid.json", "md": out / "grid.md", "html": out / "grid.html"}
    paths["json"].write_text(render_json(model), encoding="utf-8")
    paths["md"].write_text(render_markdown(model), encoding="utf-8")
    paths["html"].write_text(render_html(model), encoding="utf-8")
    return paths
