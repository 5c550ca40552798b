"""pytest's entry point for accelgrid (``pytest11`` in pyproject.toml): the cell plugin,
only in a cell run.

pytest imports this module in every project where accelgrid is installed, so it registers
:mod:`accelgrid.testing.pytest_plugin` only when the runner started the pytest
(``ACCELGRID_CELL`` set): a plain ``pytest`` anywhere else gets no fixture, marker, option
or hook of ours. The plugin is named by its module, as a conftest's ``pytest_plugins`` and
the runner's ``PYTEST_PLUGINS`` name it, so pytest registers it once whichever comes first.
"""

from __future__ import annotations

import os

from ..base import contract

PLUGIN = contract.PLUGIN

pytest_plugins = [PLUGIN] if os.environ.get(contract.CELL) else []
