"""A selected run's pytest started ahead of nox (the head start,
accelgrid.run.headstart.prestart): held at its gate until the session has checked the env,
taken when it is the run the session would start, ended without a trace otherwise. Real
envs, real pytest, real `accelgrid run`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.run import preflight
from accelgrid.run.headstart import prestart, relaunch
from accelgrid.run.request import RunRequest

PAYLOAD = '''
import os

def test_one():
    with open(os.environ["PRESTART_RAN"], "a") as fh:
        fh.write(os.environ["ACCELGRID_RUN_ID"] + "\\n")

def test_two():
    pass
'''


REGISTRY = """schema: 1
issues:
  "pytorch/pytorch#1":
    title: a bug
    url: https://github.com/pytorch/pytorch/issues/1
    scope:
      devices: {devices}
    tests:
      - suites/payload/test_payload.py::test_two
    expect: failed
"""


def _cli(proj: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), *args], cwd=proj, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **_env(proj)})


def _env(proj: Path) -> dict[str, str]:
    return {contract.RESULTS_DIR: str(proj / "results"), "PRESTART_RAN": str(proj / "ran")}


def _ran(proj: Path) -> list[str]:
    path = proj / "ran"
    return path.read_text().split() if path.exists() else []


def _runs(proj: Path) -> list[Path]:
    return sorted((proj / "results" / "cpu-2.13" / contract.RUNS_DIR).glob("*"))


@pytest.fixture
def warm(mini_project, monkeypatch) -> Path:
    """A project whose cpu-2.13 env is built (its stamp holds its pins)."""
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    built = _cli(proj, "run", "cpu-2.13")   # the full run builds the env
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert sorted(_ran(proj)) and not _runs(proj)
    (proj / "ran").unlink()
    for key, value in _env(proj).items():
        monkeypatch.setenv(key, value)
    return proj


def _wait_for(path: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.05)


@pytest.mark.slow
def test_held_until_taken_and_gone_without_a_trace_when_not(warm: Path, monkeypatch) -> None:
    monkeypatch.chdir(warm)
    matrix = load_matrix(warm / "matrix.yaml")
    cell = matrix.cell("cpu-2.13")
    assert prestart.start(matrix, cell, ["-k", "one"]) is None
    try:
        held = prestart._HELD
        assert held is not None and held.run.started is not None
        folder = held.run.folder
        # Collected (the plan is written), then held: no test runs while the checks run.
        _wait_for(folder / contract.COLLECTED_FILE)
        time.sleep(1.5)
        assert _ran(warm) == []
        assert not (folder / contract.TESTS_FILE).exists() or \
            not (folder / contract.TESTS_FILE).read_text().strip()
        procs = held.run.started.started.procs
        assert all(p.poll() is None for p in procs)
        # Not the run the session would start (other arguments): ended, its folder gone.
        checked = preflight.check(cell, warm)
        assert prestart.take(RunRequest(cell, held.run.python, warm, warm / "results",
                                        checked, ("-k", "two"), held.run.workers)) is None
        assert not folder.exists() and all(p.poll() is not None for p in procs)
        assert not prestart.waiting() and _ran(warm) == [] and _runs(warm) == []
    finally:
        prestart.cancel()
    # The lock was released: the next run goes, started ahead and taken (its gate opened
    # after its start), its test run once, in the one selected-run folder there is.
    done = _cli(warm, "run", "cpu-2.13", "--", "-k", "one")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = _runs(warm)
    assert _ran(warm) == [run.name]
    summary = json.loads((run / contract.SUMMARY_FILE).read_text())
    (single, *_) = summary["passes"]
    assert single["ahead_s"] > 0 and single["tests"] == 1
    assert results.last_run(warm / "results" / "cpu-2.13")[1] == run

    # The cell's known issues changed while it was held (the same path in its env, other
    # entries in the file its plugin reads): another run, ended; the file it read stays.
    registry = warm / "known_issues.yaml"
    registry.write_text(REGISTRY.format(devices="[xpu]"))
    assert prestart.start(matrix, cell, ["-k", "one"]) is None
    try:
        held = prestart._HELD
        assert held is not None
        issues = held.run.folder / contract.KNOWN_ISSUES_FILE
        read = issues.read_text()
        registry.write_text(REGISTRY.format(devices="[cpu, xpu]"))
        assert prestart.take(RunRequest(cell, held.run.python, warm, warm / "results",
                                        preflight.check(cell, warm), ("-k", "one"),
                                        held.run.workers)) is None
        assert not held.run.folder.exists() and json.loads(read)["issues"] == []
    finally:
        prestart.cancel()


@pytest.mark.slow
def test_a_session_that_repairs_ends_the_run_started_ahead(warm: Path) -> None:
    """A pinned file altered in the env: the session reinstalls it, so the run started
    ahead is ended first (its pytest imported the altered file); the run after the repair
    is a run of its own, and the only one left."""
    (timeout_py,) = (warm / ".nox" / "cpu-2-13").glob(
        "lib/python*/site-packages/pytest_timeout.py")
    timeout_py.unlink()   # not written through: uv's cache may share its inode
    timeout_py.write_text("raise SystemExit('an altered pytest_timeout')\n")
    done = _cli(warm, "run", "cpu-2.13", "--", "-k", "one")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "reinstalling pytest-timeout" in out
    (run,) = _runs(warm)
    assert _ran(warm) == [run.name]
    summary = json.loads((run / contract.SUMMARY_FILE).read_text())
    assert "ahead_s" not in summary["passes"][0]


def _last(proj: Path) -> tuple[Path, dict]:
    """The cell's latest run: its folder and summary."""
    folder = results.last_run(proj / "results" / "cpu-2.13")[1]
    return folder, json.loads((folder / contract.SUMMARY_FILE).read_text())


@pytest.mark.slow
def test_the_same_command_again_starts_its_pytest_as_it_starts(warm: Path) -> None:
    """The launch a session took is kept (run.headstart.relaunch); the next identical command starts
    its pytest from it before accelgrid loads, and the session keeps it (summary:
    ``launched``). A record that is not exactly the run (planted: a variable more) is ended
    unseen and the run started as without it; a matrix touched since starts nothing."""
    record = relaunch.record_path(warm, "cpu-2.13")

    def run() -> tuple[Path, dict]:
        done = _cli(warm, "run", "cpu-2.13", "--", "-k", "one")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return _last(warm)

    first, summary = run()
    assert "launched" not in summary["passes"][0] and record.is_file()
    second, summary = run()
    (single,) = summary["passes"]
    assert single["launched"] is True and single["tests"] == 1 and single["ahead_s"] > 0
    assert _ran(warm) == [first.name, second.name]

    kept = json.loads(record.read_text())
    kept["jobs"][0]["env"]["TORCH_PLANTED"] = "1"
    record.write_text(json.dumps(kept))
    third, summary = run()
    assert "launched" not in summary["passes"][0]
    assert "TORCH_PLANTED" not in (third / contract.ENV_FILE).read_text()
    assert "TORCH_PLANTED" not in record.read_text()   # kept again, as the session took it
    assert _ran(warm) == [first.name, second.name, third.name]
    assert _runs(warm) == sorted([first, second, third])   # the ended launch left nothing

    matrix = warm / "matrix.yaml"
    os.utime(matrix, ns=(matrix.stat().st_atime_ns, matrix.stat().st_mtime_ns + 10**9))
    _, summary = run()
    assert "launched" not in summary["passes"][0]
    _, summary = run()
    assert summary["passes"][0]["launched"] is True


@pytest.mark.slow
@pytest.mark.parametrize("launched", [False, True])
def test_ctrl_c_while_the_session_checks_leaves_nothing_started_ahead(
        warm: Path, launched: bool) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while the session checks the env
    (every hashed file: ACCELGRID_VERIFY=full, seconds) and the run started ahead waits at
    its gate: nox's one line, exit 130, its folder gone, its pytest ended, the lock free.
    ``launched``: the same command ran before, so its pytest started with the command."""
    import signal

    if launched:
        done = subprocess.run(
            [sys.executable, "-m", "accelgrid", "--matrix", str(warm / "matrix.yaml"), "run",
             "cpu-2.13", "--", "-k", "one"], cwd=warm, capture_output=True, text=True,
            timeout=600, env={**os.environ, **_env(warm), contract.VERIFY: "full"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert relaunch.record_path(warm, "cpu-2.13").is_file()
        (warm / "ran").unlink()
        shutil.rmtree(warm / "results" / "cpu-2.13" / contract.RUNS_DIR)
    proc = subprocess.Popen([sys.executable, "-m", "accelgrid", "--matrix",
                             str(warm / "matrix.yaml"), "run", "cpu-2.13", "--", "-k", "one"],
                            cwd=warm, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, **_env(warm), contract.VERIFY: "full"})
    try:
        runs = warm / "results" / "cpu-2.13" / contract.RUNS_DIR
        deadline = time.monotonic() + 120
        while not any(runs.glob(f"*/{contract.PYTEST_LOG_FILE}")):
            assert time.monotonic() < deadline and proc.poll() is None, "nothing started ahead"
            time.sleep(0.02)
        (log,) = runs.glob(f"*/{contract.PYTEST_LOG_FILE}")
        # Started with the command when launched, before accelgrid and nox have loaded:
        # the stop must come once nox runs the session (then its checks take seconds).
        said = []
        for line in proc.stderr:  # type: ignore[union-attr]
            said.append(line)
            if line.startswith("nox > Running session"):
                break
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        err = "".join(said) + err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert err.strip().splitlines()[-1] == "nox > Session cpu-2.13 interrupted."
    assert "Traceback" not in err
    assert not log.parent.exists() and _runs(warm) == [] and _ran(warm) == []
    stray = subprocess.run(["pgrep", "-f", log.parent.name], capture_output=True, text=True)
    assert stray.stdout.strip() == ""
    again = _cli(warm, "run", "cpu-2.13", "--", "-k", "one")   # the lock was released
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]


@pytest.mark.parametrize(("args", "shard", "why"), [
    ([], None, "not a selected run"),
    (["-v", "--tb", "short"], None, "not a selected run"),   # no narrowing: a full run
    (["-k", "one"], "1/2", "a shard"),
    (["-k", "one"], None, "no env at "),
])
def test_what_is_never_started_ahead(mini_project, monkeypatch, args, shard, why) -> None:
    """A full run (its start empties the cell's folder), a shard, an env not built: the
    session does all; nothing is opened, locked or started."""
    proj = mini_project()
    monkeypatch.chdir(proj)
    monkeypatch.setenv(contract.RESULTS_DIR, str(proj / "results"))
    if shard:
        monkeypatch.setenv(contract.SHARD, shard)
    matrix = load_matrix(proj / "matrix.yaml")
    assert (prestart.start(matrix, matrix.cell("cpu-2.13"), args) or "").startswith(why)
    assert not prestart.waiting() and not (proj / "results").exists()
