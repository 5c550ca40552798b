"""pytest plugin for cell runs: the device fixtures, markers, and per-test recording.

Loaded by the repo's root ``conftest.py``. Recording is on when ``ACCELGRID_RESULTS``
names a results folder (the runner sets it); without it only the fixtures are active.
With pytest-xdist the controller records (:class:`accelgrid.testing.recorder.Recorder`: it
sees every report, including the ones xdist makes for a crashed worker); each worker notes
the test it is in so a crash or a hang is attributed to the right test.

Nothing lost: a dead worker with a test does not count towards xdist's restart limit
(:class:`RestartBudget`), so any number of crashing or hanging tests lose
only themselves; every event a worker sends is made encodable first (:func:`_safe_events`),
so a test's text (a non-UTF-8 file name in a message, a skip reason, captured output)
cannot end the run; each worker dies with its controller (:mod:`accelgrid.base.lifetime`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import devices, results, testing
from ..base import contract, jsonio, lifetime
from ..results import junit, provenance, shards
from . import known_issues_runtime
from .outcome_map import message
from .recorder import Recorder

if TYPE_CHECKING:  # an old-style hookwrapper's outcome: pluggy's (pytest's own dependency)
    from pluggy import Result


def _worker_id(config: pytest.Config) -> str | None:
    return getattr(config, "workerinput", {}).get("workerid")


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
            have: list[str] = known if isinstance(known, list) else []
            seen = set(have)
            return have + [i for i in left if i not in seen]

        jsonio.update_json(self.folder / name, add)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> None:
        marker = item.get_closest_marker("timeout")
        timeout = marker.args[0] if marker and marker.args else self.default_timeout
        results.mark_running(self.folder, self.worker, item.nodeid, timeout, slot=self.slot)
        self.cpu_start = time.process_time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, Result[pytest.TestReport], None]:
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
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Result[None], None]:
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
        if str(report.outcome) == "rerun":  # pytest-rerunfailures', outside pytest's Literal
            self.attempts.setdefault(report.nodeid, []).append(
                (message(report), str(report.longrepr or "")))
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
