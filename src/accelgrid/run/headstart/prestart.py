"""A selected run's tests started ahead of nox, held until the cell's session has checked
the env (``accelgrid run CELL -- -k ...``).

Most of a short warm run is pytest's own start: its interpreter, its imports, torch,
the collection; none of it needs what nox does first (the session, the env's stamp, the
files and pins against the matrix). ``accelgrid run`` runs nox in its own process, so it
can start the run's pytest first: the run is opened as :func:`accelgrid.run.cell.run_cell`
opens it (the cell's lock, a new ``runs/<run-id>/`` folder, the run's env and plan) and
its passes start with a gate (``ACCELGRID_GATE``: the in-cell plugin holds the first test
until the file exists). The session then checks the env as it always does and hands
the run its own arguments (:func:`take`): when the run it would start is this one (the
same python, folder, arguments, env and pytest commands), the gate opens and the run goes
on; otherwise, and whenever the session installs, repairs, links or stops first
(:func:`cancel`), the held pytest is ended, its folder removed, the lock released: no test
ran, nothing was recorded, and the session runs the cell as it would have.

Only what can be undone is started ahead: a selected run (a full run empties the cell's
folder first) of a venv cell whose env's stamp holds its pins, not a shard, whose plan is
one stage without a gated pass. docs/guides/running.md gives the measured gain.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...base import contract
from ...base.errors import AccelgridError
from ...config import known_issues
from ...config.model import Cell, Matrix
from .. import cell as cellrun
from .. import preflight
from ..passes import plan_run, stages, workers_override
from ..request import RunRequest
from ..selection import selection
from ..supervise import end_started, start_pytests
from . import relaunch

GATE_NAME = ".gate-start"   # in the run's folder; removed when the stage ends


@dataclass
class _Held:
    run: cellrun.CellRun
    stack: contextlib.ExitStack   # the cell's lock
    taken: bool = False
    launch: relaunch.Launch | None = None   # its processes, started by .relaunch
    inputs: list[Path] = field(default_factory=list)   # what its launch depends on


_HELD: _Held | None = None


def start(matrix: Matrix, cell: Cell, pytest_args: Sequence[str]) -> str | None:
    """Start ``cell``'s selected run ahead of its session where it can be undone (see the
    module): None when it was, else why not. Anything in the way (no env, a stamp that
    does not match, another run holding the lock, ...) starts nothing: the session then
    does all, and says what was wrong. The launch :mod:`.relaunch` started at the
    command's start is this run's when it is exactly the run this would start."""
    launch = relaunch.claim(cell.name)
    try:
        return _start(matrix, cell, pytest_args, launch)
    finally:
        if launch is not None and (_HELD is None or _HELD.launch is not launch):
            relaunch.end(launch)   # not this run's (its folder, if it was, is gone)


def _start(matrix: Matrix, cell: Cell, pytest_args: Sequence[str],
           launch: relaunch.Launch | None) -> str | None:
    global _HELD
    if _HELD is not None:
        return "a run is started ahead already"
    if not selection(pytest_args):
        return "not a selected run"
    if os.environ.get(contract.SHARD):
        return "a shard"
    from ...host import detect, stamp, venvs

    root = matrix.root
    envdir = venvs.env_dir(root, cell)
    python = venvs.python_in(envdir)
    if not python.is_file():
        return f"no env at {envdir}"
    stack = contextlib.ExitStack()
    try:
        host = preflight.host_check(cell, absent=detect.absent_reason(
            cell.device, matrix.devices[cell.device].detect))
        if (host.absent and not os.environ.get(contract.SKIP_DETECT)) or host.problem:
            return "the host cannot run the cell"
        if stamp.held_plan(envdir, stamp.plans(cell, envdir)) is None:
            return "the env's stamp does not hold the cell's pins"
        # What the launch of this run depends on, besides the command and environment.
        inputs = [matrix.path, root / "noxfile.py", known_issues.registry_path(root),
                  envdir / stamp.STAMP]
        request = RunRequest(cell, str(python.absolute()), root, _results_root(root),
                             preflight.check(cell, root, host=host), tuple(pytest_args),
                             workers_override())
        run = cellrun.open_run(stack, request, launched=launch)
        _HELD = _Held(run, stack, launch=launch, inputs=inputs)
        cellrun.plan(run)
        assert run.plan is not None
        first = stages(run.plan.passes)[0]
        if any(p.gated for p in first):
            cancel()
            return "its first stage has a gated pass"
        cellrun.adopt(run)
        gate = run.folder / GATE_NAME
        jobs = [(p, cmd, {**env, contract.GATE: str(gate)}, log)
                for p, cmd, env, log in cellrun.stage_jobs(run, first)]
        if launch is not None:
            if relaunch.matches(launch, [(cmd, env, log) for _, cmd, env, log in jobs],
                                [cellrun.log_head(p, cmd) for p, cmd, _, _ in jobs],
                                _read(run.folder / contract.KNOWN_ISSUES_FILE)):
                run.started = cellrun.HeldStart(jobs, gate, launch.started, launched=True)
                return None
            # Not this run: ended with its folder; the run is started as without it.
            relaunch.forget(root, cell.name)
            cancel()
            return _start(matrix, cell, pytest_args, None)
        cellrun.write_log_heads(jobs)
        started = start_pytests([(cmd, env, log) for _, cmd, env, log in jobs], root,
                                run.keep_fds)
        run.started = cellrun.HeldStart(jobs, gate, started)
        return None
    except (AccelgridError, OSError) as exc:
        cancel()
        stack.close()
        return str(exc) or type(exc).__name__


def _results_root(root: Path) -> Path:
    from ... import results

    return results.results_root(root)


def take(request: RunRequest) -> cellrun.CellRun | None:
    """The run started ahead, when it is the ``request``ed one the session is about to
    start (its env checked): then it is the session's to go on with
    (:func:`accelgrid.run.cell.run_cell`, ``prestarted=``); else it is ended
    (:func:`cancel`) and None is returned."""
    held = _HELD
    if held is None or held.taken:
        return None
    run = held.run
    cell, root = request.cell, request.root
    same = (run.cell.name == cell.name and run.python == request.python and run.root == root
            and run.pytest_args == request.pytest_args and run.workers == request.workers
            and run.folder.is_relative_to(
                Path(os.path.abspath(request.results_root / cell.name))))
    if same:
        # The files the env points at are written again only where they would differ (the
        # held pytest may be reading them): a difference is another run.
        issues = _read(run.folder / contract.KNOWN_ISSUES_FILE)
        # The commit as the run was opened, a moment ago in this process: git asked again
        # (two processes beside the held pytest) could only tell of a commit made since.
        commit = (run.env.get(contract.COMMIT) or None, run.env.get(contract.DIRTY) == "1")
        env = cellrun.run_env(cell, root, run.folder, request.preflight, request.python,
                              run.record, quiet=True, commit=commit)
        same = env == run.env and _read(run.folder / contract.KNOWN_ISSUES_FILE) == issues \
            and run.plan is not None and plan_run(
            cell, request.python, run.folder, root, request.pytest_args, request.workers,
            env).commands == run.plan.commands
    if not same:
        cancel()
        return None
    held.taken = True
    run.finalized = request.finalized
    if run.started is not None:
        relaunch.record(root, cell.name, run.folder, str(run.record["run_id"]),
                        [(cmd, env, log, cellrun.log_head(p, cmd))
                         for p, cmd, env, log in run.started.jobs_of_passes],
                        held.inputs, Path(os.path.abspath(request.results_root)))
    return run


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def cancel() -> None:
    """End the run started ahead, unless the session took it (then it is the session's,
    and :func:`ahead` releases its lock at the end): its pytest and what it started, its
    folder, the cell's lock. No test of it ran (they wait for the gate)."""
    global _HELD
    held = _HELD
    if held is None or held.taken:
        return
    _HELD = None
    if held.run.started is not None:
        end_started(held.run.started.started)
        held.run.started = None
    elif held.launch is not None:   # its processes, before the lock they hold goes
        relaunch.end(held.launch, keep_folder=True)
    shutil.rmtree(held.run.folder, ignore_errors=True)
    held.stack.close()


def waiting() -> bool:
    """Whether a run started ahead waits for the session."""
    return _HELD is not None and not _HELD.taken


@contextlib.contextmanager
def ahead(matrix: Matrix, cell: Cell, pytest_args: Sequence[str]) -> Iterator[str | None]:
    """:func:`start` the run ahead (yields its answer); whatever the session did with it,
    once it returns: a run not taken is ended, a taken one's lock released (and its
    pytest ended, if the session stopped before waiting for it)."""
    global _HELD
    try:
        yield start(matrix, cell, pytest_args)
    finally:
        held = _HELD
        if held is not None and held.taken:
            _HELD = None
            if held.run.started is not None:   # taken, but never waited for
                end_started(held.run.started.started)
            held.stack.close()
        else:
            cancel()
