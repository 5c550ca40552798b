"""The grid with its history (:mod:`accelgrid.results.history`): per test the last N runs of each
cell as a strip, per cell what changed since its previous run, for a failing test the run
it started failing in and the last run it passed, and flaky tests.

:func:`annotate` fills, on a grid model (docs/reference/grid-schema.md, "history"):

- each result's ``history``: its strip, one letter per run, oldest first (history.CODE;
  ``.`` where that run lacked the test);
- a result that is bad now: ``failing_since`` (the first run of its current failing
  streak: run id, start, commit, torch build) and ``last_passed`` (the run before it that
  passed, or None when it never passed in the history);
- a flaky result: ``flaky`` = {flips, pairs, rate, reruns}. A test is flaky when, over the
  window, its outcome changed between good (passed) and bad at least ``FLAKY_FLIPS``
  times between two adjacent runs of the cell whose inputs were the same
  (:func:`accelgrid.results.history.inputs_digest`), or when it passed only on a rerun in the
  latest run. One change is not flakiness: it is a new failure or a fix;
- each column's ``history``: its window (runs) and ``since`` its previous run (new
  failures, fixed, stopped, appeared, vanished: results.verdict's transition table);
- the model's ``history``: the database, the window, the flaky tests.

The regression gate's flaky policy (:func:`gate_flaky`): a regression against the
baseline on a test the history calls flaky is reported (``FLAKY (not gating)``) and
does not fail the gate; any other regression still does. Lost cells still fail it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, overload

from ..base import outcomes
from ..base.jsonio import mapping
from ..results import verdict
from ..results.cellresults import run_of
from ..results.history import BAD_CODES, CODE, FLAKY, OUTCOME, Store, strip_flips
from ..results.records import Change, Column, Grid, Result, Row

DEFAULT_WINDOW = 30
FLAKY_FLIPS = 2
PASS = CODE[outcomes.PASSED]
RUN_BRIEF = ("run_id", "start", "commit_sha", "torch_build", "runner", "status", "inputs",
             "ci_url")


@overload
def _brief(run: dict[str, Any]) -> dict[str, Any]: ...
@overload
def _brief(run: dict[str, Any] | None) -> dict[str, Any] | None: ...
def _brief(run: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: run.get(k) for k in RUN_BRIEF} if run else None


def _previous(runs: list[dict[str, Any]]) -> int | None:
    """Where the run to compare the window's last with is: the one before it, or for a
    whole-cell run the last whole-cell run before it (a selected run in between would
    make every test outside its selection look vanished)."""
    whole = runs[-1]["selection"] == "[]"
    for i in range(len(runs) - 2, -1, -1):
        if not whole or runs[i]["selection"] == "[]":
            return i
    return None


def _since(strips: dict[str, str], at: int) -> dict[str, list[str]]:
    """What changed between the run at ``at`` and the last, from a cell's strips
    (:func:`accelgrid.results.verdict.transition`)."""
    out: dict[str, list[str]] = {key: [] for key in verdict.TRANSITIONS}
    for nodeid, strip in strips.items():
        key = verdict.transition(OUTCOME.get(strip[at]), OUTCOME.get(strip[-1]))
        if key is not None:
            out[key].append(nodeid)
    return {k: sorted(v) for k, v in out.items()}


def _builds(runs: list[dict[str, Any]], at: int | None) -> dict[str, Any] | None:
    """The torch builds of the previous run and this one, when they differ (a nightly
    against the night before: which builds the changes are between), else None."""
    if at is None or runs[at]["torch_build"] == runs[-1]["torch_build"]:
        return None
    return {"previous": runs[at]["torch_build"], "this": runs[-1]["torch_build"]}


def _window_ends(columns: list[Column], run_ids: dict[str, Any],
                 all_runs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Per cell, the run its window ends at. Several columns of one cell (several runs
    given): the window ends at the latest of them, and that column shows it."""
    upto: dict[str, str] = {}
    for cell, runs in all_runs.items():
        mine = {run_ids[c["name"]] for c in columns if c["cell"] == cell}
        latest = [r["run_id"] for r in runs if r["run_id"] in mine]
        if latest:
            upto[cell] = latest[-1]
    return upto


def _annotate_entry(entry: Result, strip: str, runs: list[dict[str, Any]],
                    inputs: list[Any], flaky: list[dict[str, Any]], nodeid: str,
                    name: str) -> bool:
    """Fill one result's strip, flakiness and failing streak (appending to ``flaky``).
    Returns whether it was bad in every run of the window (its last pass is further
    back)."""
    entry["history"] = strip
    if not strip.strip(PASS):
        return False  # passed every time: most results
    flips, pairs = strip_flips(strip, inputs)
    reran = strip[-1] == CODE[FLAKY]
    if flips >= FLAKY_FLIPS or reran:
        entry["flaky"] = {"flips": flips, "pairs": pairs,
                          "rate": round(flips / pairs, 3) if pairs else None,
                          "reruns": reran}
        flaky.append({"nodeid": nodeid, "cell": name, **entry["flaky"]})
    if strip[-1] not in BAD_CODES:
        return False
    i = len(strip) - 1
    while i > 0 and strip[i - 1] not in (PASS, CODE[FLAKY]):
        i -= 1  # skips, absences and bad runs continue the streak
    passed_at = i - 1
    while strip[i] not in BAD_CODES:
        i += 1  # the streak starts at its first bad run
    entry["failing_since"] = _brief(runs[i])
    entry["last_passed"] = _brief(runs[passed_at]) if passed_at >= 0 else None
    return passed_at < 0


def _further_back(store: Store, cell: str, name: str, whole_window: list[str],
                  rows: list[Row], runs: list[dict[str, Any]],
                  cell_runs: list[dict[str, Any]]) -> None:
    """Failing throughout the window (``runs``): the last pass (and the run after it,
    where the streak began) are further back in ``cell_runs``."""
    index = {r["run_id"]: i for i, r in enumerate(cell_runs)}
    older = store.last_passed_before(cell, whole_window, runs[0]["start"])
    by_id = {r["nodeid"]: r for r in rows}
    for nodeid in whole_window:
        entry = by_id[nodeid]["cells"][name]
        passed = older.get(nodeid)
        entry["last_passed"] = _brief(passed)
        if passed is not None:
            after = cell_runs[index[passed["run_id"]] + 1]
            entry["failing_since"] = _brief(after)
        else:
            entry["failing_since"] = {**mapping(_brief(cell_runs[0])), "earliest": True}


def annotate(model: Grid, store: Store, window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    """Fill ``model`` with what ``store`` knows of its cells (the runs of the grid's own
    columns are expected to be in it: the grid adds them first). Returns the model's
    ``history`` summary."""
    columns = [c for c in model["columns"] if c.get("status") != "lost"]
    run_ids = {c["name"]: run_of(Path(c["path"])).get("run_id") for c in columns}
    all_runs = {c["cell"]: store.runs_of(c["cell"]) for c in columns}
    upto = _window_ends(columns, run_ids, all_runs)
    win = store.window(list(all_runs), window, upto, all_runs)
    rows = model["rows"]
    flaky: list[dict[str, Any]] = []
    for col in columns:
        cell, name = col["cell"], col["name"]
        runs = win.runs.get(cell) or []
        strips = win.strips.get(cell) or {}
        shown = bool(runs) and runs[-1]["run_id"] == upto.get(cell) == run_ids[name]
        at = _previous(runs) if shown else None
        col["history"] = {"runs": [_brief(r) for r in runs], "in_history": shown,
                          "since": _since(strips, at) if at is not None else None,
                          "previous": _brief(runs[at]) if at is not None else None,
                          "builds": _builds(runs, at) if shown else None}
        if not shown:
            continue  # this column's run is not the latest of its window: no strips
        inputs = [r["inputs"] for r in runs]
        whole_window: list[str] = []  # bad in every run of the window: look further back
        for row in rows:
            entry = row["cells"].get(name)
            strip = strips.get(row["nodeid"])
            if entry is None or strip is None:
                continue
            if _annotate_entry(entry, strip, runs, inputs, flaky, row["nodeid"], name):
                whole_window.append(row["nodeid"])
        if whole_window:
            _further_back(store, cell, name, whole_window, rows, runs, all_runs[cell])
    flaky.sort(key=lambda f: (-(f["rate"] or 0), f["nodeid"], f["cell"]))
    history: dict[str, Any] = {"db": str(store.path), "window": window, "flaky": flaky,
                               "flaky_flips": FLAKY_FLIPS,
                               "cells": {c: len(r) for c, r in win.runs.items()}}
    model["history"] = history
    gate_flaky(model)
    return history


def gate_flaky(model: Grid) -> list[Change]:
    """Mark the baseline regressions on flaky tests (``flaky`` on the change): the gate
    reports them and does not fail on them. Returns those changes."""
    base = model.get("baseline")
    rows = {r["nodeid"]: r for r in model["rows"]}
    marked = []
    for change in base["changes"] if base else []:
        if change["change"] != "regression":
            continue
        row = rows.get(change["nodeid"])
        entry = row["cells"].get(change["cell"]) if row else None
        if entry and entry.get("flaky"):
            change["flaky"] = entry["flaky"]
            marked.append(change)
    return marked


def strip_text(strip: str) -> str:
    """A strip as words (for a title): ``P P F`` -> ``passed, passed, failed``."""
    from ..results.history import OUTCOME

    return ", ".join(OUTCOME.get(c, "absent") for c in strip)


def markdown_lines(model: Grid, md: Any, cap: int = 50) -> list[str]:
    """grid.md's part on lost cells and history: lost cells, per cell what changed since
    its previous run, failing tests with when they started, flaky tests. ``md`` escapes."""
    out: list[str] = []
    if model.get("lost"):
        out += [f"### ❌ Lost cells ({len(model['lost'])}): expected, no results", ""]
        out += [f"- **{md(lost['cell'])}**: {md(lost['why'])}" for lost in model["lost"]] + [""]
    hist = model.get("history")
    if not hist:
        return out
    out += [f"### History (last {hist['window']} runs per cell)", ""]
    since = [(c, c["history"]["since"]) for c in model["columns"]
             if mapping(c.get("history")).get("since")]
    if since:
        out += ["| cell | previous run | new failures | fixed | stopped | appeared | vanished |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for col, s in since:
            prev = col["history"]["previous"] or {}
            builds = col["history"].get("builds")
            torch = (f"; torch {md(builds['previous'])} → {md(builds['this'])}" if builds
                     else "")
            out.append(f"| {md(col['name'])} | {md(prev.get('start'))} "
                       f"({md(str(prev.get('commit_sha'))[:12])}{torch}) | "
                       f"{len(s['new_failures'])} | "
                       f"{len(s['fixed'])} | {len(s.get('stopped', ()))} | "
                       f"{len(s['appeared'])} | {len(s['vanished'])} |")
        out.append("")
        new = [(col["name"], n) for col, s in since for n in s["new_failures"]]
        if new:
            out += ["<details><summary><b>New failures since the previous run</b></summary>", ""]
            out += [f"- {md(cell)}: `{md(n)}`" for cell, n in new[:cap]]
            out += [f"- …and {len(new) - cap} more" if len(new) > cap else "", "</details>", ""]
    failing = []
    for row in model["rows"]:
        for cell, entry in row["cells"].items():
            if entry.get("failing_since"):
                failing.append((row["nodeid"], cell, entry))
    if failing:
        out += ["<details><summary><b>Failing tests: since when</b></summary>", "",
                "| test | cell | failing since (commit, torch) | last passed |",
                "| --- | --- | --- | --- |"]
        for nodeid, cell, entry in failing[:cap]:
            first, last = entry["failing_since"], entry.get("last_passed")
            out.append(f"| `{md(nodeid)}` | {md(cell)} | {md(first.get('start'))} "
                       f"({md(str(first.get('commit_sha'))[:12])}, {md(first.get('torch_build'))})"
                       f"{' or earlier' if first.get('earliest') else ''} | "
                       + (f"{md(last.get('start'))} ({md(str(last.get('commit_sha'))[:12])})"
                          if last else "never in the history") + " |")
        if len(failing) > cap:
            out.append(f"\n_…and {len(failing) - cap} more: grid.json has them all._")
        out += ["", "</details>", ""]
    if hist["flaky"]:
        out += [f"**Flaky** ({len(hist['flaky'])}; flaky regressions do not fail the gate):", ""]
        out += [f"- {md(f['cell'])}: `{md(f['nodeid'])}` — "
                + ("passed only on a rerun" if f["reruns"] else
                   f"{f['flips']} flips in {f['pairs']} (rate {f['rate']})")
                for f in hist["flaky"][:cap]] + [""]
    return out
