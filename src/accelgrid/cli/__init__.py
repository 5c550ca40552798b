"""The ``accelgrid`` command line (also ``python -m accelgrid``): one argparse tree.

:mod:`.entry` is the command's door (:func:`main`): its first moments (Ctrl-C said in one
line, a warm run's pytest started at once) before anything heavy loads, then the parse
and the handler, and the exit code. :mod:`.parser` is the tree: each command group is a
module of this package with ``register(sub, common)``, which adds its subcommands and
sets ``func`` (a handler ``(args) -> int``) on each. Handlers call library functions;
library code raises :class:`~accelgrid.base.errors.AccelgridError`, caught once in
:func:`main`, whose ``return_code`` is the exit code.

Arguments after the first ``--`` belong to the chosen command when it declares a
``passthrough`` (``accelgrid run CELL -- -k ops`` hands ``-k ops`` to pytest); they are
never scanned for command words.

Only :mod:`.entry` is imported here: importing this package loads nothing heavy, so the
command's first moments come before argparse, accelgrid and the matrix.
"""

from .entry import main

__all__ = ["main"]
