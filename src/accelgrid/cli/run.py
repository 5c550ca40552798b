"""``accelgrid run``: a cell through its nox session (or inside its container image)."""

from __future__ import annotations

import argparse
import subprocess
import sys

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
    p.set_defaults(func=_run, passthrough="pytest_args")


def _run(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    if args.container:
        from .. import containers

        return containers.run_named(matrix, args.cell, args.pytest_args)
    cell = matrix.cell(args.cell)
    cmd = [sys.executable, "-m", "nox", "-f", str(matrix.root / "noxfile.py"), "-s", cell.name]
    if args.no_venv:
        cmd.append("--no-venv")
    if args.pytest_args:
        cmd += ["--", *args.pytest_args]
    return subprocess.call(cmd, cwd=matrix.root)
