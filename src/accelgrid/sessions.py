"""nox sessions from the matrix: one session per cell, plus the project sessions.

``noxfile.py`` calls :func:`register`. A cell session checks the device is present,
builds its env with uv (pip's configuration carried over), installs the cell's pins from
the right index, and hands over to :mod:`accelgrid.runner`. With ``--no-venv`` it installs
nothing and runs on the current interpreter, refusing a torch of another version.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox
from nox.virtualenv import PassthroughEnv

from . import contract, detect, install, results, runner
from .errors import AccelgridError
from .matrix import Cell, Matrix


def _python_in(session: nox.Session) -> str:
    if isinstance(session.virtualenv, PassthroughEnv):
        return sys.executable
    bin_dir = Path(session.bin)
    exe = bin_dir / ("python.exe" if os.name == "nt" else "python")
    return str(exe)


def run_cell_session(session: nox.Session, matrix: Matrix, cell: Cell) -> None:
    """The body of every cell session."""
    device = matrix.devices[cell.device]
    reason = detect.absent_reason(cell.device, device.detect)
    if reason and not os.environ.get(contract.SKIP_DETECT):
        session.error(f"{cell.name}: {reason}")
    python = _python_in(session)
    if isinstance(session.virtualenv, PassthroughEnv):
        mismatch = runner.torch_mismatch(cell, python)
        if mismatch:
            session.error(mismatch + " (--no-venv runs on the current interpreter)")
        session.log(f"{cell.name}: --no-venv, using {python} with its installed packages")
    else:
        plan = install.plan(cell, torch_index=os.environ.get(contract.TORCH_INDEX))
        problem = install.index_problem(plan.index)
        if problem:
            session.error(f"{cell.name}: {problem}")
        session.env.update(plan.env)
        for step in plan.steps:
            session.log(f"{cell.name}: installing {step.description}")
            session.install(*step.args)
    # session.run returns None under --install-only: the env is ready, run nothing.
    if session.run(python, "-c", "pass", silent=True, external=True) is None:
        return
    out = results.results_root(matrix.root)
    try:
        rc = runner.run_cell(
            cell, python, matrix.root, out, session.posargs,
            workers=int(os.environ[contract.WORKERS]) if os.environ.get(contract.WORKERS)
            else None,
        )
    except AccelgridError as exc:  # another run holds the cell: one line, no traceback
        session.error(str(exc))
    if rc != 0:
        folder = results.last_run(out / cell.name)[1]
        session.error(f"{cell.name}: pytest exited with {rc} (results in {folder})")


def _describe(cell: Cell) -> str:
    return (f"{cell.device} / torch {cell.pins['torch']} / profile {cell.profile}: "
            f"{', '.join(cell.suites)}")


def register(matrix: Matrix) -> list[str]:
    """Register a nox session per cell; returns the sessions a plain ``nox`` runs."""
    for cell in matrix.cells:

        def _session(session: nox.Session, _cell: Cell = cell) -> None:
            run_cell_session(session, matrix, _cell)

        _session.__doc__ = _describe(cell)
        nox.session(name=cell.name, python=cell.python, venv_backend="uv",
                    tags=list(cell.tags), default=False)(_session)
    present = detect.present_devices({d: matrix.devices[d] for d in matrix.axes["device"]
                                      if d in matrix.devices})
    return [c.name for c in matrix.cells
            if c.device in present and c.is_default_torch and c.profile == matrix.default_profile]


def prepared_python(root: Path, cell: Cell, env: dict[str, str] | None = None) -> str:
    """Create or refresh ``cell``'s nox env (``--install-only``) and return its python."""
    import subprocess

    cmd = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", cell.name,
           "--install-only"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AccelgridError(f"{cell.name}: preparing its env failed:\n{proc.stderr[-2000:]}")
    # nox names env folders after the session, with '.' replaced.
    return str(root / ".nox" / cell.name.replace(".", "-") / "bin" / "python")
