"""What a cell's run is asked: one value, :class:`RunRequest`, the one door into
:func:`accelgrid.run.cell.run_cell` (and :func:`~accelgrid.run.cell.open_run`).

The request carries the run's preflight (:func:`accelgrid.run.preflight.check`): its
caller asks the host and reads the registry once, before anything is installed or
opened, and everything below (the run, its env, the cell's known issues) takes that
answer; nothing asks again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.model import Cell
from .preflight import Preflight


@dataclass(frozen=True)
class RunRequest:
    """One run of ``cell``: with ``python``, for the project at ``root``, its results
    under ``results_root/<cell>/`` (a shard's folder, for a shard run)."""

    cell: Cell
    python: str                     # the interpreter the run's pytest starts with
    root: Path                      # the project (its suites, registry, checkout)
    results_root: Path              # the run writes results_root/<cell>/
    preflight: Preflight            # made once, by the caller
    pytest_args: tuple[str, ...] = ()   # after `--`: a selection narrows the run
    workers: int | None = None      # ACCELGRID_WORKERS' count, else the plan's
    limit_s: float | None = None    # the cell's time limit; None: its cell_minutes
    # Called with the run's folder once its results are closed (the session step writes
    # the op pages there: run and report are siblings).
    finalized: Callable[[Cell, Path], None] | None = None

    def __post_init__(self) -> None:
        # A list from a caller (nox's posargs) compares and hashes as the tuple it is.
        object.__setattr__(self, "pytest_args", tuple(self.pytest_args))
