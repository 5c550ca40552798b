"""The command tree: each command group's module (:data:`GROUPS`) adds its commands,
parsed with the first ``--`` cut off for the command's passthrough (:func:`parse`).
"""

from __future__ import annotations

import argparse
import importlib

from .. import __version__
from ._common import DEFAULT_MATRIX, common_parser

# Command groups, in the order `accelgrid --help` lists them, with the commands each adds.
# Parsing a known command imports only its group (as pip's command table does): `accelgrid
# run` then loads no report, container or bench code (~0.1 s of a warm partial run). A
# test checks this table against what each group registers.
GROUPS: dict[str, tuple[str, ...]] = {
    "init": ("init",),
    "matrix": ("validate", "cells", "plan", "schema"),
    "run": ("run", "prune"),
    "shell": ("env", "shell"),
    "report": ("grid", "baseline", "ops", "hf-tests"),
    "history": ("history", "publish"),
    "issues": ("repro", "bisect"),
    "ci": ("ci",),
    "container": ("container",),
    "bench": ("bench",),
}

DESCRIPTION = """\
accelgrid: a reproducible test matrix for PyTorch device backends.

matrix.yaml declares devices (cpu, cuda, xpu, mps), torch versions with their package
pins, env-flag profiles and include/exclude rules; each combination is a cell
(`cpu-2.13`, `xpu-2.5-fallback-debug`). Cells run as nox sessions (`nox -s cpu-2.13`)
and leave results under results/<cell>/, which `accelgrid grid` turns into grids.
"""

EPILOG = """\
examples:
  accelgrid init --devices cpu,xpu       accelgrid in this repository: matrix, noxfile, CI
  accelgrid validate                     check matrix.yaml
  accelgrid cells --device xpu           list the xpu cells
  accelgrid plan xpu-2.5                 what that cell installs, sets and runs
  accelgrid run cpu-2.13 -- -k smoke     run a cell (via nox), pytest args after --
  accelgrid shell cpu-2.13 -- python -m pytest suites/smoke -k matmul
                                         one test inside the cell's env (env: its variables)
  accelgrid grid results/*               grids from results folders
  accelgrid hf-tests results/*           HF's own tests: per file, failures beside cuda/cpu

exit codes: 0 ok, 1 failed run / stale generated files / nothing found,
            2 invalid input, 3 regression against a baseline
"""


def command_word(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not a global option or its
    value), or None; None too when help is asked for first (``accelgrid -h run``)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word == "--matrix":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command tree: every group's commands, or only the group adding ``command``
    when a group does (help and errors for anything else list every command)."""
    parser = argparse.ArgumentParser(prog="accelgrid", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"accelgrid {__version__}")
    parser.add_argument("--matrix", default=DEFAULT_MATRIX,
                        help="the matrix file (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    groups = [g for g, commands in GROUPS.items() if command in commands] or list(GROUPS)
    for group in groups:
        importlib.import_module(f"{__package__}.{group}").register(sub, common)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; what follows the first ``--`` goes to the command's passthrough."""
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser(command_word(argv[:cut]))
    args = parser.parse_args(argv[:cut])
    passthrough = getattr(args, "passthrough", None)
    if cut < len(argv):
        if passthrough is None:
            parser.error(f"`--` arguments are not taken by `accelgrid {args.command}`")
        setattr(args, passthrough, argv[cut + 1:])
    elif passthrough is not None and getattr(args, passthrough, None) is None:
        setattr(args, passthrough, [])
    return args
