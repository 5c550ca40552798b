"""The results folder of a cell run, ``results/<cell>/``, written as the run goes, one
concept a module:

    folders.py      where results go, a run's folder and the files in it, last-run.json
    writing.py      tests.jsonl written: records appended whole, redacted and bounded
    cleaning.py     tests.jsonl read back: records with the types readers rely on
    markers.py      running/ and importing/: the test each worker, the file each process is in
    summary.py      what summary.json says: counts, incompleteness, timing per pass
    finish.py       a run's results closed however it ended (:func:`finalize`)

Passes of a run may write the folder at the same time (the all-devices pass runs beside
the pinned one): records are appended, and env.json, collected.json and the lists left for
later passes read, changed and written, under the folder's lock
(:func:`accelgrid.base.jsonio.locked`). Every record carries the run's id (``run_id``, also
in env.json and summary.json); a reader ignores records of another run.

Reading a whole folder back is :mod:`.cellresults`, env.json :mod:`.provenance`, the files'
types :mod:`.records`; JSON in and out :mod:`accelgrid.base.jsonio`. Stdlib only: the
cell's interpreter writes these through the pytest plugin.

What the six modules above name in their ``__all__`` is importable from here too
(``results.append_record``): star imports, since one line per name would not fit a face.
"""

from .cleaning import *  # noqa: F403
from .finish import *  # noqa: F403
from .folders import *  # noqa: F403
from .markers import *  # noqa: F403
from .summary import *  # noqa: F403
from .writing import *  # noqa: F403
