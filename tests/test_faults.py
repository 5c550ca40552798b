"""Issue 27, faults a hostile or unlucky test (or user) causes, on real pytest runs through
the runner and the recording plugin: failures of any size stay failures, and a test that
deletes the results folder, its cell folder or the lock, changes the cwd or rewrites
os.environ loses and mixes none of the records written before it."""

from __future__ import annotations

import json
from pathlib import Path

from accelgrid import outcomes, results, runner
from accelgrid.matrix import load_matrix

MIB = 1024 * 1024

HUGE = f'''
import pytest

def test_a_huge_message():
    assert False, "M" * {6 * MIB} + "END-OF-MESSAGE"

def test_b_huge_output():
    print("O" * {6 * MIB} + "END-OF-OUTPUT")
    raise RuntimeError("after the output")

def test_c_huge_skip_reason():
    pytest.skip("S" * {5 * MIB})

def test_d_huge_property(record_property):
    record_property("blob", "P" * {5 * MIB})

def test_e_after():
    pass
'''


def _cell(proj: Path):
    return load_matrix(proj / "matrix.yaml").cell("cpu-2.13")


def _records(folder: Path) -> tuple[dict[str, dict], list[str]]:
    recs, problems = results.read_records(folder / results.TESTS)
    return {r["nodeid"].split("::")[-1]: r for r in recs}, problems


def test_a_failure_of_any_size_is_recorded_as_one(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_huge.py").write_text(HUGE)
    assert runner.run_cell(_cell(proj), python, proj, proj / "results") == 1
    folder = proj / "results" / "cpu-2.13"
    recs, problems = _records(folder)
    assert not problems, problems
    got = {n: r["outcome"] for n, r in recs.items()}
    assert got == {"test_a_huge_message": "failed", "test_b_huge_output": "failed",
                   "test_c_huge_skip_reason": "skipped", "test_d_huge_property": "passed",
                   "test_e_after": "passed"}
    for line in (folder / results.TESTS).read_bytes().splitlines():
        assert len(line) < results.MAX_LINE_BYTES // 8  # bounded: readers never skip it
    msg = recs["test_a_huge_message"]
    assert "characters cut; whole text in full-text/" in msg["message"]
    whole = (folder / msg["full_text"]["message"]).read_text()
    assert "END-OF-MESSAGE" in whole and whole.count("M") >= 6 * MIB
    out = recs["test_b_huge_output"]
    assert "END-OF-OUTPUT" in (folder / out["full_text"]["output"]).read_text()
    assert len(out["output"]) < 9000 and "Captured stdout call" in out["output"]
    assert "cut" in recs["test_d_huge_property"]["properties"]["truncated"]
    summary = json.loads((folder / results.SUMMARY).read_text())
    assert summary["counts"]["failed"] == 2 and not summary["counts"].get(outcomes.NOT_RUN)


def test_an_over_long_record_of_an_older_writer_keeps_its_outcome(tmp_path) -> None:
    """A record line past the reader's bound (written without bounds) is read back as
    its test's outcome, never dropped to become not-run."""
    path = tmp_path / results.TESTS
    big = {"nodeid": 'suites/s/t.py::test_x["q"]', "outcome": "failed",
           "message": "x" * (results.MAX_LINE_BYTES + 10), "run_id": "r1", "cell": "c"}
    path.write_text(json.dumps(big) + "\n" + json.dumps(
        {"nodeid": "suites/s/t.py::test_y", "outcome": "passed"}) + "\n")
    recs, problems = results.read_records(path)
    assert [(r["nodeid"], r["outcome"]) for r in recs] == [
        ('suites/s/t.py::test_x["q"]', "failed"), ("suites/s/t.py::test_y", "passed")]
    assert recs[0]["run_id"] == "r1" and "its outcome kept" in problems[0]


def test_the_writer_bounds_every_field(tmp_path) -> None:
    path = tmp_path / results.TESTS
    results.append_record(path, {"nodeid": "a", "outcome": "failed",
                                 "message": "m" * (results.MAX_FIELD_CHARS + 1),
                                 "longrepr": "l" * results.FIELD_LIMITS["longrepr"]})
    (rec,), _ = results.read_records(path)
    assert set(rec["full_text"]) == {"message"}  # longrepr just at its limit: kept whole
    assert len(rec["longrepr"]) == results.FIELD_LIMITS["longrepr"]
    assert (tmp_path / rec["full_text"]["message"]).read_text() == \
        "m" * (results.MAX_FIELD_CHARS + 1)


HOSTILE = '''
import os, shutil
from pathlib import Path

RESULTS = Path(os.environ["ACCELGRID_RESULTS"])

def test_a_first():
    pass

def test_b_deletes_its_cell_folder():
    shutil.rmtree(RESULTS)

def test_c_after_that():
    assert 0, "still recorded"

def test_d_deletes_results():
    shutil.rmtree(RESULTS.parent)

def test_e_deletes_the_lock_and_the_records():
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in (".lock", "tests.jsonl", "env.json", "collected.json"):
        p = RESULTS / name
        if p.exists():
            p.unlink()

def test_f_replaces_the_records_with_a_symlink(tmp_path):
    RESULTS.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    p = RESULTS / "tests.jsonl"
    if p.exists():
        p.unlink()
    p.symlink_to(outside)

def test_g_changes_cwd(tmp_path):
    os.chdir(tmp_path)

def test_h_rewrites_environ():
    os.environ.clear()
    os.environ["ACCELGRID_RESULTS"] = "elsewhere"
    os.environ["ACCELGRID_CELL"] = "other-cell"

def test_i_last():
    pass
'''


def test_records_are_safe_from_the_tests(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_hostile.py").write_text(HOSTILE)
    runner.run_cell(_cell(proj), python, proj, proj / "results")
    folder = proj / "results" / "cpu-2.13"
    recs, problems = _records(folder)
    assert not problems, problems
    assert {n: r["outcome"] for n, r in recs.items()} == {
        "test_a_first": "passed", "test_b_deletes_its_cell_folder": "passed",
        "test_c_after_that": "failed", "test_d_deletes_results": "passed",
        "test_e_deletes_the_lock_and_the_records": "passed",
        "test_f_replaces_the_records_with_a_symlink": "passed",
        "test_g_changes_cwd": "passed", "test_h_rewrites_environ": "passed",
        "test_i_last": "passed"}
    assert all(r["cell"] == "cpu-2.13" for r in recs.values())  # nothing mixed
    assert not (folder / results.TESTS).is_symlink()
    env = json.loads((folder / results.ENV).read_text())
    assert env["cell"] == "cpu-2.13" and env["status"] == "finished"
    assert len(json.loads((folder / results.COLLECTED).read_text())) == 9
    assert not (proj / "elsewhere").exists()
    for p in proj.rglob("*.jsonl"):  # the records went nowhere else
        assert p.parent == folder or p.is_relative_to(folder), p
