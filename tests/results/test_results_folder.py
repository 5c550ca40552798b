"""The run folder's protocol (accelgrid.results) on real folders and records: each case
pins a behaviour a planted fault changed unseen (docs/design/mutation.md,
``python tools/mutate.py results``)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path, PosixPath
from typing import Any

import pytest
import torch

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.results import markers
from accelgrid.results.records import TestRecord as TypedRecord


def test_results_root_is_the_project_results_unless_the_variable_names_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.RESULTS_DIR, raising=False)
    assert results.results_root(tmp_path) == tmp_path / "results"
    monkeypatch.setenv(contract.RESULTS_DIR, "")  # empty: as unset
    assert results.results_root(tmp_path) == tmp_path / "results"
    monkeypatch.setenv(contract.RESULTS_DIR, str(tmp_path / "elsewhere"))
    assert results.results_root(tmp_path) == tmp_path / "elsewhere"


@pytest.mark.parametrize(("nodeid", "suite"), [
    ("suites/offload/test_x.py::t", "offload"),
    ("suites/smoke/test_device_api.py::test_a[cpu]", "smoke"),
    ("suites/test_top.py::t", "suites"),     # a file directly under suites/: no folder
    ("tests/test_x.py::t", "tests"),
    ("other/suites/x.py::t", "other"),
    ("test_x.py::t", "test_x.py"),
    ("suites/a/b/test_c.py::t[x/y]", "a"),  # a slash in the parameters is not a folder
])
def test_suite_of_is_the_folder_under_suites(nodeid: str, suite: str) -> None:
    assert results.suite_of(nodeid) == suite


def _written(folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    results.append_record(folder / contract.TESTS_FILE, record)
    [rec], problems = results.read_records(folder / contract.TESTS_FILE)
    assert problems == []
    (folder / contract.TESTS_FILE).unlink()
    return dict(rec)


@pytest.mark.parametrize(("field", "limit"), [("message", 64 * 1024), ("longrepr", 8000),
                                              ("output", 8000)])
def test_a_field_past_its_limit_is_cut_in_the_middle_and_kept_whole(
        tmp_path: Path, field: str, limit: int) -> None:
    inside = "a" * limit
    rec = _written(tmp_path, {"nodeid": "t.py::t", "outcome": "failed", field: inside})
    assert rec[field] == inside and "full_text" not in rec
    past = "b" * (limit // 2) + "MIDDLE" + "c" * (limit - limit // 2 - 5)   # limit + 1
    rec = _written(tmp_path, {"nodeid": "t.py::t", "outcome": "failed", field: past})
    rel = rec["full_text"][field]
    assert re.fullmatch(rf"full-text/[0-9a-f]{{16}}-\d+-{field}\.txt", rel)
    assert (tmp_path / rel).read_text() == past
    half = limit // 2
    assert rec[field] == (past[:half] + f"\n... [1 characters cut; whole text in {rel}] ...\n"
                          + past[-half:])
    assert "MIDDLE" not in rec[field]


def test_every_cut_field_of_a_record_is_kept_whole_even_in_a_new_folder(tmp_path: Path) -> None:
    folder = tmp_path / "not" / "yet"   # bounded_record makes full-text/ and its parents
    record = {"nodeid": "t.py::t", "outcome": "failed", "message": "m" * 70_000,
              "longrepr": "l" * 9000, "output": "o" * 9000}
    out = results.bounded_record(record, folder)
    assert set(out["full_text"]) == {"message", "longrepr", "output"}
    for name, rel in out["full_text"].items():
        assert (folder / rel).read_text() == record[name]
        assert f"whole text in {rel}" in out[name]
    dropped = results.bounded_record(record, None)
    assert "full_text" not in dropped
    assert "[1000 characters cut; dropped]" in dropped["longrepr"]


def test_identity_and_numbers_stay_whole_and_a_big_mapping_is_cut_to_text(
        tmp_path: Path) -> None:
    nodeid = "t.py::t[" + "p" * 70_000 + "]"
    small = {"kernel": "gemm"}
    big = {f"k{i}": "v" * 100 for i in range(1000)}   # JSON past 64 KiB
    out = results.bounded_record({"nodeid": nodeid, "outcome": "x" * 70_000,
                                  "run_id": "r" * 70_000, "duration": 1.5, "cpu_s": 2,
                                  "flag": True, "issue": None, "properties": small,
                                  "other": big}, tmp_path)
    assert out["nodeid"] == nodeid and out["outcome"] == "x" * 70_000
    assert out["run_id"] == "r" * 70_000
    assert (out["duration"], out["cpu_s"], out["flag"], out["issue"]) == (1.5, 2, True, None)
    assert out["properties"] == small
    encoded = json.dumps(big, ensure_ascii=False)
    rel = out["full_text"]["other"]
    assert set(out["full_text"]) == {"other"}
    assert json.loads((tmp_path / rel).read_text()) == big
    cut = len(encoded) - 2 * (64 * 1024 // 2)
    assert out["other"] == {"truncated": f"[{cut} characters cut; whole text in {rel}] "
                            + encoded[:32 * 1024] + f"\n... [{cut} characters cut; whole "
                            f"text in {rel}] ...\n" + encoded[-32 * 1024:]}


def test_a_folder_that_cannot_take_the_whole_text_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "cell"
    blocker.write_text("a file where the folder would be")
    out = results.bounded_record({"nodeid": "t", "outcome": "failed",
                                  "message": "m" * 70_000}, blocker)
    assert "full_text" not in out
    assert "characters cut; the whole could not be kept: Not a directory]" in out["message"]


def test_a_record_is_written_redacted_but_its_identity_as_collected(tmp_path: Path) -> None:
    url = "https://alice:s3cret@example.com/x"
    nodeid = f"t.py::t[{url}]"
    results.append_record(tmp_path / contract.TESTS_FILE, {
        "nodeid": nodeid, "outcome": "failed", "message": f"fetch {url} failed",
        "run_id": "r1", "duration": 0.5})
    line = (tmp_path / contract.TESTS_FILE).read_text()
    raw = json.loads(line)
    assert raw["nodeid"] == nodeid and "s3cret" not in raw["message"]
    assert raw["message"].startswith("fetch https://") and raw["message"].endswith(" failed")
    # Written in the order given (nodeid first), one line.
    assert list(raw) == ["nodeid", "outcome", "message", "run_id", "duration"]
    assert line.count("\n") == 1 and line.endswith("\n")


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors os.fsync is called with (it still syncs)."""
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_durable_append_is_fsynced_and_a_plain_one_is_not(
        tmp_path: Path, synced: list[int]) -> None:
    path = tmp_path / contract.TESTS_FILE
    results.append_record(path, {"nodeid": "t.py::a", "outcome": "passed"})
    assert synced == []
    results.append_record(path, {"nodeid": "t.py::b", "outcome": "passed"}, durable=True)
    assert len(synced) == 1
    results.append_record_once(path, {"nodeid": "t.py::c", "outcome": "error"})
    assert len(synced) == 1   # once: two passes' same collection error, not durable
    assert [r["nodeid"] for r in results.read_records(path)[0]] == [
        "t.py::a", "t.py::b", "t.py::c"]


def test_record_file_puts_back_what_a_test_deleted_merged_with_what_others_wrote(
        tmp_path: Path) -> None:
    path = tmp_path / "cell" / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rf.append({"nodeid": "t.py::a", "outcome": "passed"})
    with jsonio.locked(path.parent):
        assert rf.restore() is False          # the path still names the fd's file
    path.unlink()                              # a test deleted it
    results.append_record(path, {"nodeid": "t.py::b", "outcome": "passed"})  # another pass
    rf.append({"nodeid": "t.py::c", "outcome": "passed"})
    assert [r["nodeid"] for r in results.read_records(path)[0]] == [
        "t.py::b", "t.py::a", "t.py::c"]
    path.unlink()
    with jsonio.locked(path.parent):
        assert rf.restore() is True
        assert rf.restore() is False
    path.unlink()
    rf.close()   # restores what a test took at the very end too
    rf.close()   # a second close does nothing
    assert [r["nodeid"] for r in results.read_records(path)[0]] == [
        "t.py::b", "t.py::a", "t.py::c"]


def test_record_file_appends_each_record_unless_once_finds_it_there(
        tmp_path: Path, synced: list[int]) -> None:
    path = tmp_path / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rec: TypedRecord = {"nodeid": "t.py::a", "outcome": "passed", "run_id": "r1"}
    assert rf.append(rec.copy()) is True
    assert rf.append(rec.copy()) is True           # a rerun of the test: a record each
    assert synced == []
    assert rf.append(rec.copy(), once=True) is False
    assert rf.append({**rec, "run_id": "r2"}, once=True) is True
    assert rf.append(rec.copy(), once=True) is False   # one of several matches
    assert rf.append({**rec, "nodeid": "t.py::b"}, durable=True, once=True) is True
    assert len(synced) == 1
    rf.close()
    assert [(r["nodeid"], r["run_id"]) for r in results.read_records(path)[0]] == [
        ("t.py::a", "r1"), ("t.py::a", "r1"), ("t.py::a", "r2"), ("t.py::b", "r1")]


@pytest.mark.parametrize(("elapsed", "timeout", "outcome"), [
    (95.0, 100.0, "timeout"),      # pytest-timeout fires at the limit: 5 % slack
    (94.9, 100.0, "crashed"),
    (200.0, 100.0, "timeout"),
    (10.0, None, "crashed"),       # no limit: a death is a crash
    (10.0, 0, "crashed"),
])
def test_a_dead_workers_test_is_a_timeout_only_near_its_limit(
        elapsed: float, timeout: float | None, outcome: str) -> None:
    assert results.crash_outcome(1000.0, timeout, now=1000.0 + elapsed) == outcome
    assert results.crash_outcome(None, 100.0, now=5000.0) == "crashed"


def test_running_markers_name_the_test_each_worker_is_in(tmp_path: Path) -> None:
    results.mark_running(tmp_path, "gw0", "t.py::a", 30.0, slot="single-gw0")
    results.mark_running(tmp_path, "main", "t.py::b", None)
    (tmp_path / contract.RUNNING_DIR / "junk.json").write_text("{not json")
    (tmp_path / contract.RUNNING_DIR / "other.json").write_text('{"start": 1}')
    got = results.running(tmp_path)
    assert set(got) == {"t.py::a", "t.py::b"}
    assert got["t.py::a"]["worker"] == "gw0" and got["t.py::a"]["timeout"] == 30.0
    assert got["t.py::b"]["worker"] == "main" and got["t.py::b"]["timeout"] is None
    results.clear_running(tmp_path, "single-gw0")
    assert set(results.running(tmp_path)) == {"t.py::b"}


def test_import_deaths_are_the_imports_never_cleared_once_each(tmp_path: Path) -> None:
    marker = results.mark_importing(tmp_path, "test file", "suites/x/test_dies.py")
    assert marker.parent == tmp_path / results.IMPORTING_DIR
    (marker.parent / "1.json").write_text(json.dumps({"path": "suites/x/test_dies.py",
                                                      "what": "test file"}))
    (marker.parent / "2.json").write_text(json.dumps({"path": "spec.py", "what": "spec"}))
    (marker.parent / "3.json").write_text("{half")
    assert results.import_deaths(tmp_path) == [   # in the markers' order (1, 2, pid)
        {"path": "suites/x/test_dies.py", "what": "test file"},
        {"path": "spec.py", "what": "spec"}]
    assert not marker.parent.exists()   # the notes are cleared
    assert results.import_deaths(tmp_path) == []
    results.mark_importing(tmp_path, "test file", "a.py")
    results.clear_importing(tmp_path)
    assert results.import_deaths(tmp_path) == []


def test_redact_file_rewrites_only_what_holds_a_secret(tmp_path: Path) -> None:
    log = tmp_path / "pytest.log"
    log.write_text("GET https://alice:s3cret@example.com/x\nok\n")
    clean = tmp_path / "junit.xml"
    clean.write_text("<testsuites/>\n")
    assert results.redact_files(tmp_path) == [log]
    assert "s3cret" not in log.read_text() and log.read_text().endswith("/x\nok\n")
    assert stat.S_IMODE(log.stat().st_mode) == 0o644   # the rewritten file, readable
    assert clean.read_text() == "<testsuites/>\n"
    assert results.redact_file(log) is False           # nothing left to redact
    link = tmp_path / "pytest-link.log"
    link.symlink_to(tmp_path / "outside.txt")
    (tmp_path / "outside.txt").write_text("https://bob:pw2@example.com/\n")
    assert results.redact_file(link) is False           # never followed
    assert "pw2" in (tmp_path / "outside.txt").read_text()


def test_a_mapping_exactly_at_the_limit_stays_a_mapping(tmp_path: Path) -> None:
    def sized(n: int) -> dict[str, str]:
        return {"k": "v" * n}

    base = len(jsonio.safe_dumps(sized(0), sort_keys=False))
    at = sized(64 * 1024 - base)
    assert len(jsonio.safe_dumps(at, sort_keys=False)) == 64 * 1024
    assert results.bounded_record({"nodeid": "t", "properties": at}, tmp_path) == {
        "nodeid": "t", "properties": at}
    past = sized(64 * 1024 - base + 1)
    assert "truncated" in results.bounded_record({"nodeid": "t", "properties": past},
                                                 tmp_path)["properties"]


def test_record_file_survives_a_test_that_deletes_the_whole_results_folder(
        tmp_path: Path) -> None:
    path = tmp_path / "results" / "cpu-2.13" / contract.TESTS_FILE   # none of it yet
    rf = results.RecordFile(path)
    rf.append({"nodeid": "t.py::a", "outcome": "passed"})
    shutil.rmtree(tmp_path / "results")
    rf.append({"nodeid": "t.py::b", "outcome": "passed"})
    shutil.rmtree(tmp_path / "results")
    rf.close()
    assert [r["nodeid"] for r in results.read_records(path)[0]] == ["t.py::a", "t.py::b"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644   # as a plain file: others read it


def test_two_passes_record_files_restore_a_deleted_file_without_duplicates(
        tmp_path: Path) -> None:
    path = tmp_path / contract.TESTS_FILE
    one, two = results.RecordFile(path), results.RecordFile(path)   # passes at once
    one.append({"nodeid": "t.py::a", "outcome": "passed"})
    two.append({"nodeid": "t.py::b", "outcome": "passed"})
    path.unlink()
    two.append({"nodeid": "t.py::c", "outcome": "passed"})   # restores a, b, then c
    one.append({"nodeid": "t.py::d", "outcome": "passed"})   # a, b are there already
    one.close()
    two.close()
    assert [r["nodeid"] for r in results.read_records(path)[0]] == [
        "t.py::a", "t.py::b", "t.py::c", "t.py::d"]


def test_a_symlink_planted_at_the_records_path_is_replaced_by_the_records(
        tmp_path: Path) -> None:
    path = tmp_path / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rf.append({"nodeid": "t.py::a", "outcome": "passed"})
    moved = tmp_path / "moved.jsonl"
    path.rename(moved)
    path.symlink_to(moved)     # the path now leads (through a link) to the fd's own file
    rf.append({"nodeid": "t.py::b", "outcome": "passed"})
    rf.close()
    assert not path.is_symlink()
    assert [r["nodeid"] for r in results.read_records(path)[0]] == ["t.py::a", "t.py::b"]


def test_an_int_past_64_bits_is_kept_as_text() -> None:
    big = 2 ** 63
    assert results.clean_properties({"a": big, "b": big - 1, "c": -big, "d": -big + 1,
                                     "e": True}) == {
        "a": str(big), "b": big - 1, "c": str(-big), "d": -big + 1, "e": True}


def test_a_nested_value_is_its_compact_json_with_sorted_keys() -> None:
    assert results.clean_properties({"x": [{"b": 1, "a": [2, 3]}]}) == {
        "x": ['{"a":[2,3],"b":1}']}


def test_clean_record_without_a_cache_redacts_properties_and_messages() -> None:
    url = "https://alice:s3cret@example.com/x"
    rec, notes = results.clean_record({"nodeid": "t.py::t", "outcome": "failed",
                                       "message": url, "properties": {"where": url}}, "here")
    assert notes == [] and rec is not None
    assert "s3cret" not in rec["message"] and "s3cret" not in rec["properties"]["where"]
    assert rec["properties"]["where"].endswith("example.com/x")


def test_pass_times_of_a_gated_pass_count_from_its_gate() -> None:
    t0 = 1_700_000_000.0
    passes = [{"name": "pinned", "start": t0, "end": t0 + 10},
              {"name": "alone", "start": t0 + 1, "gate": t0 + 10, "end": t0 + 14.004}]
    recs = [{"nodeid": "a", "pass": "alone", "start": t0 + 12},
            {"nodeid": "b", "pass": "alone", "worker": "gw1", "start": t0 + 11},
            {"nodeid": "c", "pass": "alone", "worker": "gw2", "start": True},
            {"nodeid": "d", "pass": "alone", "worker": "gw3", "start": float("nan")},
            {"nodeid": "e", "pass": "pinned", "start": t0 + 3}]
    timing = results.pass_times(recs, passes, t0)   # type: ignore[arg-type]
    pinned, alone = timing["passes"]
    assert "waited_s" not in pinned and pinned["first_test_s"] == 3.0
    assert pinned["workers_first_test_s"] == {"main": 3.0}
    assert alone["waited_s"] == 9.0 and alone["tests"] == 4 and alone["wall_s"] == 13.0
    assert alone["first_test_s"] == 1.0
    assert alone["workers_first_test_s"] == {"gw1": 1.0, "main": 2.0}
    assert timing["wall_s"] == 14.0
    assert results.pass_times([], [], t0) == {"wall_s": 0.0, "passes": []}


def test_pass_times_say_how_long_a_pass_started_ahead_waited_for_its_gate() -> None:
    """A selected run `accelgrid run` started ahead of its session (run.headstart.prestart): its
    first test still counts from the pass's start; `ahead_s` says when the gate opened."""
    t0 = 1_700_000_000.0
    passes = [{"name": "single", "start": t0, "ahead": t0 + 0.13456, "end": t0 + 2.5,
               "launched": True},
              {"name": "later", "start": t0 + 3, "end": t0 + 4}]
    recs = [{"nodeid": "a", "pass": "single", "start": t0 + 1.5}]
    single, later = results.pass_times(recs, passes, t0)["passes"]   # type: ignore[arg-type]
    assert single["ahead_s"] == 0.13 and single["first_test_s"] == 1.5
    assert "waited_s" not in single and "ahead_s" not in later
    # Started with the command from the last launch (run.headstart.relaunch): said, and only then.
    assert single["launched"] is True and "launched" not in later


def test_finalize_names_the_dead_workers_tests_and_ends_the_env(tmp_path: Path) -> None:
    jsonio.write_json(tmp_path / contract.ENV_FILE, {
        "cell": "cpu-2.13", "run_id": "r1", "status": "running", "end": None,
        "passes": [{"name": "single", "end": None}, {"name": "other", "end": "earlier"}]})
    jsonio.write_json(tmp_path / contract.COLLECTED_FILE, ["t.py::a", "t.py::b", "t.py::c"])
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::a", "outcome": "passed", "run_id": "r1"})
    results.mark_running(tmp_path, "gw0", "t.py::b", None)
    results.mark_running(tmp_path, "gw1", "t.py::a", None)   # recorded: not crashed
    t0 = 1_700_000_000.0
    summary = results.finalize(tmp_path, "killed", timing={
        "passes": [{"name": "single", "start": t0, "end": t0 + 5}], "run_start": t0})
    recs = {r["nodeid"]: r for r in results.read_records(tmp_path / contract.TESTS_FILE)[0]}
    b = recs["t.py::b"]
    assert (b["outcome"], b["worker"], b["run_id"], b["cell"]) == ("crashed", "gw0", "r1",
                                                                   "cpu-2.13")
    assert b["message"] == "the test process died while running this test (killed)"
    assert b["duration"] is not None
    assert 0 <= b["duration"] < 60
    c = recs["t.py::c"]
    assert (c["outcome"], c["message"], c["run_id"]) == ("not-run", "killed", "r1")
    assert recs["t.py::a"]["outcome"] == "passed" and len(recs) == 3
    env, _ = jsonio.read_json(tmp_path / contract.ENV_FILE)
    assert env["status"] == "ended" and env["end_reason"] == "killed" and env["end"]
    assert env["passes"] == [{"name": "single", "end": env["end"]},
                             {"name": "other", "end": "earlier"}]
    assert summary["counts"]["crashed"] == 1 and summary["counts"]["not-run"] == 1
    assert summary["run_id"] == "r1" and summary["partial"] is False
    assert summary["wall_s"] == 5.0 and summary["passes"][0]["tests"] == 0
    assert summary["incomplete"] == "1 of the 3 collected tests have no record: t.py::c"


def test_a_nodeid_up_to_its_bound_is_a_test_and_one_past_it_is_skipped() -> None:
    limit = 64 * 1024
    at = "t.py::t[" + "x" * (limit - 9) + "]"
    assert len(at) == limit
    rec, notes = results.clean_record({"nodeid": at, "outcome": "passed"}, "here")
    assert rec is not None and notes == []
    rec, notes = results.clean_record({"nodeid": at + "y", "outcome": "passed"}, "here")
    assert rec is None and notes == ["here: nodeid is too long, not a test id; record skipped"]


def test_finalize_merges_pending_torch_facts_and_reports_count_mismatches(
        tmp_path: Path) -> None:
    from accelgrid.results import plan, provenance

    jsonio.write_json(tmp_path / contract.ENV_FILE, {
        "cell": "cpu-2.13", "run_id": "r1", "status": "running", "torch": {"pending": True},
        "passes": [{"name": "single", "end": None}]})
    jsonio.write_json(tmp_path / "torch-single-main.json",
                      provenance.worker_torch_report("cpu", True))
    jsonio.write_json(tmp_path / contract.COLLECTED_FILE, ["t.py::a"])
    results.append_record(tmp_path / contract.TESTS_FILE, {
        "nodeid": "t.py::a", "outcome": "passed", "run_id": "r1", "pass": "single"})
    plan.start_pass(tmp_path, "single", "r1", "cpu-2.13", env={})
    plan.end_pass(tmp_path, "single", 2, 2, {"passed": 2}, 0)   # pytest saw 2
    summary = results.finalize(tmp_path, "ended")
    env, _ = jsonio.read_json(tmp_path / contract.ENV_FILE)
    assert "pending" not in env["torch"] and env["torch"]["version"] == torch.__version__
    assert summary["incomplete"] == ("pass single: pytest collected 2 and reported 2, the "
                                     "recorder wrote 1")
    assert "wall_s" not in summary and summary["problems"] == []


def test_a_text_field_holding_a_number_is_its_text_and_a_bool_is_dropped(
        tmp_path: Path) -> None:
    path = tmp_path / contract.TESTS_FILE
    results.append_record(path, {"nodeid": "t.py::a", "outcome": "passed", "worker": 3,
                                 "device": 1.5, "when": True, "duration": 0})
    [rec], notes = results.read_records(path)
    assert (rec["worker"], rec["device"], rec["duration"]) == ("3", "1.5", 0)
    assert "when" not in rec
    assert notes == ["tests.jsonl record 1: when of t.py::a is a boolean; dropped"]


def test_notes_on_bad_fields_name_a_long_test_id_by_its_first_200_characters(
        tmp_path: Path) -> None:
    nodeid = "t.py::t[" + "p" * 3000 + "]"
    path = tmp_path / contract.TESTS_FILE
    for bad in ({"outcome": 5}, {"outcome": "failed", "duration": "d" * 100},
                {"outcome": "failed", "issue": 7}, {"outcome": "failed", "properties": [1]},
                {"outcome": "failed", "worker": [1]}):
        results.append_record(path, {"nodeid": nodeid, **bad})
    records, notes = results.read_records(path)
    short = nodeid[:200]
    assert notes == [
        f"tests.jsonl record 1: outcome of {short} is a number, not a word; record skipped",
        f"tests.jsonl record 2: duration {'d' * 40!r} of {short} is not a number of "
        "seconds; dropped",
        f"tests.jsonl record 3: issue of {short} is a number; dropped",
        f"tests.jsonl record 4: properties of {short} are a list; dropped",
        f"tests.jsonl record 5: worker of {short} is a list; dropped"]
    assert len(records) == 4 and all(r["nodeid"] == nodeid for r in records)


def test_merged_torch_skips_a_report_that_is_not_a_mapping(tmp_path: Path) -> None:
    from accelgrid.results import provenance

    good = provenance.worker_torch_report("cpu", True)
    jsonio.write_json(tmp_path / "torch-single-gw0.json", good)
    jsonio.write_json(tmp_path / "torch-single-gw1.json", [good])
    (tmp_path / "torch-single-gw2.json").write_text("{half")
    assert results.merged_torch(tmp_path) == provenance.merge_torch_reports([good])


def test_run_records_are_env_jsons_run_unless_one_is_named(tmp_path: Path) -> None:
    jsonio.write_json(tmp_path / contract.ENV_FILE, {"run_id": "r1"})
    for nodeid, run_id in (("t.py::a", "r1"), ("t.py::b", "r2"), ("t.py::c", None)):
        rec: dict[str, Any] = {"nodeid": nodeid, "outcome": "passed"}
        if run_id:
            rec["run_id"] = run_id
        results.append_record(tmp_path / contract.TESTS_FILE, rec)
    recs, problems = results.run_records(tmp_path)
    assert [r["nodeid"] for r in recs] == ["t.py::a", "t.py::c"]
    assert problems == ["tests.jsonl: 1 record(s) of another run ignored"]
    recs, _ = results.run_records(tmp_path, "r2")
    assert [r["nodeid"] for r in recs] == ["t.py::b", "t.py::c"]


def test_finalize_without_env_json_takes_the_run_it_is_given(tmp_path: Path) -> None:
    jsonio.write_json(tmp_path / contract.COLLECTED_FILE, ["t.py::a"])
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::a", "outcome": "passed"})
    summary = results.finalize(tmp_path, "ended", run={
        "run_id": "r9", "pytest_args": ["-k", "a"], "selection": ["-k", "a"],
        "cell": "other", "extra": 1})
    assert (summary["run_id"], summary["pytest_args"], summary["selection"]) == (
        "r9", ["-k", "a"], ["-k", "a"])
    assert summary["partial"] is True and "extra" not in summary
    assert summary["cell"] == tmp_path.name and summary["counts"]["passed"] == 1
    assert "incomplete" not in summary
    assert not (tmp_path / contract.ENV_FILE).exists()


def test_finalize_leaves_an_ended_runs_env_as_it_is(tmp_path: Path) -> None:
    env = {"cell": "cpu-2.13", "run_id": "r1", "status": "ended",
           "end": "2026-12-05T01:00:00+00:00", "torch": {"version": "2.13.0"},
           "passes": [{"name": "single", "end": "2026-12-05T01:00:00+00:00"}]}
    jsonio.write_json(tmp_path / contract.ENV_FILE, env)
    jsonio.write_json(tmp_path / contract.COLLECTED_FILE, ["t.py::a"])
    results.append_record(tmp_path / contract.TESTS_FILE,
                          {"nodeid": "t.py::a", "outcome": "passed", "run_id": "r1"})
    summary = results.finalize(tmp_path, "killed")
    assert jsonio.read_json(tmp_path / contract.ENV_FILE)[0] == env
    assert summary["cell"] == "cpu-2.13" and summary["run_id"] == "r1"


def test_finalize_of_a_run_that_never_collected_says_which_part_is_missing(
        tmp_path: Path) -> None:
    jsonio.write_json(tmp_path / contract.ENV_FILE, {
        "cell": "cpu-2.13", "run_id": "r1", "status": "running",
        "passes": [{"name": "single", "end": None}]})
    summary = results.finalize(tmp_path, "killed")
    assert summary["incomplete"].startswith("no collection was recorded (no collected.json)")
    (tmp_path / contract.ENV_FILE).unlink()
    assert results.finalize(tmp_path, "killed")["incomplete"].startswith(
        "the recorder never ran")


def test_incompleteness_names_three_unrecorded_tests_and_marks_more() -> None:
    assert results.incompleteness(["a", "b", "c"], set(), None) == (
        "3 of the 3 collected tests have no record: a, b, c")
    assert results.incompleteness(["a", "b", "c", "d"], {"b"}, None) == (
        "3 of the 4 collected tests have no record: a, c, d")
    assert results.incompleteness(["a", "b", "c", "d"], set(), None) == (
        "4 of the 4 collected tests have no record: a, b, c, ...")
    assert results.incompleteness(["a"], {"a"}, None) is None


def test_pass_times_are_rounded_to_hundredths() -> None:
    t0 = 1_700_000_000.0
    passes = [{"name": "alone", "start": t0, "gate": t0 + 1.004, "end": t0 + 3}]
    recs = [{"nodeid": "a", "pass": "alone", "worker": "gw0", "start": t0 + 2.0071}]
    [timing] = results.pass_times(recs, passes, t0)["passes"]   # type: ignore[arg-type]
    assert (timing["waited_s"], timing["first_test_s"]) == (1.0, 1.0)
    assert timing["workers_first_test_s"] == {"gw0": 1.0}


def test_record_file_restores_a_folder_deleted_while_it_held_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "results" / "cpu-2.13" / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rf.append({"nodeid": "t.py::a", "outcome": "passed"})
    with jsonio.locked(path.parent):
        shutil.rmtree(tmp_path / "results")   # another process's test: flock is advisory
        assert rf.restore() is True
    rf.close()
    assert [r["nodeid"] for r in results.read_records(path)[0]] == ["t.py::a"]


def test_markers_are_written_where_a_test_deleted_the_run_folder(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "cpu-2.13"   # none of it left
    results.mark_running(folder, "gw0", "t.py::a", 5.0)
    assert set(results.running(folder)) == {"t.py::a"}
    shutil.rmtree(tmp_path / "results")
    results.mark_importing(folder, "test file", "suites/x/test_a.py")
    assert results.import_deaths(folder) == [{"path": "suites/x/test_a.py",
                                              "what": "test file"}]


def test_two_workers_making_a_marker_folder_at_once_both_write_theirs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = jsonio.open_nofollow

    def racing(path: Path, flags: int, mode: int = 0o644) -> int:
        if not path.parent.exists():
            # Another worker makes the folder just after this one found it missing.
            path.parent.mkdir()
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        return real(path, flags, mode)

    monkeypatch.setattr(markers, "open_nofollow", racing)
    results.mark_running(tmp_path, "gw0", "t.py::a", None)
    results.mark_importing(tmp_path, "test file", "a.py")
    assert set(results.running(tmp_path)) == {"t.py::a"}
    assert results.import_deaths(tmp_path) == [{"path": "a.py", "what": "test file"}]


def test_import_deaths_never_follow_a_linked_importing_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "1.json").write_text(json.dumps({"path": "x.py", "what": "test file"}))
    run = tmp_path / "run"
    run.mkdir()
    (run / results.IMPORTING_DIR).symlink_to(outside)
    assert results.import_deaths(run) == []
    assert (outside / "1.json").exists()


def test_clear_for_run_makes_a_new_cells_folder_and_its_parents(tmp_path: Path) -> None:
    cell = tmp_path / "results" / "cpu-2.13"   # neither results/ nor the cell yet
    results.clear_for_run(cell)
    assert cell.is_dir() and list(cell.iterdir()) == []


def test_selected_runs_are_the_real_run_folders_newest_first(tmp_path: Path) -> None:
    cell = tmp_path / "cpu-2.13"
    cell.mkdir()
    assert results.selected_runs(cell) == []   # no runs/ yet
    runs = cell / contract.RUNS_DIR
    old, new = runs / "r-old", runs / "r-new"
    old.mkdir(parents=True)
    new.mkdir()
    os.utime(old, (1000, 1000))
    os.utime(new, (2000, 2000))
    (runs / "stray.txt").write_text("not a run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (runs / "linked").symlink_to(outside)
    assert results.selected_runs(cell) == [new, old]


@contextlib.contextmanager
def _undeletable(path: Path) -> Iterator[None]:
    """``path`` cannot be unlinked: its folder read-only for a user, the file immutable
    for root (whom permissions do not stop)."""
    if os.geteuid() != 0:
        path.parent.chmod(0o500)
        try:
            yield
        finally:
            path.parent.chmod(0o700)
        return
    if not shutil.which("chattr") or subprocess.run(
            ["chattr", "+i", str(path)], capture_output=True, check=False).returncode:
        pytest.skip("root without chattr +i here: no file it cannot unlink")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_prune_runs_goes_on_past_a_run_it_cannot_remove(tmp_path: Path) -> None:
    cell = tmp_path / "cpu-2.13"
    runs = cell / contract.RUNS_DIR
    r1, r2, r3 = (runs / f"r{i}" for i in (1, 2, 3))
    for i, run in enumerate((r1, r2, r3)):
        run.mkdir(parents=True)
        os.utime(run, (1000 + i, 1000 + i))
    held = r2 / "held.txt"
    held.write_text("x")
    os.utime(r2, (1001, 1001))
    with _undeletable(held):
        gone = results.prune_runs(cell, keep=1)
        assert gone == [r2, r1] and held.exists()
    assert not r1.exists() and r3.is_dir()


def test_a_field_past_256_mib_keeps_its_first_256_mib_in_full_text(tmp_path: Path) -> None:
    cap = 256 * 1024 * 1024
    out = results.bounded_record({"nodeid": "t", "outcome": "failed",
                                  "message": "a" * cap + "b"}, tmp_path)
    kept = tmp_path / out["full_text"]["message"]
    assert kept.stat().st_size == cap
    with kept.open("rb") as fh:
        fh.seek(cap - 2)
        assert fh.read() == b"aa"


class _Reported(PosixPath):
    """A real file whose size reads as ``size``; each whole read of it is noted."""

    size = 0
    loaded: list[Path] = []

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        real = super().stat(follow_symlinks=follow_symlinks)
        return os.stat_result((*real[:6], self.size, *real[7:10]))

    def read_bytes(self) -> bytes:
        self.loaded.append(self)
        return super().read_bytes()


def test_a_log_past_512_mib_is_redacted_by_lines_and_one_at_512_mib_whole(
        tmp_path: Path) -> None:
    # A real 512 MiB log takes 20-40 s to redact here: small files report the sizes.
    cap = 512 * 1024 * 1024

    class Past(_Reported):
        size, loaded = cap + 1, []

    class At(_Reported):
        size, loaded = cap, []

    log = tmp_path / "pytest.log"
    log.write_text("GET https://alice:s3cret@example.com/x\nok\n")
    assert results.redact_file(Past(log)) is True
    assert Past.loaded == []   # never loaded whole
    text = log.read_text()
    assert "s3cret" not in text and text.endswith("/x\nok\n")
    clean = tmp_path / "junit.xml"
    clean.write_text("<testsuites/>\n")
    before = clean.stat()
    assert results.redact_file(At(clean)) is False
    assert At.loaded == [clean]
    assert clean.stat().st_ino == before.st_ino and clean.read_text() == "<testsuites/>\n"



@pytest.mark.parametrize("times", [1, results.RESTORE_TRIES - 1])
def test_record_file_puts_records_back_while_a_test_deletes_the_folder_again(
        tmp_path: Path, monkeypatch, times: int) -> None:
    """A test that removes results/ in a loop deletes it again while the recorder puts it
    back (here: as each restore writes its copy, ``times`` times): the records still come
    back, nothing raised into pytest (an INTERNALERROR, the run's records lost)."""
    path = tmp_path / "results" / "cpu-2.13" / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rf.append({"nodeid": "t.py::a", "outcome": "passed"})
    shutil.rmtree(tmp_path / "results")
    real = os.replace
    left = [times]

    def deleted_first(src, dst, *args, **kwargs):
        if left[0]:
            left[0] -= 1
            shutil.rmtree(tmp_path / "results")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", deleted_first)
    rf.append({"nodeid": "t.py::b", "outcome": "passed"})
    monkeypatch.setattr(os, "replace", real)
    rf.close()
    assert [r["nodeid"] for r in results.read_records(path)[0]] == ["t.py::a", "t.py::b"]


def test_record_file_gives_up_on_a_folder_deleted_every_time(tmp_path: Path,
                                                              monkeypatch) -> None:
    path = tmp_path / "results" / "cpu-2.13" / contract.TESTS_FILE
    rf = results.RecordFile(path)
    shutil.rmtree(tmp_path / "results")
    real = os.replace

    def always(src, dst, *args, **kwargs):
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", always)
    with pytest.raises(FileNotFoundError):
        rf.append({"nodeid": "t.py::a", "outcome": "passed"})
