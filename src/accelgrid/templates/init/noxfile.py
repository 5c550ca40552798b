"""nox sessions from matrix.yaml (accelgrid init wrote this file): one per cell.

    nox -l                       # the cells
    nox -s cpu-SERIES            # a cell: its env, its pins, its suites, results/
    accelgrid grid results/*     # the grid
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

from accelgrid.base import contract
from accelgrid.base.errors import AccelgridError
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix, matrix_path

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
if os.environ.get(contract.ENVDIR):  # envs outside the checkout (ACCELGRID_ENVDIR)
    nox.options.envdir = os.environ[contract.ENVDIR]

try:
    MATRIX = load_matrix(matrix_path(Path(__file__).resolve().parent))
except AccelgridError as exc:  # one line per problem, as `accelgrid validate` prints them
    sys.exit(str(exc))

nox.options.sessions = sessions.register(MATRIX)
