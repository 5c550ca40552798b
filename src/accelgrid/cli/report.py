"""Reports from results folders: ``accelgrid grid``, ``baseline``, ``ops``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import AccelgridError, Regression


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("grid", parents=[common],
                       help="grids (grid.md/.html/.json) from results folders")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--out", default="results", help="where to write the grids (%(default)s)")
    p.add_argument("--baseline", metavar="DIR",
                   help="compare with DIR/<cell>.json; exit 3 on any regression")
    p.set_defaults(func=_grid)

    # TEMPORARY: baseline and ops still parse their own options (being moved here).
    for name, text in (("baseline", "update or show the expected outcomes per cell"),
                       ("ops", "op coverage: capture, classify and grid aten ops per cell")):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_legacy)


def _legacy(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(f"accelgrid.{args.command}")
    return module.main(["--matrix", args.matrix, *args.rest])


def _grid(args: argparse.Namespace) -> int:
    from .. import grid

    folders = [Path(p) for p in args.results]
    model = grid.build(folders, baseline_dir=Path(args.baseline) if args.baseline else None)
    paths = grid.write(model, Path(args.out))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(paths["md"].read_text(encoding="utf-8"))
    for note in model["notes"]:
        print(f"note: {note}", file=sys.stderr)
    for col in model["columns"]:
        state = f"errored: {col['error']}" if col["error"] else ", ".join(
            f"{n} {o}" for o, n in col["counts"].items() if n)
        if col["status"] == "partial":
            state += f" (partial: {col['reason']})"
        print(f"{col['name']}: {state}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    if not model["columns"]:
        raise AccelgridError("no results folders found in " + " ".join(args.results))
    base = model["baseline"]
    if base:
        print("vs baselines: " + (", ".join(f"{n} {k}" for k, n in base["counts"].items()
                                            if n and k != "unchanged") or "all as expected"))
        regressions = [c for c in base["changes"] if c["change"] == "regression"]
        for c in regressions[:50]:
            print(f"REGRESSION {c['cell']}: {c['nodeid']}: {c['expected']} -> {c['outcome']}")
        if regressions:
            raise Regression(f"{len(regressions)} regression(s) against the baselines")
    return 0
