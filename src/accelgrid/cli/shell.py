"""``accelgrid env`` and ``accelgrid shell``: a cell's env and the variables a run of it
gives its tests, for running one test by hand (:mod:`accelgrid.commands.cellshell`)."""

from __future__ import annotations

import argparse
import json

from ..commands import cellshell
from ._common import matrix_of

NO_VENV_HELP = ("as `nox --no-venv -s CELL` runs it: this interpreter and its installed "
                "packages, no env activated (its torch must be the cell's)")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "env", parents=[common], help="print a cell's env and the variables a run sets",
        description="Print the cell's env (its folder and python) and the variables a run "
                    "of the cell gives its tests, as export lines for eval, then the lines "
                    "activating the env.",
        epilog='eval "$(accelgrid env cpu-2.13)" && python -m pytest suites/smoke -k matmul')
    p.add_argument("cell")
    p.add_argument("--json", action="store_true",
                   help="as JSON: env_dir, python, results, pass, set, unset")
    p.add_argument("--no-venv", action="store_true", help=NO_VENV_HELP)
    p.set_defaults(func=_env)

    p = sub.add_parser(
        "shell", parents=[common], help="a shell (or a command after --) inside a cell's env",
        description="Start $SHELL, or the command after --, in the cell's env with the "
                    "variables a run of the cell gives its tests; its exit status is the "
                    "command's.",
        epilog="accelgrid shell cpu-2.13 -- python -m pytest suites/smoke -k matmul")
    p.add_argument("cell")
    p.add_argument("--no-venv", action="store_true", help=NO_VENV_HELP)
    p.set_defaults(func=_shell, passthrough="argv")


def _env(args: argparse.Namespace) -> int:
    found = cellshell.cell_env(matrix_of(args), args.cell, no_venv=args.no_venv)
    if args.json:
        print(json.dumps(found.as_dict(), indent=2))
    else:
        print(found.exports(), end="")
    return 0


def _shell(args: argparse.Namespace) -> int:
    found = cellshell.cell_env(matrix_of(args), args.cell, no_venv=args.no_venv)
    return cellshell.run_in(found, args.argv)
