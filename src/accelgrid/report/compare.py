"""Baselines: the expected outcome of every test per cell, kept in ``baselines/<cell>.json``,
and the comparison of results with them.

:func:`classify` names what a test's outcome now is relative to its baseline;
:func:`mark` compares every column of a grid model that has a baseline and fills the
model's ``baseline`` summary (``accelgrid grid --baseline DIR`` exits 3 on a regression).
:func:`update` writes baselines from results folders, :func:`load` and :func:`entries`
read them back (``accelgrid baseline update|show|list``).

File format (docs/reference/grid-schema.md): ``{"schema": 1, "cell": ..., "updated": ..., "source":
{...provenance...}, "tests": {nodeid: outcome}}``; a plain ``{nodeid: outcome}`` mapping
is read too, so a hand-written baseline can be that short.
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import outcomes, outputs
from ..base.errors import InvalidInput, UnknownName
from ..base.jsonio import dumps, mapping, read_json, write_text
from ..results import shards, verdict
from ..results.cellresults import (
    SELECTED_RUN,
    CellResults,
    discover,
    fill_cell_name,
    load_cell,
)
from ..results.provenance import now
from ..results.records import Baseline as GridBaseline
from ..results.records import Change, ColumnBaseline, Grid
from .model import new_row, row_key

SCHEMA_VERSION = 1  # of a baseline file (grid.json has its own, model.SCHEMA_VERSION)
DEFAULT_DIR = "baselines"

# What a test's outcome now is, relative to its baseline: one table, results.verdict.
REGRESSION, NEW_PASS = verdict.REGRESSION, verdict.NEW_PASS
EXPECTED_FAILURE = verdict.EXPECTED_FAILURE
CHANGED, LOST, NEW, UNCHANGED = verdict.CHANGED, verdict.LOST, verdict.NEW, verdict.UNCHANGED
CATEGORIES = verdict.CHANGES
# How reports name the changes (every category but UNCHANGED), in display order.
CHANGE_LABEL = {
    REGRESSION: "regression", NEW_PASS: "new pass", EXPECTED_FAILURE: "expected failure",
    CHANGED: "changed", LOST: "lost", NEW: "new test",
}
CHANGE_PLURAL = {
    REGRESSION: "regressions", NEW_PASS: "new passes", EXPECTED_FAILURE: "expected failures",
    CHANGED: "changed", LOST: "lost", NEW: "new tests",
}


def classify_change(expected: str | None, actual: str | None) -> str | None:
    """The category of one test in one cell; None when it is in neither
    (:func:`accelgrid.results.verdict.change`)."""
    return verdict.change(expected, actual)


# --- baseline files --------------------------------------------------------------------

def default_dir(matrix: str | Path | None) -> Path:
    """``baselines/`` beside the matrix file (or in the current folder without one)."""
    return Path(matrix).parent / DEFAULT_DIR if matrix else Path(DEFAULT_DIR)


def path_for(folder: Path, cell: str) -> Path:
    return Path(folder) / f"{cell}.json"


def _document(path: Path) -> Any:
    """A baseline file's JSON (bounded, regular files only); ValueError naming the file."""
    data, err = read_json(Path(path))
    if err and Path(path).is_file() and not Path(path).is_symlink() \
            and Path(path).stat().st_size == 0:
        raise ValueError(f"{path}: empty file")
    if err:
        raise ValueError(f"{path}: {err.removeprefix(Path(path).name + ' ')}")
    return data


def read(path: Path) -> dict[str, str]:
    """nodeid -> expected outcome. Raises ValueError naming the file if it is malformed:
    not a regular file, empty, not JSON, a ``schema`` other than :data:`SCHEMA_VERSION`,
    no tests, or an outcome that is not one of :data:`accelgrid.base.outcomes.ALL`."""
    data = _document(path)
    if isinstance(data, dict) and "schema" in data:
        # Only a known schema may gate: 99 (a newer writer) or 0 read as 1 compares the
        # wrong thing and may pass everything.
        version = data["schema"]
        if type(version) is not int or version != SCHEMA_VERSION:
            raise ValueError(f"{path}: unknown baseline schema {json_text(version)} "
                             f"(this accelgrid reads schema {SCHEMA_VERSION})")
        if "tests" not in data:
            raise ValueError(f"{path}: schema {SCHEMA_VERSION} but no \"tests\"")
    tests = data.get("tests") if isinstance(data, dict) and "tests" in data else data
    if not isinstance(tests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tests.items()):
        raise ValueError(f"{path}: expected {{nodeid: outcome}} (or {{\"tests\": {{...}}}})")
    if not tests:
        raise ValueError(f"{path}: holds no tests (a gate on it would compare nothing)")
    unknown = sorted({v for v in tests.values() if v not in outcomes.ALL})
    if unknown:
        raise ValueError(f"{path}: unknown outcome {json_text(unknown[0][:80])} "
                         f"(expected one of: {', '.join(outcomes.ALL)})")
    return tests


def json_text(value: Any) -> str:
    """``value`` as JSON, bounded, for a message."""
    text = dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_dir(folder: Path, cells: Iterable[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The baselines of ``cells`` found in ``folder`` (and notes, none today). A baseline
    that exists but cannot be read raises InvalidInput naming the file: a gate that
    skipped it would pass whatever the results are."""
    found: dict[str, dict[str, str]] = {}
    for cell in cells:
        path = path_for(folder, cell)
        if not os.path.lexists(path):
            continue
        try:
            found[cell] = read(path)
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"bad baseline: {exc}") from exc
    return found, []


@dataclass
class Baseline:
    """One baseline file as read back: its tests and, when recorded, where it came from."""

    cell: str
    path: Path
    tests: dict[str, str]
    updated: str | None = None
    source: dict[str, Any] = field(default_factory=dict)


def load(folder: Path, cell: str) -> Baseline:
    """``cell``'s baseline in ``folder``. Raises UnknownName (with the closest cell that
    has one) when there is none, InvalidInput when it cannot be read."""
    path = path_for(folder, cell)
    if not path.is_file():
        known = sorted(p.stem for p in Path(folder).glob("*.json"))
        close = difflib.get_close_matches(cell, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else (
            f"; baselines exist for: {', '.join(known)}" if known else "")
        raise UnknownName(f"no baseline for {cell} in {folder}/{hint}")
    try:
        tests = read(path)
        doc = _document(path)
    except (OSError, ValueError) as exc:
        raise InvalidInput(str(exc)) from exc
    if isinstance(doc, dict) and "tests" in doc:
        source = mapping(doc.get("source"))
        return Baseline(cell, path, tests, updated=doc.get("updated") or None, source=source)
    return Baseline(cell, path, tests)


def entries(folder: Path) -> list[tuple[Path, dict[str, str] | None, str | None]]:
    """Every baseline file in ``folder``, sorted: (path, tests, None), or (path, None,
    why) for one that cannot be read. A folder that does not exist has none."""
    out: list[tuple[Path, dict[str, str] | None, str | None]] = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            out.append((path, read(path), None))
        except (OSError, ValueError) as exc:
            out.append((path, None, str(exc)))
    return out


def from_results(cell: CellResults) -> dict[str, Any]:
    """A baseline document from a loaded cell
    (:class:`accelgrid.results.cellresults.CellResults`)."""
    env = cell.env or {}
    torch = env.get("torch") or {}
    return {
        "schema": SCHEMA_VERSION,
        "cell": cell.name,
        "updated": now(),
        "source": {"torch": torch.get("version"),
                   "devices": sorted({d.get("name") or "?" for d in torch.get("devices") or []}),
                   "host": mapping(env.get("host")).get("name"),
                   "commit": mapping(env.get("project")).get("commit"),
                   "run_start": env.get("start")},
        "tests": {nodeid: rec["outcome"] for nodeid, rec in sorted(cell.tests.items())},
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write a baseline document: one test per line, in the order given."""
    # One test per line, sorted: baselines are reviewed as diffs in pull requests. A
    # symlink planted there is refused (the write would land where it points).
    write_text(path, dumps(doc, indent=1, sort_keys=False) + "\n")


@dataclass
class CellUpdate:
    """What :func:`update` did with one cell's results."""

    cell: str
    path: Path  # the baseline file
    refused: str | None = None  # why it was not written; nothing below is set then
    tests: dict[str, str] = field(default_factory=dict)  # as written
    old: dict[str, str] = field(default_factory=dict)  # the baseline replaced ({}: none)
    unreadable: str | None = None  # why the replaced baseline could not be read

    @property
    def changed(self) -> int:
        return sum(1 for k, v in self.tests.items() if self.old.get(k) != v)

    @property
    def dropped(self) -> int:
        return len(set(self.old) - set(self.tests))

    @property
    def added(self) -> int:
        return len(set(self.tests) - set(self.old))


def update(results: Iterable[Path], folder: Path, cells: Iterable[str] | None = None,
           keep_missing: bool = False, allow_partial: bool = False, add_new: bool = False
           ) -> tuple[list[CellUpdate], list[str]]:
    """Write ``folder/<cell>.json`` from each cell found in ``results`` (only ``cells``
    when given). Errored cells are refused, and partial ones (run never finished,
    unreadable parts, a selected run) unless ``allow_partial``; ``keep_missing`` keeps
    baseline entries of tests absent from the results (always, for a selected run).
    ``add_new`` adds only the tests the baseline lacks and changes no entry it has; a
    selected run is then no partial run (``-k test_new`` is how one runs a new test).
    Returns what happened per cell, in the order found, and a note per path ignored."""
    wanted = set(cells or ())
    folders, notes = discover([Path(p) for p in results])
    done: list[CellUpdate] = []
    new: dict[str, str] = {}
    loaded = []
    for found in folders:
        cell = load_cell(found)
        fill_cell_name(cell)
        loaded.append(cell)
    # A cell's shards are one cell here too (one of them alone is partial: refused).
    for cell in shards.merge(loaded):
        if wanted and cell.name not in wanted:
            continue
        path = path_for(folder, cell.name)
        problems = [p for p in cell.problems
                    if not (add_new and p.startswith(SELECTED_RUN))]
        unusable = cell.error or (not allow_partial and problems and "; ".join(problems))
        if unusable:
            hint = "" if cell.error else "; --allow-partial to use them anyway"
            done.append(CellUpdate(cell.name, path, refused=f"not updated ({unusable}){hint}"))
            continue
        doc = from_results(cell)
        entry = CellUpdate(cell.name, path)
        if path.is_file():
            try:
                entry.old = read(path)
            except ValueError as exc:
                entry.unreadable = str(exc)
        if add_new and entry.unreadable:
            done.append(CellUpdate(cell.name, path, refused=(
                f"not updated (its baseline is unreadable: {entry.unreadable}); without "
                "--add-new the results replace it")))
            continue
        if add_new:
            doc["tests"] = dict(sorted({**doc["tests"], **entry.old}.items()))
        # A selected run (-k, a path, -x) says nothing of the tests outside its selection:
        # they keep their baseline entries rather than being dropped.
        elif keep_missing or (cell.env or {}).get("selection"):
            doc["tests"] = dict(sorted({**entry.old, **doc["tests"]}.items()))
        entry.tests = doc["tests"]
        new[path.name] = dumps(doc, indent=1, sort_keys=False) + "\n"
        done.append(entry)
    if new:
        # One set: a stop mid-update leaves every baseline as it was or every one updated
        # (the folder is accelgrid's own: a baseline written by hand is one too).
        outputs.replace_files(folder, new, "baselines", "accelgrid baseline update",
                              own_folder=True)
    return done, notes


# --- comparing a grid model with baselines ---------------------------------------------

def _verdict(expected: str | None, actual: str | None) -> str:
    """:func:`classify_change` of a test in the baseline or the results (never neither)."""
    change = classify_change(expected, actual)
    if change is None:  # classify_change's None is for a test in neither
        raise ValueError("a test in neither the baseline nor the results")
    return change


def mark(model: Grid, folder: Path) -> GridBaseline:
    """Compare each column of ``model`` whose cell has ``folder/<cell>.json``: every result
    that changed gets ``change`` (and ``expected``), lost tests go in their row's ``lost``
    (a row is added when no cell has the test), the column gets its ``baseline`` counts
    and the model its ``baseline`` summary, which is also returned."""
    folder = Path(folder)
    columns, notes = model["columns"], model["notes"]
    rows = {r["nodeid"]: r for r in model["rows"]}
    if not folder.is_dir():
        # Asked for a gate: a folder that is not there (a typo, a checkout without it)
        # must not turn it off.
        what = "is not a folder" if os.path.lexists(folder) else "does not exist"
        raise InvalidInput(f"baseline folder {folder} {what}: nothing could be compared")
    baselines, problems = load_dir(folder, sorted({c["cell"] for c in columns}))
    notes += problems
    totals: Counter[str] = Counter()
    changes: list[Change] = []
    verdicts: dict[tuple[str | None, str], str] = {}  # classify's, per pair met
    added = False
    for col in columns:
        expected = baselines.get(col["cell"])
        if expected is None:
            continue
        counts: Counter[str] = Counter()
        name = col["name"]
        selected = bool(col.get("selection"))
        outside = 0
        # Results first, then the baseline's tests without one. Any order: what these
        # loops add up does not depend on it (changes are sorted below).
        for nodeid, row in rows.items():
            entry = row["cells"].get(name)
            if entry is None:
                continue
            was, actual = expected.get(nodeid), entry["outcome"]
            change = verdicts.get((was, actual)) or verdicts.setdefault(
                (was, actual), _verdict(was, actual))
            counts[change] += 1
            if change != UNCHANGED:
                entry["change"] = change
                if was is not None:
                    entry["expected"] = was
                changes.append({"nodeid": nodeid, "cell": name, "change": change,
                                "expected": was, "outcome": actual,
                                "message": entry.get("message")})
        for nodeid, was in expected.items():
            known = rows.get(nodeid)
            if known is not None and name in known["cells"]:
                continue  # compared above
            if selected:
                outside += 1  # a selected run: a test it did not record was not selected
                continue
            if known is None:
                known = rows[nodeid] = new_row(nodeid)
                added = True
            change = _verdict(was, None)  # lost
            counts[change] += 1
            known.setdefault("lost", {})[name] = was
            changes.append({"nodeid": nodeid, "cell": name, "change": change,
                            "expected": was, "outcome": None, "message": None})
        col_base: ColumnBaseline = {"file": str(path_for(folder, col["cell"])),
                                    "counts": {c: counts.get(c, 0) for c in CATEGORIES}}
        if selected:
            col_base["outside_selection"] = outside
            col_base["compared"] = sum(n for c, n in counts.items() if c != NEW)
        col["baseline"] = col_base
        totals.update(counts)
    if added:
        model["rows"] = sorted(rows.values(), key=row_key)
    order = {c: i for i, c in enumerate(CATEGORIES)}
    changes.sort(key=lambda c: (order[c["change"]], c["nodeid"], c["cell"]))
    baseline: GridBaseline = {
        "dir": str(folder), "cells": [c["name"] for c in columns if c["baseline"]],
        "counts": {c: totals.get(c, 0) for c in CATEGORIES},
        "regressions": totals.get(REGRESSION, 0), "changes": changes,
        # Selected runs (partial columns) compared with nothing of their baseline: a gate
        # on them checked nothing, which must not pass for a success (GridReport.check).
        "nothing_compared": [c["name"] for c in columns if c["baseline"] and c["selection"]
                             and not c["baseline"]["compared"]]}
    model["baseline"] = baseline
    return baseline


def regressions(model: Grid) -> list[Change]:
    """The model's changes that are regressions (none without a baseline)."""
    return [c for c in mapping(model.get("baseline")).get("changes", [])
            if c["change"] == REGRESSION]
