"""Root conftest for the payload suites: the cell's device, flags and recording.

Everything lives in :mod:`accelgrid.testing.pytest_plugin`; it is inert unless a cell is active
(``ACCELGRID_CELL`` set by the runner), except for the ``device`` fixtures.
"""

pytest_plugins = ["accelgrid.testing.pytest_plugin"]
