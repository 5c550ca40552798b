"""The baseline gate counts lost coverage: a test that passed in a cell's baseline and now
skips (or is not-run) checks nothing any more, so ``accelgrid grid --baseline`` exits 3,
the same as for a failure. Other moves into a skip stay ``changed``."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid import report
from accelgrid.base.errors import EXIT_REGRESSION
from accelgrid.cli import main
from accelgrid.report import compare

SMOKE = "suites/smoke/test_device_api.py::"


@pytest.mark.parametrize(("expected", "actual", "change"), [
    ("passed", "skipped", compare.REGRESSION), ("passed", "not-run", compare.REGRESSION),
    ("xfailed", "skipped", compare.CHANGED), ("not-run", "skipped", compare.CHANGED),
    ("skipped", "not-run", compare.CHANGED), ("skipped", "passed", compare.NEW_PASS),
])
def test_passed_to_skipped_is_a_regression(expected: str, actual: str, change: str) -> None:
    assert compare.classify_change(expected, actual) == change


def test_gate_trips_when_a_suite_starts_skipping(tmp_path: Path, capsys) -> None:
    """cuda-2.11's smoke checks passed when the baseline was taken; now one skips on its
    own target device: the grid reports a regression and exits 3."""
    tests = {SMOKE + "test_synchronize": "passed", SMOKE + "test_streams_and_events": "passed"}
    base = tmp_path / "baselines"
    write_cell(tmp_path / "before", "cuda-2.11", tests, torch="2.11.0+cu130")
    done, _ = compare.update([tmp_path / "before"], base)
    assert [u.cell for u in done] == ["cuda-2.11"] and not done[0].refused

    now = write_cell(tmp_path / "after", "cuda-2.11",
                     {**tests, SMOKE + "test_streams_and_events": "skipped"},
                     torch="2.11.0+cu130")
    model = report.build_model([now], baseline_dir=base)
    baseline = model["baseline"]
    assert baseline is not None
    assert baseline["regressions"] == 1
    [change] = baseline["changes"]
    assert (change["nodeid"], change["expected"], change["outcome"], change["change"]) == (
        SMOKE + "test_streams_and_events", "passed", "skipped", compare.REGRESSION)

    args = ["grid", str(now), "--out", str(tmp_path / "out"), "--baseline", str(base)]
    assert main(args) == EXIT_REGRESSION == 3
    assert "test_streams_and_events: passed -> skipped" in capsys.readouterr().out
