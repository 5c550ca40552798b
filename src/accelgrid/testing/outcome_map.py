"""A test's pytest reports mapped onto its record (one line of tests.jsonl): the outcome
its setup, call and teardown reports give (pytest's passed, failed and skipped, with
xfail, strict XPASS and the runner's not-run skips, onto :mod:`accelgrid.base.outcomes`),
the one-line message, the failure's text and captured output, and the facts the test and
the plugin's other hooks put on the reports. :class:`accelgrid.testing.recorder.Recorder`
writes the records.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..base import contract, outcomes


def message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """A report's one line: a skip's reason, a crash's message, else the last line of its
    text."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (path, line, reason)
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    text = str(longrepr or "")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it as it is, else its ``repr``: a NaN (a diverged
    error a test records) too, which the record's JSON would turn into null."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def add_output(rec: dict[str, Any], report: pytest.TestReport) -> None:
    """A failure's captured output (pytest's "Captured stdout call" sections) in its
    record's ``output``: whatever its size, the record keeps its ends and
    :func:`accelgrid.results.bounded_record` the whole beside the records."""
    text = "".join(f"--- {name} ---\n{content}\n" for name, content in
                   getattr(report, "sections", ()) or () if name.startswith("Captured "))
    if text:
        rec["output"] = text


def add_phase(rec: dict[str, Any], report: pytest.TestReport) -> None:
    """One phase's report (setup, call or teardown) onto the test's record: its duration,
    the known issue and CPU time the plugin's hooks set on it, the facts the test recorded
    (``request.node.user_properties``), and the outcome, where the phases before left it
    open or a failed teardown turns a pass into an error."""
    rec["duration"] += float(getattr(report, "duration", 0.0) or 0.0)
    if getattr(report, contract.REPORT_ISSUE, None):  # set by known_issues_runtime
        rec["issue"] = getattr(report, contract.REPORT_ISSUE)
    if getattr(report, contract.REPORT_CPU_S, None) is not None:  # set by WorkerMarker
        rec["cpu_s"] = getattr(report, contract.REPORT_CPU_S)
    # Facts a test records (request.node.user_properties): kept in its record too.
    for name, value in getattr(report, "user_properties", None) or ():
        rec.setdefault("properties", {})[str(name)] = jsonable(value)
    if rec["outcome"] is None:
        _first_outcome(rec, report)
    elif report.when == "teardown" and report.failed and rec["outcome"] == outcomes.PASSED:
        _failure(rec, report, outcomes.ERROR)


def _first_outcome(rec: dict[str, Any], report: pytest.TestReport) -> None:
    wasxfail = getattr(report, "wasxfail", None)
    if report.failed:
        if report.when == "call":
            text = str(report.longrepr or "")
            _failure(rec, report, outcomes.XPASSED if "XPASS(strict)" in text
                     else outcomes.FAILED)
        else:
            _failure(rec, report, outcomes.ERROR)
    elif report.skipped:
        if wasxfail is not None:
            rec["outcome"] = outcomes.XFAILED
            rec["message"] = wasxfail
        else:
            reason = message(report)
            if reason.startswith(outcomes.NOT_RUN_PREFIX):
                rec["outcome"] = outcomes.NOT_RUN
                reason = reason[len(outcomes.NOT_RUN_PREFIX):]
            else:
                rec["outcome"] = outcomes.SKIPPED
            rec["message"] = reason
    elif report.when == "call":
        rec["outcome"] = outcomes.XPASSED if wasxfail is not None else outcomes.PASSED
        if wasxfail is not None:
            rec["message"] = wasxfail


def _failure(rec: dict[str, Any], report: pytest.TestReport, outcome: str) -> None:
    """A failed phase: the record's outcome, message, text, captured output and phase."""
    rec["outcome"] = outcome
    rec["message"] = message(report)
    rec["longrepr"] = str(report.longrepr or "")
    add_output(rec, report)
    rec["phase"] = report.when
