"""A run's results closed after its pytest process ended, however it ended
(:func:`finalize`): pytest's own files redacted, the tests a dead worker was in and those
never run recorded, env.json's end written, and summary.json.

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import contract, outcomes
from ..base.jsonio import read_json, write_json
from ..base.redact import redact_text
from .cleaning import run_records
from .markers import crash_outcome, drop_cleared_markers, running
from .summary import RUN_FIELDS, incompleteness, pass_times, run_summary
from .writing import append_record

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import Summary, TestRecord

__all__ = [
    "MAX_REDACTED_FILE", "finalize", "merged_torch", "redact_file", "redact_files",
]


def merged_torch(results: Path) -> dict[str, Any]:
    """env.json's ``torch`` section from the test processes' reports (``torch-*.json``)."""
    from .provenance import TORCH_REPORT_GLOB, merge_torch_reports

    reports = []
    for f in sorted(results.glob(TORCH_REPORT_GLOB)):
        data, err = read_json(f)
        if not err and isinstance(data, dict):
            reports.append(data)
    return merge_torch_reports(reports)


MAX_REDACTED_FILE = 512 * 1024 * 1024  # a bigger JUnit file or log is redacted by lines


def redact_file(path: Path) -> bool:
    """Rewrite ``path`` (pytest's JUnit XML, its log) through :func:`redact_text`, the
    redaction records get, when that changes it; whether it did. pytest writes these
    itself, so they carry what tests printed, raw. A symlink is left alone (never
    followed, :func:`accelgrid.base.jsonio.refuse_symlink`)."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.stat().st_size <= MAX_REDACTED_FILE:
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
        clean = redact_text(text)
        if clean == text:
            return False
        data = clean.encode("utf-8", errors="surrogateescape")
    else:
        with path.open("rb") as fh:
            lines = [redact_text(ln.decode("utf-8", errors="surrogateescape"))
                     for ln in fh]
        data = "".join(lines).encode("utf-8", errors="surrogateescape")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def redact_files(folder: Path) -> list[Path]:
    """:func:`redact_file` of every JUnit file and pytest log of a run's folder."""
    return [p for p in sorted((*folder.glob("junit*.xml"), *folder.glob("pytest*.log")))
            if redact_file(p)]


def finalize(results: Path, reason: str, run: dict[str, Any] | None = None,
             timing: dict[str, Any] | None = None) -> Summary:
    """Close a run's results after its pytest process ended, however it ended.

    Tests a dead worker was in become crashed/timeout; collected tests with no record
    become not-run with ``reason``; ``env.json`` gets its end (and so does each pass it
    lists that never reached its own); ``summary.json`` is written with ``run``
    (:data:`RUN_FIELDS`: the run id, the user's pytest args, the selection) and
    ``timing`` (``passes``: what :func:`pass_times` needs, and ``run_start``).
    """
    run = {k: v for k, v in (run or {}).items() if k in RUN_FIELDS}
    redact_files(results)
    env, _ = read_json(results / contract.ENV_FILE)
    env = env if isinstance(env, dict) else None
    run_id = run.get("run_id") or (env or {}).get("run_id")
    stamped = _stamper(run_id, (env or {}).get("cell"))
    records, _ = run_records(results, run_id)
    seen = {r["nodeid"] for r in records}
    _record_dead_workers_tests(results, reason, seen, stamped)
    drop_cleared_markers(results)
    collected, _ = read_json(results / contract.COLLECTED_FILE)
    incomplete = _incomplete(results, collected, seen, env, records)
    for nodeid in collected or []:   # collected, no record: not run
        if nodeid not in seen:
            append_record(results / contract.TESTS_FILE, stamped(
                {"nodeid": nodeid, "outcome": outcomes.NOT_RUN, "message": reason}))
            seen.add(nodeid)
    if env is not None:
        _end_env(results, env, reason)
    summary = _summary(results, run_id, run, env, timing)
    if incomplete:
        summary["incomplete"] = incomplete
    write_json(results / contract.SUMMARY_FILE, summary)
    return summary


def _stamper(run_id: str | None, cell: str | None) -> Callable[[TestRecord], TestRecord]:
    """What :func:`finalize` adds to each record it writes: the run's id and cell."""
    def stamped(rec: TestRecord) -> TestRecord:
        if run_id:
            rec["run_id"] = run_id
        if cell:
            rec["cell"] = cell
        return rec
    return stamped


def _record_dead_workers_tests(results: Path, reason: str, seen: set[str],
                               stamped: Callable[[TestRecord], TestRecord]) -> None:
    """A record (crashed or timeout) for each test a worker was in when it stopped and
    that has none in ``seen``, which gets it."""
    for nodeid, info in running(results).items():
        if nodeid in seen:
            continue
        outcome = crash_outcome(info.get("start"), info.get("timeout"))
        append_record(results / contract.TESTS_FILE, stamped({
            "nodeid": nodeid, "outcome": outcome, "worker": info.get("worker"),
            "message": f"the test process died while running this test ({reason})",
            "duration": time.time() - info["start"] if info.get("start") else None}))
        seen.add(nodeid)


def _incomplete(results: Path, collected: Any, seen: set[str], env: dict[str, Any] | None,
                records: list[TestRecord]) -> str | None:
    """Why the run is incomplete (:func:`incompleteness`, then the plan's counts against
    the ``records``), or None."""
    incomplete = incompleteness(collected if isinstance(collected, list) else None, seen,
                                (env or {}).get("passes"))
    from .plan import count_mismatch, read  # local: plan reads this module's folder files
    counts = count_mismatch(read(results), records)
    if counts:
        incomplete = f"{incomplete}; {counts}" if incomplete else counts
    return incomplete


def _end_env(results: Path, env: dict[str, Any], reason: str) -> None:
    """env.json's torch reports merged if the run never did, and its end (and each of its
    passes') written unless it has one."""
    if (env.get("torch") or {}).get("pending"):
        env["torch"] = merged_torch(results)  # the run died before it merged them
        write_json(results / contract.ENV_FILE, env)
    if not env.get("end"):
        from .provenance import now  # local: provenance is the only user of datetime here
        env["end"] = now()
        env["status"] = "ended" if env.get("status") == "running" else env.get("status")
        env["end_reason"] = reason
        for entry in env.get("passes") or []:
            if isinstance(entry, dict) and not entry.get("end"):
                entry["end"] = env["end"]
        write_json(results / contract.ENV_FILE, env)


def _summary(results: Path, run_id: str | None, run: dict[str, Any],
             env: dict[str, Any] | None, timing: dict[str, Any] | None) -> Summary:
    """summary.json's content: :func:`run_summary`, with the passes' ``timing`` and the
    run's fields (``run``'s, else env.json's)."""
    summary = run_summary(results, run_id)
    if timing is not None:
        records, _ = run_records(results, run_id)
        times = pass_times(records, timing["passes"], timing["run_start"])
        summary["wall_s"], summary["passes"] = times["wall_s"], times["passes"]
    for key in RUN_FIELDS:
        if key in run or key in (env or {}):
            # RUN_FIELDS are Summary's keys, named through a tuple mypy cannot follow.
            summary[key] = run[key] if key in run else (env or {})[key]  # type: ignore[literal-required]
    summary["partial"] = bool(summary.get("selection"))
    return summary
