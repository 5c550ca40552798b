"""What ``summary.json`` says of a run: its counts (:func:`run_summary`, the last record
of each test), why it is incomplete (:func:`incompleteness`), its timing per pass
(:func:`pass_times`) and its identity (:data:`RUN_FIELDS`).

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import contract, outcomes
from ..base.jsonio import read_json
from .cleaning import run_records

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import PassTiming, Summary, TestRecord

__all__ = [
    "FIRST_UNRECORDED", "RUN_FIELDS", "incompleteness", "last_outcomes", "pass_times",
    "run_summary",
]


RUN_FIELDS = ("run_id", "pytest_args", "selection")  # a run's identity, in env/summary


def pass_times(records: list[TestRecord], passes: list[dict[str, Any]],
               run_start: float) -> dict[str, Any]:
    """summary.json's timing of a run: ``wall_s`` from the run's start to the end of its
    last pass, and per pass (``passes``: name, beside, workers, start and end in epoch
    seconds, rc, as the runner measured them) its wall time and how long each of its
    workers took from the pass's start to its first test (``first_test_s``: start-up,
    read from the records' ``start`` and ``pass``)."""
    out: list[PassTiming] = []
    for p in passes:
        first: dict[str, float] = {}
        count = 0
        for rec in records:
            start = rec.get("start")
            if rec.get("pass") != p["name"]:
                continue
            count += 1
            if isinstance(start, (int, float)) and not isinstance(start, bool) \
                    and math.isfinite(start):
                worker = str(rec.get("worker") or "main")
                first[worker] = min(first.get(worker, start), start)
        # A gated pass (started beside, its tests once the others ended): start-up counts
        # from its gate, and how long it waited is its own figure.
        gate = p.get("gate")
        since = max(p["start"], gate) if isinstance(gate, int | float) else p["start"]
        timing: PassTiming = {
            "name": p["name"], "beside": p.get("beside"), "workers": p.get("workers"),
            "start": _dt_text(p["start"]), "wall_s": round(p["end"] - p["start"], 2),
            "rc": p.get("rc"), "tests": count,
            "first_test_s": round(min(first.values()) - since, 2) if first else None,
            "workers_first_test_s": {w: round(t - since, 2)
                                     for w, t in sorted(first.items())},
        }
        if "gate" in p:
            timing["waited_s"] = round(since - p["start"], 2)
        ahead = p.get("ahead")
        if isinstance(ahead, int | float):  # started while nox checked (run.headstart.prestart)
            timing["ahead_s"] = round(ahead - p["start"], 2)
        if p.get("launched"):   # its pytest started with the command (run.headstart.relaunch)
            timing["launched"] = True
        out.append(timing)
    end = max((p["end"] for p in passes), default=run_start)
    return {"wall_s": round(end - run_start, 2), "passes": out}


def _dt_text(epoch: float) -> str:
    from .provenance import iso  # local: provenance is the only user of datetime here

    return iso(epoch)


FIRST_UNRECORDED = 3  # unrecorded test ids an incomplete run names


def incompleteness(collected: list[Any] | None, recorded: set[str],
                   passes: Any) -> str | None:
    """Why a run is incomplete, or None when it is complete: every test its pytest
    collected has a record (a crashed test's counts). ``collected``: collected.json (None
    when absent: no pytest of the run got through collection with the recorder loaded,
    e.g. the plugin was not loaded or the test processes died importing a file);
    ``passes``: env.json's (absent too when the recorder never started)."""
    if collected is None:
        if not passes:
            return ("the recorder never ran (no env.json, no collected.json): pytest ran "
                    "without the accelgrid plugin")
        return ("no collection was recorded (no collected.json): the test processes died "
                "before they finished collecting (a test file that ends its process at "
                "import?); pytest's log says which")
    missing = [str(i) for i in collected if str(i) not in recorded]
    if not missing:
        return None
    return (f"{len(missing)} of the {len(collected)} collected tests have no record: "
            + ", ".join(missing[:FIRST_UNRECORDED])
            + (", ..." if len(missing) > FIRST_UNRECORDED else ""))


def last_outcomes(records: list[TestRecord]) -> dict[str, TestRecord]:
    """One record per test id; a later record of the same test replaces an earlier one."""
    out: dict[str, TestRecord] = {}
    for rec in records:
        out[rec["nodeid"]] = rec
    return out


def run_summary(results: Path, run_id: str | None = None) -> Summary:
    records, problems = run_records(results, run_id)
    tests = last_outcomes(records)
    counts = Counter(r["outcome"] for r in tests.values())
    env, _ = read_json(results / contract.ENV_FILE)
    cell = env.get("cell") if isinstance(env, dict) else None
    return {"cell": cell or results.name, "total": len(tests),
            "counts": {o: counts.get(o, 0) for o in outcomes.ALL},
            "problems": problems}
