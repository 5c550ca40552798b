"""The cell run's records: on the xdist controller (or the one pytest process of a run
without xdist), :class:`Recorder` turns each test's setup, call and teardown reports into
one record of tests.jsonl (:mod:`.outcome_map`), a dead worker's test into a crash or a
timeout, a module that fails to import into a collection error, and keeps the run's
env.json (each pass's start and end), collected.json and plan.json up to date.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from .. import results
from ..base import contract, jsonio, outcomes, redact
from ..results import plan as run_plan
from ..results import provenance
from .outcome_map import add_phase, message

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from ..results.records import TestRecord


def run_fields() -> dict[str, Any]:
    """The run's id, the user's pytest args and the selection, as the runner set them."""
    fields: dict[str, Any] = {"run_id": os.environ.get(contract.RUN_ID) or None}
    for key, var in (("pytest_args", contract.PYTEST_ARGS), ("selection", contract.SELECTION)):
        try:
            value = json.loads(os.environ.get(var) or "[]")
        except ValueError:
            value = [os.environ[var]]
        fields[key] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return fields



def _adding(ids: list[str]) -> Callable[[Any], list[str]]:
    """collected.json's change that adds ``ids`` it lacks (in order)."""
    def add(known: Any) -> list[str]:
        have: list[str] = known if isinstance(known, list) else []
        seen = set(have)
        return have + [i for i in ids if i not in seen]
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
        self.run = run_fields()
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
            redacted: dict[str, Any] = redact.redact_value(new)
            return redacted

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
            redacted: dict[str, Any] = redact.redact_value(env)
            return redacted

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
                     "duration": None, "message": message(report),
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
        if self._rerun_attempt(report):
            return
        rec = self.pending.setdefault(report.nodeid, {
            "nodeid": report.nodeid, "outcome": None, "duration": 0.0,
            "message": "", "longrepr": "", "worker": worker, "device": self._device_of(node),
            "start": self.started.get(report.nodeid),
        })
        add_phase(rec, report)
        if report.when == "teardown":
            done = self.pending.pop(report.nodeid)
            if report.nodeid in self.reruns:
                done["reruns"] = self.reruns.pop(report.nodeid)
                if done["outcome"] == outcomes.PASSED:
                    done["outcome"] = outcomes.FLAKY  # passed only after failing first
            self._write(done)

    def _rerun_attempt(self, report: pytest.TestReport) -> bool:
        """Whether ``report`` belongs to an attempt pytest-rerunfailures runs again: the
        attempt (and its teardown's report) is dropped; the final record counts the
        reruns (history: a pass after a rerun is flaky, never passed)."""
        # str(): "rerun" is pytest-rerunfailures' outcome, outside pytest's Literal.
        if str(report.outcome) == "rerun":
            self.pending[report.nodeid] = {"rerun_attempt": True}
            self.reruns[report.nodeid] = self.reruns.get(report.nodeid, 0) + 1
            return True
        if self.pending.get(report.nodeid, {}).get("rerun_attempt"):
            if report.when == "teardown":
                del self.pending[report.nodeid]
            return True
        return False

    def _crashed(self, report: pytest.TestReport, worker: str | None) -> None:
        info = results.running(self.folder).get(report.nodeid, {})
        start = info.get("start") or self.started.get(report.nodeid)
        timeout = info.get("timeout") or self.config.getoption("timeout", None)
        outcome = results.crash_outcome(start, timeout)
        detail = message(report)
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

