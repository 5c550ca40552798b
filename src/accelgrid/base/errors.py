"""The one error type of accelgrid, and the exit code each kind of failure maps to.

Library code raises; ``accelgrid.cli`` catches :class:`AccelgridError` once and exits with
its ``return_code`` (as cibuildwheel's ``FatalError`` does), so the codes are defined here
and nowhere else:

  1  stale generated files (``accelgrid ci check``) or nothing to report
  2  invalid input: a bad matrix, registry, cell name, option or results folder
  3  a regression against a baseline (CI gates on it)
"""

from __future__ import annotations

EXIT_STALE = 1
EXIT_INVALID = 2
EXIT_REGRESSION = 3


class AccelgridError(Exception):
    """A failure the user can act on; ``str()`` is the message to print (no traceback)."""

    return_code: int = 1

    def __init__(self, message: str = "", *, return_code: int | None = None) -> None:
        super().__init__(message)
        if return_code is not None:
            self.return_code = return_code


class InvalidInput(AccelgridError):
    """Bad input: a file, an option or a name that does not exist."""

    return_code = EXIT_INVALID


class Regression(AccelgridError):
    """Results got worse than a baseline expects."""

    return_code = EXIT_REGRESSION


class StaleFiles(AccelgridError):
    """Generated files differ from what the matrix renders."""

    return_code = EXIT_STALE


class UnknownName(InvalidInput, KeyError):
    """A cell, device or issue name that does not exist (still a KeyError for lookups)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
