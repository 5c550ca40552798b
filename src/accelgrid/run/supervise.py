"""Process supervision: pytest passes started, timed, signalled and ended, with
whatever they leave behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..base import contract, lifetime

EXIT_CELL_TIMEOUT = 124


FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM) + (
    (signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


TICK_S = 1.0  # how often the console's progress is updated while pytest runs


# Plain classes, not dataclasses: this module is on the path of the early launch
# (run/headstart/relaunch.py), where importing dataclasses (and inspect with it) costs 4-5
# ms before its pytest can start.
class Supervised:
    """What :func:`run_pytests` saw."""

    def __init__(self) -> None:
        # (exit code, start, end, gate opened or None) per started job, epoch seconds
        self.ended: list[tuple[int, float, float, float | None]] = []
        self.stop_reason: list[str] = []   # empty: nothing stopped them
        self.left_behind: list[int] = []   # pids ended with their cgroup


class Started:
    """pytest passes started (:func:`start_pytests`), not yet waited for."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.guards: list[subprocess.Popen | None] = []
        self.cgroups: list[str] = []
        self.starts: list[float] = []


def start_pytests(jobs: Sequence[tuple[list[str], dict[str, str], Path | None]], root: Path,
                  keep_fds: tuple[int, ...] = (), stop: Sequence[str] = (),
                  into: Started | None = None) -> Started:
    """Start pytest commands (``jobs``: command, env, log), each in a process group and,
    where one can be made, a cgroup of its own, with its guard; none after ``stop`` (the
    caller's stop reasons) has an entry. ``into``: the record to fill as they start (a
    signal handler sees each process as soon as it is there)."""
    # Each in its own process group (the cell limit and signals reach every xdist worker
    # and what the tests start), no terminal input (a background group reading it would
    # be stopped), killed by the kernel if this process dies, and a guard in that group
    # (lifetime).
    posix = os.name == "posix"
    started = into if into is not None else Started()
    for cmd, env, log in jobs:
        if stop:
            break
        group: int | None = None   # Popen's defaults, where not POSIX
        pass_fds: tuple[int, ...] = ()
        preexec: Callable[[], None] | None = None
        cgroup = None
        if posix:
            cgroup = lifetime.cell_cgroup(f"{env.get(contract.RUN_ID) or os.urandom(16).hex()}-"
                                          f"{env.get(contract.PASS, len(started.procs))}")
            if cgroup is not None:
                started.cgroups.append(cgroup)
            group, pass_fds = 0, keep_fds
            preexec = lifetime.death_signal_preexec()
        started.starts.append(time.time())
        with open(log, "ab") if log is not None else contextlib.nullcontext() as out:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT if out else None,
                                    process_group=group, pass_fds=pass_fds,
                                    preexec_fn=preexec)
        started.procs.append(proc)
        if cgroup is not None:
            lifetime.join_cgroup(cgroup, proc.pid)
        started.guards.append(_start_guard(proc.pid, cgroup) if posix else None)
    return started


def end_started(started: Started) -> list[int]:
    """What :func:`start_pytests` started, ended: the groups, their cgroups (the pids
    ended with them, returned) and guards."""
    _terminate(*started.procs)
    return _end_around(started)


def _end_around(started: Started) -> list[int]:
    """The cgroups (the pids ended with them, returned) and guards of ``started``."""
    left: list[int] = []
    for cgroup in started.cgroups:  # what the tests left, daemons included
        left += lifetime.end_cgroup(cgroup)
    for guard in started.guards:
        _end_guard(guard)  # whatever a pass left in its group goes with it
    return left


def run_pytests(jobs: Sequence[tuple[list[str], dict[str, str], Path | None]], root: Path,
                limit: float, keep_fds: tuple[int, ...] = (),
                tick: Callable[[], None] | None = None, started: Started | None = None
                ) -> Supervised:
    """Run pytest commands at once: ``jobs`` are (command, env, log); each one's whole
    output goes to its log file (a file, not a pipe: kept even when this process dies
    first), ``tick`` runs about every :data:`TICK_S` while they run. Each runs in a
    cgroup of its own where one can be made (:func:`accelgrid.base.lifetime.cell_cgroup`),
    ended with it (the pids ended that way, what its tests left: ``left_behind``). A job
    whose env names a gate file (contract.GATE: its pytest waits for it) gets it once
    every job without one has ended. A signal or the time limit that stops them is in
    ``stop_reason``. ``started``: the jobs, started already (:func:`start_pytests`)."""
    seen = Supervised()
    stop_reason = seen.stop_reason
    begun = started is not None
    started = started if started is not None else Started()
    procs = started.procs

    def _forward(signum: int, _frame: object) -> None:
        stop_reason.append(f"interrupted by {signal.Signals(signum).name}")
        _terminate(*procs)

    old = {s: signal.signal(s, _forward) for s in FORWARDED_SIGNALS}
    try:
        if not begun:
            start_pytests(jobs, root, keep_fds, stop_reason, into=started)
        gated = [Path(env[contract.GATE]) if env.get(contract.GATE) else None
                 for _, env, _ in jobs[:len(procs)]]
        opened: list[float | None] = [None] * len(procs)
        ends = _wait_all(procs, time.monotonic() + max(limit, 1.0), limit, stop_reason, tick,
                         gated, opened)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        seen.left_behind += _end_around(started)
    for proc, start, end, gate in zip(procs, started.starts, ends, opened, strict=True):
        rc = EXIT_CELL_TIMEOUT if proc.returncode is None else proc.returncode
        if end[1]:
            rc = EXIT_CELL_TIMEOUT
        elif rc < 0:
            stop_reason.append(f"pytest killed by {signal.Signals(-rc).name}")
        seen.ended.append((rc, start, end[0], gate))
    return seen


def _wait_all(procs: list[subprocess.Popen], deadline: float, limit: float,
              stop_reason: list[str], tick: Callable[[], None] | None = None,
              gates: Sequence[Path | None] = (), opened: list[float | None] | None = None
              ) -> list[tuple[float, bool]]:
    """Wait for every process; (end time, whether the cell limit ended it) for each. The
    gate files in ``gates`` are made (and the time put in ``opened``) once every process
    without one has ended."""
    ends: dict[int, tuple[float, bool]] = {}
    last_tick = time.monotonic()
    shut = [i for i, gate in enumerate(gates) if gate is not None]
    while len(ends) < len(procs):
        for i, proc in enumerate(procs):
            if i not in ends and proc.poll() is not None:
                ends[i] = (time.time(), False)
        if shut and all(i in ends for i in range(len(procs)) if i not in shut):
            for i in shut:
                gates[i].touch()  # type: ignore[union-attr]
                if opened is not None:
                    opened[i] = time.time()
            shut = []
        if len(ends) == len(procs):
            break
        if time.monotonic() >= deadline:
            stop_reason.append(f"cell time limit of {limit:.0f} s reached")
            running = [i for i in range(len(procs)) if i not in ends]
            _terminate(*(procs[i] for i in running))
            for i in running:
                ends[i] = (time.time(), True)
            break
        if tick is not None and time.monotonic() - last_tick >= TICK_S:
            tick()
            last_tick = time.monotonic()
        # Returns as soon as that pass ends (a short run is not rounded up to a tick); a
        # gated pass is waited for last (the gate opens when the others end).
        pending = next((p for i, p in enumerate(procs) if i not in ends and i not in shut),
                       None) or next(p for i, p in enumerate(procs) if i not in ends)
        _wait_briefly(pending, 0.05)
    return [ends[i] for i in range(len(procs))]


def _wait_briefly(proc: subprocess.Popen, timeout: float) -> None:
    """Until ``proc`` ends or ``timeout`` passes. Where the kernel has pidfds (Linux 5.3+)
    it wakes the moment the process ends: Popen.wait's timeout polls with growing sleeps
    (up to 16 ms late, 5 ms on average at the end of every run)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):   # not Linux, or it is gone already
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        return
    try:
        waiter = select.poll()   # not select.select: it refuses a descriptor above 1023
        waiter.register(fd, select.POLLIN)
        waiter.poll(timeout * 1000)
    finally:
        os.close(fd)


def append_logs(log: Path, others: Sequence[Path]) -> None:
    """A pass that ran beside another wrote its own log (two writers would mix their
    lines): appended whole to the run's log once both ended, then removed."""
    for other in others:
        if not other.exists():
            continue
        with open(log, "ab") as out, open(other, "rb") as src:
            out.write(src.read())
        other.unlink()


def _start_guard(pgid: int, cgroup: str | None = None) -> subprocess.Popen | None:
    """The guard (:data:`accelgrid.base.lifetime.GUARD_CODE`) in process group ``pgid``: it
    kills the group (and ``cgroup``) once its stdin closes, i.e. when this process ends
    the pass or dies."""
    try:
        # -S: it needs no site (a few ms less CPU beside pytest's start).
        guard = subprocess.Popen([sys.executable, "-I", "-S", "-c", lifetime.GUARD_CODE,
                                  *([cgroup] if cgroup else [])],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 process_group=pgid)
        # Ready once it ignores the group's SIGTERM/SIGINT (a signal sent before then
        # would end it early): it says so with one byte.
        ready = guard.stdout.read(1)  # type: ignore[union-attr]
        guard.stdout.close()  # type: ignore[union-attr]
        if ready != b"+":
            guard.wait()
            raise OSError(f"it exited with {guard.returncode}")
        return guard
    except (OSError, subprocess.SubprocessError) as exc:  # pytest already gone, or no python
        from .console import say  # (not at import: the early launch's path, .relaunch)

        say(None, f"no guard for pytest's process group ({exc}); it relies on the "
            "parent-death signal alone", err=True)
        return None


def _end_guard(guard: subprocess.Popen | None) -> None:
    if guard is None:
        return
    with contextlib.suppress(OSError):
        guard.stdin.close()  # type: ignore[union-attr]
    try:
        guard.wait(timeout=30)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


def _terminate(*procs: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to each process's group, then SIGKILL to the groups whose leader is still
    there after ``grace`` seconds (passes beside each other stop together)."""
    alive = []
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            alive.append(proc)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in alive):
        time.sleep(0.1)
    for proc in alive:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
