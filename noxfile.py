"""nox sessions for accelgrid: one per matrix cell (``nox -l``), plus ``grid``.

    nox -s cpu-2.13                 # a cell: env with uv, pinned installs, suites, results/
    nox -s xpu-2.5 -- -k memory     # arguments after -- go to pytest
    nox -t xpu                      # every xpu cell
    nox --no-venv -s cuda-2.11      # current interpreter, no installs (GPU boxes)
    nox                             # cells whose device is here, at the default torch
    nox -s grid                     # grids from results/
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))  # accelgrid itself need not be installed here

from accelgrid import results  # noqa: E402
from accelgrid.base import contract  # noqa: E402
from accelgrid.base.errors import AccelgridError  # noqa: E402
from accelgrid.base.redact import redact_text  # noqa: E402
from accelgrid.commands import sessions  # noqa: E402
from accelgrid.config.matrix import load_matrix, matrix_path  # noqa: E402

nox.needs_version = ">=2026.7.11"  # pyproject.toml: the oldest nox tested
nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
if os.environ.get(contract.ENVDIR):  # envs outside the checkout (venvs.env_dir agrees)
    nox.options.envdir = os.environ[contract.ENVDIR]

try:
    # `accelgrid --matrix F run CELL` names F in ACCELGRID_MATRIX: the sessions are F's cells.
    MATRIX = load_matrix(matrix_path(ROOT))
except AccelgridError as exc:
    # One line per problem (FILE:LINE: key: message), as `accelgrid validate` prints them.
    sys.exit(redact_text(str(exc)))

nox.options.sessions = sessions.register(MATRIX) + ["grid"]


def _container_session(name: str):
    def _container(session: nox.Session) -> None:
        from accelgrid.commands import containers

        try:
            code = containers.run_named(MATRIX, name, session.posargs)
        except AccelgridError as exc:
            session.error(str(exc))
        if code:
            session.error(f"the cell {name} in its container exited with {code}")

    _container.__doc__ = f"{name} inside its container image (accelgrid container run)"
    return _container


# container-<cell>: posargs still go to pytest, so the container is a session of its own.
for _cell in MATRIX.cells:
    if _cell.container_family:
        nox.session(name=f"container-{_cell.name}", python=False,
                    tags=["container", _cell.device], default=False)(
            _container_session(_cell.name))


@nox.session(python=False, tags=["grid"])
def grid(session: nox.Session) -> None:
    """Grids (Markdown, HTML, JSON) from every cell under results/."""
    # Here, not at the top: every cell session loads this file, and the grid renderer
    # (jinja2, the report model) is not what they need.
    from accelgrid import report

    out = results.results_root(ROOT)
    args = session.posargs or [str(p) for p in sorted(out.glob("*/")) if p.is_dir()]
    if not args:
        session.error(f"no results in {out} yet: run a cell first, e.g. nox -s cpu-2.13")
    try:
        made = report.grid([Path(a) for a in args], out,
                           step_summary=os.environ.get("GITHUB_STEP_SUMMARY"))
        for note in made.model["notes"]:
            session.warn(f"note: {note}")
        for line in made.lines():
            session.log(line)
        made.check()
    except AccelgridError as exc:
        session.error(str(exc))
