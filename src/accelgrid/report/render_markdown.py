"""grid.md: the grid as Markdown that fits a GitHub job summary."""

from __future__ import annotations

import html
from typing import Any

from ..base import outcomes
from ..base.text import one_line
from ..results.records import Column, Grid, Row
from . import compare
from .compare import CHANGE_LABEL, CHANGE_PLURAL
from .history import markdown_lines as history_lines

SYMBOL = {
    outcomes.PASSED: "✅", outcomes.FAILED: "❌", outcomes.ERROR: "💥",
    outcomes.SKIPPED: "⏭️", outcomes.XFAILED: "🟡", outcomes.XPASSED: "❗",
    outcomes.TIMEOUT: "⏱️", outcomes.CRASHED: "☠️", outcomes.NOT_RUN: "➖",
    outcomes.FLAKY: "🔁",
}
# The fewest bytes a result takes in grid.md ("lost" may stand in for its symbol).
_SYMBOL_BYTES = {o: min(len(s.encode()), len("lost")) for o, s in SYMBOL.items()}
GITHUB_SUMMARY_LIMIT = 1024 * 1024  # bytes GitHub takes per step; grid.md keeps to half
MAX_REASONS = 40   # reason rows per cell in "Why tests did not run"; the rest are counted
# Recorded properties grid.md shows beside a result's symbol: a few words that read at a
# glance (the attention kernel that ran); numbers stay in grid.html and grid.json.
MD_PROPERTIES = ("kernels",)


def _md(text: Any) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _md_changes(model: Grid, cap: int = 100) -> list[str]:
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
        if change == compare.REGRESSION:
            out += [f"### ❌ {title}", ""]
        else:
            out += [f"<details><summary><b>{title}</b></summary>", ""]
        out += ["| test | cell | baseline | now | message |", "| --- | --- | --- | --- | --- |"]
        for c in items[:cap]:
            now_ = c["outcome"] or "absent"
            out.append(f"| `{_md(c['nodeid'])}` | {_md(c['cell'])} | {c['expected'] or '—'} | "
                       f"{SYMBOL.get(now_, '')} {now_} | {_md(one_line(c['message']))} |")
        if len(items) > cap:
            out.append(f"\n_…and {len(items) - cap} more: see grid.json or grid.html._")
        out += [""] if change == compare.REGRESSION else ["", "</details>", ""]
    return out


def _md_grid(model: Grid, rows: list[Row], open_bad: bool) -> list[str]:
    cols = model["columns"]
    suites: dict[str, list[Row]] = {}
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
                change = rec.get("change") if rec else None
                if change == compare.REGRESSION:
                    mark += " **REGRESSION**"
                elif change == compare.NEW_PASS:
                    mark += " (new pass)"
                elif c["name"] in row.get("lost", {}):
                    mark = "lost"
                if rec and rec.get("issue") and rec["issue"].get("url"):
                    mark += f" [{_md(rec['issue']['id'])}]({rec['issue']['url']})"
                if rec and rec.get("properties"):
                    mark += _md_properties(rec["properties"])
                cells.append(mark)
            test = row["test"] if row["test"] != row["workload"] else ""
            body.append(f"| {_md(row['workload'])} | {_md(test)} | " + " | ".join(cells) + " |")
        body += ["", "</details>", ""]
    return body


def _md_properties(props: dict[str, Any]) -> str:
    """The :data:`MD_PROPERTIES` of a result, each as short code text (`` `flash_cpu` ``)."""
    out = ""
    for name in MD_PROPERTIES:
        value = props.get(name)
        if value is None or value == []:
            continue
        text = "+".join(map(str, value)) if isinstance(value, list) else str(value)
        out += f" `{_md(one_line(text, 40)).replace('`', '')}`"
    return out


def _md_reasons(cols: list[Column]) -> list[str]:
    """Per cell and suite: how many tests were skipped or not run, and why."""
    if not any(c.get("reasons") for c in cols):
        return []
    out = ["### Why tests did not run", "",
           "| cell | suite | outcome | tests | reason |", "| --- | --- | --- | --- | --- |"]
    for c in cols:
        groups = c.get("reasons") or []
        for g in groups[:MAX_REASONS]:
            out.append(f"| {_md(c['name'])} | {_md(g['suite'])} | {SYMBOL[g['outcome']]} "
                       f"{g['outcome']} | {g['count']} | {_md(g['reason'])} |")
        if len(groups) > MAX_REASONS:
            rest = groups[MAX_REASONS:]
            out.append(f"| {_md(c['name'])} | … | | {sum(g['count'] for g in rest)} | "
                       f"{len(rest)} more reasons: grid.json has them all |")
    return out + [""]


def _interesting(row: Row) -> bool:
    return bool(row.get("lost")) or any(
        c["outcome"] in outcomes.BAD or c.get("change") not in (None, compare.UNCHANGED)
        for c in row["cells"].values())


def _md_counts(model: Grid) -> list[str]:
    """The table of counts per cell, with its torch build, device and (with baselines) its
    changes against its baseline."""
    cols = model["columns"]
    with_base = model["baseline"] is not None
    out = ["| cell | torch build | device | " + " | ".join(outcomes.ALL)
           + (" | vs baseline" if with_base else "") + " |",
           "|" + " --- |" * (3 + len(outcomes.ALL) + with_base)]
    for c in cols:
        dev = _md(c["device_name"] or c["device"])
        if c["device_count"] and c["device_count"] > 1:
            dev += f" ×{c['device_count']}"
        if c["error"]:
            cells = " | ".join([f"{c['status']}: {_md(c['error'])}"]
                               + [""] * (len(outcomes.ALL) - 1))
        else:
            cells = " | ".join(str(c["counts"].get(o, 0) or "") for o in outcomes.ALL)
        if with_base:
            b = c["baseline"]["counts"] if c["baseline"] else None
            cells += " | " + (", ".join(f"{b[k]} {CHANGE_LABEL[k]}" for k in CHANGE_LABEL
                                        if b[k] and k != compare.EXPECTED_FAILURE)
                              or "no change") if b else " | no baseline"
            outside = c["baseline"].get("outside_selection") if c["baseline"] else None
            if outside:
                cells += f" ({outside} outside the selection)"
        out.append(f"| {_md(c['name'])} | {_md(c['torch_build'])} | {dev} | {cells} |")
    return out


def render(model: Grid, limit: int = GITHUB_SUMMARY_LIMIT // 2) -> str:
    """Markdown for a GitHub job summary: changes against baselines, counts per cell with
    each cell's torch build and device, then the grid, each suite folded in <details>.
    Over ``limit`` bytes it keeps only rows with a bad result or a change, then truncates."""
    cols = model["columns"]
    out = ["# accelgrid results", "",
           f"{len(cols)} cells, {len(model['rows'])} tests."
           + (" Cells errored: " + ", ".join(c["name"] for c in cols if c["error"]) + "."
              if any(c["error"] for c in cols) else ""), ""]
    out += _md_changes(model)
    out += history_lines(model, _md)
    out += _md_counts(model)
    if any(c["counts"].get(outcomes.NOT_RUN) for c in cols):
        out += ["", f"{SYMBOL[outcomes.NOT_RUN]} {_md(outcomes.NOT_RUN_MEANING)}."]
    partial = [c for c in cols if c["status"] != "ok"]
    if partial:
        out += [""] + [f"- ⚠️ **{_md(c['name'])}** {c['status']}: {_md(one_line(c['reason'], 400))}"
                       for c in partial]
    checked = [c for c in cols if c.get("ops_vs_predicted")]
    if checked:
        out.append("")
    for c in checked:
        ops = c["ops_vs_predicted"] or {}   # checked: there
        out.append(f"- 🔎 **{_md(c['name'])}** ops observed vs predicted: "
                   + (_md(ops["error"]) if ops.get("error") else
                      f"{ops['agree']} agree, {ops['disagree']} disagree with torch-xpu-ops "
                      f"{_md(ops['branch'])} (`accelgrid ops grid` lists them)"))
    out += [""] + _md_reasons(cols)
    out += ["Legend: " + ", ".join(f"{SYMBOL[o]} {o}" for o in outcomes.ALL), ""]
    out += [f"- note: {_md(n)}" for n in model.get("notes", [])]
    head = "\n".join(out) + "\n"
    # A row takes at least its names, " | " per column, each result's symbol and issue
    # link: skip rendering a full grid that cannot fit (rendering a big one only to drop
    # it cost a third). Escaping only lengthens a text, and a character is a byte or more.
    least = len(head.encode()) + sum(
        len(r["workload"]) + (len(r["test"]) if r["test"] != r["workload"] else 0)
        + 3 * len(cols) + 8 + sum(_SYMBOL_BYTES[c["outcome"]] + (
            len(c["issue"]["id"]) + len(c["issue"]["url"]) + 5
            if c.get("issue") and c["issue"].get("url") else 0) for c in r["cells"].values())
        for r in model["rows"])
    fits = least < limit
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
    return _truncated(text, limit) if len(text.encode()) > limit else text


def _truncated(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` bytes at a line's end, with a note saying so."""
    note = (f"\n\n_Grid truncated to fit the {limit // 1024} KiB summary budget: see the "
            "HTML grid artifact for all rows._\n")
    text = text.encode()[: limit - len(note.encode())].decode(errors="ignore")
    text = text[: text.rfind("\n")]
    if text.count("<details") > text.count("</details>"):
        text += "\n\n</details>"  # keep the rest of the summary page outside the fold
    return text + note
