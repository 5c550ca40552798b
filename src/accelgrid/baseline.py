"""Baselines: the expected outcome of every test per cell, kept in ``baselines/<cell>.json``.

``accelgrid grid --baseline baselines RESULTS...`` compares each cell that has a baseline
with it (see :func:`classify`) and exits 3 on any regression, so CI can gate on it.

    accelgrid baseline update RESULTS...   write/replace baselines from results folders
    accelgrid baseline show CELL           counts and the not-passing tests of a baseline
    accelgrid baseline list                the cells that have a baseline

File format (docs/grid-schema.md): ``{"schema": 1, "cell": ..., "updated": ..., "source":
{...provenance...}, "tests": {nodeid: outcome}}``; a plain ``{nodeid: outcome}`` mapping
is read too, so a hand-written baseline can be that short.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import outcomes

SCHEMA_VERSION = 1
DEFAULT_DIR = "baselines"

# What a test's outcome now is, relative to its baseline.
REGRESSION = "regression"  # expected good (passed/xfailed/skipped/not-run), now bad
NEW_PASS = "new-pass"  # passes now, expected something else
EXPECTED_FAILURE = "expected-failure"  # bad, and the baseline says bad
CHANGED = "changed"  # another change that is not bad, e.g. passed -> skipped
LOST = "lost"  # in the baseline, absent from the results
NEW = "new"  # in the results, absent from the baseline
UNCHANGED = "unchanged"
CATEGORIES = (REGRESSION, NEW_PASS, EXPECTED_FAILURE, CHANGED, LOST, NEW, UNCHANGED)

EXIT_REGRESSION = 3
EXIT_USAGE = 2


def classify(expected: str | None, actual: str | None) -> str | None:
    """The category of one test in one cell; None when it is in neither."""
    if expected is None:
        return None if actual is None else NEW
    if actual is None:
        return LOST
    if actual in outcomes.BAD:
        return EXPECTED_FAILURE if expected in outcomes.BAD else REGRESSION
    if actual == expected:
        return UNCHANGED
    if actual == outcomes.PASSED:
        return NEW_PASS
    return CHANGED


def path_for(folder: Path, cell: str) -> Path:
    return Path(folder) / f"{cell}.json"


def read(path: Path) -> dict[str, str]:
    """nodeid -> expected outcome. Raises ValueError naming the file if it is malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    tests = data.get("tests") if isinstance(data, dict) and "tests" in data else data
    if not isinstance(tests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tests.items()):
        raise ValueError(f"{path}: expected {{nodeid: outcome}} (or {{\"tests\": {{...}}}})")
    return tests


def load_dir(folder: Path, cells: Iterable[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The baselines of ``cells`` found in ``folder``, and a note per unreadable one."""
    found: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for cell in cells:
        path = path_for(folder, cell)
        if not path.is_file():
            continue
        try:
            found[cell] = read(path)
        except (OSError, ValueError) as exc:
            notes.append(f"baseline ignored: {exc}")
    return found, notes


def from_results(cell: Any) -> dict[str, Any]:
    """A baseline document from a loaded cell (:class:`accelgrid.results.CellResults`)."""
    from .provenance import now  # local: only `update` needs a timestamp

    env = cell.env or {}
    torch = env.get("torch") or {}
    return {
        "schema": SCHEMA_VERSION,
        "cell": cell.name,
        "updated": now(),
        "source": {"torch": torch.get("version"),
                   "devices": sorted({d.get("name") or "?" for d in torch.get("devices") or []}),
                   "host": (env.get("host") or {}).get("name"),
                   "commit": (env.get("project") or {}).get("commit"),
                   "run_start": env.get("start")},
        "tests": {nodeid: rec["outcome"] for nodeid, rec in sorted(cell.tests.items())},
    }


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # One test per line, sorted: baselines are reviewed as diffs in pull requests.
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _cmd_update(args: argparse.Namespace) -> int:
    from . import grid  # local: grid imports this module
    from .results import load_cell

    folders, notes = grid.discover([Path(p) for p in args.results])
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    written = refused = 0
    for folder in folders:
        cell = load_cell(folder)
        grid.fill_cell_name(cell)
        if args.cell and cell.name not in args.cell:
            continue
        unusable = cell.error or (not args.allow_partial and cell.problems and
                                  "; ".join(cell.problems))
        if unusable:
            hint = "" if cell.error else "; --allow-partial to use them anyway"
            print(f"{cell.name}: not updated ({unusable}){hint}", file=sys.stderr)
            refused += 1
            continue
        doc = from_results(cell)
        path = path_for(Path(args.dir), cell.name)
        old: dict[str, str] = {}
        if path.is_file():
            try:
                old = read(path)
            except ValueError as exc:
                print(f"{cell.name}: replacing unreadable baseline ({exc})", file=sys.stderr)
        if args.keep_missing:
            doc["tests"] = dict(sorted({**old, **doc["tests"]}.items()))
        changed = sum(1 for k, v in doc["tests"].items() if old.get(k) != v)
        dropped = len(set(old) - set(doc["tests"]))
        _write(path, doc)
        written += 1
        counts = Counter(doc["tests"].values())
        print(f"{cell.name}: wrote {path} ({len(doc['tests'])} tests: "
              + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
              + (f"; {changed} changed, {dropped} dropped)" if old else "; new)"))
    if not written and not refused:
        print("no results folders found", file=sys.stderr)
    return 0 if written and not refused else 1


def _cmd_show(args: argparse.Namespace) -> int:
    path = path_for(Path(args.dir), args.cell)
    if not path.is_file():
        known = sorted(p.stem for p in Path(args.dir).glob("*.json"))
        close = difflib.get_close_matches(args.cell, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else (
            f"; baselines exist for: {', '.join(known)}" if known else "")
        print(f"no baseline for {args.cell} in {args.dir}/{hint}", file=sys.stderr)
        return EXIT_USAGE
    try:
        tests = read(path)
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(tests, indent=1))
        return 0
    source = doc.get("source", {}) if isinstance(doc, dict) and "tests" in doc else {}
    counts = Counter(tests.values())
    print(f"{args.cell}: {len(tests)} tests in {path}")
    if isinstance(doc, dict) and doc.get("updated"):
        print(f"updated {doc['updated']} from torch {source.get('torch')} on "
              f"{', '.join(source.get('devices') or []) or '?'} (host {source.get('host')})")
    print("  " + ", ".join(f"{counts[o]} {o}" for o in outcomes.ALL if counts.get(o))
          + "".join(f", {n} {o} (unknown outcome)" for o, n in counts.items()
                    if o not in outcomes.ALL))
    for nodeid, outcome in sorted(tests.items()):
        if outcome != outcomes.PASSED:
            print(f"  {outcome:<8} {nodeid}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    for path in sorted(Path(args.dir).glob("*.json")):
        try:
            tests = read(path)
        except (OSError, ValueError) as exc:
            print(f"{path.stem}: unreadable ({exc})")
            continue
        bad = sum(1 for o in tests.values() if o in outcomes.BAD)
        print(f"{path.stem}: {len(tests)} tests, {bad} expected bad")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelgrid baseline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", help="matrix file; baselines/ beside it is the default dir")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = sub.add_parser("update", help="write baselines/<cell>.json from results folders")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (an artifacts dir)")
    p.add_argument("--dir", help=f"baselines folder (default: {DEFAULT_DIR}/)")
    p.add_argument("--cell", action="append", help="only this cell (repeatable)")
    p.add_argument("--keep-missing", action="store_true",
                   help="keep baseline entries of tests absent from the results "
                        "(a partial run, e.g. -k); default: the results replace the baseline")
    p.add_argument("--allow-partial", action="store_true",
                   help="also use results of runs that did not finish or have unreadable parts")
    p.set_defaults(func=_cmd_update)

    p = sub.add_parser("show", help="a cell's baseline: counts and tests not expected to pass")
    p.add_argument("cell")
    p.add_argument("--dir", help=f"baselines folder (default: {DEFAULT_DIR}/)")
    p.add_argument("--json", action="store_true", help="print {nodeid: outcome}")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("list", help="the cells that have a baseline")
    p.add_argument("--dir", help=f"baselines folder (default: {DEFAULT_DIR}/)")
    p.set_defaults(func=_cmd_list)

    args = parser.parse_args(argv)
    if not args.dir:
        args.dir = str(Path(args.matrix).parent / DEFAULT_DIR) if args.matrix else DEFAULT_DIR
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
