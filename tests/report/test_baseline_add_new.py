"""A new test into the baselines with one flag (#38): `baseline update --add-new` adds the
tests a baseline lacks, from a whole run or a selected one, and changes no entry it has."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.report_cases import write_cell

from accelgrid.cli import main

OLD = {"suites/s/t.py::a": "passed", "suites/s/t.py::b": "failed"}


def _baseline(tmp_path: Path, tests: dict[str, str] | None = None) -> Path:
    base = tmp_path / "baselines"
    base.mkdir(exist_ok=True)
    (base / "cpu-2.13.json").write_text(json.dumps({"schema": 1, "tests": tests or OLD}))
    return base


def _tests(base: Path) -> dict[str, str]:
    return json.loads((base / "cpu-2.13.json").read_text())["tests"]


def test_add_new_from_a_whole_run_adds_only_the_new_test(tmp_path: Path, capsys) -> None:
    base = _baseline(tmp_path)
    cell = write_cell(tmp_path / "r", "cpu-2.13", {
        "suites/s/t.py::a": "failed",      # changed: not the flag's business
        "suites/s/t.py::b": "passed",      # changed too
        "suites/s/t.py::c": "passed"})     # new
    assert main(["baseline", "update", str(cell), "--dir", str(base), "--add-new"]) == 0
    assert "3 tests: 1 failed, 2 passed; 1 added)" in capsys.readouterr().out
    assert _tests(base) == {**OLD, "suites/s/t.py::c": "passed"}
    # Without the flag the same results replace the baseline (the contrast: the flag works).
    assert main(["baseline", "update", str(cell), "--dir", str(base)]) == 0
    assert _tests(base)["suites/s/t.py::a"] == "failed"


def test_a_selected_run_of_a_new_test_enters_with_add_new_alone(tmp_path: Path,
                                                                 capsys) -> None:
    """The gate on a selection of only new tests compared nothing (exit 1); a plain update
    refuses the selected run; --add-new takes it, after which the gate compares it."""
    base = _baseline(tmp_path)
    selected = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::d": "xfailed"},
                          run_id="r1", selection=["-k", "d"])
    gate = ["grid", str(selected), "--baseline", str(base), "--out", str(tmp_path / "g")]
    assert main(gate) == 1
    assert "nothing was compared" in capsys.readouterr().err
    assert main(["baseline", "update", str(selected), "--dir", str(base)]) == 1
    assert "a selected run" in capsys.readouterr().err
    assert _tests(base) == OLD
    assert main(["baseline", "update", str(selected), "--dir", str(base), "--add-new"]) == 0
    assert "1 added" in capsys.readouterr().out
    assert _tests(base) == {**OLD, "suites/s/t.py::d": "xfailed"}
    assert main(gate) == 0


def test_add_new_still_refuses_an_unfinished_run_and_an_unreadable_baseline(
        tmp_path: Path, capsys) -> None:
    base = _baseline(tmp_path)
    killed = write_cell(tmp_path / "k", "cpu-2.13", {"suites/s/t.py::e": "passed"},
                        finished=False, run_id="r2", selection=["-k", "e"])
    assert main(["baseline", "update", str(killed), "--dir", str(base), "--add-new"]) == 1
    assert "never finished" in capsys.readouterr().err
    assert _tests(base) == OLD
    (base / "cpu-2.13.json").write_text("{")
    cell = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::c": "passed"})
    assert main(["baseline", "update", str(cell), "--dir", str(base), "--add-new"]) == 1
    assert "baseline is unreadable" in capsys.readouterr().err
    assert (base / "cpu-2.13.json").read_text() == "{"


def test_add_new_without_a_baseline_writes_the_results(tmp_path: Path, capsys) -> None:
    base = tmp_path / "baselines"
    cell = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::c": "passed"})
    assert main(["baseline", "update", str(cell), "--dir", str(base), "--add-new"]) == 0
    assert "; new)" in capsys.readouterr().out
    assert _tests(base) == {"suites/s/t.py::c": "passed"}
