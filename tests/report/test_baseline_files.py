"""Baseline files read and written by accelgrid.report.compare, one malformed shape at a
time: each must fail naming the file (a gate that read it as something else would compare
the wrong thing), and what is written keeps its documented form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid.report import compare

GOOD = {"suites/s/t.py::a": "passed"}


def _read(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "cpu-2.13.json"
    path.write_text(text, encoding="utf-8")
    return compare.read(path)


@pytest.mark.parametrize(("text", "message"), [
    ("", "cpu-2.13.json: empty file"),
    ("{", "cpu-2.13.json: "),
    (json.dumps({"schema": 99, "tests": GOOD}), "unknown baseline schema 99"),
    (json.dumps({"schema": 0, "tests": GOOD}), "unknown baseline schema 0"),
    (json.dumps({"schema": True, "tests": GOOD}), "unknown baseline schema true"),
    (json.dumps({"schema": "1", "tests": GOOD}), 'unknown baseline schema "1"'),
    (json.dumps({"schema": 1}), 'schema 1 but no "tests"'),
    (json.dumps({"schema": 1, "tests": {**GOOD, "t.py::b": 3}}), "expected {nodeid: outcome}"),
    (json.dumps({**GOOD, "t.py::b": None}), "expected {nodeid: outcome}"),
    (json.dumps({"schema": 1, "tests": {}}), "holds no tests"),
    (json.dumps({}), "holds no tests"),
    (json.dumps({**GOOD, "t.py::b": "fine"}), 'unknown outcome "fine"'),
])
def test_a_malformed_baseline_is_refused_naming_the_file(tmp_path: Path, text: str,
                                                         message: str) -> None:
    with pytest.raises(ValueError, match="cpu-2.13.json") as info:
        _read(tmp_path, text)
    assert message in str(info.value)


def test_an_empty_file_is_said_so_but_a_link_to_one_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    (tmp_path / "cpu-2.13.json").symlink_to(tmp_path / "empty")
    with pytest.raises(ValueError) as info:
        compare.read(tmp_path / "cpu-2.13.json")
    assert "empty file" not in str(info.value)


@pytest.mark.parametrize("text", [json.dumps(GOOD), json.dumps({"schema": 1, "tests": GOOD})])
def test_both_forms_read_the_same(tmp_path: Path, text: str) -> None:
    assert _read(tmp_path, text) == GOOD


def test_json_text_bounds_what_a_message_quotes() -> None:
    assert compare.json_text("x" * 78) == '"' + "x" * 78 + '"'          # 80 characters: kept
    longer = compare.json_text("x" * 79)                                # 81: cut
    assert len(longer) == 80 and longer.endswith("...") and longer.startswith('"xxx')


def test_verdict_refuses_a_test_in_neither() -> None:
    with pytest.raises(ValueError, match="neither"):
        compare._verdict(None, None)
    assert compare._verdict("passed", None) == compare.LOST


def test_write_keeps_the_documents_order(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    compare.write(path, {"schema": 1, "cell": "c", "tests": {"b": "passed", "a": "failed"}})
    lines = path.read_text().splitlines()
    assert lines[1].startswith(' "schema"') and lines[2].startswith(' "cell"')
    assert [ln.strip()[:3] for ln in lines[4:6]] == ['"b"', '"a"']   # one test per line


def test_update_keeps_entries_of_tests_the_run_lacks_only_when_asked(tmp_path: Path) -> None:
    base = tmp_path / "b"
    base.mkdir()
    (base / "cpu-2.13.json").write_text(json.dumps({"schema": 1, "tests": {
        "suites/s/t.py::gone": "passed", "suites/s/t.py::a": "failed"}}))
    cell = write_cell(tmp_path / "r", "cpu-2.13", GOOD)
    (u,), _ = compare.update([cell], base, keep_missing=True)
    assert u.tests == {"suites/s/t.py::a": "passed", "suites/s/t.py::gone": "passed"}
    assert u.changed == 1 and u.dropped == 0
    (u,), _ = compare.update([cell], base)
    assert u.tests == GOOD and u.dropped == 1


def test_update_says_when_the_baseline_it_replaces_was_unreadable(tmp_path: Path) -> None:
    base = tmp_path / "b"
    base.mkdir()
    (base / "cpu-2.13.json").write_text("{")
    (u,), _ = compare.update([write_cell(tmp_path / "r", "cpu-2.13", GOOD)], base)
    assert u.unreadable and "cpu-2.13.json" in u.unreadable and u.old == {}
    assert compare.read(base / "cpu-2.13.json") == GOOD


def test_a_selected_run_keeps_the_entries_outside_its_selection(tmp_path: Path) -> None:
    base = tmp_path / "b"
    base.mkdir()
    (base / "cpu-2.13.json").write_text(json.dumps({"schema": 1, "tests": {
        "suites/s/t.py::other": "passed", "suites/s/t.py::a": "failed"}}))
    cell = write_cell(tmp_path / "r", "cpu-2.13", GOOD, selection=["-k", "a"])
    (u,), _ = compare.update([cell], base, allow_partial=True)
    assert u.tests == {"suites/s/t.py::a": "passed", "suites/s/t.py::other": "passed"}
