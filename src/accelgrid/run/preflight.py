"""Can this cell run here: the interpreter's torch, the device, its runtime and
hardware, the registry.

A run asks once (:func:`check`) and hands the answer down: the nox session's registration
checks the host (:func:`host_check`: it decides whether the session gets an env), the
session adds the registry and passes the :class:`Preflight` to
:func:`accelgrid.run.cell.run_cell`, which passes it to the cell's env
(:func:`accelgrid.run.cellenv.cell_env`) and the registry's entries for the cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config import known_issues
from ..config.model import Cell
from ..host import detect


@dataclass(frozen=True)
class HostCheck:
    """Whether this host can run a cell whatever gets installed: its device
    (:func:`accelgrid.host.detect.absent_reason`, asked by the caller, which knows the matrix's
    detection rule; ``ACCELGRID_SKIP_DETECT`` overrides it), its torch's runtime bundle
    (:func:`accelgrid.host.detect.runtime_problem`) and the hardware family and driver
    (:func:`accelgrid.host.detect.resolve_hardware`)."""

    runtime_problem: str | None
    hardware: detect.HardwareChoice
    absent: str | None = None     # why the device is not on this host, or None

    @property
    def problem(self) -> str | None:
        """The one line saying why the cell cannot run here, or None."""
        return self.runtime_problem or self.hardware.problem


@dataclass(frozen=True)
class Preflight:
    """A run's preflight: the host check and the project's registry (validated; None
    without one), computed once per run and handed down."""

    host: HostCheck
    registry: known_issues.Registry | None

    @property
    def hardware(self) -> detect.HardwareChoice:
        return self.host.hardware


def host_check(cell: Cell, env: Mapping[str, str] | None = None,
               absent: str | None = None) -> HostCheck:
    """The host's side of the preflight (no registry: a nox listing must not fail on it);
    ``absent``: the device's absence, as the caller found it."""
    return HostCheck(detect.runtime_problem(cell, env), detect.resolve_hardware(cell, env),
                     absent)


def check(cell: Cell, root: Path, env: Mapping[str, str] | None = None,
          host: HostCheck | None = None) -> Preflight:
    """The run's preflight: the registry validated first (raises ValidationFailed before
    anything is touched), then ``host`` or the host checked now."""
    registry = known_issues.registry_for_run(root)
    return Preflight(host or host_check(cell, env), registry)
