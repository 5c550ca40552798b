"""``accelgrid bench overhead``: what it runs and what it writes. Preparing a cell env and
timing real cell runs takes minutes (the nox sessions install torch), so here the env is
stood in for and the timed commands are recorded instead of run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from accelgrid import sessions
from accelgrid.bench import overhead
from accelgrid.cli import main
from accelgrid.errors import AccelgridError, InvalidInput
from accelgrid.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[1]
MATRIX = str(ROOT / "matrix.yaml")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """The commands the benchmark would time; each "takes" 2 s (cell runs) or 1 s."""
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
        assert cwd == ROOT
        calls.append((cmd, env))
        return 2.0 if "-R" in cmd else 1.0

    monkeypatch.setattr(overhead, "_timed", fake_timed)
    monkeypatch.setattr(sessions, "prepared_python",
                        lambda root, cell, env=None: "/envs/cpu-2-13/bin/python")
    return calls


def test_run_times_cell_and_bare_runs_and_env_creation(
        recorded: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = load_matrix(MATRIX)
    report = overhead.run(matrix, "cpu-2.13", suites=["suites/smoke"], repeat=2,
                          out=tmp_path)
    cmds = [cmd for cmd, _ in recorded]
    assert len(cmds) == 2 * 2 + 2 * 2  # (cell, bare) x repeat, (cold, warm) x backends
    assert cmds[0][-5:] == ["-R", "-s", "cpu-2.13", "--", "suites/smoke"]
    assert cmds[1][:4] == ["/envs/cpu-2-13/bin/python", "-m", "pytest", "-q"]
    assert recorded[1][1]["ACCELGRID_DEVICE"] == "cpu"
    assert recorded[1][1]["PYTHONPATH"] == str(ROOT / "src")
    assert "ACCELGRID_RESULTS_DIR" in recorded[0][1]  # the cell runs write to a tmp folder
    for cmd, backend, reuse in zip(cmds[4:], ["uv", "uv", "virtualenv", "virtualenv"],
                                   ["no", "yes", "no", "yes"], strict=True):
        assert cmd[cmd.index("-fb") + 1] == backend and cmd[-2:] == ["--reuse-venv", reuse]
        assert "--install-only" in cmd and "--envdir" in cmd
    assert report["runs"] == {"cell": [2.0, 2.0], "bare": [1.0, 1.0]}
    assert report["ratio_median"] == 2.0
    assert report["env_creation"] == {"uv": {"cold_s": 1.0, "warm_s": 1.0},
                                      "virtualenv": {"cold_s": 1.0, "warm_s": 1.0}}
    assert json.loads((tmp_path / "bench-overhead.json").read_text()) == report
    md = (tmp_path / "bench-overhead.md").read_text()
    assert md == overhead.render_markdown(report)
    assert "| cell run (nox -R, xdist, recording) | 2.0 s | 2.0 s | 2.0 s |" in md
    assert "Median ratio cell/bare: **2.000** (aim <= 1.10)." in md
    assert "| uv | 1.0 s | 1.0 s |" in md
    out = capsys.readouterr().out
    assert "[1/3] preparing cpu-2.13's env" in out and "[3/3] env creation with uv" in out


def test_skip_env_and_the_cells_own_suites(recorded: list) -> None:
    matrix = load_matrix(MATRIX)
    report = overhead.run(matrix, "cpu-2.13", repeat=1, skip_env=True, out=None)
    assert len(recorded) == 2 and "env_creation" not in report
    assert report["suites"] == list(matrix.cell("cpu-2.13").suite_paths)
    assert "env backend" not in overhead.render_markdown(report)


def test_cli_options_reach_the_run(recorded: list, tmp_path: Path) -> None:
    assert main(["bench", "overhead", "--matrix", MATRIX, "--suites", "suites/smoke,x.py",
                 "--repeat", "1", "--skip-env", "--out", str(tmp_path)]) == 0
    assert recorded[0][0][-2:] == ["suites/smoke", "x.py"]
    assert (tmp_path / "bench-overhead.md").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--cell", "cpu-9.99"], "unknown cell 'cpu-9.99'"),
    (["--repeat", "0"], "--repeat must be >= 1"),
])
def test_bad_options_exit_2(recorded: list, argv: list[str], message: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "overhead", "--matrix", MATRIX, *argv]) == 2
    assert message in capsys.readouterr().err
    assert recorded == []


def test_repeat_is_checked_before_anything_runs() -> None:
    with pytest.raises(InvalidInput):
        overhead.run(load_matrix(MATRIX), repeat=0)


def test_timed_keeps_test_failures_and_stops_on_errors(tmp_path: Path) -> None:
    env = dict(os.environ)
    assert overhead._timed([sys.executable, "-c", "raise SystemExit(1)"], tmp_path, env) > 0
    with pytest.raises(AccelgridError, match=r"command failed \(3\)") as exc:
        overhead._timed([sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
                        tmp_path, env)
    assert "boom" in str(exc.value) and exc.value.return_code == 1
