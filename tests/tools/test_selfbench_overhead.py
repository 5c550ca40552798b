"""``python -m tools.selfbench overhead``: real runs on a one-cell project (its env built with uv:
seconds, torch comes from the local wheels), pairs printed as they finish, and a stop by
SIGINT or SIGTERM that removes the temporary folder and leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.mini_projects import make_project

from accelgrid.base.errors import InvalidInput
from accelgrid.config.matrix import load_matrix
from tools.selfbench import overhead
from tools.selfbench.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
MATRIX = str(ROOT / "matrix.yaml")

PAYLOAD = """
import os
import time


def test_fast():
    pass


def test_other():
    pass


def test_wait():
    marker = os.environ.get("BENCH_MARKER")
    if marker:
        with open(marker, "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(120)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    proj = make_project(tmp_path_factory.mktemp("bench") / "proj", noxfile=True)
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    yield proj
    shutil.rmtree(proj.parent, ignore_errors=True)   # its cell env: 0.9 GB


def bench(proj: Path, tmp: Path, *args: str, **popen: Any) -> subprocess.Popen:
    tmp.mkdir(exist_ok=True)
    # The bench is the checkout's tools/selfbench: its root on the path, beside src/.
    env = {**os.environ, "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           **popen.pop("env", {})}
    return subprocess.Popen([sys.executable, "-m", "tools.selfbench", "--matrix",
                             str(proj / "matrix.yaml"), "overhead", "--cell",
                             "cpu-2.13", *args], cwd=proj, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


@pytest.mark.slow
def test_pairs_are_printed_as_they_finish_and_written(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = bench(project, tmp_path / "tmp", "--partial", "-k fast", "--partial-repeat", "2",
                 "--repeat", "1", "--out", str(out))
    lines: list[tuple[float, str]] = []
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append((time.monotonic(), line))
    assert proc.wait(timeout=600) == 0, proc.stderr.read()  # type: ignore[union-attr]
    pairs = [(t, line) for t, line in lines if line.startswith("[")]
    assert [line.split(" (")[0] for _, line in pairs] == [
        "[1/3] partial", "[2/3] full", "[3/3] partial"]
    # Each one as its pair finished, not all at the end (printed at once, they would come
    # within milliseconds; a pair is two runs of pytest, each 0.3 s or more here: a warm
    # full pair of this 3-test project took 0.95 s in a CI run after the quick exit).
    assert pairs[1][0] - pairs[0][0] > 0.3 and pairs[2][0] - pairs[1][0] > 0.3
    assert "[1/3] partial (-k fast): cell " in pairs[0][1] and "tests 1 / 1" in pairs[0][1]
    report = json.loads((out / "bench-overhead.json").read_text())
    partial, full = report["pairs"]["partial"], report["pairs"]["full"]
    assert partial["args"] == ["-k", "fast"] and partial["bare_paths"] == ["suites/payload"]
    assert partial["tests"] == [[1, 1], [1, 1]] and full["tests"] == [[3, 3]]
    assert all(r > 0 for r in partial["ratios"] + full["ratios"])
    assert partial["bare_first"] == [False, True]   # alternating, per kind
    # A selected run's pytest started with the command (after the untimed first run, the
    # same command: run.headstart.relaunch); a full run's never.
    assert partial["launched"] == [True, True] and full["launched"] == [False]
    assert all(c > 0 for c in partial["cell_cpu"] + partial["bare_cpu"] + full["cell_cpu"])
    assert partial["cpu_ratio_median"] > 0
    # Outside the tests' own durations: both sides measured, neither over its wall time.
    for entry in (partial, full):
        for (cell, bare), cell_s, bare_s in zip(entry["outside_tests"], entry["cell"],
                                                entry["bare"], strict=True):
            assert 0 < cell <= cell_s and 0 < bare <= bare_s
        # The cell run in three: before its pytest, its pytest, after; they add up.
        for (before, pytest_s, after), cell_s in zip(entry["cell_stages"], entry["cell"],
                                                     strict=True):
            assert 0 < before < cell_s and 0 < pytest_s < cell_s and after > -0.01
            assert abs(before + pytest_s + after - cell_s) < 0.1
    assert full["ratio_median"] == full["cell"][0] / full["bare"][0]
    assert report["command"] == ("python -m tools.selfbench overhead --cell cpu-2.13 --partial "
                                 "'-k fast' --partial-repeat 2 --repeat 1")
    assert report["machine"]["cpus"] == os.cpu_count() and "load_start" in report
    assert report["python_env"] == {k: os.environ[k] for k in overhead.BYTECODE_VARS
                                    if k in os.environ}
    md = (out / "bench-overhead.md").read_text()
    assert md == overhead.render_markdown(report)
    assert "## partial: a selected run (`-- -k fast`)" in md and "| tests (cell / bare) |" in md
    assert "| cell run: before its pytest / pytest / after |" in md
    assert not list((tmp_path / "tmp").glob("accelgrid-bench-*"))   # its folder is gone


def _sigint(disposition: signal.Handlers) -> Callable[[], None]:
    """For preexec_fn: the bench starts with SIGINT as given, not as pytest inherited it
    (a background job, a CI step: ignored; a terminal: the default)."""

    def as_given() -> None:
        signal.signal(signal.SIGINT, disposition)

    return as_given


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "sigint"), [
    (signal.SIGINT, 130, signal.SIG_DFL),
    (signal.SIGINT, 130, signal.SIG_IGN),   # started as a background job
    (signal.SIGTERM, 143, signal.SIG_DFL),
], ids=["SIGINT", "SIGINT-started-ignored", "SIGTERM"])
def test_a_stopped_bench_removes_its_folder_and_its_processes(
        project: Path, tmp_path: Path, sig: signal.Signals, code: int,
        sigint: signal.Handlers) -> None:
    marker = tmp_path / "pid"
    proc = bench(project, tmp_path / "tmp", "--partial", "-k wait", "--partial-repeat", "1",
                 "--repeat", "0", "--out", str(tmp_path / "out"),
                 env={"BENCH_MARKER": str(marker)}, preexec_fn=_sigint(sigint))
    deadline = time.monotonic() + 600
    while not marker.exists() or not marker.read_text():  # a test of the cell run is running
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    test_pid = int(marker.read_text())
    assert list((tmp_path / "tmp").glob("accelgrid-bench-*"))
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stdout + stderr
    assert "stopped after 0 of 1 pairs" in stderr and "nothing written" in stderr
    assert not list((tmp_path / "tmp").glob("accelgrid-bench-*"))
    assert not (tmp_path / "out").exists()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{test_pid}").exists() and "Z" not in _state(test_pid):
        assert time.monotonic() < deadline, f"the test's process {test_pid} outlived the bench"
        time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    return next((ln.split(":", 1)[1] for ln in status.splitlines()
                 if ln.startswith("State:")), "")


def test_the_full_pairs_sit_between_the_partial_ones() -> None:
    assert overhead._schedule(5, 1) == ["partial", "partial", "full", "partial", "partial",
                                        "partial"]
    assert overhead._schedule(0, 2) == ["full", "full"]
    assert overhead._schedule(2, 0) == ["partial", "partial"]


def test_bare_counts_come_from_pytests_summary_line() -> None:
    assert overhead.bare_count("..\n9 passed, 7 skipped in 2.48s\n") == 16
    assert overhead.bare_count("1 failed, 2 passed, 1 xfailed, 2 errors in 1.0s") == 6
    assert overhead.bare_count("no summary") is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--cell", "cpu-9.99"], "unknown cell 'cpu-9.99'"),
    (["--repeat", "-1"], "must be >= 0"),
    (["--repeat", "0", "--partial-repeat", "0"], "nothing to time"),
    (["--repeat", "0", "--partial", ""], "nothing to time"),
])
def test_bad_options_exit_2_before_anything_runs(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert main(["overhead", "--matrix", MATRIX, *argv]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_repeat_is_checked_before_anything_runs() -> None:
    with pytest.raises(InvalidInput):
        overhead.run(load_matrix(MATRIX), repeat=0, partial_repeat=0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("inherited", [signal.SIG_IGN, signal.SIG_DFL], ids=["ignored", "default"])
def test_stoppable_raises_stopped_however_the_signal_was_inherited(
        sig: signal.Signals, inherited: signal.Handlers) -> None:
    """In this process (pytest's main thread): whatever SIGINT/SIGTERM were set to before,
    inside stoppable() both raise Stopped, and the previous handlers come back after."""
    from accelgrid.bench import Stopped, stoppable

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, inherited if sig == signal.SIGINT else signal.SIG_IGN)
        signal.signal(signal.SIGTERM, inherited if sig == signal.SIGTERM else signal.SIG_IGN)
        before = {s: signal.getsignal(s) for s in saved}
        with pytest.raises(Stopped) as info, stoppable():
            os.kill(os.getpid(), sig)
            time.sleep(5)   # the handler runs at the next bytecode; never sleeps this long
        assert info.value.signum == sig
        assert {s: signal.getsignal(s) for s in saved} == before
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
