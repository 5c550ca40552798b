"""The site's runs x cells page (``hud.html``), what a CI HUD shows first: one row per run,
newest first, one column per cell, a square per result coloured by its verdict, linking
to the cell's page and to the CI run it came from.

A row is one CI run (the results whose env.json "ci" names the same run and attempt,
:func:`accelgrid.results.provenance.ci_run_url`); a result without one (a run outside CI)
is a row of its own. The runs come from the history (``publish --history``), else from the
results folders given. The page's filters (a part of a cell's name, rows with a bad
result only) live in the URL's fragment, so a link reproduces the view.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..base import outcomes

ROWS = 60          # the newest runs the page shows
CELL_RUNS = 5000   # the newest cell runs read from the history for them
# A result's verdict, worst first: tests failed (or errored, timed out, crashed, passed
# when they should not); the run never finished; it ran no test; every test that ran is
# fine. "passed" means tests ran and none failed.
VERDICTS = ("failed", "unfinished", "empty", "passed")
BAD_VERDICTS = ("failed", "unfinished", "empty")


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _counts(run: Mapping[str, Any]) -> dict[str, int]:
    counts = run.get("counts") or {}
    if isinstance(counts, str):
        try:
            counts = json.loads(counts)
        except ValueError:
            counts = {}
    return {str(k): v for k, v in counts.items() if isinstance(v, int)} if isinstance(
        counts, dict) else {}


def verdict(run: Mapping[str, Any]) -> str:
    """One of :data:`VERDICTS` for a history runs row (:data:`RUN_COLUMNS`)."""
    counts = _counts(run)
    if any(counts.get(o) for o in outcomes.BAD):
        return "failed"
    if run.get("status") != "finished":
        return "unfinished"
    if not run.get("total"):
        return "empty"
    return "passed"


def rows(runs: Iterable[Mapping[str, Any]], limit: int = ROWS) -> list[dict[str, Any]]:
    """The runs (history rows) grouped into HUD rows, newest first: {key, start, ci_url,
    commits, results: {cell: run}}; of a cell run twice in one row, the later."""
    grouped: dict[str, dict[str, Any]] = {}
    for run in runs:
        url = run.get("ci_url")
        key = f"ci:{url}" if url else f"run:{run.get('run_id')}"
        row = grouped.setdefault(key, {"key": key, "ci_url": url, "start": None,
                                       "commits": [], "results": {}})
        start = run.get("start") or ""
        if row["start"] is None or start < row["start"]:
            row["start"] = start   # the row's date: when its first result started
        commit = run.get("commit_sha")
        if commit and commit not in row["commits"]:
            row["commits"].append(commit)
        old = row["results"].get(run["cell"])
        if old is None or (old.get("start") or "") <= start:
            row["results"][run["cell"]] = run
    ordered = sorted(grouped.values(), key=lambda r: (r["start"] or "", r["key"]),
                     reverse=True)
    return ordered[:limit]


def _square(cell: str, run: Mapping[str, Any], page: str | None) -> str:
    v = verdict(run)
    counts = _counts(run)
    said = ", ".join(f"{n} {o}" for o in outcomes.ALL if (n := counts.get(o)))
    title = (f"{cell}: {v} ({said or 'no tests'}); run {run.get('run_id')}, "
             f"{run.get('start') or '?'}, torch {run.get('torch_build') or '?'}")
    anchor = "#run-" + _e(run.get("run_id"))
    sq = (f'<a class="sq v-{v}" href="{_e(page)}{anchor}" title="{_e(title)}"></a>' if page
          else f'<span class="sq v-{v}" title="{_e(title)}"></span>')
    ci = (f'<a class="ci" href="{_e(run["ci_url"])}" title="its CI run">↗</a>'
          if run.get("ci_url") else "")
    return f'<td data-v="{v}">{sq}{ci}</td>'


def _row(row: dict[str, Any], cells: list[str], pages: Mapping[str, str]) -> str:
    """One run's row: when, its CI run (or run id), its commits, a square per cell."""
    res = row["results"]
    bad = any(verdict(r) in BAD_VERDICTS for r in res.values())
    when = _e((row["start"] or "?")[:16].replace("T", " "))
    if row["ci_url"]:
        tail = row["ci_url"].split("/actions/runs/", 1)[-1].replace("/attempts/", " #")
        what = f'<a href="{_e(row["ci_url"])}">CI run {_e(tail)}</a>'
    else:
        only = next(iter(res.values()))
        what = f"run <code>{_e(only.get('run_id'))}</code>"
    commits = " ".join(f"<code>{_e(str(c)[:12])}</code>" for c in row["commits"])
    tds = "".join(_square(c, res[c], pages.get(c)) if c in res else '<td></td>'
                  for c in cells)
    return (f'<tr data-bad="{int(bad)}"><th class="run">{when} {what} {commits}</th>'
            f"{tds}</tr>")


def page_body(hud_rows: list[dict[str, Any]], cells: list[str],
              pages: Mapping[str, str]) -> str:
    """The page's body: filters, the table, the legend and the script that keeps the
    filters in the URL. ``pages``: cell -> its page (relative), for the cells that have one."""
    head = "".join(f'<th class="c" data-cell="{_e(c)}"><span>{_e(c)}</span></th>'
                   for c in cells)
    body = [_row(row, cells, pages) for row in hud_rows]
    legend = " ".join(f'<span class="sq v-{v}"></span> {v}' for v in VERDICTS)
    return f"""<style>
#hud th.c{{height:9em;white-space:nowrap;vertical-align:bottom;padding:0 2px}}
#hud th.c span{{writing-mode:vertical-rl;transform:rotate(180deg)}}
#hud th.run{{text-align:left;white-space:nowrap;font-weight:400}}
#hud td{{text-align:center;padding:1px 2px;white-space:nowrap}}
.sq{{display:inline-block;width:14px;height:14px;border-radius:2px;vertical-align:middle}}
.v-passed{{background:#3a3}}.v-failed{{background:#c00}}.v-unfinished{{background:#f80}}
.v-empty{{background:#999}}a.ci{{font-size:10px;text-decoration:none;margin-left:1px}}
#hud-filters{{margin:.5em 0}}#hshown{{margin-left:1em;color:#555}}
</style>
<p>Rows: runs, newest first (a CI run's results are one row); columns: cells. A square is
one result: its cell's page on a click, its CI run on ↗. Filters are kept in the URL.</p>
<form id="hud-filters"><label>cells <input type="search" id="hq" size="18"
placeholder="part of a cell name"></label>
<label><input type="checkbox" id="hbad"> runs with a bad result only</label>
<span id="hshown"></span></form>
<table id="hud"><thead><tr><th>run</th>{head}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<p>{legend}</p>
<script>
(function () {{
  "use strict";
  const $ = s => document.querySelector(s), $$ = s => Array.from(document.querySelectorAll(s));
  const cols = $$('#hud thead th.c').map(th => th.dataset.cell.toLowerCase());
  const rows = $$('#hud tbody tr');
  function read() {{
    const p = new URLSearchParams(location.hash.slice(1));
    $('#hq').value = p.get('cells') || '';
    $('#hbad').checked = p.get('bad') === '1';
  }}
  function apply() {{
    const q = $('#hq').value.trim().toLowerCase(), bad = $('#hbad').checked;
    const vis = cols.map(c => !q || c.includes(q));
    $$('#hud tr').forEach(tr => Array.from(tr.cells).slice(1).forEach((td, j) => {{
      td.hidden = !vis[j];
    }}));
    let shown = 0;
    rows.forEach(tr => {{
      const any = Array.from(tr.cells).slice(1).some((td, j) => vis[j] && td.dataset.v);
      const anyBad = Array.from(tr.cells).slice(1).some(
        (td, j) => vis[j] && td.dataset.v && td.dataset.v !== 'passed');
      tr.hidden = !any || (bad && !anyBad);
      if (!tr.hidden) shown++;
    }});
    $('#hshown').textContent = shown + ' of ' + rows.length + ' runs shown';
    const p = new URLSearchParams();
    if (q) p.set('cells', q);
    if (bad) p.set('bad', '1');
    const hash = p.toString() ? '#' + p.toString() : '';
    if (hash !== location.hash) history.replaceState(null, '', hash || location.pathname);
  }}
  $('#hud-filters').addEventListener('submit', e => e.preventDefault());
  $('#hq').addEventListener('input', apply);
  $('#hbad').addEventListener('change', apply);
  window.addEventListener('hashchange', () => {{ read(); apply(); }});
  read(); apply();
  document.body.dataset.ready = '1';
}})();
</script>"""
