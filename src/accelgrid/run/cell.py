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
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import results
from ..base import contract, jsonio, lifetime
from ..base.errors import AccelgridError
from ..config.matrix import Cell
from . import console, preflight, suite_scope
from .cellenv import cell_env
from .console import PYTEST_TROUBLE, beside_note, print_timing
from .lock import cell_lock
from .passes import Pass, pass_args, plan_run, pytest_command, stages
from .selection import selection
from .supervise import append_logs, run_pytests

RUNS_KEPT = 20  # runs with a selection kept in results/<cell>/runs/ (the newest)


def run_cell(cell: Cell, python: str, root: Path, results_root: Path,
             pytest_args: Sequence[str] = (), workers: int | None = None,
             limit_s: float | None = None,
             finalized: Callable[[Cell, Path], None] | None = None,
             checked: preflight.Preflight | None = None) -> int:
    """Run ``cell`` with ``python``; returns pytest's exit code (124 past the cell limit).
    ``finalized`` gets the run's folder once its results are closed (the session step
    writes the op pages there); ``checked``: the run's preflight, when the caller made it
    (else made here, once). Raises :class:`CellBusy` when another run of the cell is in
    progress."""
    # Not resolved: a symlink planted as the cell folder is refused, never followed.
    cell_folder = Path(os.path.abspath(results_root / cell.name))
    # Everything the run reads is checked before the results folder is touched; nothing
    # it writes or deletes under results/ may be a symlink (it would act outside).
    for name in ("", contract.RUNS_DIR, contract.LOCK_FILE, contract.LAST_RUN_FILE):
        jsonio.refuse_symlink(cell_folder / name if name else cell_folder, results_root)
    checked = checked or preflight.check(cell, root)
    if checked.hardware.problem:
        raise AccelgridError(checked.hardware.problem)
    run_start = time.time()
    run_id = uuid.uuid4().hex
    chosen = selection(pytest_args)
    with cell_lock(cell_folder, cell.name, run_id) as lock_fds:
        folder = results.run_folder(cell_folder, run_id, partial=bool(chosen))
        if chosen:
            results.prune_runs(cell_folder, RUNS_KEPT - 1)
            folder.mkdir(parents=True)
        else:
            results.clear_for_run(cell_folder)
        results.write_last_run(cell_folder, run_id, folder, chosen)
        run = {"run_id": run_id, "pytest_args": list(pytest_args), "selection": chosen}
        env = cell_env(cell, root, folder, checked=checked, python=python)
        env.update({contract.RUN_ID: run_id,
                    contract.PYTEST_ARGS: json.dumps(jsonio.safe(run["pytest_args"])),
                    contract.SELECTION: json.dumps(jsonio.safe(chosen))})
        if chosen:
            print(f"accelgrid: {cell.name}: a selected run (pytest "
                  f"{jsonio.safe_text(' '.join(chosen))}): results in {folder}; "
                  f"the cell's full run stays in {cell_folder}", flush=True)
            scope = suite_scope.suite_paths(cell.suite_paths, pytest_args, root)
            if scope and len(scope) < len(cell.suite_paths):
                print(f"accelgrid: {cell.name}: collecting {', '.join(scope)} only (the "
                      "selection can take no test from the other suites)", flush=True)
        return _run_passes(cell, python, root, folder, env, pytest_args, workers, limit_s,
                           run, lock_fds, run_start, finalized)



def _run_passes(cell: Cell, python: str, root: Path, folder: Path, env: dict[str, str],
                pytest_args: Sequence[str], workers: int | None, limit_s: float | None,
                run: dict[str, object], keep_fds: tuple[int, ...],
                run_start: float | None = None,
                finalized: Callable[[Cell, Path], None] | None = None) -> int:
    run_start = time.time() if run_start is None else run_start
    limit = limit_s if limit_s is not None else cell.cell_minutes * 60
    deadline = time.monotonic() + limit
    planned = plan_run(cell, python, folder, root, pytest_args, workers, env)
    ids, how, serial, plan = planned.device_ids, planned.how, planned.serial, planned.passes
    if cell.device_type.visibility_var and how:
        print(f"accelgrid: {cell.name}: {len(ids)} {cell.device} devices: {how}", flush=True)
    # Children this process had before the cell (none, from the CLI): not the tests'.
    keep_children = set(lifetime.children(os.getpid())) if lifetime.become_subreaper() \
        else None
    if plan[0].name == contract.PASS_PINNED:
        beside = any(p.beside and not p.gated for p in plan)
        each = plan[0].workers // len(ids)
        print(f"accelgrid: {cell.name}: {len(ids)} {cell.device} devices ({', '.join(ids)}): "
              + ("one pinned worker each, " if each == 1 else f"{each} pinned workers each, ")
              + ("multi-device tests beside them" if beside else
                 "then multi-device tests" + (f" ({serial})" if serial else "")), flush=True)
    stop_reason: list[str] = []
    left_behind: list[int] = []   # pids of what the tests left running, ended
    rc = 0
    watch = console.Progress(cell.name, folder)
    log = folder / contract.PYTEST_LOG_FILE
    timed: list[dict[str, object]] = []
    for stage in stages(plan):
        jobs: list[tuple[Pass, list[str]]] = []
        for run_pass in stage:
            args = pass_args(run_pass, folder, root, pytest_args)
            if args is None:
                continue
            # The planned command, unless the pass got the tests an earlier one left.
            jobs.append((run_pass, planned.commands[plan.index(run_pass)]
                         if args == list(pytest_args) else
                         pytest_command(cell, python, folder, args, workers, root, run_pass)))
        if not jobs:
            continue
        left = deadline - time.monotonic()
        logs = [log if i == 0 else folder / f"pytest-{run_pass.name}.log"
                for i, (run_pass, _) in enumerate(jobs)]
        for (run_pass, cmd), pass_log in zip(jobs, logs, strict=True):
            n = run_pass.workers
            print(f"accelgrid: {cell.name}: running {run_pass.title} ({n} worker"
                  f"{'s' if n > 1 else ''}, time limit {console.elapsed(left)})"
                  + beside_note(run_pass, jobs[0][0]) + "; pytest's output goes to "
                  f"{console.shown_path(log)}", flush=True)
            with open(pass_log, "a", encoding="utf-8") as fh:
                fh.write(f"accelgrid: pass {run_pass.name} ({run_pass.title}): "
                         f"{jsonio.safe_text(' '.join(cmd))}\n")
        gates = [folder / f".gate-{run_pass.name}" if run_pass.gated else None
                 for run_pass, _ in jobs]
        ended = run_pytests(
            [(cmd, {**env, **dict(run_pass.env), contract.PASS: run_pass.name,
                    **({contract.GATE: str(gate)} if gate else {})}, pass_log)
             for (run_pass, cmd), pass_log, gate in zip(jobs, logs, gates, strict=True)],
            root, left, stop_reason, keep_fds, tick=watch.poll, ended=left_behind)
        for gate in gates:
            if gate is not None:
                gate.unlink(missing_ok=True)
        append_logs(log, logs[1:])
        # (a pass the run was stopped before starting has no entry)
        for (run_pass, _), (pass_rc, start, end, opened) in zip(jobs, ended, strict=False):
            if run_pass.empty_ok and pass_rc == 5:  # no multi-device (etc.) tests selected
                pass_rc = 0
            if pass_rc in PYTEST_TROUBLE:  # usage error, interrupted, internal error, none
                which = f" in {run_pass.title}" if len(jobs) > 1 else ""
                print(f"accelgrid: {cell.name}: pytest exited with {pass_rc} "
                      f"({PYTEST_TROUBLE[pass_rc]}){which}; the end of its output:",
                      file=sys.stderr, flush=True)
                for line in console.log_tail(log):
                    print(f"    {line}", file=sys.stderr, flush=True)
            rc = rc or pass_rc
            timed.append({"name": run_pass.name, "workers": run_pass.workers, "rc": pass_rc,
                          "beside": jobs[0][0].name if run_pass.beside else None,
                          "start": start, "end": end,
                          **({"gate": opened} if run_pass.gated else {})})
        if stop_reason:
            break
    # Daemons the tests left (double fork + setsid, out of every process group): ended
    # with their pass's cgroup where there is one, else now, at the cell's end, never after
    # it (this process adopted them: subreaper).
    if keep_children is not None:
        left_behind += lifetime.end_adopted(keep=keep_children)
    if left_behind:
        print(f"accelgrid: {cell.name}: ended {len(left_behind)} process(es) the tests left "
              f"running (pid {', '.join(map(str, left_behind[:5]))})", flush=True)
    reason = "; ".join(stop_reason) or f"pytest exited with {rc} before running it"
    full = jsonio.storage_failure(folder) if rc and not stop_reason else None
    if full is not None:  # the disk filled (or went read-only) under pytest: say that
        with contextlib.suppress(OSError):
            results.finalize(folder, str(jsonio.storage_problem(full)), run,
                             timing={"passes": timed, "run_start": run_start})
        raise full
    summary = results.finalize(folder, reason, run,
                               timing={"passes": timed, "run_start": run_start})
    if finalized is not None:
        finalized(cell, folder)
    watch.poll(final=True)   # suites whose last tests finalize marked
    records = results.last_outcomes(results.run_records(folder, str(run["run_id"]))[0])
    for line in console.summary_lines(summary, records, folder, log):
        print(f"accelgrid: {cell.name}: {line}", flush=True)
    print_timing(cell.name, summary)
    if stop_reason:
        print(f"accelgrid: {cell.name}: {reason}", file=sys.stderr, flush=True)
        return rc if rc > 0 else 128 + (-rc if rc < 0 else 15)
    return rc

