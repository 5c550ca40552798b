"""``accelgrid run``: a cell through its nox session (or inside its container image)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ..base import contract
from ..base.errors import EXIT_INVALID
from ._common import matrix_of


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run", parents=[common], help="run a cell through its nox session",
        epilog="Arguments after -- go to pytest: accelgrid run cpu-2.13 --no-venv -- -x")
    p.add_argument("cell")
    p.add_argument("--no-venv", action="store_true",
                   help="use the current interpreter and its installed torch; install nothing")
    p.add_argument("--container", action="store_true",
                   help="run the cell inside its container image (accelgrid container run)")
    p.add_argument("--shard", metavar="K/N",
                   help="run shard K of N of the cell's tests (balanced by recorded "
                        "durations; results in results/shard-K-of-N/<cell>/, merged by the "
                        f"grid); the same as {contract.SHARD}=K/N nox -s CELL")
    p.set_defaults(func=_run, passthrough="pytest_args")


def _run(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    if args.shard is not None:
        from ..base import contract
        from ..base.errors import InvalidInput
        from ..results import shards

        try:
            shards.parse(args.shard)
        except shards.ShardError as exc:
            raise InvalidInput(f"--shard: {exc}") from None
        os.environ[contract.SHARD] = args.shard.strip()
    if args.container:
        from ..commands import containers

        return containers.run_named(matrix, args.cell, args.pytest_args)
    cell = matrix.cell(args.cell)
    argv = ["-f", str(matrix.root / "noxfile.py"), "-s", cell.name]
    if args.no_venv:
        argv.append("--no-venv")
    if args.pytest_args:
        argv += ["--", *args.pytest_args]
    return exit_code(nox(argv, matrix.root, matrix.nox_env))


# nox's own exit codes (nox.tasks) that are not a failed session: 2, the noxfile did not
# load; 3, no such session or the selection is invalid. Both are bad input to accelgrid
# (exit 2); 3 would otherwise read as a regression (accelgrid.base.errors).
NOX_INPUT_ERRORS = (2, 3)


def exit_code(nox_code: int) -> int:
    """accelgrid's exit code for a nox exit code: 0 and 1 (a session failed) as they are,
    nox's input errors as :data:`~accelgrid.base.errors.EXIT_INVALID`."""
    return EXIT_INVALID if nox_code in NOX_INPUT_ERRORS else nox_code


def nox(argv: list[str], root: Path, env: dict[str, str] | None = None) -> int:
    """``python -m nox ARGV`` in ``root``, in a process of its own, with ``env`` added to
    the environment; nox's exit code."""
    return subprocess.call([sys.executable, "-m", "nox", *argv], cwd=root,
                           env={**os.environ, **(env or {})})
