"""``accelgrid repro ID``: run an upstream issue's reproduction in the cells of its scope.

    accelgrid repro pytorch/ao#958                  # every cell in scope whose device is here
    accelgrid repro pytorch/ao#958 --cell cpu-2.13  # just this cell (in scope or not)
    accelgrid repro --list                          # the registry, with the cells in scope

Each cell runs through its nox session with pytest selecting the reproduction
(``suites/repro/test_<owner>_<repo>_<N>.py --upstream=ID``), so it gets the cell's
environment, flags and the registry like any run; results go to
``<results>/repro/<owner>-<repo>-<N>/<cell>/`` (``<results>``: $ACCELGRID_RESULTS_DIR or
``results/``), so a reproduction never replaces a cell's full results. One line per cell:
``cell → reproduces / fixed / not run (why)``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import results
from ..base import contract, outcomes, outputs
from ..base.errors import AccelgridError, InvalidInput
from ..base.text import one_line
from ..config import known_issues
from ..config.model import Cell, Matrix
from ..host import detect, install
from ..results.records import TestRecord
from ..run import preflight

REPRODUCES = "reproduces"
FIXED = "fixed"
NOT_RUN = "not run"
INCONCLUSIVE = "inconclusive"
ARROW = "→"

# Outcomes that show the bug (xfailed: the registry recognised its failure), and those
# that show correct behaviour (xpassed: the registry expected the bug, the test passed).
_SHOWS_BUG = (outcomes.XFAILED, outcomes.FAILED, outcomes.ERROR, outcomes.CRASHED)
_SHOWS_FIX = (outcomes.PASSED, outcomes.XPASSED)


@dataclass
class CellRun:
    """One nox run of a cell: its exit code, time, log and the records it left."""

    cell: str
    rc: int | None
    seconds: float
    folder: Path
    log: Path | None = None
    records: dict[str, TestRecord] = field(default_factory=dict)
    error: str | None = None   # why no test ran (device absent, env failed, ...)


def nox_command(matrix: Matrix, cell: Cell, pytest_args: list[str], *,
                envdir: str | None = None, reuse: bool = False, no_venv: bool = False
                ) -> list[str]:
    """``python -m nox -s CELL [...] -- ARGS``: the cell's own session, as a user runs it."""
    cmd = [sys.executable, "-m", "nox", "-f", str(matrix.root / "noxfile.py"), "-s", cell.name]
    if envdir:
        cmd += ["--envdir", envdir]
    if reuse:
        cmd.append("-R")  # reuse the env and skip installs: what makes bisects cheap
    if no_venv:
        cmd.append("--no-venv")
    return [*cmd, "--", *pytest_args]


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    picked = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(picked[-lines:])


def run_in_nox(matrix: Matrix, cell: Cell, pytest_args: list[str], out: Path, *,
               envdir: str | None = None, reuse: bool = False, no_venv: bool = False,
               verbose: bool = False, timeout: float | None = None) -> CellRun:
    """Run ``cell`` through nox with ``pytest_args``; results land in ``out/<cell>/``."""
    folder = out / cell.name
    reason = detect.absent_reason(cell.device, matrix.devices[cell.device].detect)
    if reason and not os.environ.get(contract.SKIP_DETECT):
        return CellRun(cell.name, None, 0.0, folder, error=reason)
    # The host's side of the run's preflight (the session in nox asks the registry).
    problem = preflight.host_check(cell).problem
    if not problem and not no_venv:
        problem = install.local_wheel(cell)[1]
    if problem:
        return CellRun(cell.name, None, 0.0, folder, error=problem.removeprefix(f"{cell.name}: "))
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{cell.name}.nox.log"
    cmd = nox_command(matrix, cell, pytest_args, envdir=envdir, reuse=reuse, no_venv=no_venv)
    env = {**os.environ, contract.RESULTS_DIR: str(out), **matrix.nox_env}
    t0 = time.monotonic()
    # A stale run must not pass for this one's: each run has a new id (last-run.json).
    before = results.last_run(folder)[0]
    with log.open("w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, cwd=matrix.root, env=env, timeout=timeout, check=False,
                                  stdout=None if verbose else fh, stderr=subprocess.STDOUT
                                  if not verbose else None)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
    seconds = time.monotonic() - t0
    run_id, run_folder = results.last_run(folder)
    run = CellRun(cell.name, rc, seconds, run_folder, log)
    if run_id is not None and run_id != before:  # a selected run: runs/<run-id>/
        records, _ = results.run_records(run_folder, run_id)
        run.records = results.last_outcomes(records)
    if not run.records:
        why = _tail(log) if not verbose else f"nox exited with {rc}"
        run.error = ("timed out" if rc is None else f"the session ran no test: {why}")
    return run


def verdict(records: Mapping[str, TestRecord]) -> tuple[str, str]:
    """(reproduces | fixed | not run | inconclusive, detail) from a reproduction's records."""
    if not records:
        return NOT_RUN, "no test ran"
    bug = [r for r in records.values() if r["outcome"] in _SHOWS_BUG]
    fix = [r for r in records.values() if r["outcome"] in _SHOWS_FIX]
    other = [r for r in records.values() if r not in bug and r not in fix]
    if bug:
        first = bug[0]
        detail = one_line(first.get("message") or first["outcome"])
        if len(records) > 1:
            detail = f"{len(bug)} of {len(records)} tests; {detail}"
        return REPRODUCES, detail
    if fix:
        counts = Counter(r["outcome"] for r in records.values())
        return FIXED, ", ".join(f"{n} {o}" for o, n in counts.items())
    if any(r["outcome"] == outcomes.TIMEOUT for r in other):
        return INCONCLUSIVE, "timed out"
    return NOT_RUN, one_line(other[0].get("message") or other[0]["outcome"])


def _slug(issue_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", issue_id).strip("-").lower()


def _present(matrix: Matrix, device: str) -> bool:
    return detect.absent_reason(device, matrix.devices[device].detect) is None


def _on_request(cell: Cell) -> str:
    return (f"torch from a local wheel ({cell.torch_wheel}): excluded from default runs; "
            f"run it with --cell {cell.name}")


def list_registry(matrix: Matrix, registry: known_issues.Registry) -> int:
    for issue in registry.issues.values():
        cells = [c for c in matrix.cells if issue.in_scope(c)]
        here = [c.name for c in cells if _present(matrix, c.device) and not c.manual]
        status = f"fixed in torch {issue.fixed_in}" if issue.fixed_in else issue.status
        print(f"{issue.id} [{status}] {issue.title}")
        print(f"    {issue.url}")
        names = [c.name + (" (local torch wheel: --cell only)" if c.manual else "")
                 for c in cells]
        print(f"    cells in scope: {', '.join(names) or 'none in this matrix'}")
        print(f"    runnable here: {', '.join(here) or 'none'}")
    return 0


def reproduce(matrix: Matrix, registry: known_issues.Registry, issue_id: str, *,
              cells: Sequence[str] | None = None, torch: Sequence[str] | None = None,
              envdir: str | None = None, reuse: bool = False, no_venv: bool = False,
              results_dir: Path | None = None, expect: str | None = None,
              dry_run: bool = False, verbose: bool = False,
              timeout: float | None = None) -> int:
    """Run ``issue_id``'s reproduction in the named cells (default: every cell in its
    scope), one line per cell; 0 when every cell ran (and gave ``expect``, if set)."""
    try:
        issue = registry.get(issue_id)
        picked = ([matrix.cell(name) for name in cells] if cells
                  else [c for c in matrix.cells if issue.in_scope(c)])
    except KeyError as exc:
        raise InvalidInput(str(exc.args[0]) if exc.args else str(exc)) from None
    if torch:
        picked = [c for c in picked if c.torch in torch]
    # Cells whose torch is a local wheel run only when named: listed, not run.
    on_request = [] if cells else [c for c in picked if c.manual]
    picked = [c for c in picked if c not in on_request]
    repro = known_issues.repro_file(issue.id)
    if not (matrix.root / repro).exists():
        raise InvalidInput(f"{issue.id} has no reproduction: {repro} is missing")
    if not picked and not on_request:
        raise AccelgridError(f"no cell of {matrix.path.name} is in the scope of {issue.id}; "
                             "name one with --cell")
    out = results_dir or results.results_root(matrix.root) / contract.REPRO_DIR / _slug(issue.id)
    if not dry_run:  # its kind, so a grid of results/* passes these runs over
        outputs.mark(out, "repro", issue=issue.id)
    pytest_args = [repro, f"--upstream={issue.id}"]
    print(f"{issue.id}: {issue.title}\n{issue.url}\nreproduction: {repro}; results in {out}/",
          flush=True)
    width = max(len(c.name) for c in [*picked, *on_request])
    for cell in on_request:
        print(f"{cell.name:<{width}} {ARROW} {NOT_RUN} ({_on_request(cell)})", flush=True)
    ran, failed_runs, unexpected = 0, 0, 0
    for cell in picked:
        note = "" if issue.in_scope(cell) else "  [outside the registry's scope]"
        if dry_run:
            cmd = nox_command(matrix, cell, pytest_args, envdir=envdir, reuse=reuse,
                              no_venv=no_venv)
            print(f"{cell.name:<{width}} {ARROW} would run: {' '.join(cmd[1:])}{note}")
            continue
        run = run_in_nox(matrix, cell, pytest_args, out, envdir=envdir, reuse=reuse,
                         no_venv=no_venv, verbose=verbose, timeout=timeout)
        if run.error:
            word, detail = NOT_RUN, run.error
            failed_runs += run.log is not None   # an absent device is not a failure
        else:
            word, detail = verdict(run.records)
            ran += word in (REPRODUCES, FIXED)
            if expect and word != expect:
                unexpected += 1
        took = f" [{run.seconds:.0f} s]" if run.log else ""
        print(f"{cell.name:<{width}} {ARROW} {word} ({detail}){took}{note}", flush=True)
    if dry_run:
        return 0
    return 0 if ran and not failed_runs and not unexpected else 1
