"""The verdict on one test, written once: what its outcome means beside another.

Two tables over the ten outcomes of :mod:`accelgrid.base.outcomes` and :data:`ABSENT` (no
record of the test), every pair spelled out (docs/reference/results.md prints both):

- :func:`change` ``(baseline, run)``: the test against its cell's baseline
  (:mod:`accelgrid.report.compare`; ``regression`` gates, ``lost`` is named);
- :func:`transition` ``(previous, current)``: the test since its cell's previous run
  (:mod:`accelgrid.report.history`: new failures, fixed, stopped, appeared, vanished).

The outcomes fall in five kinds, and the tables are written over the kinds, with the few
pairs where the outcomes themselves matter said apart:

- ``bad``: failed, error, xpassed (pytest's strict XPASS included), timeout, crashed;
- ``passed``: passed, and flaky (passed, but only after failing first within the run);
- ``xfailed``: a known issue's test failing as the registry says;
- ``not run``: skipped, not-run: the test checked nothing here;
- ``absent``: no record.

A test that checked something and now checks nothing is never "fixed" and never
"unchanged": against a baseline that passed it is a regression (coverage lost on the
cell's own device), since a previous run it is ``stopped``.
"""

from __future__ import annotations

from typing import Final

from ..base import outcomes

ABSENT: Final = None
OUTCOMES: Final = (*outcomes.ALL, ABSENT)

# Kinds (module docstring).
BAD: Final = frozenset(outcomes.BAD)
PASSING: Final = frozenset((outcomes.PASSED, outcomes.FLAKY))
NOT_RUN: Final = frozenset((outcomes.SKIPPED, outcomes.NOT_RUN))

# change(): the test against its baseline.
REGRESSION: Final = "regression"  # expected good, now bad; or passed, now not run
NEW_PASS: Final = "new-pass"  # passes now, expected something else
EXPECTED_FAILURE: Final = "expected-failure"  # bad, and the baseline says bad
CHANGED: Final = "changed"  # another change that is not bad, e.g. failed -> xfailed
LOST: Final = "lost"  # in the baseline, absent from the results
NEW: Final = "new"  # in the results, absent from the baseline
UNCHANGED: Final = "unchanged"
CHANGES: Final = (REGRESSION, NEW_PASS, EXPECTED_FAILURE, CHANGED, LOST, NEW, UNCHANGED)

# transition(): the test since the previous run of its cell. None: nothing to say.
NEW_FAILURE: Final = "new_failures"  # ran and was not bad (or did not run), now bad
FIXED: Final = "fixed"  # bad, now passes
STOPPED: Final = "stopped"  # ran (bad or passing), now skipped / not-run: checks nothing
APPEARED: Final = "appeared"
VANISHED: Final = "vanished"
TRANSITIONS: Final = (NEW_FAILURE, FIXED, STOPPED, APPEARED, VANISHED)


def change(baseline: str | None, run: str | None) -> str | None:
    """What ``run`` (this run's outcome, or ABSENT) is against ``baseline`` (the baseline's
    outcome, or ABSENT); None when the test is in neither."""
    _check(baseline, run)
    if baseline is ABSENT:
        return None if run is ABSENT else NEW
    if run is ABSENT:
        return LOST
    if run in BAD:
        return EXPECTED_FAILURE if baseline in BAD else REGRESSION
    if run == baseline:
        return UNCHANGED
    if run == outcomes.PASSED:
        return NEW_PASS
    if run in NOT_RUN and baseline in PASSING:
        return REGRESSION  # it checked something on this device; now it checks nothing
    # The rest changed without breaking: flaky (passed on a rerun: no regression, the
    # gate's flaky policy in docs/reference/history.md, yet no plain pass), xfailed, not run.
    return CHANGED


def transition(previous: str | None, current: str | None) -> str | None:
    """What changed for one test from the cell's ``previous`` run to its ``current`` one
    (outcomes, or ABSENT); None when nothing worth saying did."""
    _check(previous, current)
    if previous is ABSENT:
        return None if current is ABSENT else APPEARED
    if current is ABSENT:
        return VANISHED
    if current in BAD:
        return None if previous in BAD else NEW_FAILURE
    if previous in BAD:
        if current in PASSING:
            return FIXED
        # A failing test that now skips, or xfails, is not fixed: skipping checks nothing,
        # and an xfail says the bug is still there.
        return STOPPED if current in NOT_RUN else None
    if current in NOT_RUN and previous in PASSING:
        return STOPPED
    return None


def is_bad(outcome: str | None) -> bool:
    """Whether ``outcome`` says something is broken (grids colour it, baselines gate it)."""
    return outcome in BAD


def _check(*values: str | None) -> None:
    for value in values:
        if value is not ABSENT and value not in outcomes.ALL:
            raise ValueError(f"not an outcome: {value!r} (one of {', '.join(outcomes.ALL)})")
