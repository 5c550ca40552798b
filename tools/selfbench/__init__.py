"""accelgrid's benchmarks of itself, run from a checkout: ``python -m tools.selfbench``.

- :mod:`.overhead`: a warm cell run against bare pytest, and env creation (uv, virtualenv)
- :mod:`.grid`: building and writing grids for a large synthetic matrix
- :mod:`.history`: the history store, a grid with history and the site on synthetic nights
- :mod:`.ops`: what op capture (``ACCELGRID_CAPTURE_OPS=1``) costs

They measure accelgrid, not a device, so they are not in the installed package (the
user-facing ``accelgrid bench devices`` and ``accelgrid bench offload`` are). Each
``run(...)`` prints its progress, writes its JSON/Markdown outputs and returns the report;
the options live in :mod:`.__main__`. docs/measured holds the committed figures.
"""
