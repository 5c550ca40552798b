"""``accelgrid ci render|check``: the workflow and tox configuration, from the matrix."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..base.errors import StaleFiles
from ..base.jsonio import read_json
from ..commands import ci
from ..commands import relay as relay_commands
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
    relay = actions.add_parser(
        "relay", parents=[common],
        help="PyTorch's cross-repository CI relay: read its event, report the grid to it",
        description="The workflow's side of PyTorch's CI relay (docs/guides/ci.md). Each command "
                    "prints its outputs as KEY=VALUE lines and appends them to "
                    "$GITHUB_OUTPUT when set.")
    steps = relay.add_subparsers(dest="step", required=True, metavar="STEP")
    p = steps.add_parser(
        "resolve", parents=[common], help="what a relayed event asks to test",
        description="Read a relayed repository_dispatch event (the file $GITHUB_EVENT_PATH "
                    "names, or its client_payload): run (true/false), why, event, delivery, "
                    "sha (the PyTorch commit), pr, base, torch (the nightly series whose "
                    "cells run), build. Exit 2 on an event the relay does not send.")
    p.add_argument("event", type=Path, help="the event JSON")
    p.set_defaults(func=_relay_resolve)
    p = steps.add_parser(
        "report", parents=[common], help="the callback's conclusion and test-results",
        description="From a grid folder's grid.json: conclusion (success only when every "
                    "planned test ran and none failed unexpectedly), verdict (one line, "
                    f"at most {relay_commands.STATUS_CHARS} characters), test_results "
                    "(JSON: counts, per cell, failures, known issues), and for a self-report "
                    "(--event schedule) delivery_id = the nightly torch's commit and "
                    "event_type. Exit 0 whatever the verdict: the outputs carry it.")
    p.add_argument("grid", type=Path, help="the folder holding grid.json (or the file)")
    p.add_argument("--event", default="", help="github.event_name of the run")
    p.set_defaults(func=_relay_report)


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


def _outputs(values: dict[str, str]) -> None:
    """KEY=VALUE lines on stdout, and into $GITHUB_OUTPUT (each value one line)."""
    lines = [f"{k}={' '.join(v.splitlines())}" for k, v in values.items()]
    print("\n".join(lines))
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write("".join(f"{line}\n" for line in lines))


def _relay_resolve(args: argparse.Namespace) -> int:
    event, why = read_json(args.event)
    if not isinstance(event, dict):
        raise relay_commands.RelayError(f"{args.event}: {why or 'not a JSON object'}")
    _outputs(relay_commands.resolve(event, matrix_of(args)).outputs())
    return 0


def _relay_report(args: argparse.Namespace) -> int:
    path = args.grid / "grid.json" if args.grid.is_dir() else args.grid
    grid, why = read_json(path)
    if not isinstance(grid, dict):
        grid, why = None, f"{path}: {why or 'not a JSON object'} (the grid job wrote no grid)"
    _outputs(relay_commands.report(grid, args.event, why or "").outputs())
    return 0
