"""Process lifetime: nothing a cell run starts outlives the process that started it.

Three layers, so that ``kill -9`` of any process group leaves no orphan:

* :func:`death_signal_preexec`, :func:`with_death_signal`, :func:`die_with_parent`:
  Linux's ``prctl(PR_SET_PDEATHSIG)``, through ctypes. The runner arms it in the pytest
  it starts (``preexec_fn``), the in-cell plugin in every xdist worker,
  ``suites/distributed`` in torchrun (through :func:`with_death_signal`: a test process
  has threads, where ``preexec_fn`` is unsafe) and in each rank (torch starts ranks in
  sessions of their own, out of reach of a process-group kill).
* :data:`GUARD_CODE`: a tiny process the runner starts inside pytest's process group,
  reading a pipe whose other end only the runner holds. When the runner dies (even by
  SIGKILL) or ends the pass, the pipe closes and the guard kills the whole group: pytest,
  its workers and whatever the tests started there. It works without prctl (macOS).
* the runner's own ``killpg`` on its time limit and on SIGINT/SIGTERM/SIGHUP.

:func:`run_group` runs a command (a benchmark's cell run, an env build) the same way from
outside a cell: its own process group, stopped as a whole when the caller is
interrupted, killed by the kernel when the caller dies.

Standard library only: this module is imported inside the cell.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# The guard: ignores the signals the runner sends the group to stop pytest gently, says
# so (one byte on stdout), waits for EOF on stdin (the runner closed its end or died),
# then SIGKILLs its process group, itself included.
# Given a cgroup (argv[1], :func:`cell_cgroup`), it first ends everything in it, daemons
# in sessions of their own included, and removes it: the runner may be dead by then.
GUARD_CODE = (
    "import os, signal, sys, time\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "os.write(1, b'+')\n"
    "while sys.stdin.buffer.read(65536):\n"
    "    pass\n"
    "if len(sys.argv) > 1:\n"
    "    try:\n"
    "        with open(os.path.join(sys.argv[1], 'cgroup.kill'), 'w') as f:\n"
    "            f.write('1')\n"
    "    except OSError:\n"
    "        pass\n"
    "    for _ in range(250):\n"
    "        try:\n"
    "            os.rmdir(sys.argv[1])\n"
    "            break\n"
    "        except FileNotFoundError:\n"
    "            break\n"
    "        except OSError:\n"
    "            time.sleep(0.02)\n"
    "os.killpg(0, signal.SIGKILL)\n"
)


# Arms the death signal, then becomes the command (execve keeps it): argv is
# SIGNAL PARENT_PID COMMAND...
EXEC_WITH_DEATH_SIGNAL = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def death_signal_preexec(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` for a child of this process: the kernel sends it ``sig`` when this
    process dies. prctl is looked up here, before the fork; the child only calls it, and
    exits at once if this process is already gone."""
    prctl = _prctl()
    parent = os.getpid()

    def arm() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # died between fork and prctl: nobody would wait for us
            os._exit(1)

    return arm


def with_death_signal(cmd: list[str], sig: int = signal.SIGKILL) -> list[str]:
    """``cmd`` started so that it is sent ``sig`` when this process dies: a small Python
    arms the signal and execs ``cmd`` (same pid). Unlike ``preexec_fn`` this is safe in a
    process with threads. ``cmd`` unchanged where there is no prctl."""
    if _prctl() is None:
        return list(cmd)
    return [sys.executable, "-I", "-c", EXEC_WITH_DEATH_SIGNAL, str(int(sig)),
            str(os.getpid()), *cmd]


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send this process ``sig`` when its parent dies (Linux; False
    elsewhere). A parent that died before this call cannot be told apart from a
    subreaper that adopted us: the guard covers that window."""
    prctl = _prctl()
    if prctl is None:
        return False
    parent = os.getppid()
    if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died while we armed it
        os.kill(os.getpid(), sig)
    return True


PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux): a process a test
    double-forks and moves into a session of its own (a daemon, out of reach of every
    process-group kill) is then re-parented here, not to init, when its parent exits,
    and :func:`end_adopted` can end it. False where there is no prctl."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children(pid: int) -> list[int]:
    """Living processes whose parent is ``pid`` (none where there is no /proc). Read from
    its threads' ``children`` lists (Linux with CONFIG_PROC_CHILDREN: a few files), else
    from a scan of every process in /proc (1-2 ms)."""
    listed = _listed_children(pid)
    if listed is None:
        try:
            listed = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return []
    found: list[int] = []
    for child in listed:
        try:
            with open(f"/proc/{child}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != b"Z":
            found.append(child)
    return found


def _listed_children(pid: int) -> list[int] | None:
    """The pids in ``pid``'s /proc/PID/task/TID/children files; None where the kernel has
    none (or no /proc)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    listed: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                listed += [int(x) for x in fh.read().split()]
        except FileNotFoundError:
            return None
        except OSError:   # that thread ended meanwhile
            continue
    return listed


def end_adopted(keep: Iterable[int] = (), timeout: float = 5.0) -> list[int]:
    """SIGKILL every living child of this process but ``keep`` (after
    :func:`become_subreaper`: the daemons a cell's tests left, adopted when their
    parents ended), again for their children as they are adopted in turn, until none is
    left or ``timeout`` passes; reap them. Returns the pids ended. A bounded wait, so a
    daemon can never hold the end of a run up."""
    import time

    kept = set(keep)
    ended: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in children(os.getpid()) if p not in kept]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            if pid not in ended:
                ended.append(pid)
        for pid in alive:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
    return ended


CGROUP_PREFIX = "accelgrid-run-"


def cell_cgroup(run_id: str) -> str | None:
    """A cgroup v2 of its own for a cell run's pytest, below this process's cgroup
    (``<mount><own cgroup>/accelgrid-run-<id>``), or None where there is none to make:
    no cgroup2 mount, not writable (no root, no delegation), or no ``cgroup.kill``
    (Linux before 5.14). What the run's pytest starts is born in it, a daemon in a
    session of its own included, and :func:`end_cgroup` (or the guard, if the runner
    died) ends it all at once; the subreaper sweep (:func:`end_adopted`) is the
    fallback."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            own = next((ln.split("::", 1)[1].strip() for ln in fh if ln.startswith("0::")),
                       None)
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            mounts = [ln.split() for ln in fh]
    except OSError:
        return None
    # mountinfo: ID PARENT DEV ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
    point = next((f[4] for f in mounts if "-" in f and f[f.index("-") + 1:][:1] == ["cgroup2"]
                  and f[3] == "/"), None)
    if own is None or point is None:
        return None
    path = os.path.join(point, own.lstrip("/"), CGROUP_PREFIX + run_id)
    try:
        os.mkdir(path)
    except OSError:
        return None
    if not os.path.exists(os.path.join(path, "cgroup.kill")):
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    return path


def join_cgroup(path: str, pid: int) -> bool:
    """Move ``pid`` (a child this process just started), and whatever it started by then,
    into the cgroup ``path``. Done from here, after its exec, and not by the child before
    it (a ``preexec_fn``): a move waits for the kernel (an RCU grace period, 10-20 ms on
    the 2-core box of docs/guides/running.md), which the child's own start now overlaps. The
    kernel blocks forks while it moves a process, so what the child forked before the
    move is in /proc by then, and moved too; what it forks after is born in the cgroup.
    False when ``pid`` could not be moved (it has ended, or no permission)."""
    def move(one: int) -> bool:
        try:
            fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, str(one).encode())
            finally:
                os.close(fd)
        except OSError:
            return False
        return True

    if not move(pid):
        return False
    pending = children(pid)
    while pending:
        one = pending.pop()
        move(one)
        pending += children(one)
    return True


def end_cgroup(path: str, timeout: float = 5.0) -> list[int]:
    """SIGKILL everything in the cgroup ``path`` (``cgroup.kill``), reap what this process
    adopted of it, wait (at most ``timeout``) until it is empty and remove it. Returns
    the pids that were in it."""
    import time

    def members() -> list[int]:
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="utf-8") as fh:
                return [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            return []

    found = members()
    with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as fh:
        fh.write("1")
    deadline = time.monotonic() + timeout
    while True:
        for pid in found:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        try:
            os.rmdir(path)
            break
        except FileNotFoundError:
            break
        except OSError:  # EBUSY: not empty yet
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    return found


def stop_group(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """End ``proc``'s process group: SIGINT (nox and the runner close their run), after
    ``grace`` seconds SIGTERM, 5 s later SIGKILL."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            return


def run_group(cmd: list[str], *, cwd: str | os.PathLike[str] | None = None,
              env: dict[str, str] | None = None, grace: float = 15.0
              ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a process group of its own, output (stdout and stderr together,
    text) captured. An exception while it runs (KeyboardInterrupt, a SIGTERM turned into
    one) stops the whole group first (:func:`stop_group`); the kernel kills ``cmd`` when
    this process dies."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=death_signal_preexec())
    try:
        out, _ = proc.communicate()
    except BaseException:
        stop_group(proc, grace)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


# --- stopping on a signal -----------------------------------------------------------------

class Stopped(KeyboardInterrupt):
    """A command (a benchmark, ``publish``) got SIGTERM or SIGINT (:func:`stoppable`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Stopped`, so a command cleans up (a benchmark's
    process groups, a temporary folder) and exits 128 + the signal's number.

    SIGINT too, whatever this process inherited: a shell starts a background job (``cmd &``,
    a CI step's child) with SIGINT ignored, and Python then leaves it ignored, so
    ``kill -INT`` would not stop the bench. The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    old = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait (blocked, then delivered) while a few steps that must not be
    cut in two run, such as moving one folder away and another into its place."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
