"""The runner: run one cell's suites with pytest in a given interpreter, to results.

It sets the cell's env before the interpreter starts (torch reads its flags at import),
runs pytest with pytest-xdist (so a crashing test only loses its worker, however many
crash) and pytest-timeout (thread method: survives C-level hangs), enforces the cell's
time limit, and closes the results folder however the run ends.

A cell on several devices runs a pass pinned per device and one that sees them all
(:func:`passes`); where processes can share a device, at the same time, the second
writing its own log, appended to the run's ``pytest.log`` once both ended.

Each run has an id and holds the cell's lock (:func:`cell_lock`): a second run of the
cell stops with one line instead of writing into the same folder. A run narrowed by its
pytest arguments (:func:`selection`) writes ``results/<cell>/runs/<run-id>/`` and leaves
the cell's full run in ``results/<cell>/``. Nothing the run starts outlives it
(:mod:`accelgrid.base.lifetime`): pytest gets a parent-death signal and a guard in its process
group kills the group when the runner ends the pass or dies, even by SIGKILL.

Once the lock is held and the folder ready, the run is one value, :class:`CellRun`, handed
from step to step (:data:`STEPS`: plan, adopt, run_passes, end_left_behind, finalize,
tell); each step takes it, adds what it found and returns it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement

from .. import results
from ..base import contract, jsonio, lifetime, outcomes
from ..base.errors import AccelgridError
from ..config.model import Cell
from ..results import plan as run_plan
from ..results.records import Summary
from . import console, preflight
from .cellenv import cell_env
from .console import PYTEST_TROUBLE, beside_note, print_timing, say
from .lock import cell_lock, new_run_id
from .passes import Pass, RunPlan, pass_args, plan_run, pytest_command, stages
from .request import RunRequest
from .selection import selection
from .supervise import Started, append_logs, run_pytests

RUNS_KEPT = 20  # runs with a selection kept in results/<cell>/runs/ (the newest)


@dataclass
class HeldStart:
    """A stage's pytest jobs started ahead of the run's last checks (the head start,
    :mod:`.headstart.prestart`): their tests wait for ``gate`` (contract.GATE), made once
    the env is checked."""

    jobs_of_passes: list[tuple[Pass, list[str], dict[str, str], Path]]
    gate: Path
    started: Started
    launched: bool = False   # by .headstart.relaunch, as the command started


@dataclass
class CellRun:
    """One run of a cell as its steps (:data:`STEPS`) hand it along: what the run was
    asked, then what each step adds. Each step takes it and returns it."""

    cell: Cell
    python: str
    root: Path
    folder: Path                   # where this run's results go
    env: dict[str, str]            # the env every pass starts with
    pytest_args: tuple[str, ...]
    workers: int | None
    limit_s: float                 # the cell's time limit, all passes together
    record: dict[str, Any]         # run_id, pytest_args, selection: finalize records them
    keep_fds: tuple[int, ...] = ()  # the cell lock's: held by pytest too
    run_start: float = field(default_factory=time.time)
    finalized: Callable[[Cell, Path], None] | None = None
    # What the steps add:
    plan: RunPlan | None = None
    deadline: float = 0.0          # time.monotonic() when the limit is reached
    keep_children: set[int] | None = None   # not the tests' (None: not a subreaper)
    watch: console.Progress | None = None
    stop_reason: list[str] = field(default_factory=list)
    left_behind: list[int] = field(default_factory=list)   # pids the tests left, ended
    timed: list[dict[str, object]] = field(default_factory=list)   # per pass, as run
    rc: int = 0
    summary: Summary | None = None
    ignored: list[str] = field(default_factory=list)   # test files that ended their process
    started: HeldStart | None = None   # its first stage, started held (the head start)

    @property
    def log(self) -> Path:
        return self.folder / contract.PYTEST_LOG_FILE

    def say(self, text: str, *, err: bool = False) -> None:
        say(self.cell.name, text, err=err)

    def exit_code(self) -> int:
        """pytest's exit code; a run stopped early never reads as 0 (128 + the signal)."""
        if self.stop_reason:
            return self.rc if self.rc > 0 else 128 + (-self.rc if self.rc < 0 else 15)
        if self.rc == 0 and self.summary is not None and self.summary.get("incomplete"):
            return 1  # pytest said ok, but tests it collected have no record (issue 36)
        return self.rc


def run_cell(request: RunRequest, prestarted: CellRun | None = None) -> int:
    """Run the ``request``ed cell; returns pytest's exit code (124 past the cell limit;
    1 where pytest's was 0 but the run is incomplete: summary.json's ``incomplete``).
    ``prestarted``: this very run, its tests started and held at their gate (the head
    start, which holds its lock): it goes on from there. Raises :class:`CellBusy` when
    another run of the cell is in progress."""
    if prestarted is not None:
        announce(prestarted)
        return run_steps(prestarted, STEPS[STEPS.index(adopt) + 1:])
    with contextlib.ExitStack() as stack:
        run = open_run(stack, request)
        announce(run)
        return run_steps(run)


class Launched(Protocol):
    """A run started before it was opened (the head start's launch, as the command
    started): its id, its start, the cell's lock it holds (``stack`` releases it)."""

    run_id: str
    start: float
    stack: contextlib.ExitStack
    fds: tuple[int, ...]


def open_run(stack: contextlib.ExitStack, request: RunRequest,
             launched: Launched | None = None) -> CellRun:
    """The ``request``ed run as :func:`run_cell` takes it: the cell's lock held (until
    ``stack`` closes), its folder ready (a full run's emptied; a selected run's made),
    its env; nothing said yet (:func:`announce`). ``launched``: a selected run started
    as the command started (its id, lock, folder and start are the run's)."""
    cell, results_root, pytest_args = request.cell, request.results_root, request.pytest_args
    # Not resolved: a symlink planted as the cell folder is refused, never followed.
    cell_folder = Path(os.path.abspath(results_root / cell.name))
    # Everything the run reads is checked before the results folder is touched; nothing
    # it writes or deletes under results/ may be a symlink (it would act outside).
    for name in ("", contract.RUNS_DIR, contract.LOCK_FILE, contract.LAST_RUN_FILE):
        jsonio.refuse_symlink(cell_folder / name if name else cell_folder, results_root)
    if request.preflight.hardware.problem:
        raise AccelgridError(request.preflight.hardware.problem)
    run_start = time.time() if launched is None else launched.start
    run_id = new_run_id() if launched is None else launched.run_id
    chosen = selection(pytest_args)
    if launched is None:
        lock_fds = stack.enter_context(cell_lock(cell_folder, cell.name, run_id))
    else:
        stack.enter_context(launched.stack)
        lock_fds = launched.fds
    folder = results.run_folder(cell_folder, run_id, partial=bool(chosen))
    if chosen:
        folder.mkdir(parents=True, exist_ok=launched is not None)
    else:
        results.clear_for_run(cell_folder)
    record = {"run_id": run_id, "pytest_args": list(pytest_args), "selection": chosen}
    limit_s = request.limit_s if request.limit_s is not None else cell.cell_minutes * 60
    return CellRun(cell, request.python, request.root, folder,
                   run_env(cell, request.root, folder, request.preflight, request.python,
                           record),
                   pytest_args, request.workers, limit_s, record, keep_fds=lock_fds,
                   run_start=run_start, finalized=request.finalized)


def run_env(cell: Cell, root: Path, folder: Path, checked: preflight.Preflight,
            python: str, record: dict[str, Any], quiet: bool = False,
            commit: tuple[str | None, bool] | None = None) -> dict[str, str]:
    """The env every pass of the run in ``folder`` starts with (``record``: its id, pytest
    arguments and selection; ``quiet``, ``commit``: as :func:`~.cellenv.cell_env`'s)."""
    env = cell_env(cell, root, folder, checked=checked, python=python, quiet=quiet,
                   commit=commit)
    env.update({contract.RUN_ID: str(record["run_id"]),
                contract.PLAN_INPUTS: plan_inputs(cell),
                contract.PYTEST_ARGS: json.dumps(jsonio.safe(record["pytest_args"])),
                contract.SELECTION: json.dumps(jsonio.safe(record["selection"]))})
    return env


def announce(run: CellRun) -> None:
    """The run named the cell's latest (``last-run.json``; a selected run's folder keeps
    the newest :data:`RUNS_KEPT` of ``runs/``), and a selected run said."""
    cell_folder = run.folder if not run.record["selection"] else run.folder.parent.parent
    chosen = list(run.record["selection"])
    results.write_last_run(cell_folder, str(run.record["run_id"]), run.folder, chosen)
    if chosen:
        results.prune_runs(cell_folder, RUNS_KEPT)
        run.say(f"a selected run (pytest {jsonio.safe_text(' '.join(chosen))}): "
                f"results in {run.folder}; the cell's full run stays in {cell_folder}")


def plan_inputs(cell: Cell) -> str:
    """The runner's side of the run's plan (results.plan): the cell's pinned package
    names, its matrix entry and its env flags' names."""
    names = ["torch", *cell.pins]
    for spec in cell.packages:
        with contextlib.suppress(InvalidRequirement):
            names.append(Requirement(spec).name)
    return run_plan.runner_inputs(names, cell.as_dict(), cell.env)


def plan(run: CellRun) -> CellRun:
    """How the run spreads its tests (:func:`~accelgrid.run.passes.plan_run`), said."""
    run.deadline = time.monotonic() + run.limit_s
    cell = run.cell
    run.plan = planned = plan_run(cell, run.python, run.folder, run.root, run.pytest_args,
                                  run.workers, run.env)
    ids = planned.device_ids
    if cell.device_type.visibility_var and planned.how:
        run.say(f"{len(ids)} {cell.device} devices: {planned.how}")
    first = planned.passes[0]
    if first.name == contract.PASS_PINNED:
        beside = any(p.beside and not p.gated for p in planned.passes)
        each = first.workers // len(ids)
        run.say(f"{len(ids)} {cell.device} devices ({', '.join(ids)}): "
                + ("one pinned worker each, " if each == 1 else f"{each} pinned workers each, ")
                + ("multi-device tests beside them" if beside else "then multi-device tests"
                   + (f" ({planned.serial})" if planned.serial else "")))
    return run


def adopt(run: CellRun) -> CellRun:
    """This process adopts what the tests leave running (a subreaper), to end it at the
    run's end; the children it had before the cell (none, from the CLI) are not theirs."""
    if lifetime.become_subreaper():
        run.keep_children = set(lifetime.children(os.getpid()))
    run.watch = console.Progress(run.cell.name, run.folder)
    return run


def run_passes(run: CellRun) -> CellRun:
    """The plan's stages one after another, each stage's passes at once, until one is
    stopped (a signal, the time limit)."""
    assert run.plan is not None
    for stage in stages(run.plan.passes):
        before = run.rc
        _run_stage(run, stage)
        # A test file that ended its test processes at import (os._exit): named, an
        # error of its own, and the stage again without it (the other files' tests run;
        # the run fails on the error, not on the dead attempt's exit code).
        for _ in range(MAX_IMPORT_DEATHS):
            if run.stop_reason or not _import_deaths(run, stage):
                break
            run.rc = before or 1
            _run_stage(run, stage)
        if run.stop_reason:
            break
    return run


MAX_IMPORT_DEATHS = 5  # test files a stage is run again without, one round each


def _import_deaths(run: CellRun, stage: list[Pass]) -> bool:
    """Say each test file the stage's test processes never came back from importing: it
    becomes an error record and is left out of the stage's next run. Whether the stage
    must run again."""
    again = False
    collected, _ = jsonio.read_json(run.folder / contract.COLLECTED_FILE)
    imported = {str(i).split("::", 1)[0] for i in collected or ()} \
        if isinstance(collected, list) else set()
    for death in results.import_deaths(run.folder):
        path, what = death["path"], death["what"]
        if path in imported:
            # Another process got through importing it: this one was ended while it
            # collected (xdist ends a worker it started in place of a crashed one when
            # no test is left), not by the file.
            continue
        why = (f"the {what} ended its test process at import (os._exit or a signal, "
               "before pytest could report it)")
        run.say(f"{jsonio.safe_text(path)}: {why}; the other files' tests run without it",
                err=True)
        results.append_record(run.folder / contract.TESTS_FILE, {
            "nodeid": path, "outcome": outcomes.ERROR, "phase": "collect", "message": why,
            "cell": run.cell.name, "pass": stage[0].name, "run_id": str(run.record["run_id"]),
            "duration": None})
        run.ignored.append(path)
        again = True
    return again


def stage_jobs(run: CellRun, stage: list[Pass]
               ) -> list[tuple[Pass, list[str], dict[str, str], Path]]:
    """The stage's passes as pytest jobs: (pass, command, env, log); passes with nothing
    left to run are not among them (:func:`write_log_heads` starts their logs)."""
    planned = run.plan
    assert planned is not None
    jobs: list[tuple[Pass, list[str], dict[str, str], Path]] = []
    for run_pass in stage:
        args = pass_args(run_pass, run.folder, run.root, run.pytest_args)
        if args is None:
            continue
        # The planned command, unless the pass got the tests an earlier one left.
        cmd = [*(planned.commands[planned.passes.index(run_pass)]
                 if args == list(run.pytest_args) else
                 pytest_command(run.cell, run.python, run.folder, args, run.workers,
                                run.root, run_pass)),
               *(f"--ignore={p}" for p in run.ignored)]
        gate = run.folder / f".gate-{run_pass.name}" if run_pass.gated else None
        env = {**run.env, **dict(run_pass.env), contract.PASS: run_pass.name,
               **({contract.GATE: str(gate)} if gate else {})}
        log = run.log if not jobs else run.folder / f"pytest-{run_pass.name}.log"
        jobs.append((run_pass, cmd, env, log))
    return jobs


def log_head(run_pass: Pass, cmd: Sequence[str]) -> str:
    """The first line of a pass's log: its command."""
    return (f"accelgrid: pass {run_pass.name} ({run_pass.title}): "
            f"{jsonio.safe_text(' '.join(cmd))}\n")


def write_log_heads(jobs: Sequence[tuple[Pass, list[str], dict[str, str], Path]]) -> None:
    """Each pass's log starts with its command (pytest's output follows)."""
    for run_pass, cmd, _, log in jobs:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(log_head(run_pass, cmd))


def _run_stage(run: CellRun, stage: list[Pass]) -> None:
    assert run.watch is not None
    started, run.started = run.started, None
    jobs = stage_jobs(run, stage) if started is None else started.jobs_of_passes
    if not jobs:
        return
    left = run.deadline - time.monotonic()
    for run_pass, _, _, _ in jobs:
        n = run_pass.workers
        run.say(f"running {run_pass.title} ({n} worker{'s' if n > 1 else ''}, time limit "
                f"{console.elapsed(left)})" + beside_note(run_pass, jobs[0][0])
                + f"; pytest's output goes to {console.shown_path(run.log)}")
    ahead: float | None = None   # when the gate of a stage started ahead opened
    if started is None:
        write_log_heads(jobs)
    else:
        started.gate.touch()   # the env is checked: the tests started ahead may run
        ahead = time.time()
    gates = [Path(env[contract.GATE]) if run_pass.gated else None
             for run_pass, _, env, _ in jobs]
    logs = [log for _, _, _, log in jobs]
    seen = run_pytests([(cmd, env, log) for _, cmd, env, log in jobs], run.root, left,
                       run.keep_fds, tick=run.watch.poll,
                       started=None if started is None else started.started)
    run.stop_reason += seen.stop_reason
    run.left_behind += seen.left_behind
    for gate in [*gates, started.gate if started else None]:
        if gate is not None:
            gate.unlink(missing_ok=True)
    append_logs(run.log, logs[1:])
    # (a pass the run was stopped before starting has no entry)
    for (run_pass, *_), (pass_rc, start, end, opened) in zip(jobs, seen.ended, strict=False):
        if run_pass.empty_ok and pass_rc == 5:  # no multi-device (etc.) tests selected
            pass_rc = 0
        if pass_rc in PYTEST_TROUBLE:  # usage error, interrupted, internal error, none
            which = f" in {run_pass.title}" if len(jobs) > 1 else ""
            run.say(f"pytest exited with {pass_rc} ({PYTEST_TROUBLE[pass_rc]}){which}; the "
                    "end of its output:" + "".join(f"\n    {line}"
                                                   for line in console.log_tail(run.log)),
                    err=True)
        run.rc = run.rc or pass_rc
        run.timed.append({"name": run_pass.name, "workers": run_pass.workers, "rc": pass_rc,
                          "beside": jobs[0][0].name if run_pass.beside else None,
                          "start": start, "end": end,
                          **({"gate": opened} if run_pass.gated else {}),
                          **({"ahead": ahead} if ahead is not None else {}),
                          **({"launched": True} if started and started.launched else {})})


def end_left_behind(run: CellRun) -> CellRun:
    """Daemons the tests left (double fork + setsid, out of every process group): ended
    with their pass's cgroup where there is one, else now, at the cell's end, never after
    it (this process adopted them: subreaper)."""
    if run.keep_children is not None:
        run.left_behind += lifetime.end_adopted(keep=run.keep_children)
    if run.left_behind:
        run.say(f"ended {len(run.left_behind)} process(es) the tests left running (pid "
                f"{', '.join(map(str, run.left_behind[:5]))})")
    return run


def finalize(run: CellRun) -> CellRun:
    """The results folder closed (summary.json); a disk that filled under pytest is
    raised as what it is."""
    reason = "; ".join(run.stop_reason) or f"pytest exited with {run.rc} before running it"
    timing = {"passes": run.timed, "run_start": run.run_start}
    full = jsonio.storage_failure(run.folder) if run.rc and not run.stop_reason else None
    if full is not None:  # the disk filled (or went read-only) under pytest: say that
        with contextlib.suppress(OSError):
            results.finalize(run.folder, str(jsonio.storage_problem(full)), run.record,
                             timing=timing)
        raise full
    run.summary = results.finalize(run.folder, reason, run.record, timing=timing)
    if run.finalized is not None:
        run.finalized(run.cell, run.folder)
    return run


def tell(run: CellRun) -> CellRun:
    """The end of the run on the console: counts, why tests did not run, what failed, the
    timing, and why the run stopped early."""
    assert run.summary is not None and run.watch is not None
    run.watch.poll(final=True)   # suites whose last tests finalize marked
    records = results.last_outcomes(results.run_records(run.folder,
                                                        str(run.record["run_id"]))[0])
    for line in console.summary_lines(run.summary, records, run.folder, run.log):
        run.say(line)
    print_timing(run.cell.name, run.summary)
    if run.stop_reason:
        run.say("; ".join(run.stop_reason), err=True)
    if run.summary.get("incomplete"):
        run.say(f"incomplete: {run.summary['incomplete']}", err=True)
    return run


# A cell run, step by step: each takes the run and hands it on (nox's own style).
STEPS: tuple[Callable[[CellRun], CellRun], ...] = (
    plan, adopt, run_passes, end_left_behind, finalize, tell)


def run_steps(run: CellRun, steps: Sequence[Callable[[CellRun], CellRun]] = STEPS) -> int:
    """Run ``run`` through ``steps`` (:data:`STEPS`); its exit code."""
    for step in steps:
        run = step(run)
    return run.exit_code()
