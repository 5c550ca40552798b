"""Lost tests gate: a test in a cell's baseline with no record in that cell's column (a run
that stopped running it, renamed it, or recorded nothing) makes ``accelgrid grid
--baseline`` exit 3, like a regression, unless ``--allow-lost``. A selected run's tests
outside its selection are not lost; a baselined cell not given at all is lost only when
``--expect`` names it. Real results folders, real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid import report
from accelgrid.base import contract, jsonio
from accelgrid.base.errors import EXIT_REGRESSION, Regression
from accelgrid.cli import main
from accelgrid.report import compare

SMOKE = "suites/smoke/test_device_api.py::"
TESTS = {SMOKE + "test_device_available": "passed", SMOKE + "test_memory_stats": "passed",
         SMOKE + "test_synchronize": "skipped"}


def baselines(tmp_path: Path, cells: tuple[str, ...] = ("cpu-2.13",)) -> Path:
    """Baselines of ``cells``, each with :data:`TESTS`, taken from real results folders."""
    base = tmp_path / "baselines"
    for cell in cells:
        write_cell(tmp_path / "before", cell, TESTS)
    done, _ = compare.update([tmp_path / "before"], base)
    assert sorted(u.cell for u in done if not u.refused) == sorted(cells)
    return base


def grid(tmp_path: Path, base: Path, *folders: Path, extra: tuple[str, ...] = ()) -> int:
    return main(["grid", *map(str, folders), "--baseline", str(base),
                 "--out", str(tmp_path / "out"), *extra])


def test_a_baseline_test_the_run_lacks_exits_3_and_is_named(tmp_path: Path, capsys) -> None:
    base = baselines(tmp_path)
    gone = SMOKE + "test_memory_stats"
    now = write_cell(tmp_path / "after", "cpu-2.13",
                     {k: v for k, v in TESTS.items() if k != gone})
    assert grid(tmp_path, base, now) == EXIT_REGRESSION
    out = capsys.readouterr()
    assert f"LOST TEST cpu-2.13: {gone}: passed -> no record" in out.out
    assert "1 lost test(s) (in the baseline, no record in the run): " \
           f"cpu-2.13: {gone} (--allow-lost to accept them)" in out.err
    # A skipped baseline test that is gone is lost too: the gate is about records.
    now2 = write_cell(tmp_path / "after2", "cpu-2.13",
                      {k: v for k, v in TESTS.items() if k != SMOKE + "test_synchronize"})
    assert grid(tmp_path, base, now2) == EXIT_REGRESSION
    assert f"cpu-2.13: {SMOKE}test_synchronize (--allow-lost" in capsys.readouterr().err


def test_allow_lost_exits_0_and_says_how_many(tmp_path: Path, capsys) -> None:
    base = baselines(tmp_path)
    now = write_cell(tmp_path / "after", "cpu-2.13", {SMOKE + "test_device_available": "passed"})
    assert grid(tmp_path, base, now, extra=("--allow-lost",)) == 0
    out = capsys.readouterr()
    assert "note: 2 lost tests allowed by --allow-lost" in out.err
    assert out.out.count("LOST TEST cpu-2.13: ") == 2
    # --allow-lost does not let a regression through.
    worse = write_cell(tmp_path / "worse", "cpu-2.13",
                       {SMOKE + "test_device_available": "failed"})
    assert grid(tmp_path, base, worse, extra=("--allow-lost",)) == EXIT_REGRESSION
    said = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("accelgrid grid: ")]
    assert said == ["accelgrid grid: 1 regression(s) against the baselines"], said


def test_a_complete_run_exits_0(tmp_path: Path, capsys) -> None:
    base = baselines(tmp_path)
    now = write_cell(tmp_path / "after", "cpu-2.13", {**TESTS, SMOKE + "test_new": "passed"})
    assert grid(tmp_path, base, now) == 0
    out = capsys.readouterr()
    assert "LOST" not in out.out and "allow-lost" not in out.err
    assert "vs baselines: 1 new" in out.out


def test_renamed_ids_are_lost_not_a_pass(tmp_path: Path, capsys) -> None:
    """Every id renamed: all new, all lost; before, this passed with nothing compared."""
    base = baselines(tmp_path)
    now = write_cell(tmp_path / "after", "cpu-2.13",
                     {k.replace("test_", "test_renamed_", 1): v for k, v in TESTS.items()})
    assert grid(tmp_path, base, now) == EXIT_REGRESSION
    assert "3 lost test(s)" in capsys.readouterr().err


def test_a_cell_folder_with_no_records_loses_its_baseline(tmp_path: Path, capsys) -> None:
    """The run started (env.json) but recorded no test: an errored column, every baseline
    test lost, exit 3 without --expect."""
    base = baselines(tmp_path)
    empty = tmp_path / "after" / "cpu-2.13"
    empty.mkdir(parents=True)
    jsonio.write_json(empty / contract.ENV_FILE, {"cell": "cpu-2.13", "device_type": "cpu"})
    assert grid(tmp_path, base, empty) == EXIT_REGRESSION
    assert "3 lost test(s)" in capsys.readouterr().err


def test_lost_in_one_column_whatever_the_others_hold(tmp_path: Path, capsys) -> None:
    base = baselines(tmp_path, ("cpu-2.13", "cpu-2.6"))
    gone = SMOKE + "test_memory_stats"
    full = write_cell(tmp_path / "after", "cpu-2.13", TESTS)
    short = write_cell(tmp_path / "after", "cpu-2.6",
                       {k: v for k, v in TESTS.items() if k != gone}, torch="2.6.0+cpu")
    assert grid(tmp_path, base, full, short) == EXIT_REGRESSION
    err = capsys.readouterr().err
    assert f"1 lost test(s) (in the baseline, no record in the run): cpu-2.6: {gone}" in err


def test_a_selected_run_loses_nothing_outside_its_selection(tmp_path: Path, capsys) -> None:
    """env.json's ``selection`` (what a -k run records, in results/<cell>/runs/<id>/):
    baseline tests it did not record are outside it, not lost."""
    base = baselines(tmp_path)
    run = write_cell(tmp_path / "cpu-2.13" / contract.RUNS_DIR, "r1",
                     {SMOKE + "test_device_available": "passed"},
                     cell="cpu-2.13", device_type="cpu", selection=["-k", "available"])
    assert grid(tmp_path, base, run) == 0
    out = capsys.readouterr().out
    assert "1 baseline tests compared, 2 outside its selection not compared (not lost)" in out
    assert "LOST" not in out


def test_a_baselined_cell_not_given_is_lost_only_when_expected(tmp_path: Path,
                                                              capsys) -> None:
    base = baselines(tmp_path, ("cpu-2.13", "cpu-2.6"))
    now = write_cell(tmp_path / "after", "cpu-2.13", TESTS)
    assert grid(tmp_path, base, now) == 0
    capsys.readouterr()
    assert grid(tmp_path, base, now, extra=("--expect", "baselines")) == EXIT_REGRESSION
    assert "1 expected cell(s) lost: cpu-2.6" in capsys.readouterr().err


def test_check_counts_lost_tests(tmp_path: Path) -> None:
    base = baselines(tmp_path)
    now = write_cell(tmp_path / "after", "cpu-2.13", {SMOKE + "test_device_available": "passed"})
    made = report.grid([now], tmp_path / "out", baseline_dir=base)
    assert sorted(c["nodeid"] for c in made.lost_tests) == [
        SMOKE + "test_memory_stats", SMOKE + "test_synchronize"]
    with pytest.raises(Regression, match="2 lost test"):
        made.check()
    made.check(allow_lost=True)
