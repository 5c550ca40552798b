"""grid.html: the grid as one self-contained page (inline CSS and JS, no external
resources), filterable by outcome, device, suite and change; a click shows a result's
message, traceback and the cell's provenance."""

from __future__ import annotations

import functools
import html
from typing import Any

from markupsafe import Markup

from ..base import outcomes
from ..base.jsonio import dumps
from ..base.text import one_line
from ..results.history import ABSENT
from ..results.history import CODE as HISTORY_CODE
from ..results.records import Grid, Result
from . import compare
from ._common import templates
from .compare import CHANGE_LABEL, CHANGE_PLURAL
from .history import strip_text

# The HTML uses glyphs every system font has (headless browsers often lack emoji fonts).
GLYPH = {
    outcomes.PASSED: "✓", outcomes.FAILED: "✗", outcomes.ERROR: "E",
    outcomes.SKIPPED: "s", outcomes.XFAILED: "x", outcomes.XPASSED: "X!",
    outcomes.TIMEOUT: "T", outcomes.CRASHED: "☠", outcomes.NOT_RUN: "–",
    outcomes.FLAKY: "↻",
}
# One letter per outcome / change: the rows carry these strings for fast filtering.
CODE = {
    outcomes.PASSED: "P", outcomes.FAILED: "F", outcomes.ERROR: "E", outcomes.SKIPPED: "S",
    outcomes.XFAILED: "x", outcomes.XPASSED: "X", outcomes.TIMEOUT: "T",
    outcomes.CRASHED: "C", outcomes.NOT_RUN: "N", outcomes.FLAKY: "K",
}
CHANGE_CODE: dict[str | None, str] = {
    compare.REGRESSION: "r", compare.NEW_PASS: "n", compare.EXPECTED_FAILURE: "e",
    compare.CHANGED: "c", compare.LOST: "l", compare.NEW: "+",
}
# A result with only these fields (and no pinned device, not bad) is a bare glyph.
# A strip that passed every time adds nothing to show either.
_PLAIN_FIELDS = frozenset(("outcome", "duration", "worker", "device", "history"))
# A history strip's letters (accelgrid.results.history.CODE) as the outcome classes that
# colour them.
STRIP_CLASS = {**{c: o for o, c in HISTORY_CODE.items()}, ABSENT: "absent"}
LONGREPR_HTML_LIMIT = 8000  # characters of a traceback kept in the HTML page
MESSAGE_TITLE_LIMIT = 300


def _attr(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _result_td(rec: Result, dclass: str) -> str:
    """The <td> of a result that is not a bare glyph: its change, hover text (message or
    properties), issue link and history strip."""
    outcome = rec["outcome"]
    change = rec.get("change")
    cls = f"{dclass} {outcome}" + (f" ch-{change}" if change else "")
    title = ""
    msg = rec.get("message")
    device = rec.get("device") or ""
    on = f"[{device}] " if ":" in device else ""  # a pinned worker's device
    props = rec.get("properties")
    if msg or change or on or props:
        tip = on + (f"{CHANGE_LABEL[change]} (baseline: {rec.get('expected', '—')}) "
                    if change else "") + one_line(msg or properties_text(props),
                                                  MESSAGE_TITLE_LIMIT)
        title = f' title="{_attr(tip.strip())}"'
    link = ""
    issue = rec.get("issue")
    if issue and issue.get("url"):
        label = issue["id"].rsplit("#", 1)[-1]
        link = (f' <a href="{_attr(issue["url"])}" target="_blank" rel="noopener" '
                f'title="{_attr(issue.get("title") or issue["id"])}">#{_attr(label)}</a>')
    return f'<td class="{cls}"{title}>{GLYPH[outcome]}{link}{_history_html(rec)}</td>'


def _result_details(rec: Result) -> dict[str, Any] | None:
    """What the page shows on a click on a result, or None when there is nothing to show."""
    if not (rec.get("message") or rec.get("longrepr") or rec.get("issue") or rec.get("change")
            or rec["outcome"] in outcomes.BAD or "history" in rec or "properties" in rec):
        return None
    info: dict[str, Any] = {
        k: rec[k] for k in ("outcome", "message", "duration", "worker", "device",
                            "issue", "change", "expected", "history", "flaky",
                            "failing_since", "last_passed", "properties")
        if k in rec}
    if rec.get("longrepr"):
        lr = str(rec["longrepr"])
        info["longrepr"] = (lr if len(lr) <= LONGREPR_HTML_LIMIT else
                            "…" + lr[-LONGREPR_HTML_LIMIT:])  # the end says why
    return info


def _html_body(model: Grid, dev_index: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """The table body (built here, not in Jinja: 100k cells render 10x faster) and the
    per-cell details the page shows on click, keyed "row,column"."""
    cols = model["columns"]
    names = [c["name"] for c in cols]
    dclass = [f"d{dev_index[c['device']]}" for c in cols]
    plain = [{o: f'<td class="{d} {o}">{GLYPH[o]}</td>' for o in outcomes.ALL} for d in dclass]
    bad = frozenset(outcomes.BAD)
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
                    details[f"{i},{j}"] = {"change": compare.LOST, "expected": lost[name]}
                else:
                    changes.append(".")
                    tds.append(f'<td class="{dclass[j]}"></td>')
                continue
            outcome = rec["outcome"]
            if _PLAIN_FIELDS.issuperset(rec) and outcome not in bad \
                    and ":" not in rec.get("device", "") and not rec.get("history", "P").strip("P"):
                # Most results: a glyph, no title, no details; the same <td> every time.
                codes.append(CODE[outcome])
                changes.append(".")
                tds.append(plain[j][outcome])
                continue
            codes.append(CODE[outcome])
            changes.append(CHANGE_CODE.get(rec.get("change"), "."))
            tds.append(_result_td(rec, dclass[j]))
            info = _result_details(rec)
            if info is not None:
                details[f"{i},{j}"] = info
        label = _attr(row["workload"])
        if row["test"] != row["workload"]:
            label += f' <span class="fn">{_attr(row["test"])}</span>'
        parts.append(f'<tr class="t" data-i="{i}" data-s="{_attr(row["suite"])}" '
                     f'data-o="{"".join(codes)}" data-c="{"".join(changes)}">'
                     f'<td class="test" title="{_attr(row["nodeid"])}">{label}</td>'
                     + "".join(tds) + "</tr>\n")
    return "".join(parts), details


def properties_text(props: dict[str, Any] | None) -> str:
    """A result's recorded properties on one line (``kernels: flash_cpu; state_ratio:
    0.26``): the hover text of a result without a message."""
    def value(v: Any) -> str:
        if isinstance(v, list):
            return ", ".join(map(str, v))
        if isinstance(v, dict):
            return " ".join(f"{k}={x}" for k, x in v.items())
        return str(v)

    return "; ".join(f"{k}: {value(v)}" for k, v in (props or {}).items())


def _history_html(rec: Result) -> str:
    """A result's history strip (oldest first) and flaky badge, when it has them."""
    out = ""
    flaky = rec.get("flaky")
    if flaky:
        why = ("passed only on a rerun" if flaky.get("reruns") else
               f"{flaky['flips']} flips in {flaky['pairs']} runs with unchanged inputs")
        out += f' <span class="flaky" title="flaky: {_attr(why)}">flaky</span>'
    strip = rec.get("history")
    if strip and strip.strip("P"):  # passed every run: nothing to draw
        out += _strip_html(strip)
    return out


@functools.lru_cache(maxsize=4096)
def _strip_html(strip: str) -> str:
    # Few distinct strips recur across a grid's thousands of results (always skipped,
    # always xfailed, ...): each is drawn once.
    return (f'<span class="strip" title="last {len(strip)} runs, oldest first: '
            f'{_attr(strip_text(strip))}">'
            + "".join(f'<i class="{STRIP_CLASS.get(c, "absent")}"></i>' for c in strip)
            + "</span>")


def _script_json(data: Any) -> Markup:
    """JSON safe inside <script> (no "</script>" or "<!--" can end it early)."""
    text = dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render(model: Grid, nav: str | None = None) -> str:
    """grid.html: one self-contained page (inline CSS and JS, no external resources);
    ``nav``: HTML links above it (the published site's)."""
    template = templates().get_template("grid.html.j2")
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
    # Why tests did not run, per cell and suite (as grid.md's table): every group.
    with_reasons = [c for c in cols if c.get("reasons")]
    why = {"cells": with_reasons,
           "tests": sum(g["count"] for c in with_reasons for g in c["reasons"]),
           "not_run": any(g["outcome"] == outcomes.NOT_RUN
                          for c in with_reasons for g in c["reasons"])}
    return template.render(
        model=model, cols=cols, symbol=GLYPH, outcomes=outcomes.ALL, code=CODE,
        bad=outcomes.BAD, devices=devices, dev_groups=dev_groups, suites=suites,
        series_groups=series_groups, body=Markup(body), change_label=CHANGE_LABEL,
        change_plural=CHANGE_PLURAL,
        details_json=_script_json(details), columns_json=_script_json(provenance),
        code_json=_script_json({v: k for k, v in CODE.items()}),
        bad_codes="".join(CODE[o] for o in outcomes.BAD),
        dev_count=len(devices), why=why, not_run_meaning=outcomes.NOT_RUN_MEANING,
        nav=Markup(nav) if nav else None,
    )
