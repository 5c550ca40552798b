"""What a cell run tells the user on the console, while it runs and when it ends.

Every line of the run's own goes through :func:`say` (``accelgrid: CELL: ...``, flushed at
once). pytest's own output (with ``-rA``: every test's captured output) goes to the run's
``pytest.log``; the console gets :class:`Progress`: one line per suite as it advances
(done/total, outcomes so far, time since the run started), read from the records the
plugin appends to ``tests.jsonl`` and the ids in ``collected.json``. :func:`summary_lines`
is the end: counts, what not-run means, why tests did not run (per suite, with counts)
and the tests that failed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .. import results
from ..base import contract, jsonio, outcomes
from ..results import reasons

if TYPE_CHECKING:
    from ..results.records import TestRecord
    from .passes import Pass

HEARTBEAT_S = 60.0   # a suite still running gets a line this often (if it advanced)
MAX_FAILURES = 20    # failed tests listed at the end; the rest are counted
BAD_LABEL = {outcomes.FAILED: "FAILED", outcomes.ERROR: "ERROR", outcomes.XPASSED: "XPASSED",
             outcomes.TIMEOUT: "TIMEOUT", outcomes.CRASHED: "CRASHED"}


def say(cell: str | None, text: str, *, err: bool = False, out: TextIO | None = None) -> None:
    """Tell the user one thing about a run: ``accelgrid: CELL: TEXT`` (``accelgrid: TEXT``
    without a cell; further lines of ``text`` as they are) on stdout, on stderr with
    ``err`` (what went wrong), or on ``out``; flushed, so it keeps its place among the
    output of the processes the run starts."""
    stream = out or (sys.stderr if err else sys.stdout)
    print(f"accelgrid: {cell}: {text}" if cell else f"accelgrid: {text}", file=stream,
          flush=True)


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when under it (shorter to read)."""
    try:
        return os.path.relpath(path) if Path.cwd() in path.resolve().parents else str(path)
    except (OSError, ValueError):
        return str(path)


def elapsed(seconds: float) -> str:
    """``48 s``, ``2 min 05 s``, ``60 min``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min" + (f" {seconds % 60:02d} s" if seconds % 60 else "")


def tests(n: int) -> str:
    return f"{n} test" if n == 1 else f"{n} tests"


def count_text(counts: Mapping[str, int]) -> str:
    """``9 passed, 4 skipped``: the outcomes that occur, in the vocabulary's order."""
    return ", ".join(f"{counts[o]} {o}" for o in outcomes.ALL if counts.get(o)) or "none yet"


class Progress:
    """Follows a run's results folder and prints a line per suite as it advances: when
    its last test ends, and every :data:`HEARTBEAT_S` while it runs. Reads only what was
    appended since the last :meth:`poll`; an unreadable file is tried again next time."""

    def __init__(self, cell: str, folder: Path, *, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float | None = None):
        self.cell, self.folder, self.out = cell, folder, out or sys.stdout
        self.clock = clock
        self.heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
        self.start = clock()
        self.collected: list[str] = []
        self.collected_stamp: tuple[int, int] | None = None
        self.outcome: dict[str, str] = {}    # nodeid -> its latest outcome
        self.offset = 0                      # bytes of tests.jsonl read
        self.shown: dict[str, tuple] = {}    # suite -> (done, counts) last printed
        self.shown_at: dict[str, float] = {}

    def _say(self, text: str) -> None:
        say(self.cell, text, out=self.out)

    def _read_collected(self) -> list[str]:
        path = self.folder / contract.COLLECTED_FILE
        try:
            stamp = (path.stat().st_mtime_ns, path.stat().st_size)
        except OSError:
            return self.collected
        if stamp == self.collected_stamp:   # read once per change, not once per poll
            return self.collected
        ids, err = jsonio.read_json(path)
        if err or not isinstance(ids, list):
            return self.collected
        self.collected_stamp = stamp
        return [str(i) for i in ids]

    def _read_records(self) -> None:
        try:
            with open(self.folder / contract.TESTS_FILE, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1   # a line still being written waits for the next poll
        for raw in data[:end].splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("nodeid"), str):
                self.outcome[rec["nodeid"]] = str(rec.get("outcome"))
        self.offset += end

    def _suites(self) -> dict[str, tuple[int, int, Counter]]:
        """suite -> (done, total, outcome counts), suites in collection order."""
        totals = Counter(results.suite_of(i) for i in self.collected)
        out: dict[str, tuple[int, int, Counter]] = {s: (0, n, Counter())
                                                    for s, n in totals.items()}
        for nodeid, outcome in self.outcome.items():
            suite = results.suite_of(nodeid)
            done, total, counts = out.get(suite, (0, 0, Counter()))
            counts[outcome] += 1
            out[suite] = (done + 1, total, counts)
        return {s: (d, max(t, d), c) for s, (d, t, c) in out.items()}

    def poll(self, final: bool = False) -> None:
        """Print what changed since the last call (``final``: every suite not yet shown
        in its last state)."""
        try:
            collected = self._read_collected()
            self._read_records()
        except (OSError, ValueError):  # half-written file: next poll
            return
        if len(collected) > len(self.collected):
            new = Counter(results.suite_of(i) for i in collected[len(self.collected):])
            n = sum(new.values())
            more = "" if not self.collected else "more "
            self._say(f"{n} {more}test{'' if n == 1 else 's'} to run: "
                      + ", ".join(f"{s} {n}" for s, n in new.items()))
            self.collected = collected
        now = self.clock()
        suites = self._suites()
        width = max((len(s) for s in suites), default=0)
        for suite, (done, total, counts) in suites.items():
            state = (done, tuple(sorted(counts.items())))
            if not done or self.shown.get(suite) == state:
                continue
            complete = done >= total
            due = now - self.shown_at.get(suite, self.start) >= self.heartbeat_s
            if complete or due or final:
                digits = len(str(total))
                self._say(f"{suite:<{width}} {done:>{digits}}/{total} "
                          f"{'done' if complete else 'so far'}: {count_text(counts)} "
                          f"[{elapsed(now - self.start)}]")
                self.shown[suite], self.shown_at[suite] = state, now


def summary_lines(summary: Mapping[str, Any], records: Mapping[str, TestRecord],
                  folder: Path, log: Path) -> list[str]:
    """The end of a run: counts (and what not-run means, when there are any), why tests
    did not run grouped per suite, the tests that failed, and where the full report is."""
    counts = summary.get("counts") or {}
    out = [f"{tests(summary.get('total', len(records)))}: {count_text(counts)} "
           f"-> {shown_path(folder)}"]
    if counts.get(outcomes.NOT_RUN):
        out.append(f"  ({outcomes.NOT_RUN_MEANING})")
    grouped = reasons.group(records.values())
    if grouped:
        n = sum(g["count"] for g in grouped)
        out.append(f"why {tests(n)} did not run, per suite:")
        out += [f"  {reasons.line(g)}" for g in grouped]
    bad = [r for r in records.values() if r.get("outcome") in outcomes.BAD]
    if bad:
        out.append(f"{tests(len(bad))} went wrong:")
        for rec in bad[:MAX_FAILURES]:
            message = " ".join(str(rec.get("message") or "").split())[:200]
            out.append(f"  {BAD_LABEL[rec['outcome']]} {rec['nodeid']}"
                       + (f": {message}" if message else ""))
        if len(bad) > MAX_FAILURES:
            out.append(f"  ... and {len(bad) - MAX_FAILURES} more (tests.jsonl has them all)")
    out.append(f"pytest's full report (every test with its captured output): {shown_path(log)}")
    return out


def log_tail(log: Path, lines: int = 15) -> list[str]:
    """The last ``lines`` non-empty lines of pytest's output (why it stopped early)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def tolerant_console() -> None:
    """Make stdout and stderr write what their encoding cannot hold as backslash escapes
    (a console that is not UTF-8, ``PYTHONIOENCODING=ascii``, a C locale): the end of a
    run prints test ids and messages in any script, and must never crash on them."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and getattr(stream, "errors", "") == "strict":
            stream.reconfigure(errors="backslashreplace")


def beside_note(run_pass: Pass, front: Pass) -> str:
    if run_pass.gated:
        return f", started now, its tests once {front.title} ended"
    return (f", at the same time as {front.title}" if run_pass.beside else "")


def print_timing(cell: str, summary: Mapping[str, Any]) -> None:
    """One line: the run's wall time and each pass's, with its workers' start-up (pass
    start to their first test), as summary.json records them."""
    parts = []
    for p in summary.get("passes") or []:
        first = sorted((p.get("workers_first_test_s") or {}).values())
        start_up = (f", first test at {first[0]:.1f} s" if len(first) == 1 else
                    f", first tests at {first[0]:.1f}-{first[-1]:.1f} s" if first else "")
        waited = p.get("waited_s")
        parts.append(f"{p['name']} {p['wall_s']:.1f} s"
                     + (f" beside {p['beside']}" if p.get("beside") else "")
                     + (f", its tests after {waited:.1f} s" if waited is not None else "")
                     + f" ({p['workers']} worker{'s' if p['workers'] != 1 else ''}{start_up})")
    if parts:
        say(cell, f"wall {summary['wall_s']:.1f} s: " + "; ".join(parts))



# pytest's exit codes that mean it ran no test or stopped on its own: the console shows
# the end of its output (it goes to pytest.log, not the console).
PYTEST_TROUBLE = {2: "interrupted", 3: "internal error", 4: "usage error",
                  5: "no tests collected"}
