"""What several command groups share: the ``--matrix`` option and loading the matrix."""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import Callable

from ..base.lifetime import Stopped, stoppable
from ..config.matrix import DEFAULT_MATRIX, load_matrix
from ..config.model import Matrix

__all__ = ["DEFAULT_MATRIX", "common_parser", "matrix_of", "quick_exit", "writes_a_set"]

Handler = Callable[[argparse.Namespace], int]


def writes_a_set(handler: Handler) -> Handler:
    """``handler`` (a command that writes a set of files: base.outputs) stopped by
    SIGTERM/SIGINT cleanly: the files it was writing are removed, one line, exit 128 +
    the signal's number (the old set stays, or the whole new one when the stop came
    while it was being swapped in)."""
    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            with stoppable():
                return handler(args)
        except Stopped as exc:
            name = " ".join(w for w in (args.command, getattr(args, "action", None),
                                        getattr(args, "what", None)) if w)
            # As main says it for any command: Ctrl-C "interrupted", else the signal.
            said = ("interrupted" if exc.signum == signal.SIGINT
                    else f"stopped by {signal.Signals(exc.signum).name}")
            print(f"accelgrid {name}: {said}", file=sys.stderr)
            return 128 + exc.signum
    run.handles_stops = True  # type: ignore[attr-defined]  # read by main
    return run


def quick_exit(handler: Handler) -> Handler:
    """Mark a command whose process may end without the interpreter's teardown once it
    returned (main's ``_exit_now``): ``accelgrid run``, where tearing down nox, accelgrid
    and the matrix is 0.04-0.06 s of a 2-3 s warm selected run here."""
    handler.quick_exit = True  # type: ignore[attr-defined]  # read by main
    return handler


def common_parser() -> argparse.ArgumentParser:
    """A parent parser: ``--matrix`` is accepted after the command too
    (``accelgrid ci check --matrix m.yaml``); the top-level option sets the default."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--matrix", default=argparse.SUPPRESS,
                        help=f"the matrix file (default: {DEFAULT_MATRIX})")
    return parent


def matrix_of(args: argparse.Namespace) -> Matrix:
    """The matrix named by ``--matrix`` (raises ValidationFailed, an InvalidInput)."""
    return load_matrix(args.matrix)
