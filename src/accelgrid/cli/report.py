"""Reports from results folders: ``accelgrid grid``, ``baseline``, ``ops build|grid|predict``."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from .. import ops as ops_model
from .. import report
from ..base import contract, outcomes
from ..base.errors import AccelgridError, InvalidInput
from ..base.jsonio import dumps
from ..report import compare, ops_pages
from ..results.cellresults import require_runs
from ._common import matrix_of, writes_a_set

BASELINE_DESCRIPTION = """\
Baselines: the expected outcome of every test per cell, kept in baselines/<cell>.json.
`accelgrid grid --baseline baselines RESULTS...` compares each cell that has one with it
and exits 3 on any regression, so CI can gate on it.
"""

OPS_DESCRIPTION = f"""\
Op coverage from results/<cell>/ops-raw/ (runs with {contract.CAPTURE_OPS}=1, e.g. the
op-capture, fallback-debug and fallback-survey profiles).

  accelgrid ops build results/cpu-2.13          ops.json, ops.md, ops.html in the folder
  accelgrid ops grid results/* --out results    ops-grid.md/.html/.json: op x cell, when
                                                each op stopped falling back, and an xpu
                                                cell's observed beside predicted statuses
  accelgrid ops predict docs/cuda/ops-cuda-2.11.json
                                                ops-predicted.md/.html/.json: those ops
                                                predicted per XPU release (no GPU needed)
"""

PREDICT_DESCRIPTION = """\
Predict how a cell's captured ops would run on XPU, per torch release, from
intel/torch-xpu-ops' registrations (its kernels and CPU-fallback list per release branch)
and PyTorch's own (XPU keys, composites, structured delegates per release), shipped with
accelgrid: native, decomposed, fallback, missing, routed: cpu / routed: cuda (the
capturing device called its own op; the op XPU calls is predicted) or unknown.
Writes ops-predicted.md/.html/.json (per-series counts, the op x series view of where each
op stopped falling back or being missing, the ops that would not run per release) and
prints the counts. Predicted, not observed: it cannot see runtime routing or driver bugs.

  accelgrid ops predict docs/cuda/ops-cuda-2.11.json            the matrix's xpu series
  accelgrid ops predict results/cpu-2.13-op-capture --series 2.5 --series 2.6
  accelgrid ops predict results/cuda-2.11-op-capture --all-series --json
"""


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("grid", parents=[common],
                       help="grids (grid.md/.html/.json) from results folders")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--out", default="results", help="where to write the grids (%(default)s)")
    p.add_argument("--baseline", metavar="DIR",
                   help="compare with DIR/<cell>.json; exit 3 on any regression")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="exit 0 even where a run recorded less than it collected "
                        "(collected.json against tests.jsonl; else exit 1: "
                        "docs/reference/results.md)")
    p.add_argument("--allow-lost", action="store_true",
                   help="exit 0 even where a baseline's test has no record in its column "
                        "(a lost test; else exit 3: docs/reference/results.md)")
    add_history_options(p)
    p.set_defaults(func=writes_a_set(_grid))
    _register_baseline(sub, common)
    _register_ops(sub, common)
    p = sub.add_parser("hf-tests", parents=[common],
                       help="HF's own tests (suites/hf_tests): counts per file, failures with "
                            "the reference cell's outcome (cuda, else cpu), ops tables")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--out", default="results", help="where to write hf-tests.md/.json "
                                                    "(%(default)s)")
    p.set_defaults(func=writes_a_set(_hf_tests))


def _register_baseline(sub: argparse._SubParsersAction, common: argparse.ArgumentParser
                       ) -> None:
    group = sub.add_parser("baseline", parents=[common],
                           help="update or show the expected outcomes per cell",
                           description=BASELINE_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    dir_help = f"baselines folder (default: {compare.DEFAULT_DIR}/ beside --matrix)"

    p = actions.add_parser("update", parents=[common],
                           help="write baselines/<cell>.json from results folders")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (an artifacts dir)")
    p.add_argument("--dir", help=dir_help)
    p.add_argument("--cell", action="append", help="only this cell (repeatable)")
    p.add_argument("--add-new", action="store_true",
                   help="add only the tests the baseline does not have (new tests), from any "
                        "run of the cell, a selected one (nox -s CELL -- -k NEW) included; "
                        "every entry the baseline has stays as it is")
    p.add_argument("--keep-missing", action="store_true",
                   help="keep the baseline's entries of tests the results do not have (a "
                        "selected run keeps them anyway); default: the results replace the "
                        "baseline")
    p.add_argument("--allow-partial", action="store_true",
                   help="also use partial results: a run that did not finish, has unreadable "
                        "parts or ran a selection (-k, a path, -x; --add-new needs no flag "
                        "for a selection)")
    p.set_defaults(func=writes_a_set(_baseline_update))

    p = actions.add_parser("show", parents=[common],
                           help="a cell's baseline: counts and tests not expected to pass")
    p.add_argument("cell")
    p.add_argument("--dir", help=dir_help)
    p.add_argument("--json", action="store_true", help="print {nodeid: outcome}")
    p.set_defaults(func=_baseline_show)

    p = actions.add_parser("list", parents=[common], help="the cells that have a baseline")
    p.add_argument("--dir", help=dir_help)
    p.set_defaults(func=_baseline_list)


def _register_ops(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("ops", parents=[common],
                           help="op coverage: capture, classify and grid aten ops per cell",
                           description=OPS_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="what", required=True, metavar="ACTION")
    p = actions.add_parser("build", parents=[common],
                           help="ops.json/.md/.html for each results/<cell>/ given")
    p.add_argument("results", nargs="+", help="results/<cell>/ folders")
    p.set_defaults(func=writes_a_set(_ops))
    p = actions.add_parser("grid", parents=[common],
                           help="op x cell view from results folders (builds each cell's too)")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, each read at its latest capture (a selected "
                        "run's runs/<id>/ too); plain files (results/*) are passed over")
    p.add_argument("--out", default="results",
                   help="where to write ops-grid.* (%(default)s)")
    p.set_defaults(func=writes_a_set(_ops))
    p = actions.add_parser("predict", parents=[common],
                           help="predict captured ops per XPU release (ops-predicted.*)",
                           description=PREDICT_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="RESULTS_OR_OPS_JSON",
                   help="a results/<cell>/ folder (its latest capture: ops-raw/ or "
                        "ops.json, a selected run's under runs/<id>/ too), or an ops.json; "
                        "several are merged (of several, plain files that are no ops.json "
                        "are passed over)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--series", action="append", metavar="X.Y",
                       help="an xpu torch series (repeatable; default: the matrix's xpu "
                            "cells' series)")
    which.add_argument("--all-series", action="store_true",
                       help="every series with torch-xpu-ops data (2.4 on, with the seed's "
                            "table for 2.4)")
    p.add_argument("--out", metavar="DIR",
                   help="where to write ops-predicted.* (default: beside the one input; "
                        "results/ for several)")
    p.add_argument("--json", action="store_true",
                   help="print ops-predicted.json instead of the counts")
    p.set_defaults(func=writes_a_set(_ops_predict))


# --- grid ------------------------------------------------------------------------------

def add_history_options(p: argparse.ArgumentParser) -> None:
    """``--history``, ``--window`` and ``--expect`` (grid and publish)."""
    from ..report.history import DEFAULT_WINDOW
    from ..results.history import DEFAULT_DB

    p.add_argument("--history", metavar="DB", nargs="?", const=DEFAULT_DB,
                   default=os.environ.get(contract.HISTORY) or None,
                   help="add the results to this history database and show it: strips, "
                        "since the previous run, since when a test fails, flaky tests "
                        f"(no DB: {DEFAULT_DB}; default: ${contract.HISTORY} when set, "
                        "else no history; docs/reference/history.md)")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, metavar="N",
                   help="runs per cell the history shows (%(default)s)")
    p.add_argument("--expect", action="append", metavar="CELLS",
                   help="cells that must have results (comma-separated names, 'matrix', "
                        f"'baselines' or @FILE; repeatable; default: ${contract.EXPECT}); "
                        "one without results is a lost column and the gate exits 3")


def expected_cells(args: argparse.Namespace) -> list[str] | None:
    """The cells ``--expect`` names (None without it)."""
    if not args.expect and os.environ.get(contract.EXPECT):
        args.expect = [os.environ[contract.EXPECT]]  # the workflow's grid job sets it
    if not args.expect:
        return None
    from ..report import expect

    words = {w.strip() for spec in args.expect for w in spec.split(",")}
    cells = [c.name for c in matrix_of(args).cells] if "matrix" in words else None
    baselines = None
    if "baselines" in words and getattr(args, "baseline", None):
        baselines = [p.stem for p, _, _ in compare.entries(Path(args.baseline))]
    return expect.parse(args.expect, cells, baselines)


def _grid(args: argparse.Namespace) -> int:
    if args.window < 1:
        raise InvalidInput("--window must be at least 1")
    given = require_runs([Path(p) for p in args.results])  # before anything is written
    made = report.grid(given, Path(args.out),
                       baseline_dir=Path(args.baseline) if args.baseline else None,
                       step_summary=os.environ.get("GITHUB_STEP_SUMMARY"),
                       history_db=Path(args.history) if args.history else None,
                       expect=expected_cells(args), window=args.window)
    for added in made.added or []:
        if added.status == "skipped":
            print(f"note: history: {added.cell} not added: {added.why}", file=sys.stderr)
    for note in made.model["notes"]:
        print(f"note: {note}", file=sys.stderr)
    for line in made.lines():
        print(line)
    if made.incomplete and args.allow_incomplete:
        print("note: --allow-incomplete: accepted " + "; ".join(made.incomplete),
              file=sys.stderr)
    if made.lost_tests and args.allow_lost:
        print(f"note: {len(made.lost_tests)} lost tests allowed by --allow-lost",
              file=sys.stderr)
    made.check(allow_incomplete=args.allow_incomplete, allow_lost=args.allow_lost)
    return 0


def _hf_tests(args: argparse.Namespace) -> int:
    from ..report import hf_tests
    model, paths = hf_tests.write([Path(p) for p in args.results], Path(args.out))
    for note in model["notes"]:
        print(f"note: {note}", file=sys.stderr)
    cells = [c for c in model["cells"] if c["files"]]
    if not cells:
        raise AccelgridError("no suites/hf_tests records in " + " ".join(args.results))
    for c in cells:
        counts = sum((Counter(f) for f in c["files"].values()), Counter())
        print(f"{c['cell']}: {len(c['files'])} files, " + ", ".join(
            f"{n} {o}" for o, n in counts.items() if n)
            + f"; {len(c['failures'])} failures beside {c['reference'] or 'no reference'}"
            + f"; {len(c['ops'])} ops not implemented / fell back")
    print(f"wrote {paths['md']}, {paths['json']}")
    return 0


# --- baseline --------------------------------------------------------------------------

def _baseline_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else compare.default_dir(args.matrix)


def _baseline_update(args: argparse.Namespace) -> int:
    given = require_runs([Path(p) for p in args.results])  # a mistyped path writes nothing
    done, notes = compare.update(given, _baseline_dir(args),
                                 cells=args.cell, keep_missing=args.keep_missing,
                                 allow_partial=args.allow_partial, add_new=args.add_new)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for u in done:
        if u.refused:
            print(f"{u.cell}: {u.refused}", file=sys.stderr)
            continue
        if u.unreadable:
            print(f"{u.cell}: replacing unreadable baseline ({u.unreadable})", file=sys.stderr)
        counts = Counter(u.tests.values())
        print(f"{u.cell}: wrote {u.path} ({len(u.tests)} tests: "
              + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
              + (f"; {u.added} added)" if args.add_new and u.old else
                 f"; {u.changed} changed, {u.dropped} dropped)" if u.old else "; new)"))
    missing = sorted(set(args.cell or ()) - {u.cell for u in done})
    if not done:
        where = " ".join(args.results)
        raise AccelgridError(f"no results for {', '.join(missing)} in {where}" if missing
                             else f"no results folders found in {where}")
    for name in missing:
        print(f"note: no results for {name}", file=sys.stderr)
    refused = [u.cell for u in done if u.refused]
    if refused:
        raise AccelgridError(f"not updated: {', '.join(refused)}")
    return 0


def _baseline_show(args: argparse.Namespace) -> int:
    base = compare.load(_baseline_dir(args), args.cell)
    if args.json:
        print(dumps(base.tests, indent=1))
        return 0
    counts = Counter(base.tests.values())
    print(f"{base.cell}: {len(base.tests)} tests in {base.path}")
    if base.updated:
        print(f"updated {base.updated} from torch {base.source.get('torch')} on "
              f"{', '.join(base.source.get('devices') or []) or '?'} "
              f"(host {base.source.get('host')})")
    print("  " + ", ".join(f"{counts[o]} {o}" for o in outcomes.ALL if counts.get(o))
          + "".join(f", {n} {o} (unknown outcome)" for o, n in counts.items()
                    if o not in outcomes.ALL))
    for nodeid, outcome in sorted(base.tests.items()):
        if outcome != outcomes.PASSED:
            print(f"  {outcome:<8} {nodeid}")
    return 0


def _baseline_list(args: argparse.Namespace) -> int:
    for path, tests, problem in compare.entries(_baseline_dir(args)):
        if tests is None:
            print(f"{path.stem}: unreadable ({problem})")
            continue
        bad = sum(1 for o in tests.values() if o in outcomes.BAD)
        print(f"{path.stem}: {len(tests)} tests, {bad} expected bad")
    return 0


# --- ops -------------------------------------------------------------------------------

def _ops(args: argparse.Namespace) -> int:
    found = []
    for path in map(Path, args.results):
        if path.is_file():
            continue  # results/* also matches the grids themselves
        data = ops_pages.write_cell(ops_model.capture_folder(path)) if path.is_dir() else None
        if data is None:
            print(f"{path}: no captured ops (run with {contract.CAPTURE_OPS}=1 or the "
                  "op-capture profile)")
            continue
        found.append(data)
        print(f"{data['cell']}: " + ", ".join(f"{n} {s}" for s, n in data["counts"].items() if n))
    if not found:
        raise AccelgridError("no captured ops in " + " ".join(args.results))
    if args.what == "grid":
        view = ops_model.cross_cell(found)
        paths = ops_pages.write_cross(view, Path(args.out))
        for line in ops_pages.check_lines(view):
            print(line)
        print(f"wrote {paths['md']}, {paths['html']}, {paths['json']}")
    return 0


def _ops_predict(args: argparse.Namespace) -> int:
    cells = None if args.series or args.all_series else matrix_of(args).cells
    made = ops_pages.predict([Path(p) for p in args.inputs], series=args.series,
                             all_series=args.all_series, cells=cells,
                             out=Path(args.out) if args.out else None)
    for note in made.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(dumps(made.doc, indent=1))
        return 0
    for line in made.lines():
        print(line)
    return 0
