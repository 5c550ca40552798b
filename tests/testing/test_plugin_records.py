"""The in-cell plugin's records (accelgrid.testing.recorder's Recorder, registered by the
plugin) from real pytest runs in process (pytester): each way a test can end, as
tests.jsonl, env.json, collected.json and plan.json get it. Each case pins a behaviour a
planted fault changed unseen (docs/design/mutation.md, ``python tools/mutate.py plugin``,
``recorder``, ``outcome_map``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from accelgrid import results
from accelgrid.base import contract, jsonio, outcomes
from accelgrid.results import plan as run_plan
from accelgrid.testing import outcome_map, pytest_plugin, recorder

pytest_plugins = ["pytester"]

PAYLOAD = '''
import json
import os
import time
from pathlib import Path

import pytest
from accelgrid.base import outcomes


@pytest.fixture
def broken_teardown():
    yield
    print("teardown says hi")
    raise RuntimeError("teardown broke")


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")


def test_pass(record_property):
    time.sleep(0.05)
    record_property("kernel", "gemm")
    record_property("err", float("nan"))
    record_property("count", 3)


def test_fail():
    # What env.json says while the pass runs: torch's facts are merged at its end.
    env = json.loads((Path(os.environ["ACCELGRID_RESULTS"]) / "env.json").read_text())
    Path("env-during.json").write_text(json.dumps(env))
    print("captured line")
    assert 1 == 2, "one is not two"


def test_skip():
    pytest.skip("no widget API")


def test_not_run():
    outcomes.not_run("needs two devices")


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="fixed upstream", strict=True)
def test_xpass_strict():
    pass


@pytest.mark.xfail(reason="maybe fixed")
def test_xpass():
    pass


def test_teardown_error(broken_teardown):
    pass


def test_setup_error(broken_setup):
    pass
'''


def run_cell(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
             files: dict[str, str], *args: str, cell: str = "cpu-2.13",
             env: dict[str, str] | None = None) -> tuple[Path, Any]:
    """A cell's pytest in process with the plugin recording into results/<cell>/."""
    folder = pytester.path / "results" / cell
    for var in (contract.RECORDER_PID, contract.PASS, contract.DEVICE_INDEX, contract.SHARD,
                contract.GATE, contract.CAPTURE_OPS, contract.PYTEST_ARGS,
                contract.SELECTION):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(contract.RESULTS, str(folder))
    monkeypatch.setenv(contract.CELL, cell)
    monkeypatch.setenv(contract.DEVICE, "cpu")
    monkeypatch.setenv(contract.RUN_ID, "run1")
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(**files)
    rec = pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider",
                              "-p", "accelgrid.testing.pytest_plugin", *args)
    return folder, rec


def records(folder: Path) -> dict[str, dict[str, Any]]:
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert problems == []
    return {r["nodeid"].split("::")[-1]: dict(r) for r in recs}


@pytest.fixture
def payload_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[Path, dict[str, dict[str, Any]]]:
    folder, _ = run_cell(pytester, monkeypatch, {"test_w": PAYLOAD})
    return folder, records(folder)


def test_each_ending_is_one_record_with_its_outcome(payload_run) -> None:
    _, got = payload_run
    assert {name: r["outcome"] for name, r in got.items()} == {
        "test_pass": outcomes.PASSED, "test_fail": outcomes.FAILED,
        "test_skip": outcomes.SKIPPED, "test_not_run": outcomes.NOT_RUN,
        "test_xfail": outcomes.XFAILED, "test_xpass_strict": outcomes.XPASSED,
        "test_xpass": outcomes.XPASSED, "test_teardown_error": outcomes.ERROR,
        "test_setup_error": outcomes.ERROR}
    for r in got.values():
        assert (r["cell"], r["pass"], r["run_id"], r["device"]) == (
            "cpu-2.13", contract.PASS_SINGLE, "run1", "cpu")
        assert r["worker"] is None and isinstance(r["finished"], float)
        assert isinstance(r["start"], float) and 0 <= r["duration"] < 60
    assert got["test_pass"]["duration"] >= 0.05


def test_messages_phases_and_output(payload_run) -> None:
    _, got = payload_run
    fail = got["test_fail"]
    assert fail["message"].startswith("AssertionError: one is not two")
    assert "assert 1 == 2" in fail["longrepr"] and fail["phase"] == "call"
    assert fail["output"] == "--- Captured stdout call ---\ncaptured line\n\n"
    assert got["test_skip"]["message"] == "no widget API"   # pytest's "Skipped: " gone
    assert got["test_not_run"]["message"] == "needs two devices"
    assert got["test_xfail"]["message"] == "known bug"
    assert got["test_xpass"]["message"] == "maybe fixed"
    assert got["test_xpass_strict"]["message"] == "[XPASS(strict)] fixed upstream"
    assert got["test_xpass_strict"]["phase"] == "call"
    down = got["test_teardown_error"]
    assert down["phase"] == "teardown" and down["message"] == "RuntimeError: teardown broke"
    assert "teardown broke" in down["longrepr"]
    assert "teardown says hi" in down["output"]
    up = got["test_setup_error"]
    assert up["phase"] == "setup" and up["message"] == "RuntimeError: setup broke"
    assert "setup broke" in up["longrepr"] and "output" not in up
    assert got["test_pass"]["message"] == "" and "phase" not in got["test_pass"]
    assert "output" not in got["test_pass"] and "output" not in got["test_skip"]


def test_recorded_properties_keep_json_values_and_repr_the_rest(payload_run) -> None:
    _, got = payload_run
    assert got["test_pass"]["properties"] == {"kernel": "gemm", "err": "nan", "count": 3}
    assert "properties" not in got["test_fail"]


def test_env_collected_and_plan_of_the_pass(payload_run) -> None:
    folder, got = payload_run
    during = json.loads((folder.parents[1] / "env-during.json").read_text())
    assert during["torch"]["pending"] is True and during["status"] == "running"
    env, err = jsonio.read_json(folder / contract.ENV_FILE)
    assert err is None
    assert isinstance(env["torch"].get("version"), str) and "pending" not in env["torch"]
    assert env["status"] == "finished" and env["end"] and env["run_id"] == "run1"
    assert env["exitstatus"] == 1 and env["cell"] == "cpu-2.13"
    [entry] = env["passes"]
    assert entry["name"] == contract.PASS_SINGLE and entry["end"] == env["end"]
    assert entry["exitstatus"] == 1
    collected, _ = jsonio.read_json(folder / contract.COLLECTED_FILE)
    assert [c.split("::")[-1] for c in collected] == list(got)
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert run_plan.count_mismatch(run_plan.read(folder), recs) is None
    summary = results.run_summary(folder)
    assert summary["total"] == 9 and summary["counts"][outcomes.ERROR] == 2


SEES_ENV = """
import json, os
from pathlib import Path


def test_b():
    env = json.loads((Path(os.environ["ACCELGRID_RESULTS"]) / "env.json").read_text())
    Path("torch-seen.json").write_text(json.dumps(env["torch"]))
"""


def test_a_second_pass_of_the_run_keeps_the_runs_start_and_adds_its_own(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {"test_a": "def test_a():\n    pass\n"})
    first, _ = jsonio.read_json(folder / contract.ENV_FILE)
    assert isinstance(first["torch"], dict) and not first["torch"].get("pending")
    # The second pass's test sees env.json as the pass's start left it.
    pytester.makepyfile(test_b=SEES_ENV)
    monkeypatch.setenv(contract.PASS, contract.PASS_ALL_DEVICES)
    pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider",
                        "-p", "accelgrid.testing.pytest_plugin", "test_b.py", "test_a.py")
    # The torch facts the first pass merged stay while the second runs.
    assert json.loads((pytester.path / "torch-seen.json").read_text()) == first["torch"]
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert [(r["nodeid"], r["pass"]) for r in recs] == [
        ("test_a.py::test_a", contract.PASS_SINGLE),
        ("test_b.py::test_b", contract.PASS_ALL_DEVICES),
        ("test_a.py::test_a", contract.PASS_ALL_DEVICES)]   # each pass's run of a test
    env, _ = jsonio.read_json(folder / contract.ENV_FILE)
    assert env["start"] == first["start"]
    assert [p["name"] for p in env["passes"]] == [contract.PASS_SINGLE,
                                                   contract.PASS_ALL_DEVICES]
    collected, _ = jsonio.read_json(folder / contract.COLLECTED_FILE)
    assert collected == ["test_a.py::test_a", "test_b.py::test_b"]
    assert [r["device"] for r in recs] == ["cpu", "cpu:all", "cpu:all"]
    # Another run's env.json is not continued: the new run starts its own passes.
    monkeypatch.setenv(contract.RUN_ID, "run2")
    monkeypatch.setenv(contract.PASS, contract.PASS_SINGLE)
    pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider",
                        "-p", "accelgrid.testing.pytest_plugin", "test_a.py")
    env, _ = jsonio.read_json(folder / contract.ENV_FILE)
    assert [p["name"] for p in env["passes"]] == [contract.PASS_SINGLE]
    assert env["run_id"] == "run2"


def test_a_pinned_worker_records_its_device_index(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {"test_a": "def test_a():\n    pass\n"},
                         env={contract.DEVICE_INDEX: "1"})
    assert records(folder)["test_a"]["device"] == "cpu:1"


def test_a_module_that_fails_to_import_or_exits_is_an_error_record(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {
        "test_bad": "import no_such_module_here\n\ndef test_x():\n    pass\n",
        "test_exits": "import sys\nsys.exit(3)\n",
        "test_ok": "def test_ok():\n    pass\n"}, "--continue-on-collection-errors")
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    by_id = {r["nodeid"]: r for r in recs}
    bad = by_id["test_bad.py"]
    assert bad["outcome"] == outcomes.ERROR and bad["phase"] == "collect"
    assert "no_such_module_here" in bad["message"] and "no_such_module_here" in bad["longrepr"]
    exits = by_id["test_exits.py"]
    assert exits["outcome"] == outcomes.ERROR
    assert exits["message"] == ("test_exits.py: the module exited at import (SystemExit: 3); "
                                "its tests cannot be collected")
    assert by_id["test_ok.py::test_ok"]["outcome"] == outcomes.PASSED
    assert len(recs) == 3


def test_run_fields_from_the_runners_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.RUN_ID, "abc")
    monkeypatch.setenv(contract.PYTEST_ARGS, json.dumps(["-k", "x", 3]))
    monkeypatch.setenv(contract.SELECTION, "not json")
    assert recorder.run_fields() == {"run_id": "abc", "pytest_args": ["-k", "x", "3"],
                                           "selection": ["not json"]}
    monkeypatch.setenv(contract.RUN_ID, "")
    monkeypatch.setenv(contract.PYTEST_ARGS, '"one"')   # JSON, not a list
    monkeypatch.delenv(contract.SELECTION)
    assert recorder.run_fields() == {"run_id": None, "pytest_args": ["one"],
                                           "selection": []}


def test_jsonable_keeps_what_json_holds_and_reprs_the_rest() -> None:
    assert outcome_map.jsonable({"a": [1, 2.5, "x", None]}) == {"a": [1, 2.5, "x", None]}
    assert outcome_map.jsonable(math.inf) == "inf"
    assert outcome_map.jsonable({1, 2}) == "{1, 2}"


@pytest.mark.parametrize(("nodeid", "workload"), [
    ("suites/hf_examples/test_w.py::test_workload[image-classification]",
     "image-classification"),
    ("suites/hf_examples/test_w.py::test_workload_train[text]", "text"),
    ("suites/hf_examples/test_w.py::test_workload", "hf_examples"),
    ("suites/hf_examples/test_w.py::test_workload[x", "hf_examples"),
    ("suites/hf_examples/test_w.py::test_other[x]", "hf_examples"),
    ("suites/smoke/test_d.py::test_workloadx]", "smoke"),
])
def test_workload_of(nodeid: str, workload: str) -> None:
    assert pytest_plugin.workload_of(nodeid) == workload


def test_without_a_terminal_reporter_the_plan_has_no_reported_count(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {"test_a": "def test_a():\n    pass\n"},
                         "-p", "no:terminal")
    plan = run_plan.read(folder)
    assert plan is not None
    [entry] = plan["passes"]
    assert entry["collected"] == 1 and "reported" not in entry and entry["outcomes"] == {}
    assert run_plan.count_mismatch(plan, results.read_records(
        folder / contract.TESTS_FILE)[0]) is None


def test_the_plan_has_pytests_counts_per_outcome(payload_run) -> None:
    folder, _ = payload_run
    plan = run_plan.read(folder)
    assert plan is not None
    [entry] = plan["passes"]
    # A test whose teardown failed counts as passed and as an error (pytest's summary).
    assert entry["outcomes"] == {"passed": 2, "failed": 2, "error": 2, "skipped": 2,
                                 "xfailed": 1, "xpassed": 1}
    assert entry["collected"] == 9 and entry["reported"] == 9 and entry["exitstatus"] == 1


def test_a_test_that_deletes_the_cells_files_loses_none_of_them(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    deleting = '''
import os
from pathlib import Path


def test_a():
    pass


def test_deletes():
    folder = Path(os.environ["ACCELGRID_RESULTS"])
    for name in ("collected.json", "env.json", "tests.jsonl"):
        (folder / name).unlink()


def test_c():
    pass
'''
    folder, _ = run_cell(pytester, monkeypatch, {"test_d": deleting})
    collected, err = jsonio.read_json(folder / contract.COLLECTED_FILE)
    assert err is None and [c.split("::")[-1] for c in collected] == [
        "test_a", "test_deletes", "test_c"]
    assert set(records(folder)) == {"test_a", "test_deletes", "test_c"}
    env, err = jsonio.read_json(folder / contract.ENV_FILE)
    assert err is None and env["cell"] == "cpu-2.13" and env["status"] == "finished"
    assert env["passes"][0]["end"] == env["end"]


RERUN_PAYLOAD = '''
import os
from pathlib import Path


def test_flaky(tmp_path_factory):
    mark = Path(os.environ["FLAKY_MARK"])
    if not mark.exists():
        mark.write_text("failed once")
        assert False, "first attempt"


def test_always_fails():
    assert False, "every attempt"
'''


def test_reruns_are_counted_and_a_pass_after_one_is_flaky(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAKY_MARK", str(pytester.path / "flaky-mark"))
    folder, _ = run_cell(pytester, monkeypatch, {"test_r": RERUN_PAYLOAD}, "--reruns", "2")
    got = records(folder)
    assert set(got) == {"test_flaky", "test_always_fails"}
    assert (got["test_flaky"]["outcome"], got["test_flaky"]["reruns"]) == (outcomes.FLAKY, 1)
    assert got["test_flaky"]["message"] == ""
    fails = got["test_always_fails"]
    assert (fails["outcome"], fails["reruns"]) == (outcomes.FAILED, 2)
    assert fails["message"].startswith("AssertionError: every attempt")
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert len(recs) == 2   # the failed attempts leave no record of their own


ISSUE_CONFTEST = '''
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # What known_issues_runtime sets on the report of a test a registry entry covers.
    outcome = yield
    if item.name == "test_covered" and call.when == "call":
        setattr(outcome.get_result(), "accelgrid_issue", {"id": "acme/widgets#1"})


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # After the last record, before the recorder's own end: a plugin that removes it.
    (session.config.rootpath / "results" / "cpu-2.13" / "tests.jsonl").unlink()
'''


def test_the_issue_and_cpu_time_on_the_report_go_into_the_record_and_the_end_restores(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {
        "conftest": ISSUE_CONFTEST,
        "test_i": "def test_covered():\n    pass\n\ndef test_plain():\n    pass\n"})
    got = records(folder)   # tests.jsonl is back: the recorder's end restored it
    assert got["test_covered"]["issue"] == {"id": "acme/widgets#1"}
    assert "issue" not in got["test_plain"]
    for rec in got.values():
        assert isinstance(rec["cpu_s"], float) and 0 <= rec["cpu_s"] < 60


CRASH_CONFTEST = '''
import time

import pytest

from accelgrid import results


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # What xdist's controller reports for a test whose worker died (handle_crashitem:
    # when "???"), one in a test past its timeout (its running marker) and one not.
    folder = session.config.rootpath / "results" / "cpu-2.13"
    results.mark_running(folder, "gw1", "test_c.py::test_slow", 0.001, slot="gw1")
    time.sleep(0.01)
    for nodeid in ("test_c.py::test_gone", "test_c.py::test_slow"):
        session.config.hook.pytest_runtest_logreport(report=pytest.TestReport(
            nodeid, ("test_c.py", 0, nodeid), {}, "failed",
            f"worker 'gw0' crashed while running {nodeid!r}", "???"))
'''


def test_a_worker_crash_report_is_a_crashed_or_timeout_record(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = run_cell(pytester, monkeypatch, {
        "conftest": CRASH_CONFTEST, "test_c": "def test_ok():\n    pass\n"})
    got = records(folder)
    gone = got["test_gone"]
    assert gone["outcome"] == outcomes.CRASHED and gone["start"] is None
    assert gone["duration"] is None and gone["worker"] is None
    assert gone["message"] == "worker 'gw0' crashed while running 'test_c.py::test_gone'"
    assert gone["longrepr"] == gone["message"] and gone["device"] == "cpu"
    slow = got["test_slow"]
    assert slow["outcome"] == outcomes.TIMEOUT and slow["worker"] == "gw1"
    assert slow["message"] == ("timed out after 0.001 s (worker killed by pytest-timeout); "
                               "worker 'gw0' crashed while running 'test_c.py::test_slow'")
    assert 0.009 < slow["duration"] < 60
    assert got["test_ok"]["outcome"] == outcomes.PASSED


def test_the_recorder_works_without_xdist(pytester: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Its xdist hook is optional: a pytest without xdist still loads the plugin.
    folder, rec = run_cell(pytester, monkeypatch, {"test_a": "def test_a():\n    pass\n"},
                           "-p", "no:xdist")
    assert rec.ret == 0
    assert records(folder)["test_a"]["outcome"] == outcomes.PASSED


def test_a_pass_ending_while_another_runs_leaves_the_run_unfinished(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # env.json as the pinned pass beside this one left it (an env.json of this run from
    # before torch facts were kept: no torch section), still running.
    folder = pytester.path / "results" / "cpu-2.13"
    folder.mkdir(parents=True)
    jsonio.write_json(folder / contract.ENV_FILE, {
        "cell": "cpu-2.13", "run_id": "run1", "start": "2026-01-01T00:00:00+00:00",
        "status": "running", "end": None,
        "passes": [{"name": "pinned", "start": "2026-01-01T00:00:00+00:00", "end": None}]})
    folder, _ = run_cell(pytester, monkeypatch, {"test_a": "def test_a():\n    pass\n"},
                         env={contract.PASS: contract.PASS_ALL_DEVICES})
    env, _ = jsonio.read_json(folder / contract.ENV_FILE)
    assert env["start"] == "2026-01-01T00:00:00+00:00"
    pinned, mine = env["passes"]
    assert pinned == {"name": "pinned", "start": "2026-01-01T00:00:00+00:00", "end": None}
    assert mine["name"] == contract.PASS_ALL_DEVICES and mine["end"]
    assert mine["exitstatus"] == 0
    assert env["status"] == "running" and env.get("end") is None
    assert records(folder)["test_a"]["outcome"] == outcomes.PASSED


def test_a_collection_error_is_recorded_once_per_run(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"test_bad": "import no_such_module_here\n"}
    folder, _ = run_cell(pytester, monkeypatch, files)
    # The next pass of the run collects the same module: still one record of it.
    monkeypatch.setenv(contract.PASS, contract.PASS_ALL_DEVICES)
    pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider",
                        "-p", "accelgrid.testing.pytest_plugin")
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert [(r["nodeid"], r["pass"]) for r in recs] == [("test_bad.py", contract.PASS_SINGLE)]


SETUP_ON_RERUN = '''
import os
from pathlib import Path

import pytest


@pytest.fixture
def second_setup_breaks():
    mark = Path(os.environ["FLAKY_MARK"])
    if mark.exists():
        raise RuntimeError("setup broke on the rerun")
    mark.write_text("first attempt")


def test_r(second_setup_breaks):
    assert False, "first attempt fails"
'''


def test_a_rerun_whose_setup_fails_is_recorded_with_that_setups_error(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAKY_MARK", str(pytester.path / "flaky-mark"))
    folder, _ = run_cell(pytester, monkeypatch, {"test_s": SETUP_ON_RERUN}, "--reruns", "1")
    rec = records(folder)["test_r"]
    assert (rec["outcome"], rec["phase"], rec["reruns"]) == (outcomes.ERROR, "setup", 1)
    assert rec["message"] == "RuntimeError: setup broke on the rerun"
