"""``python -m tools.selfbench overhead|grid|history|ops`` (from the checkout's root):
accelgrid's benchmarks of itself, with the options and exit codes ``accelgrid bench`` had.

Exit codes: 0 done (within the aims), 1 a median over its aim, 2 invalid input,
128 + N stopped by signal N.
"""

from __future__ import annotations

import argparse
import sys

from accelgrid.base.errors import AccelgridError
from accelgrid.base.redact import redact_text
from accelgrid.bench import Stopped
from accelgrid.cli._common import DEFAULT_MATRIX, common_parser, matrix_of

from . import grid, history, ops, overhead

PROG = "python -m tools.selfbench"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="accelgrid's benchmarks of itself: overhead (a cell run vs "
        "bare pytest, env creation), grid (grids for a large synthetic matrix), history "
        "(the history store on synthetic nights), ops (the cost of op capture).")
    parser.add_argument("--matrix", default=DEFAULT_MATRIX,
                        help="the matrix file (default: %(default)s)")
    common = common_parser()
    what = parser.add_subparsers(dest="what", required=True, metavar="BENCHMARK")
    raw = argparse.RawDescriptionHelpFormatter

    p = what.add_parser("overhead", parents=[common], formatter_class=raw,
                        description=overhead.__doc__,
                        help="warm cell runs (selected and whole) vs bare pytest, pair by pair")
    p.add_argument("--cell", default=overhead.DEFAULT_CELL)
    p.add_argument("--partial", default=overhead.DEFAULT_PARTIAL,
                   help="pytest arguments of the partial pairs (default: %(default)s; '' for "
                        "none)")
    p.add_argument("--partial-repeat", type=int, default=overhead.DEFAULT_PARTIAL_REPEAT,
                   help="partial pairs (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=overhead.DEFAULT_REPEAT,
                   help="pairs of the whole cell (default: %(default)s)")
    p.add_argument("--suites", default=None,
                   help="comma-separated test paths for the whole-cell pairs (default: the "
                        "cell's suites)")
    p.add_argument("--env-creation", action="store_true",
                   help="also time creating the cell's env with uv and virtualenv (minutes)")
    p.add_argument("--out", default=overhead.DEFAULT_OUT,
                   help="folder for bench-overhead.{json,md} (default: %(default)s; "
                        "docs/measured to update the committed figures)")
    p.set_defaults(func=_overhead)

    p = what.add_parser("grid", parents=[common], formatter_class=raw,
                        description=grid.__doc__.rstrip() + "\nExits 1 when the median "
                        "run is over ``--budget``. (--matrix is ignored.)\n",
                        help="grid build + write time for a large synthetic matrix")
    p.add_argument("--cells", type=int, default=grid.DEFAULT_CELLS)
    p.add_argument("--tests", type=int, default=grid.DEFAULT_TESTS)
    p.add_argument("--repeat", type=int, default=grid.DEFAULT_REPEAT,
                   help="timed runs (default %(default)s)")
    p.add_argument("--budget", type=float, default=grid.DEFAULT_BUDGET,
                   help="seconds the median run may take (default %(default)g)")
    p.add_argument("--out", default=grid.DEFAULT_OUT,
                   help="folder for bench-grid.json and .md (default: %(default)s; '' for "
                        "none; docs/measured to update the committed figures)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timed runs, profile one more and list its N costliest "
                        "functions (default 0: none)")
    p.set_defaults(func=_grid)

    p = what.add_parser("history", parents=[common], formatter_class=raw,
                        description=history.__doc__.rstrip() + "\nExits 1 when a "
                        "median is over its aim. (--matrix is ignored.)\n",
                        help="history add, grid with history and publish on synthetic nights")
    p.add_argument("--nights", type=int, default=history.DEFAULT_NIGHTS)
    p.add_argument("--cells", type=int, default=history.DEFAULT_CELLS)
    p.add_argument("--tests", type=int, default=history.DEFAULT_TESTS)
    p.add_argument("--window", type=int, default=history.DEFAULT_WINDOW)
    p.add_argument("--repeat", type=int, default=history.DEFAULT_REPEAT,
                   help="timed runs of each step (default %(default)s)")
    p.add_argument("--out", default=history.DEFAULT_OUT,
                   help="folder for bench-history.json and .md (default: %(default)s; '' "
                        "for none; docs/measured to update the committed figures)")
    p.set_defaults(func=_history)

    p = what.add_parser("ops", parents=[common], formatter_class=raw,
                        description=ops.__doc__,
                        help="runner wall time with and without op capture")
    p.add_argument("--cell", default=ops.DEFAULT_CELL)
    p.add_argument("--suites", default=",".join(ops.DEFAULT_SUITES),
                   help="comma-separated test paths (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=ops.DEFAULT_REPEAT)
    p.add_argument("--out", default=ops.DEFAULT_OUT, help="folder for bench-ops.{json,md}")
    p.set_defaults(func=_ops)

    return parser


def _overhead(args: argparse.Namespace) -> int:
    try:
        overhead.run(matrix_of(args), args.cell,
                     suites=args.suites.split(",") if args.suites else None,
                     partial=args.partial, partial_repeat=args.partial_repeat,
                     repeat=args.repeat, env_creation=args.env_creation, out=args.out)
    except Stopped as exc:   # SIGTERM / SIGINT: the shell's code for it
        return 128 + exc.signum
    return 0


def _grid(args: argparse.Namespace) -> int:
    report = grid.run(args.cells, args.tests, repeat=args.repeat, budget=args.budget,
                     out=args.out, profile=args.profile)
    return 0 if report["ok"] else 1


def _history(args: argparse.Namespace) -> int:
    report = history.run(args.nights, args.cells, args.tests, window=args.window,
                         repeat=args.repeat, out=args.out)
    return 0 if all(report["ok"].values()) else 1


def _ops(args: argparse.Namespace) -> int:
    ops.run(matrix_of(args), args.cell, suites=[p for p in args.suites.split(",") if p],
            repeat=args.repeat, out=args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one benchmark; its exit code. Errors are one line, as accelgrid's own."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args) or 0)
    except AccelgridError as exc:
        print(redact_text(f"{PROG} {args.what}: {exc}"), file=sys.stderr)
        return exc.return_code


if __name__ == "__main__":
    sys.exit(main())
