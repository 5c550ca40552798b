"""The verdict tables (results/verdict.py): every pair of the ten outcomes and absent, for
the change against a baseline and the transition since the previous run, spelled out here
row by row so a change to either table shows as a changed row; and docs/reference/results.md prints
the same tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelgrid.base import outcomes
from accelgrid.results import verdict

ROOT = Path(__file__).resolve().parents[2]

# Columns: the run's outcome (change) or the current one (transition), in this order.
COLUMNS = ("passed", "flaky", "failed", "error", "xpassed", "timeout", "crashed", "xfailed",
           "skipped", "not-run", None)
# Abbreviations: R regression, P new-pass, E expected-failure, C changed, L lost, N new,
# U unchanged, - none.
CHANGE = {
    "passed":   "U C R R R R R C R R L",
    "flaky":    "P U R R R R R C R R L",
    "failed":   "P C E E E E E C C C L",
    "error":    "P C E E E E E C C C L",
    "xpassed":  "P C E E E E E C C C L",
    "timeout":  "P C E E E E E C C C L",
    "crashed":  "P C E E E E E C C C L",
    "xfailed":  "P C R R R R R U C C L",
    "skipped":  "P C R R R R R C U C L",
    "not-run":  "P C R R R R R C C U L",
    None:       "N N N N N N N N N N -",
}
# Abbreviations: F new failure, X fixed, S stopped, A appeared, V vanished, - none.
TRANSITION = {
    "passed":   "- - F F F F F - S S V",
    "flaky":    "- - F F F F F - S S V",
    "failed":   "X X - - - - - - S S V",
    "error":    "X X - - - - - - S S V",
    "xpassed":  "X X - - - - - - S S V",
    "timeout":  "X X - - - - - - S S V",
    "crashed":  "X X - - - - - - S S V",
    "xfailed":  "- - F F F F F - - - V",
    "skipped":  "- - F F F F F - - - V",
    "not-run":  "- - F F F F F - - - V",
    None:       "A A A A A A A A A A -",
}
CHANGE_OF = {"R": verdict.REGRESSION, "P": verdict.NEW_PASS, "E": verdict.EXPECTED_FAILURE,
             "C": verdict.CHANGED, "L": verdict.LOST, "N": verdict.NEW,
             "U": verdict.UNCHANGED, "-": None}
TRANSITION_OF = {"F": verdict.NEW_FAILURE, "X": verdict.FIXED, "S": verdict.STOPPED,
                 "A": verdict.APPEARED, "V": verdict.VANISHED, "-": None}


def test_the_tables_cover_every_outcome_and_absent() -> None:
    assert set(COLUMNS) == set(outcomes.ALL) | {None} == set(verdict.OUTCOMES)
    assert set(CHANGE) == set(TRANSITION) == set(COLUMNS)


@pytest.mark.parametrize("before", list(CHANGE))
def test_change_row(before: str | None) -> None:
    expected = [CHANGE_OF[c] for c in CHANGE[before].split()]
    assert [verdict.change(before, after) for after in COLUMNS] == expected


@pytest.mark.parametrize("before", list(TRANSITION))
def test_transition_row(before: str | None) -> None:
    expected = [TRANSITION_OF[c] for c in TRANSITION[before].split()]
    assert [verdict.transition(before, after) for after in COLUMNS] == expected


@pytest.mark.parametrize("call", [verdict.change, verdict.transition])
def test_an_unknown_outcome_is_refused(call) -> None:
    with pytest.raises(ValueError, match="not an outcome: 'pass'"):
        call("pass", "passed")
    with pytest.raises(ValueError, match="not an outcome: 'FAILED'"):
        call("passed", "FAILED")


def test_the_classes_issue_36_named() -> None:
    # A failing test that now skips is not fixed, against the baseline or the last run.
    assert verdict.transition("failed", "skipped") == verdict.STOPPED
    assert verdict.change("failed", "skipped") == verdict.CHANGED
    # A skipped (or not-run) test that now fails is a new failure, and gates.
    assert verdict.transition("skipped", "failed") == verdict.NEW_FAILURE
    assert verdict.transition("not-run", "crashed") == verdict.NEW_FAILURE
    assert verdict.change("skipped", "failed") == verdict.REGRESSION
    # A strict XPASS (recorded xpassed) is bad in both tables.
    assert verdict.transition("xfailed", "xpassed") == verdict.NEW_FAILURE
    assert verdict.change("xfailed", "xpassed") == verdict.REGRESSION
    assert verdict.is_bad("xpassed") and not verdict.is_bad("flaky")
    # A flaky test that stops running lost its coverage as a passing one does.
    assert verdict.change("flaky", "not-run") == verdict.REGRESSION


def _doc_table(title: str) -> dict[str | None, list[str]]:
    text = (ROOT / "docs" / "reference" / "results.md").read_text()
    lines = text[text.index(title):].splitlines()[2:]
    rows = lines[:next(i for i, ln in enumerate(lines) if not ln.startswith("|"))]
    header = [c.strip().strip("`") for c in rows[0].strip("|").split("|")][1:]
    assert header == [c if c else "absent" for c in COLUMNS], header
    table: dict[str | None, list[str]] = {}
    for row in rows[2:]:
        cells = [c.strip().strip("`") for c in row.strip("|").split("|")]
        table[None if cells[0] == "absent" else cells[0]] = [
            "-" if c == "" else c for c in cells[1:]]
    return table


@pytest.mark.parametrize("title, call", [
    ("### Against the baseline", verdict.change),
    ("### Since the previous run", verdict.transition)])
def test_docs_print_the_tables(title, call) -> None:
    """docs/reference/results.md's two tables are the functions' (each cell the category's name)."""
    table = _doc_table(title)
    assert set(table) == set(COLUMNS)
    for before, cells in table.items():
        assert [re.sub(r"\s", "", c) for c in cells] == [
            call(before, after) or "-" for after in COLUMNS], before
