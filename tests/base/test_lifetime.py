"""No process of a run outlives it, and two runs of a cell never share a folder: real
runner processes killed with ``kill -9`` (of the runner's process group, of pytest's),
the cell lock, run ids, and the lifetime helpers themselves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract, lifetime
from accelgrid.config.matrix import load_matrix
from accelgrid.results import cellresults
from accelgrid.run import lock as cell_lock
from accelgrid.run import supervise
from accelgrid.run.cell import run_cell

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc and relies on prctl")

RUN_CELL = ("import sys; from pathlib import Path; from accelgrid.run.cell import run_cell; "
            "from accelgrid.run import preflight; from accelgrid.run.request import RunRequest; "
            "from accelgrid.config.matrix import load_matrix; p = Path(sys.argv[1]); "
            "c = load_matrix(p / 'matrix.yaml').cell('cpu-2.13'); "
            "sys.exit(run_cell(RunRequest(c, sys.executable, p, p / 'results', "
            "preflight.check(c, p))))")

# test_3 starts a child (in pytest's process group, as test helpers do) and hangs.
HANGS_WITH_CHILD = textwrap.dedent('''
    import os, subprocess, sys, time
    from pathlib import Path

    def test_1():
        pass

    def test_2():
        pass

    def test_3_hangs_with_a_child():
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (Path(os.environ["ACCELGRID_RESULTS"]) / "child-started").write_text("")
        time.sleep(600)
''')


def _processes_with(marker: bytes) -> list[int]:
    """Live (not zombie) processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it only waits to be reaped)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _state(pid: int) -> str | None:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _wait_gone(marker: bytes, seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + seconds
    left = _processes_with(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _processes_with(marker)
    return left


def _wait_unlocked(path: Path, seconds: float = 15.0) -> bool:
    """Whether ``path``'s flock can be taken within ``seconds``. A process that is exiting
    has lost its environment (/proc/PID/environ reads empty once its memory is released)
    before the kernel closes its files, so the lock can outlive what _processes_with sees."""
    import fcntl

    deadline = time.monotonic() + seconds
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
    finally:
        os.close(fd)


def _wait_name_free(folder: Path, seconds: float = 15.0) -> bool:
    """Whether the cell's :func:`accelgrid.run.lock.name_lock` can be taken within
    ``seconds`` (as :func:`_wait_unlocked`: an exiting process closes its files last)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            sock = cell_lock.name_lock(folder)
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
            continue
        assert sock is not None  # Linux: the name can be bound
        sock.close()
        return True


def _start_runner(proj: Path, python: str) -> subprocess.Popen:
    # Its own session, as a CI job or a terminal would start it: kill -9 of its group.
    return subprocess.Popen([python, "-c", RUN_CELL, str(proj)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_hanging(folder: Path, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    """Until test_1 and test_2 are recorded and test_3's child runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        recs, _ = results.read_records(folder / contract.TESTS_FILE)
        if len(recs) >= 2 and (folder / "child-started").exists():
            return
        assert proc.poll() is None, f"the runner ended early ({proc.returncode})"
        time.sleep(0.2)
    raise AssertionError("the run never reached its hanging test")


def _marker(folder: Path) -> bytes:
    return b"ACCELGRID_RESULTS=" + str(folder).encode()


def test_second_run_refused_and_kill_9_of_the_runner_group_leaves_nothing(
        mini_project, python) -> None:
    proj = mini_project()
    payload = proj / "suites" / "payload" / "test_hang.py"
    payload.write_text(HANGS_WITH_CHILD)
    folder = (proj / "results" / "cpu-2.13").resolve()
    first = _start_runner(proj, python)
    try:
        _wait_hanging(folder, first)
        first_id = json.loads((folder / contract.ENV_FILE).read_text())["run_id"]
        # pytest, its worker and test_3's child: all carry the run's results folder.
        assert len(_processes_with(_marker(folder))) >= 3
        # A second run of the cell is refused in one line, naming the run in progress.
        cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
        with pytest.raises(cell_lock.CellBusy) as busy:
            run_cell(run_request(cell, python, proj, proj / "results"))
        message = str(busy.value)
        assert "\n" not in message and "another run of this cell is in progress" in message
        assert first_id in message and str(folder) in message
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the runner's whole process group
        first.wait()
    # Nothing of the killed run survives it: not pytest (own process group), not its
    # worker, not the child a test started.
    assert _wait_gone(_marker(folder)) == []
    assert _wait_unlocked(folder / contract.LOCK_FILE)   # and none of them holds the cell's lock
    assert _wait_name_free(folder)                  # nor its name lock
    killed = cellresults.load_cell(folder)
    assert {n.split("::")[-1]: r["outcome"] for n, r in killed.tests.items()} == {
        "test_1": "passed", "test_2": "passed"}
    assert any("never finished" in p for p in killed.problems)
    # The next run of the cell is its own: nothing of the killed run lands in it.
    payload.write_text("def test_new():\n    pass\n")
    assert run_cell(run_request(cell, python, proj, proj / "results")) == 0
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["run_id"] != first_id and env["status"] == "finished"
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert [(r["nodeid"].split("::")[-1], r["run_id"]) for r in recs] == [
        ("test_new", env["run_id"])]
    junit = (folder / contract.JUNIT_FILE).read_text()
    assert "test_new" in junit and "test_1" not in junit
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    assert summary["run_id"] == env["run_id"] and summary["total"] == 1


# The lock is the run's, not a file's: test_2 deletes what it is told (the lock file, its
# cell folder or results/), says so and waits to be released.
DELETES_THE_LOCK = textwrap.dedent('''
    import os, shutil, time
    from pathlib import Path

    RESULTS = Path(os.environ["ACCELGRID_RESULTS"])

    def test_1():
        pass

    def test_2_deletes_then_waits():
        what = os.environ.get("DELETE")
        if what is None:        # a run of its own
            return
        if what == "lock":
            (RESULTS / ".lock").unlink()
        else:  # the runner may write beside it meanwhile (its progress): until it is gone
            gone = RESULTS if what == "cell-folder" else RESULTS.parent
            while gone.exists():
                shutil.rmtree(gone, ignore_errors=True)
        Path(os.environ["DELETED"]).write_text("")
        release = Path(os.environ["RELEASE"])
        for _ in range(1200):
            if release.exists():
                return
            time.sleep(0.1)
''')


def _accelgrid_run(proj: Path, **env: str) -> subprocess.CompletedProcess:
    """``accelgrid run cpu-2.13 --no-venv`` of the mini project, as a user types it."""
    return subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), "run", "cpu-2.13", "--no-venv"],
                          cwd=proj, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ACCELGRID_RESULTS_DIR": str(proj / "results"),
                               **env})


@pytest.mark.parametrize("delete", ["lock", "results"])  # results/: the cell folder too
def test_a_second_run_is_refused_whatever_the_first_runs_tests_delete(
        mini_project, python, tmp_path, delete) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_deletes.py").write_text(DELETES_THE_LOCK)
    folder = (proj / "results" / "cpu-2.13").resolve()
    deleted, release = tmp_path / "deleted", tmp_path / "release"
    env = {**os.environ, "DELETE": delete, "DELETED": str(deleted), "RELEASE": str(release)}
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen([python, "-c", RUN_CELL, str(proj)], start_new_session=True,
                                 stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not deleted.exists():
            assert first.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first run never reached test_2"
            time.sleep(0.1)
        assert not (folder / contract.LOCK_FILE).exists()
        # A second run, by the CLI: refused in one line, non-zero exit, nothing run.
        second = _accelgrid_run(proj)
        busy = [ln for ln in (second.stdout + second.stderr).splitlines()
                if "another run of this cell is in progress" in ln]
        assert second.returncode != 0 and len(busy) == 1, second.stdout + second.stderr
        assert "its lock file is gone" in busy[0] and str(folder) in busy[0], busy
        assert "Traceback" not in second.stderr
        # And from the library: the same refusal.
        with pytest.raises(cell_lock.CellBusy):
            run_cell(run_request(load_matrix(proj / "matrix.yaml").cell("cpu-2.13"), python,
                                 proj, proj / "results"))
        assert not (folder / contract.LOCK_FILE).exists()  # refused before touching the folder
        release.write_text("")
        assert first.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    first_id = json.loads((folder / contract.ENV_FILE).read_text())["run_id"]
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert {r["run_id"] for r in recs} == {first_id}  # nothing of another run mixed in
    # Once the first run has ended, the next one runs.
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, proj / "results")) == 0
    env_json = json.loads((folder / contract.ENV_FILE).read_text())
    assert env_json["run_id"] != first_id and env_json["status"] == "finished"
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert {r["run_id"] for r in recs} == {env_json["run_id"]} and len(recs) == 2


# torchrun starts each rank in a session of its own, out of reach of a process-group
# kill: the ranks must die with torchrun, as suites/distributed's do.
TORCHRUN_HANGS = textwrap.dedent('''
    import os, signal, subprocess, sys
    from pathlib import Path
    from accelgrid.base import lifetime

    RANK = (
        "import os, time\\n"
        "from pathlib import Path\\n"
        "from accelgrid.base import lifetime\\n"
        "lifetime.die_with_parent()\\n"
        "Path(os.environ['ACCELGRID_RESULTS'], 'rank-' + os.environ['RANK']).write_text('')\\n"
        "time.sleep(600)\\n"
    )

    def test_1():
        pass

    def test_2():
        pass

    def test_3_ranks_hang(tmp_path):
        script = tmp_path / "rank.py"
        script.write_text(RANK)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(script)]
        subprocess.run(lifetime.with_death_signal(cmd, signal.SIGTERM))
''')


def test_kill_9_of_the_runner_group_takes_torchrun_ranks_along(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_ranks.py").write_text(TORCHRUN_HANGS)
    folder = (proj / "results" / "cpu-2.13").resolve()
    proc = _start_runner(proj, python)
    try:
        deadline = time.monotonic() + 180
        while not all((folder / f"rank-{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, "no ranks started"
            time.sleep(0.2)
        # The ranks lead sessions of their own: a process-group kill cannot reach them.
        assert len([pid for pid in _processes_with(_marker(folder)) if _sid(pid) == pid]) == 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _wait_gone(_marker(folder)) == []


def _pytest_of(runner_pid: int) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == runner_pid and b"pytest" in cmdline:
            return int(entry.name)
    raise AssertionError("the runner has no pytest child")


def test_kill_9_of_pytests_group_is_closed_by_the_runner(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_hang.py").write_text(HANGS_WITH_CHILD)
    folder = (proj / "results" / "cpu-2.13").resolve()
    proc = _start_runner(proj, python)
    try:
        _wait_hanging(folder, proc)
        os.killpg(os.getpgid(_pytest_of(proc.pid)), signal.SIGKILL)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc == 128 + signal.SIGKILL
    assert _wait_gone(_marker(folder)) == []
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    assert summary["total"] == 3 and summary["counts"]["passed"] == 2
    recs = {r["nodeid"].split("::")[-1]: r for r in
            results.read_records(folder / contract.TESTS_FILE)[0]}
    assert recs["test_3_hangs_with_a_child"]["outcome"] == "crashed"
    assert "pytest killed by SIGKILL" in recs["test_3_hangs_with_a_child"]["message"]
    assert {r["run_id"] for r in recs.values()} == {summary["run_id"]}


def test_the_pass_leaves_nothing_in_its_process_group(mini_project, python) -> None:
    # A test's child that outlives its test (and pytest) goes when the pass ends.
    proj = mini_project()
    (proj / "suites" / "payload" / "test_leaks.py").write_text(textwrap.dedent('''
        import subprocess, sys
        def test_leaves_a_child():
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    '''))
    folder = (proj / "results" / "cpu-2.13").resolve()
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, proj / "results")) == 0
    assert _wait_gone(_marker(folder), 10) == []


# --- the helpers -----------------------------------------------------------------------

def test_death_signal_reaches_the_child_of_a_killed_parent(tmp_path: Path) -> None:
    # parent: starts a child armed with lifetime.with_death_signal, prints its pid and
    # waits; SIGKILL of the parent must take the child along.
    code = textwrap.dedent('''
        import subprocess, sys, time
        from accelgrid.base import lifetime
        child = subprocess.Popen(lifetime.with_death_signal(
            [sys.executable, "-c", "import time; time.sleep(600)"]))
        print(child.pid, flush=True)
        time.sleep(600)
    ''')
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_guard_kills_its_group_when_its_pipe_closes() -> None:
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              process_group=0)
    guard = supervise._start_guard(leader.pid)
    assert guard is not None
    os.killpg(leader.pid, signal.SIGTERM)  # ignored by the guard: only EOF ends it
    assert leader.wait(timeout=10) == -signal.SIGTERM
    time.sleep(0.3)
    assert guard.poll() is None
    supervise._end_guard(guard)
    assert guard.returncode == -signal.SIGKILL


def test_die_with_parent_arms_the_signal() -> None:
    code = ("import ctypes, sys; from accelgrid.base import lifetime; "
            "assert lifetime.die_with_parent(); sig = ctypes.c_int(); "
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); print(sig.value)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert int(out) == signal.SIGKILL
    assert lifetime.with_death_signal(["x"])[-1] == "x"


def test_children_lists_the_living_children_from_either_source(monkeypatch) -> None:
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10   # a zombie until reaped: not a living child
        while _state(ended.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(ended.pid) == "Z"
        listed = lifetime.children(os.getpid())
        assert living.pid in listed and ended.pid not in listed
        # where the kernel keeps no children lists: the scan of /proc finds the same
        monkeypatch.setattr(lifetime, "_listed_children", lambda pid: None)
        scanned = lifetime.children(os.getpid())
        assert living.pid in scanned and ended.pid not in scanned
        assert lifetime.children(2 ** 22 + 1) == []   # no such process
    finally:
        living.kill()
        living.wait()
        ended.wait()


def test_join_cgroup_moves_the_process_and_what_it_started_before() -> None:
    path = lifetime.cell_cgroup("test-join-" + os.urandom(4).hex())
    if path is None:
        pytest.skip("no writable cgroup v2 with cgroup.kill here (needs root or a "
                    "delegated cgroup, Linux 5.14+)")
    # It forks before it is moved: the move must take that child along.
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(600)']); print(c.pid, flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert lifetime.join_cgroup(path, proc.pid)
        with open(os.path.join(path, "cgroup.procs")) as fh:
            members = {int(x) for x in fh.read().split()}
        assert {proc.pid, child} <= members
        assert set(lifetime.end_cgroup(path)) >= {proc.pid, child}
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
        assert not lifetime.join_cgroup(path, os.getpid())   # the cgroup is gone
    finally:
        proc.kill()
        proc.wait()
        if os.path.isdir(path):
            lifetime.end_cgroup(path)


@pytest.mark.parametrize("pidfd", [True, False])
def test_wait_briefly_wakes_when_the_process_ends(monkeypatch, pidfd) -> None:
    if not pidfd:   # as on macOS: Popen.wait's polling
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open")
    short = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    t0 = time.monotonic()
    supervise._wait_briefly(short, 30)
    assert time.monotonic() - t0 < 10 and short.poll() == 0
    long = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        t0 = time.monotonic()
        supervise._wait_briefly(long, 0.2)
        assert 0.15 <= time.monotonic() - t0 < 10 and long.poll() is None
    finally:
        long.kill()
        long.wait()
