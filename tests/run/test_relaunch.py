"""The launch a session took, started again as the same command starts (the head start's
run.headstart.relaunch): real processes, the real cell lock; only what is exactly the
recorded launch starts, and what nobody claims is ended with no trace. The whole path with
real cells: tests/run/test_prestart.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelgrid.base import contract
from accelgrid.run.headstart import relaunch
from accelgrid.run.lock import CellBusy, cell_lock, new_run_id

CELL = "cpu-2.13"
ARGV = ["run", CELL, "--", "-k", "one"]
OLD_ID = "0" * 32
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A folder with a matrix file (its stat key is in the launch's) and an envs folder;
    the module's state put back after."""
    (tmp_path / "matrix.yaml").write_text("schema: 1\n")
    (tmp_path / "noxfile.py").write_text("import nox\n")
    (tmp_path / ".nox").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(contract.ENVDIR, raising=False)
    monkeypatch.delenv(contract.SHARD, raising=False)
    monkeypatch.delenv(relaunch.OFF, raising=False)
    monkeypatch.setattr(relaunch, "_KEY", None)
    monkeypatch.setattr(relaunch, "_ENVIRON", {})
    monkeypatch.setattr(relaunch, "_LAUNCH", None)
    yield tmp_path
    relaunch.drop()


def _recorded(root: Path) -> Path:
    """The launch of a run whose session took it, recorded as prestart.take does: one job
    (a sleeper for pytest), the cell's variables with the run's folder and id in them.
    Returns the old run's folder."""
    relaunch.early(ARGV)   # the command's key; no launch yet
    assert relaunch.claim(CELL) is None
    cell_folder = root / "results" / CELL
    old = cell_folder / contract.RUNS_DIR / OLD_ID
    old.mkdir(parents=True)
    (old / contract.KNOWN_ISSUES_FILE).write_text('{"issues": []}\n')
    env = {**os.environ, contract.RUN_ID: OLD_ID,
           contract.GATE: str(old / ".gate-start"), "ACCELGRID_CELL": CELL}
    relaunch.record(Path("."), CELL, old, OLD_ID,
                    [([*SLEEPER, f"--junitxml={old}/junit.xml"], env,
                      old / contract.PYTEST_LOG_FILE, f"accelgrid: pass single: {old}\n")],
                    [root / "matrix.yaml", root / "noxfile.py"], root / "results")
    return old


def _record(root: Path) -> dict:
    return json.loads(relaunch.record_path(Path("."), CELL).read_text())


def test_the_commands_it_takes() -> None:
    assert relaunch._parse(ARGV) == (Path("."), CELL)
    assert relaunch._parse(["--matrix", "/p/m.yaml", *ARGV]) == (Path("/p"), CELL)
    for argv in (["run", CELL], ["run", CELL, "--"], ["run", "--no-venv", CELL, "--", "-x"],
                 ["run", CELL, "--shard", "1/2", "--", "-x"], ["grid", CELL, "--", "-x"],
                 ["run", "../x", "--", "-x"], ["--matrix"], []):
        assert relaunch._parse(argv) is None, argv


def test_a_recorded_launch_starts_held_locked_and_ends_without_a_trace(project: Path) -> None:
    _recorded(project)
    relaunch._KEY = None
    relaunch.early(ARGV)
    launch = relaunch.claim(CELL)
    assert launch is not None and launch.run_id != OLD_ID
    (proc,) = launch.started.procs
    assert proc.poll() is None
    # The new run's folder and id everywhere the old ones were; the environment as it is.
    (cmd, env, log), = launch.jobs
    assert cmd == [*SLEEPER, f"--junitxml={launch.folder}/junit.xml"]
    assert env[contract.RUN_ID] == launch.run_id and env["PATH"] == os.environ["PATH"]
    assert env[contract.GATE] == str(launch.folder / ".gate-start")
    assert log.read_text() == f"accelgrid: pass single: {launch.folder}\n"
    assert (launch.folder / contract.KNOWN_ISSUES_FILE).read_text() == '{"issues": []}\n'
    with pytest.raises(CellBusy), cell_lock(project / "results" / CELL, CELL, "x"):
        pass
    relaunch.end(launch)
    assert proc.poll() is not None and not launch.folder.exists()
    with cell_lock(project / "results" / CELL, CELL, "x"):
        pass


def test_it_matches_only_the_very_run(project: Path) -> None:
    _recorded(project)
    relaunch._KEY = None
    relaunch.early(ARGV)
    launch = relaunch.claim(CELL)
    assert launch is not None
    jobs, heads, issues = list(launch.jobs), list(launch.heads), launch.known_issues
    assert relaunch.matches(launch, jobs, heads, issues)
    (cmd, env, log), = jobs
    for other in ([([*cmd, "-x"], env, log)], [(cmd, {**env, "TORCH_X": "1"}, log)],
                  [(cmd, env, log.with_name("other.log"))], []):
        assert not relaunch.matches(launch, other, heads, issues)
    assert not relaunch.matches(launch, jobs, ["another head\n"], issues)
    assert not relaunch.matches(launch, jobs, heads, b'{"issues": [1]}\n')
    assert not relaunch.matches(launch, jobs, heads, None)
    relaunch.end(launch)


@pytest.mark.parametrize("change", ["environment", "matrix", "argv", "off", "shard",
                                    "version"])
def test_anything_else_starts_nothing(project: Path, monkeypatch, change: str) -> None:
    _recorded(project)
    argv = ARGV
    if change in ("off", "shard"):
        # Turned off (or a shard) in an environment whose launch was recorded as such: the
        # switch alone keeps it from starting.
        name, value = (relaunch.OFF, "1") if change == "off" else (contract.SHARD, "1/2")
        monkeypatch.setenv(name, value)
        kept = _record(project)
        kept["key"] = relaunch._key(ARGV, dict(os.environ))
        relaunch.record_path(Path("."), CELL).write_text(json.dumps(kept))
    elif change == "environment":
        monkeypatch.setenv("TORCH_SOMETHING", "1")
    elif change == "matrix":
        time.sleep(0.01)
        (project / "matrix.yaml").write_text("schema: 1 \n")
    elif change == "argv":
        argv = [*ARGV, "-x"]
    else:
        kept = _record(project)
        kept["version"] = relaunch.VERSION + 1
        relaunch.record_path(Path("."), CELL).write_text(json.dumps(kept))
    relaunch._KEY = None
    relaunch.early(argv)
    assert relaunch.claim(CELL) is None
    assert sorted(p.name for p in (project / "results" / CELL / contract.RUNS_DIR).iterdir()) \
        == [OLD_ID]


def test_an_unreadable_record_or_a_busy_cell_starts_nothing(project: Path) -> None:
    _recorded(project)
    with cell_lock(project / "results" / CELL, CELL, "another"):
        relaunch._KEY = None
        relaunch.early(ARGV)
        assert relaunch.claim(CELL) is None
    relaunch.record_path(Path("."), CELL).write_text("{not json")
    relaunch.early(ARGV)
    assert relaunch.claim(CELL) is None
    assert len(list((project / "results" / CELL / contract.RUNS_DIR).iterdir())) == 1


def test_the_record_holds_no_value_of_the_environment_but_the_cells(project: Path,
                                                                    monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_BEARER", "s3cr3t-value-4a7f")
    _recorded(project)
    text = relaunch.record_path(Path("."), CELL).read_text()
    assert "s3cr3t-value-4a7f" not in text and "HF_HUB_BEARER" not in text
    (job,) = _record(project)["jobs"]
    assert sorted(job["env"]) == sorted([contract.GATE, contract.RUN_ID, "ACCELGRID_CELL"])
    # ... yet a launch gets it, as the environment holds it now.
    relaunch._KEY = None
    relaunch.early(ARGV)
    launch = relaunch.claim(CELL)
    assert launch is not None and launch.jobs[0][1]["HF_HUB_BEARER"] == "s3cr3t-value-4a7f"
    relaunch.end(launch)


def test_nothing_is_recorded_unless_the_command_was_seen(project: Path) -> None:
    relaunch.record(Path("."), CELL, project / "r", "1" * 32, [], [], project / "results")
    assert not relaunch.record_path(Path("."), CELL).exists()


def test_a_launch_nobody_claims_is_ended_when_the_command_exits(project: Path) -> None:
    """The command stops before its session (a matrix error, Ctrl-C): at exit, the
    launch's process is ended, its folder removed, the lock free."""
    _recorded(project)
    code = ("import sys, os; from accelgrid.run.headstart import relaunch; "
            f"relaunch.early({ARGV!r}); l = relaunch._LAUNCH; "
            "print(l.started.procs[0].pid, l.folder, flush=True); sys.exit(2)")
    # env: os.environ as this process sees it (a library here may have set variables in
    # the C environment only, e.g. LINES and COLUMNS: another environment, another key).
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert done.returncode == 2, done.stderr
    pid, folder = done.stdout.split()
    assert not Path(folder).exists()
    with pytest.raises(ProcessLookupError):
        for _ in range(100):   # ended: gone once its parent reaped it
            os.kill(int(pid), 0)
            time.sleep(0.05)
    with cell_lock(project / "results" / CELL, CELL, "x"):
        pass


def test_what_started_before_a_failed_start_is_ended(project: Path, monkeypatch) -> None:
    """Two passes, the second's interpreter gone: the first, started, is ended with the
    launch, its folder removed, the lock free; the command goes on."""
    old = _recorded(project)
    kept = _record(project)
    second = json.loads(json.dumps(kept["jobs"][0]))
    second["cmd"][0] = str(project / "no-such-python")
    second["log"] = second["log"].replace(contract.PYTEST_LOG_FILE, "pytest-two.log")
    kept["jobs"].append(second)
    relaunch.record_path(Path("."), CELL).write_text(json.dumps(kept))
    started: list = []
    real = relaunch.Launch.__init__

    def keep(self, *args, **kwargs) -> None:
        real(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(relaunch.Launch, "__init__", keep)
    relaunch._KEY = None
    relaunch.early(ARGV)
    assert relaunch.claim(CELL) is None
    (launch,) = started
    assert launch.started is None and not launch.folder.exists()
    assert [p.name for p in old.parent.iterdir()] == [OLD_ID]
    with cell_lock(project / "results" / CELL, CELL, "x"):
        pass


def test_a_record_that_cannot_be_written_leaves_none(project: Path) -> None:
    _recorded(project)
    assert relaunch.record_path(Path("."), CELL).exists()
    folder = project / "results" / CELL / contract.RUNS_DIR / OLD_ID
    (folder / contract.KNOWN_ISSUES_FILE).write_bytes(b"\xff\xfe not utf-8")
    relaunch.record(Path("."), CELL, folder, OLD_ID, [], [], project / "results")
    assert not relaunch.record_path(Path("."), CELL).exists()


def test_run_ids_are_uuid4s() -> None:
    import uuid

    for _ in range(200):
        text = new_run_id()
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_a_launch_for_another_cell_is_ended_and_end_twice_is_once(project: Path) -> None:
    """A cell folder deleted since (results/ removed): the launch makes it again. Claimed
    for another cell: ended, none given. Ended twice (the session's cancel, then its own
    end): as once."""
    import shutil

    _recorded(project)
    shutil.rmtree(project / "results")
    relaunch._KEY = None
    relaunch.early(ARGV)
    launch = relaunch._LAUNCH
    assert launch is not None and launch.folder.is_dir()
    (proc,) = launch.started.procs
    assert relaunch.claim("cpu-2.4") is None
    assert proc.poll() is not None and not launch.folder.exists()
    relaunch.end(launch)
    with cell_lock(project / "results" / CELL, CELL, "x"):
        pass
