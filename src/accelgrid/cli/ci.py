"""``accelgrid ci render|check``: the workflow and tox configuration, from the matrix."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..base.errors import StaleFiles
from ..commands import ci
from ..commands.actions import MAX_ANNOTATIONS
from ._common import matrix_of


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "ci", parents=[common],
        help="render the GitHub Actions workflow and tox config from the matrix",
        description="The GitHub Actions workflow and the tox configuration, rendered from "
                    f"the matrix: {', '.join(ci.OUTPUTS)}.")
    group.add_argument("--root", type=Path,
                       help="where the files live (default: the matrix file's folder)")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("render", parents=[common], help="write the files")
    p.set_defaults(func=_render)
    p = actions.add_parser("check", parents=[common],
                           help="exit 1 with a diff when the files differ from the matrix")
    p.set_defaults(func=_check)
    p = actions.add_parser(
        "summary", parents=[common],
        help="a cell job's step summary and ::error annotations (GitHub Actions)",
        description="Append each cell's step summary (counts, what went wrong, why tests "
                    "did not run) to $GITHUB_STEP_SUMMARY and print an ::error annotation "
                    f"per test that went wrong (at most {MAX_ANNOTATIONS} per cell) when "
                    "GITHUB_ACTIONS=true; elsewhere the summary goes to stdout. Exit 0: "
                    "the cell's own step says whether it failed.")
    p.add_argument("results", nargs="+", type=Path,
                   help="results/<cell>/ folders, or folders holding them")
    p.set_defaults(func=_summary)


def _render(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    files = ci.render(matrix)
    root = args.root or matrix.root
    changed = ci.write(files, root)
    for rel in files:
        print(f"{rel}: {'written' if root / rel in changed else 'unchanged'}")
    return 0


def _check(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    files = ci.render(matrix)
    diffs = ci.stale(files, args.root or matrix.root)
    if not diffs:
        print(f"{', '.join(files)}: up to date with {args.matrix}")
        return 0
    for diff in diffs.values():
        sys.stdout.write(diff)
    raise StaleFiles(f"{', '.join(diffs)} out of date with {args.matrix}; "
                     "run `accelgrid ci render`")


def _summary(args: argparse.Namespace) -> int:
    from ..commands import actions

    actions.report(args.results)
    return 0
