"""GitHub Actions' own language for a cell job: its step summary, ``::error`` annotations
for the tests that went wrong, and ``::group::`` blocks around the env build.

Everything here is active only inside GitHub Actions (``GITHUB_ACTIONS=true``); elsewhere
:func:`group` prints nothing and ``accelgrid ci summary`` writes its Markdown to stdout
with no workflow commands. Text from tests goes through :func:`escape_data` /
:func:`escape_property`, so a message cannot start a workflow command of its own.
"""

# No `from __future__ import annotations`: its name would be this module's annotations().
import contextlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from ..base import outcomes
from ..base.jsonio import mapping
from ..results import cellresults, reasons, shards

MAX_ANNOTATIONS = 10        # GitHub shows at most 10 error annotations per step
MAX_WRONG_LISTED = 30       # tests listed in a step summary's "what went wrong"
MAX_SUMMARY_BYTES = 1024 * 1024 - 4096   # a step summary holds at most 1 MiB


def active(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """A workflow command's message (GitHub's toolkit encoding)."""
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@contextlib.contextmanager
def group(title: str, out: TextIO | None = None,
          env: Mapping[str, str] | None = None) -> Iterator[None]:
    """A collapsible ``::group::`` block in an Actions log around what runs inside;
    nothing outside Actions."""
    if not active(env):
        yield
        return
    out = out or sys.stdout
    out.write(f"::group::{escape_data(title)}\n")
    out.flush()
    try:
        yield
    finally:
        out.write("::endgroup::\n")
        out.flush()


def _location(rec: Mapping[str, Any]) -> tuple[str, int | None]:
    """The test's file, and the line in it where it went wrong (the last ``file:line:``
    of its traceback in that file), else where it is defined (unknown: None)."""
    path = str(rec.get("nodeid", "")).split("::", 1)[0]
    text = str(rec.get("longrepr") or "")
    lines = [int(m[1]) for m in re.finditer(rf"^{re.escape(path)}:(\d+):", text, re.M)]
    return path, (lines[-1] if lines else None)


def annotations(cell: str, records: Iterable[Mapping[str, Any]],
                limit: int = MAX_ANNOTATIONS) -> list[str]:
    """``::error file=…,line=…,title=…::message`` per test that went wrong (outcomes.BAD),
    at most ``limit``, and a last line saying how many more there are."""
    bad = [r for r in records if r.get("outcome") in outcomes.BAD]
    bad.sort(key=lambda r: str(r.get("nodeid")))
    out = []
    for rec in bad[:limit]:
        path, line = _location(rec)
        props = f"file={escape_property(path)}" + (f",line={line}" if line else "")
        title = f"{cell}: {rec.get('outcome')}: {rec.get('nodeid')}"
        message = str(rec.get("message") or rec.get("outcome"))[:2000]
        out.append(f"::error {props},title={escape_property(title)}::{escape_data(message)}")
    if len(bad) > limit:
        out.append(f"::error title={escape_property(cell)}::{len(bad) - limit} more tests "
                   "went wrong: see the step summary and the results artifact")
    return out


def _cell_text(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary(cell: cellresults.CellResults) -> str:
    """A cell job's step summary (Markdown): counts, what went wrong, why tests did not
    run, or why there are no results."""
    title = f"### accelgrid: {cell.name}"
    shard = shards.shard_of(cell)
    if shard:
        title += f" (shard {shard[0]}/{shard[1]})"
    torch = mapping(cell.env.get("torch"))
    lines = [title, ""]
    if torch.get("version"):
        lines += [f"torch {torch['version']}", ""]
    if cell.error:
        return "\n".join([*lines, f"**No results:** {_cell_text(cell.error)}", ""])
    counts = Counter(r["outcome"] for r in cell.tests.values())
    lines += [f"**{len(cell.tests)} tests:** "
              + ", ".join(f"{counts[o]} {o}" for o in outcomes.ALL if counts.get(o)), ""]
    lines += [f"- {_cell_text(p)}" for p in cell.problems] + ([""] if cell.problems else [])
    bad = sorted((r for r in cell.tests.values() if r["outcome"] in outcomes.BAD),
                 key=lambda r: str(r.get("nodeid")))
    if bad:
        lines += ["#### What went wrong", "", "| test | outcome | message |", "| --- | --- | --- |"]
        for rec in bad[:MAX_WRONG_LISTED]:
            first = (str(rec.get("message") or "").strip().splitlines() or [""])[0][:300]
            lines.append(f"| `{_cell_text(rec.get('nodeid'))}` | {rec['outcome']} | "
                         f"{_cell_text(first)} |")
        if len(bad) > MAX_WRONG_LISTED:
            lines.append(f"| … | | {len(bad) - MAX_WRONG_LISTED} more in the results |")
        lines.append("")
    why = reasons.group(cell.tests.values())
    if why:
        lines += ["#### Why tests did not run", ""]
        lines += [f"- {_cell_text(reasons.line(entry))}" for entry in why] + [""]
    text = "\n".join(lines)
    if len(text.encode()) > MAX_SUMMARY_BYTES:
        text = text.encode()[:MAX_SUMMARY_BYTES].decode(errors="ignore") + "\n\n(cut)\n"
    return text


def report(paths: Iterable[Path], *, out: TextIO | None = None,
           env: Mapping[str, str] | None = None) -> int:
    """The step summary of every cell under ``paths`` appended to $GITHUB_STEP_SUMMARY
    (stdout outside Actions) and, inside Actions, their annotations on stdout. Returns
    how many tests went wrong."""
    env = os.environ if env is None else env
    out = out or sys.stdout
    folders, _ = cellresults.discover(paths)
    cells = [cellresults.read_cell(f) for f in folders]
    text = "\n".join(summary(c) for c in cells)
    target = env.get("GITHUB_STEP_SUMMARY") if active(env) else None
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        out.write(text + "\n")
    wrong = 0
    for cell in cells:
        recs = list(cell.tests.values())
        wrong += sum(r.get("outcome") in outcomes.BAD for r in recs)
        if active(env):
            for line in annotations(cell.name, recs):
                out.write(line + "\n")
    out.flush()
    return wrong
