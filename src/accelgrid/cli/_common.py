"""What several command groups share: the ``--matrix`` option and loading the matrix."""

from __future__ import annotations

import argparse

from ..config.matrix import DEFAULT_MATRIX, Matrix, load_matrix

__all__ = ["DEFAULT_MATRIX", "common_parser", "matrix_of"]


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
