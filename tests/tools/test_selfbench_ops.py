"""``python -m tools.selfbench ops``: a small real run (one payload test, run by the runner on this
interpreter with and without op capture) and the argument checks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from accelgrid.base.errors import InvalidInput
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix
from tools.selfbench import ops as bench_ops
from tools.selfbench.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
MATRIX = str(ROOT / "matrix.yaml")

PAYLOAD = '''
import torch

def test_tiny_mlp():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model(torch.randn(3, 4)).sum().backward()
'''


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_tiny_run_with_and_without_capture(mini_project, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    proj = mini_project()
    (proj / "suites" / "payload" / "test_tiny.py").write_text(PAYLOAD)
    # The cell env is this interpreter (its torch is the cell's): no nox env to build.
    monkeypatch.setattr(sessions, "prepared_python", lambda root, cell, env=None: sys.executable)
    monkeypatch.setenv("ACCELGRID_CAPTURE_OPS", "0")
    report = bench_ops.run(load_matrix(proj / "matrix.yaml"), "cpu-2.13",
                           suites=["suites/payload"], repeat=1, out=tmp_path / "docs")
    assert report["cell"] == "cpu-2.13" and report["suites"] == ["suites/payload"]
    assert len(report["times"]["plain"]) == len(report["times"]["capture"]) == 1
    assert report["ops_classified"] > 0  # addmm, relu, ... from the payload
    assert report["ratio_median"] > 0
    assert json.loads((tmp_path / "docs" / "bench-ops.json").read_text()) == report
    md = (tmp_path / "docs" / "bench-ops.md").read_text()
    assert md == bench_ops.render_markdown(report)
    assert f"{report['ops_classified']} distinct aten ops classified." in md
    out = capsys.readouterr().out
    assert "[2/2] run 1/1 plain:" in out and "(pytest exit 0)" in out
    assert os.environ["ACCELGRID_CAPTURE_OPS"] == "0"  # restored


def test_markdown_from_a_given_report() -> None:
    md = bench_ops.render_markdown({
        "cell": "cpu-2.13", "suites": ["a.py", "b.py"], "host": "box", "cpus": 4,
        "times": {"plain": [10.0, 12.0], "capture": [14.0, 15.0]}, "ratio_median": 1.325,
        "ops_classified": 42})
    assert md.startswith("# Op capture overhead: cpu-2.13 on box (4 CPUs)\n")
    assert "Suites: a.py, b.py; runner wall time, 2 alternating runs." in md
    assert "| plain | 10.0 s | 12.0 s | 11.0 s |" in md
    assert "| capture | 14.0 s | 15.0 s | 14.5 s |" in md
    assert "Median ratio capture/plain: **1.32** (aim <= 1.5); 42 distinct aten ops" in md


@pytest.mark.parametrize(("argv", "message"), [
    (["--cell", "cpu-9.99"], "unknown cell 'cpu-9.99'"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--suites", ","], "--suites names no test paths"),
])
def test_bad_options_exit_2(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    def must_not_run(*args: object, **kwargs: object) -> str:
        raise AssertionError("no env is prepared for bad options")

    monkeypatch.setattr(sessions, "prepared_python", must_not_run)
    assert main(["ops", "--matrix", MATRIX, *argv]) == 2
    assert message in capsys.readouterr().err


def test_repeat_is_checked_in_the_library() -> None:
    with pytest.raises(InvalidInput):
        bench_ops.run(load_matrix(MATRIX), repeat=0)
