"""The head start: a warm selected run's pytest started before nox has checked the env
(``accelgrid run CELL -- ARGS``), held at its gate until the cell's session takes it or
ends it. docs/guides/running.md gives the measured gain.

:mod:`.prestart` opens the run ahead of its session and hands it over (``take``) or ends
it (``cancel``); :mod:`.relaunch` starts the same run again at the command's first
moment, from the launch its last session took. Reached from three places only (tests/
run/test_headstart_fence.py): the command's entry (``accelgrid.cli.entry``: the early
launch), ``accelgrid run`` (``accelgrid.cli.run``: the run started ahead) and the cell's
session (``accelgrid.commands.sessions``: taken, or ended once the env changes).

Nothing is imported here: the early launch loads only what it needs.
"""
