"""The history store and the published site: ``accelgrid history add|show``, ``publish``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from ..base import contract
from ..base.errors import AccelgridError
from ..results.cellresults import require_runs

HISTORY_DESCRIPTION = f"""\
The history: every cell run's results in one SQLite database (default
results/history.sqlite, or ${contract.HISTORY}; schema in docs/reference/history.md), so
grids can say what changed since the previous run, since when a test fails and which tests
are flaky.

  accelgrid history add results/*            add runs (idempotent by run id)
  accelgrid history show                     cells and their runs
  accelgrid grid results/* --history         add, then a grid with the history
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from ..results.history import DEFAULT_DB

    group = sub.add_parser("history", parents=[common], help="the history of runs (SQLite)",
                           description=HISTORY_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    db_help = f"the history database (default: ${contract.HISTORY} or {DEFAULT_DB})"
    p = actions.add_parser("add", parents=[common], help="add cell runs to the history")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--db", help=db_help)
    p.set_defaults(func=_add)
    p = actions.add_parser("show", parents=[common], help="the cells and runs it holds")
    p.add_argument("cell", nargs="?", help="only this cell's runs")
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(func=_show)

    from ..report.site import DESCRIPTION as SITE_DESCRIPTION
    from .report import add_history_options

    p = sub.add_parser("publish", parents=[common],
                       help="a static site (GitHub Pages) from results and their history",
                       description=SITE_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--out", required=True, metavar="SITE", help="the site's folder")
    p.add_argument("--baseline", metavar="DIR", help="compare with DIR/<cell>.json")
    add_history_options(p)
    p.set_defaults(func=_publish)


def _add(args: argparse.Namespace) -> int:
    from ..results.history import open_store

    given = require_runs([Path(p) for p in args.results])  # a mistyped path adds nothing
    with open_store(args.db) as store:
        done, notes = store.add(given)
        total = len(store.cells())
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for a in done:
        if a.status == "skipped":
            print(f"{a.cell}: not added: {a.why}", file=sys.stderr)
        else:
            print(f"{a.cell}: run {a.run_id}: {a.status} ({a.tests} tests)")
    print(f"history {store.path}: {total} cells")
    if not done:
        raise AccelgridError("no results folders found in " + " ".join(args.results))
    if all(a.status == "skipped" for a in done):
        raise AccelgridError("nothing added: every folder was unusable")
    return 0


def _show(args: argparse.Namespace) -> int:
    from ..results.history import open_store

    with open_store(args.db, create=False) as store:
        cells = [args.cell] if args.cell else store.cells()
        runs = {c: store.runs_of(c) for c in cells}
    if args.cell and not runs[args.cell]:
        raise AccelgridError(f"history {store.path}: no runs of {args.cell}")
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    for cell, rs in runs.items():
        print(f"{cell}: {len(rs)} runs" + (f", latest {rs[-1]['start']}" if rs else ""))
        if args.cell:
            for r in rs:
                print(f"  {r['start']}  {r['run_id']}  commit {str(r['commit_sha'])[:12]}  "
                      f"torch {r['torch_build']}  {r['total']} tests {r['counts']}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from ..base.errors import InvalidInput
    from ..base.lifetime import Stopped, stoppable
    from ..report import site
    from .report import expected_cells

    if args.window < 1:
        raise InvalidInput("--window must be at least 1")
    given = require_runs([Path(p) for p in args.results])  # before anything is written
    try:
        with stoppable():  # SIGTERM too: the temporary site is removed, the old one kept
            made = site.publish(given, Path(args.out),
                                history_db=Path(args.history) if args.history else None,
                                baseline_dir=Path(args.baseline) if args.baseline else None,
                                expect=expected_cells(args), window=args.window)
    except Stopped as exc:  # the shell's code for the signal: 130 SIGINT, 143 SIGTERM
        print(f"accelgrid publish: stopped by {signal.Signals(exc.signum).name}; "
              f"{args.out} holds the previous site or the whole new one", file=sys.stderr)
        return 128 + exc.signum
    for line in made.lines():
        print(line)
    return 0
