"""The run folder's protocol (accelgrid.results) on real folders and records: each case
pins a behaviour a planted fault changed unseen (docs/mutation.md,
``python tools/mutate.py results``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from accelgrid import results
from accelgrid.base import contract, jsonio


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


def test_a_durable_append_is_fsynced_and_a_plain_one_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
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
    rf.close()
    rf.close()   # a second close does nothing
    assert [r["nodeid"] for r in results.read_records(path)[0]] == [
        "t.py::b", "t.py::a", "t.py::c"]


def test_record_file_appends_each_record_unless_once_finds_it_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / contract.TESTS_FILE
    rf = results.RecordFile(path)
    rec = {"nodeid": "t.py::a", "outcome": "passed", "run_id": "r1"}
    assert rf.append(dict(rec)) is True
    assert rf.append(dict(rec)) is True           # a rerun of the test: a record each
    assert synced == []
    assert rf.append(dict(rec), once=True) is False
    assert rf.append({**rec, "run_id": "r2"}, once=True) is True
    assert rf.append({**rec, "nodeid": "t.py::b"}, durable=True, once=True) is True
    assert len(synced) == 1
    rf.close()
    assert [(r["nodeid"], r["run_id"]) for r in results.read_records(path)[0]] == [
        ("t.py::a", "r1"), ("t.py::a", "r1"), ("t.py::a", "r2"), ("t.py::b", "r1")]
