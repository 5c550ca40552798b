"""pytest plugin for cell runs: the device fixtures, markers, and per-test recording.

Loaded by the repo's root ``conftest.py``. Recording is on when ``ACCELGRID_RESULTS``
names a results folder (the runner sets it); without it only the fixtures are active.
With pytest-xdist the controller records (it sees every report, including the ones xdist
makes for a crashed worker); each worker notes the test it is in so a crash or a hang is
attributed to the right test.

Nothing lost: a dead worker with a test does not count towards xdist's restart limit
(:class:`RestartBudget`), so any number of crashing or hanging tests lose
only themselves; every event a worker sends is made encodable first (:func:`_safe_events`),
so a test's text (a non-UTF-8 file name in a message, a skip reason, captured output)
cannot end the run; each worker dies with its controller (:mod:`accelgrid.base.lifetime`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from .. import devices, results, testing
from ..base import contract, jsonio, lifetime, outcomes, redact
from ..results import junit, provenance, shards
from ..results import plan as run_plan
from . import known_issues_runtime

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from ..results.records import TestRecord


def _worker_id(config: pytest.Config) -> str | None:
    return getattr(config, "workerinput", {}).get("workerid")


def _run_fields() -> dict[str, Any]:
    """The run's id, the user's pytest args and the selection, as the runner set them."""
    fields: dict[str, Any] = {"run_id": os.environ.get(contract.RUN_ID) or None}
    for key, var in (("pytest_args", contract.PYTEST_ARGS), ("selection", contract.SELECTION)):
        try:
            value = json.loads(os.environ.get(var) or "[]")
        except ValueError:
            value = [os.environ[var]]
        fields[key] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return fields


def _safe_events(config: pytest.Config) -> None:
    """In an xdist worker: make every event sent to the controller encodable. execnet
    encodes strings as strict UTF-8, so one lone surrogate (a non-UTF-8 file name from
    os.listdir in an assertion message, a skip reason, a warning, a test file's name)
    would raise inside the worker and end the whole run."""
    for plugin in config.pluginmanager.get_plugins():
        send = getattr(plugin, "sendevent", None)
        if type(plugin).__name__ == "WorkerInteractor" and callable(send):

            def sendevent(name: str, _send: Any = send, **kwargs: object) -> None:
                _send(name, **jsonio.safe(kwargs))

            plugin.sendevent = sendevent
            return


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
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


def _jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it as it is, else its ``repr``: a NaN (a diverged
    error a test records) too, which the record's JSON would turn into null."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _add_output(rec: dict[str, Any], report: pytest.TestReport) -> None:
    """A failure's captured output (pytest's "Captured stdout call" sections) in its
    record's ``output``: whatever its size, the record keeps its ends and
    :func:`accelgrid.results.bounded_record` the whole beside the records."""
    text = "".join(f"--- {name} ---\n{content}\n" for name, content in
                   getattr(report, "sections", ()) or () if name.startswith("Captured "))
    if text:
        rec["output"] = text


def _adding(ids: list[str]) -> Any:
    """collected.json's change that adds ``ids`` it lacks (in order)."""
    def add(known: Any) -> list[str]:
        known = known if isinstance(known, list) else []
        seen = set(known)
        return known + [i for i in ids if i not in seen]
    return add


# pytest's terminal summary categories that are a test's outcome (not "rerun": an
# attempt; not "deselected", "warnings").
_OUTCOME_STATS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def _pytest_counts(config: pytest.Config) -> tuple[int | None, dict[str, int]]:
    """pytest's own view of the pass: how many tests it reported an outcome for, and its
    terminal summary's count per outcome (a test whose teardown failed counts in two);
    None without its terminal reporter (``-p no:terminal``)."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return None, {}
    stats = getattr(terminal, "stats", None) or {}
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for name in _OUTCOME_STATS:
        reports = [r for r in stats.get(name, ()) if isinstance(r, pytest.TestReport)]
        counts[name] = len(reports)
        ids.update(r.nodeid for r in reports)
    return len(ids), counts


class Recorder:
    """Turns the setup/call/teardown reports of each test into one record."""

    def __init__(self, config: pytest.Config, folder: Path):
        self.config = config
        self.folder = folder
        self.pending: dict[str, dict[str, Any]] = {}
        self.reruns: dict[str, int] = {}  # pytest-rerunfailures attempts, per test
        self.started: dict[str, float] = {}
        self.cell = os.environ.get(contract.CELL, folder.name)
        self.device = os.environ.get(contract.DEVICE, "cpu")
        self.run = _run_fields()
        self.pass_name = os.environ.get(contract.PASS, contract.PASS_SINGLE)
        self.collect_errors: set[str] = set()
        # Kept against tests that delete results/ or the cell folder (issue 27): the
        # records through an fd opened now, env.json's and collected.json's content here.
        self.records: results.RecordFile | None = None
        self.env_started: dict[str, Any] = {}
        self.collected: list[str] = []

    # --- provenance and collection -------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        env = provenance.collect(self.cell, self.device, with_torch=False)
        env.update(self.run)
        entry = {"name": self.pass_name, "start": env["start"], "end": None}

        def start(earlier: Any) -> dict[str, Any]:
            # Passes of one run share env.json; the one starting later (or beside) keeps
            # the run's start, the passes listed so far and torch facts already merged.
            new = dict(env)
            if (isinstance(earlier, dict) and earlier.get("cell") == self.cell
                    and earlier.get("run_id") == self.run["run_id"]):
                new["start"] = earlier.get("start", new["start"])
                new["passes"] = [*earlier.get("passes", []), entry]
                # torch's facts come from the test processes (the controller needs no
                # torch and importing it here would cost seconds): merged at the end.
                torch = earlier.get("torch")
                if isinstance(torch, dict) and not torch.get("pending"):
                    new["torch"] = torch
            else:
                new["passes"] = [entry]
            # Every value by its shape too (pytest arguments, paths): records' redaction.
            return redact.redact_value(new)

        self.env_started = jsonio.update_json(self.folder / contract.ENV_FILE, start)
        # The plan's inputs, before any test: what readers judge the records against.
        run_plan.start_pass(self.folder, self.pass_name, self.run["run_id"], self.cell)
        self.records = results.RecordFile(self.folder / contract.TESTS_FILE)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Without xdist the controller collects itself; with it, workers do (hook below).
        if session.items:
            self.pytest_xdist_node_collection_finished(None, [i.nodeid for i in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same ids; other passes of the run (at once, or later)
        # add theirs.
        seen_here = set(self.collected)
        self.collected += [i for i in ids if i not in seen_here]
        jsonio.update_json(self.folder / contract.COLLECTED_FILE, _adding(ids))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        torch_facts = results.merged_torch(self.folder)
        end = provenance.now()

        def finish(env: Any) -> dict[str, Any]:
            # A test that deleted env.json (or the folder) does not erase the provenance.
            env = env if isinstance(env, dict) else dict(self.env_started)
            passes = env.get("passes") or []
            for entry in passes:
                if isinstance(entry, dict) and entry.get("name") == self.pass_name \
                        and not entry.get("end"):
                    entry.update(end=end, exitstatus=int(exitstatus))
            env["torch"] = torch_facts
            # The run is finished when its last pass is (passes may run at once).
            if all(not isinstance(e, dict) or e.get("end") for e in passes):
                env.update(end=end, status="finished", exitstatus=int(exitstatus))
            return redact.redact_value(env)

        jsonio.update_json(self.folder / contract.ENV_FILE, finish)
        run_plan.end_pass(self.folder, self.pass_name, session.testscollected,
                          *_pytest_counts(session.config), exitstatus)
        if self.collected:  # back if a test deleted it: tests it lists never ran
            jsonio.update_json(self.folder / contract.COLLECTED_FILE, _adding(self.collected))
        if self.records is not None:
            self.records.close()
        else:
            jsonio.sync(self.folder / contract.TESTS_FILE)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A module that fails to import is a result of its own: otherwise its tests would
        # just vanish from the cell (xdist forwards each failure once, deduplicated).
        if not report.failed or report.nodeid in self.collect_errors:
            return
        self.collect_errors.add(report.nodeid)
        # Once per run: a pass running beside this one collects the same modules.
        self._write({"nodeid": report.nodeid or "<collection>", "outcome": outcomes.ERROR,
                     "duration": None, "message": _message(report),
                     "longrepr": str(report.longrepr or ""), "phase": "collect",
                     "worker": None, "device": self.device}, once=True)

    # --- per-test records ----------------------------------------------------------
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.started[nodeid] = time.time()

    def _device_of(self, node: Any) -> str:
        """The device a worker was pinned to (``cuda:1``), from its xdist spec's env."""
        spec_env = getattr(getattr(getattr(node, "gateway", None), "spec", None), "env", None)
        index = (spec_env or {}).get(contract.DEVICE_INDEX,
                                     os.environ.get(contract.DEVICE_INDEX))
        if os.environ.get(contract.PASS) == contract.PASS_ALL_DEVICES:
            return f"{self.device}:all"  # every device of the run (the subset, if chosen)
        if index is not None:
            return f"{self.device}:{index}"
        return self.device

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        if report.when not in ("setup", "call", "teardown"):
            self._crashed(report, worker)
            return
        if report.outcome == "rerun":
            # pytest-rerunfailures: this attempt failed and the test runs again. The
            # attempt (and its teardown's report) is dropped; the final record counts the
            # reruns (history: a pass after a rerun is flaky, never passed).
            self.pending[report.nodeid] = {"rerun_attempt": True}
            self.reruns[report.nodeid] = self.reruns.get(report.nodeid, 0) + 1
            return
        if self.pending.get(report.nodeid, {}).get("rerun_attempt"):
            if report.when == "teardown":
                del self.pending[report.nodeid]
            return
        rec = self.pending.setdefault(report.nodeid, {
            "nodeid": report.nodeid, "outcome": None, "duration": 0.0,
            "message": "", "longrepr": "", "worker": worker, "device": self._device_of(node),
            "start": self.started.get(report.nodeid),
        })
        rec["duration"] += float(getattr(report, "duration", 0.0) or 0.0)
        if getattr(report, contract.REPORT_ISSUE, None):  # set by known_issues_runtime
            rec["issue"] = getattr(report, contract.REPORT_ISSUE)
        if getattr(report, contract.REPORT_CPU_S, None) is not None:  # set by WorkerMarker
            rec["cpu_s"] = getattr(report, contract.REPORT_CPU_S)
        # Facts a test records (request.node.user_properties): kept in its record too.
        for name, value in getattr(report, "user_properties", None) or ():
            rec.setdefault("properties", {})[str(name)] = _jsonable(value)
        wasxfail = getattr(report, "wasxfail", None)
        if rec["outcome"] is None:
            if report.failed:
                if report.when == "call":
                    text = str(report.longrepr or "")
                    rec["outcome"] = (outcomes.XPASSED if "XPASS(strict)" in text
                                      else outcomes.FAILED)
                else:
                    rec["outcome"] = outcomes.ERROR
                rec["message"] = _message(report)
                rec["longrepr"] = str(report.longrepr or "")
                _add_output(rec, report)
                rec["phase"] = report.when
            elif report.skipped:
                if wasxfail is not None:
                    rec["outcome"] = outcomes.XFAILED
                    rec["message"] = wasxfail
                else:
                    reason = _message(report)
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
        elif report.when == "teardown" and report.failed and rec["outcome"] == outcomes.PASSED:
            rec["outcome"] = outcomes.ERROR
            rec["message"] = _message(report)
            rec["longrepr"] = str(report.longrepr or "")
            _add_output(rec, report)
            rec["phase"] = "teardown"
        if report.when == "teardown":
            done = self.pending.pop(report.nodeid)
            if report.nodeid in self.reruns:
                done["reruns"] = self.reruns.pop(report.nodeid)
                if done["outcome"] == outcomes.PASSED:
                    done["outcome"] = outcomes.FLAKY  # passed only after failing first
            self._write(done)

    def _crashed(self, report: pytest.TestReport, worker: str | None) -> None:
        info = results.running(self.folder).get(report.nodeid, {})
        start = info.get("start") or self.started.get(report.nodeid)
        timeout = info.get("timeout") or self.config.getoption("timeout", None)
        outcome = results.crash_outcome(start, timeout)
        detail = _message(report)
        if outcome == outcomes.TIMEOUT:
            detail = f"timed out after {timeout} s (worker killed by pytest-timeout); {detail}"
        self.pending.pop(report.nodeid, None)
        self._write({"nodeid": report.nodeid, "outcome": outcome, "start": start,
                     "duration": time.time() - start if start else None,
                     "message": detail, "longrepr": str(report.longrepr or ""),
                     "worker": worker or info.get("worker"),
                     "device": self._device_of(getattr(report, "node", None))})

    def _write(self, rec: dict[str, Any], once: bool = False) -> None:
        rec["outcome"] = rec["outcome"] or outcomes.ERROR
        rec["cell"] = self.cell
        rec["pass"] = self.pass_name
        if self.run["run_id"]:
            rec["run_id"] = self.run["run_id"]
        rec["finished"] = time.time()
        if self.records is None:  # a report before the session started: none today
            self.records = results.RecordFile(self.folder / contract.TESTS_FILE)
        # The dict built up over the test's phases is a whole record now that its
        # outcome and the fields above are set.
        self.records.append(cast("TestRecord", rec), once=once)


class RestartBudget:
    """On the xdist controller: a worker that died in a test is that test's outcome, not a
    reason to end the run. xdist ends the run after ``--max-worker-restart`` dead workers
    (4 per worker by default: the 5th crashing or hanging test would lose every test
    after it), so each death a test explains raises the limit by one; the limit is left
    for deaths no test explains (a worker that dies starting up, again and again)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        dsession = self.config.pluginmanager.getplugin("dsession")
        limit = getattr(dsession, "_max_worker_restart", None)
        if isinstance(limit, int) and limit > 0:  # 0: the user turned restarts off
            dsession._max_worker_restart = limit + 1


class WorkerMarker:
    """In each process that runs tests: note the current test (for crash attribution) and
    its CPU time, and which tests a pass left for a later one (the pinned pass:
    multi_device tests for the all-devices pass; a cpu cell's: sees_accelerators tests
    for host-accelerators)."""

    def __init__(self, config: pytest.Config, folder: Path):
        self.folder = folder
        self.worker = _worker_id(config) or "main"
        self.pass_name = os.environ.get(contract.PASS, "")
        # Passes may run at once and each has its gw0: the pass names this process's files.
        self.slot = f"{self.pass_name}-{self.worker}" if self.pass_name else self.worker
        self.default_timeout = config.getoption("timeout", None)
        self.device = os.environ.get(contract.DEVICE, "cpu")
        self.cpu_start = time.process_time()
        self.reports_torch = True    # (not the xdist controller: set at session start)
        self.torch_reported = False  # the full report, after this process imported torch

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.reports_torch = not (self.worker == "main"
                                  and getattr(session.config.option, "dist", "no") != "no")
        # (the xdist controller runs no test and need not import torch). A report at once
        # (the version, from metadata), so a process that dies early leaves one.
        self._torch_report()

    def _torch_report(self) -> None:
        """This process's view of torch into ``torch-<slot>.json``: the full one once its
        tests have imported torch (the suites do, at collection), never importing it
        only for the report."""
        if self.reports_torch and not self.torch_reported:
            imported = "torch" in sys.modules
            jsonio.write_json(self.folder / f"torch-{self.slot}.json",
                              provenance.worker_torch_report(self.device, imported))
            self.torch_reported = imported

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._torch_report()

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        # A test file that ends its process at import (os._exit) leaves this note: the
        # runner names the file and runs the pass again without it.
        if isinstance(collector, pytest.Module):
            results.mark_importing(self.folder, "test file", collector.nodeid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.fspath.endswith(".py"):  # (a module's report: it came back)
            results.clear_importing(self.folder)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._torch_report()  # a test that imported torch itself

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        # The pass hand-off (contract.HANDOFF): what this pass's -m deselects for a later one.
        for handoff in contract.HANDOFF.values():
            if self.pass_name in handoff.left_by:
                self._leave(handoff.file,
                            [i.nodeid for i in items if i.get_closest_marker(handoff.mark)])

    def _leave(self, name: str, left: list[str]) -> None:
        # Several deselections (-m, -k, --upstream) add up; every worker collects the same
        # items and adds them to one list, under the folder's lock.
        def add(known: Any) -> list[str]:
            known = known if isinstance(known, list) else []
            seen = set(known)
            return known + [i for i in left if i not in seen]

        jsonio.update_json(self.folder / name, add)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> None:
        marker = item.get_closest_marker("timeout")
        timeout = marker.args[0] if marker and marker.args else self.default_timeout
        results.mark_running(self.folder, self.worker, item.nodeid, timeout, slot=self.slot)
        self.cpu_start = time.process_time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if call.when == "teardown":
            # CPU time of this test process (all its threads) over the test: beside the
            # wall time it tells a test starved of CPU from one waiting on its device.
            setattr(outcome.get_result(), contract.REPORT_CPU_S,
                    round(time.process_time() - self.cpu_start, 3))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        results.clear_running(self.folder, self.slot)


class QuickExit:
    """In an xdist worker: skip the interpreter's teardown. The controller waits for every
    worker's process to end before its own session ends, and a worker's teardown with
    torch (and CUDA, transformers) loaded added seconds to the end of every pass. The
    worker stays until the controller ends its gateway (xdist may still send it a command
    after its session is over: a steal); then the first exit handler leaves at once.
    ``ACCELGRID_WORKER_TEARDOWN=1`` keeps the full teardown."""

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # Registered last, so it runs first: other handlers (torch's, the tests') are skipped.
        atexit.register(_leave_now)


def _leave_now() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:  # sys.__stdout__ is None without a console
                stream.flush()
    os._exit(0)


class OpCaptureHook:
    """With ACCELGRID_CAPTURE_OPS=1: each test's call runs under accelgrid.testing.opcapture, and
    its ops (with their status on this device) go to ``ops-raw/<worker>.jsonl``."""

    def __init__(self, config: pytest.Config, folder: Path):
        self.raw = folder / contract.OPS_RAW_DIR
        self.worker = _worker_id(config) or "main"
        self.device = os.environ.get(contract.DEVICE, "cpu")

    # Innermost (trylast): inside pytest's own output capture, which points fd 2 at its
    # file when the call starts; outside it, that would take the c10 log lines (fallback
    # messages from backward threads) away from the capture's copy of fd 2.
    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):
        from . import opcapture  # imports torch: only when capturing

        capture = opcapture.OpCapture(self.device)
        with capture:
            outcome = yield
            if outcome.excinfo is not None:  # e.g. "not currently implemented for XPU"
                capture.note_exception(outcome.excinfo[1])
        self.raw.mkdir(parents=True, exist_ok=True)
        results.append_record(self.raw / f"{self.worker}.jsonl", {
            "nodeid": item.nodeid, "workload": workload_of(item.nodeid), **capture.report()})



def _junit_key(report: pytest.TestReport) -> Any:
    """The key LogXML files a test's reporter under: (report.id, xdist's node) from pytest
    9.2, (report.nodeid, node) before it. A --no-venv cell runs on the host's pytest,
    which may be older than the matrix's pin (an H200's image had 9.1.1)."""
    # Any: typed against the installed pytest's keys, which differ across its versions.
    return (report.id if hasattr(type(report), "id") else report.nodeid,
            getattr(report, "node", None))

class JUnitProperties:
    """On the controller: pytest's JUnit file of the pass carries the run's testsuite
    properties (:func:`accelgrid.results.junit.suite_properties`), added before pytest writes it,
    and no testcase properties (junit-10.xsd has no place for them)."""

    def __init__(self, config: pytest.Config, folder: Path):
        self.config = config
        self.folder = folder
        # pytest-rerunfailures: the failed attempts of each test (message, traceback),
        # and the tests whose attempt is between its failing report and its teardown.
        self.attempts: dict[str, list[tuple[str, str]]] = {}
        self.in_attempt: set[str] = set()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Before pytest's LogXML sees the report (tryfirst), so finalize knows it.
        if report.outcome == "rerun":
            self.attempts.setdefault(report.nodeid, []).append(
                (_message(report), str(report.longrepr or "")))
            self.in_attempt.add(report.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """pytest writes a test's user_properties inside its <testcase>, which junit-10.xsd
        (what Jenkins' xUnit plugin checks) does not allow: its JUnit file goes without
        them (the test's record in tests.jsonl keeps them)."""
        try:
            from _pytest.junitxml import xml_key
        except ImportError:
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is None:   # no --junitxml
            return
        finalize = xml.finalize

        def without_properties(report: pytest.TestReport) -> None:
            # LogXML.finalize writes the testcase (reading user_properties) and then
            # drops it; other hooks still see the report's properties.
            key = _junit_key(report)
            if report.nodeid in self.in_attempt:
                # The end of a failed attempt (pytest-rerunfailures): pytest would write
                # it as a passed testcase. Its failure goes into the test's last one.
                self.in_attempt.discard(report.nodeid)
                reporter = xml.node_reporters.pop(key, None)
                if reporter in xml.node_reporters_ordered:
                    xml.node_reporters_ordered.remove(reporter)
                return
            failed = self.attempts.pop(report.nodeid, [])
            reporter = xml.node_reporters.get(key)
            if failed and reporter is not None:
                # Surefire's elements: a test that passed on a rerun is flaky (a pass
                # with its flakyFailures), one that failed every run a failure with its
                # earlier rerunFailures.
                last_failed = any(n.tag in ("failure", "error") for n in reporter.nodes)
                for message, text in failed:
                    reporter.nodes.append(junit.rerun_element(
                        "rerunFailure" if last_failed else "flakyFailure", message, text))
            kept = report.user_properties
            report.user_properties = []
            try:
                finalize(report)
            finally:
                report.user_properties = kept

        xml.finalize = without_properties  # type: ignore[method-assign]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            from _pytest.junitxml import xml_key  # what record_testsuite_property uses
        except ImportError:  # another pytest: its JUnit file goes without them
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is None:   # no --junitxml
            return
        torch = results.merged_torch(self.folder).get("version")
        for name, value in junit.suite_properties(torch=torch if isinstance(torch, str)
                                                  else None):
            xml.add_global_property(name, value)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """A test file that exits at import (``sys.exit`` at module level) is a collection
    error naming the file, like an ImportError: pytest re-raises SystemExit from
    collection, which ends the whole session (an xdist worker, then the run) with no
    record of why. The runner passes --continue-on-collection-errors, so the other
    files' tests still run."""
    try:
        return (yield)
    except SystemExit as exc:
        return pytest.CollectReport(
            collector.nodeid, "failed", result=[],
            longrepr=f"{collector.nodeid}: the module exited at import (SystemExit: "
                     f"{exc.code!r}); its tests cannot be collected")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A shard run (ACCELGRID_SHARD=K/N) keeps shard K's tests of the whole collection
    (before marker selection, so every pass of every shard splits the same set)."""
    if os.environ.get(contract.SHARD):
        try:
            mine, others = shards.keep(items)
        except shards.ShardError as exc:
            raise pytest.UsageError(str(exc)) from None
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = mine


GATE_POLL_S = 0.02


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """A gated pass (ACCELGRID_GATE: started beside the shared workers so its start-up
    overlaps theirs) runs its first test only once the runner makes the gate file, when
    every other pass has ended. xdist's controller has no items: its workers wait."""
    gate = os.environ.get(contract.GATE)
    if not gate or not session.items or session.config.option.collectonly:
        return
    while not os.path.exists(gate):
        time.sleep(GATE_POLL_S)


def _nested(config: pytest.Config) -> bool:
    """Whether this pytest was started by a test of the cell's run (transformers'
    ``run_test_using_subprocess``, a test of a test runner): it inherits the cell's
    variables, and recording its tests would mix them into the cell's records. The cell's
    own pytest marks the environment with its pid; its xdist workers are its own."""
    owner = os.environ.get(contract.RECORDER_PID)
    if _worker_id(config) is not None:  # xdist starts its workers as its own children
        return bool(owner) and owner != str(os.getppid())
    if owner and owner != str(os.getpid()):
        return True
    os.environ[contract.RECORDER_PID] = str(os.getpid())  # inherited by what tests start
    return False


def pytest_configure(config: pytest.Config) -> None:
    for help_text in testing.MARKERS.values():  # only_on, skip_on, needs_devices, needs_dtype
        config.addinivalue_line("markers", help_text)
    for mark, help_text in (
            (contract.MULTI_DEVICE_MARK, "needs every device of the host in one process (runs "
             "in a separate pass, never beside pinned workers)"),
            (contract.DEVICE_ALONE_MARK, "needs its device to itself (a timing premise, a "
             "peak-memory measurement, an overlap trace): where several workers share a "
             "device, runs after them, one worker per device"),
            (contract.SEES_ACCELERATORS_MARK, "in a cpu cell, runs in a later pass that sees "
             "the host's accelerators (the cell's other tests see none: "
             "CUDA_VISIBLE_DEVICES='', ONEAPI_DEVICE_SELECTOR)")):
        config.addinivalue_line("markers", f"{mark}: {help_text}")
    known_issues_runtime.configure(config)  # upstream marker; registry xfails
    try:
        devices.from_env()  # a spec device is registered before any test asks for it
    except (devices.SpecError, devices.UnknownDevice) as exc:
        raise pytest.UsageError(str(exc)) from None
    if _worker_id(config) is not None:
        _safe_events(config)
        lifetime.die_with_parent()  # a worker never outlives its controller
        if os.environ.get(contract.WORKER_TEARDOWN) != "1":
            config.pluginmanager.register(QuickExit(), "accelgrid-quick-exit")
    else:
        config.pluginmanager.register(RestartBudget(config), "accelgrid-restart-budget")
    folder = os.environ.get(contract.RESULTS)
    if not folder or _nested(config):
        return
    path = Path(folder).absolute()  # a test's chdir must not move the records
    config.pluginmanager.register(WorkerMarker(config, path), "accelgrid-worker-marker")
    if os.environ.get(contract.CAPTURE_OPS) == "1":
        config.pluginmanager.register(OpCaptureHook(config, path), "accelgrid-op-capture")
    if _worker_id(config) is None:
        config.pluginmanager.register(Recorder(config, path), "accelgrid-recorder")
        config.pluginmanager.register(JUnitProperties(config, path), "accelgrid-junit")


@pytest.fixture(scope="session")
def device_type() -> str:
    """The cell's device type: ``cpu``, ``cuda``, ``xpu``, ``mps`` or a spec file's
    ``DEVICE_NAME`` (``ACCELGRID_DEVICE``)."""
    return devices.from_env().name


@pytest.fixture(scope="session")
def device(device_type: str) -> str:
    """The device tests put tensors on (``"cuda"``, ``"xpu"``, ``"cpu"``, ``"mps"``; a
    spec device's ``TORCH_DEVICE``, else its name)."""
    return devices.get(device_type).tensor_device


def workload_of(nodeid: str) -> str:
    """``suites/hf_examples/test_w.py::test_workload[image-classification]`` ->
    ``image-classification``: tests named ``test_workload*`` are one workload per
    parameter; every other test counts towards its suite (``offload``, ``smoke``)."""
    name = nodeid.rsplit("::", 1)[-1]
    if name.startswith("test_workload") and name.endswith("]") and "[" in name:
        return name[name.index("[") + 1: -1]
    return results.suite_of(nodeid)


@pytest.fixture(autouse=True)
def _device_marks(request: pytest.FixtureRequest, device_type: str, device: str) -> None:
    """only_on / skip_on / needs_devices / dtypes' marks (accelgrid.testing), before the test."""
    why = testing.skip_reason(request.node, device_type, device)
    if why:
        pytest.skip(why)
