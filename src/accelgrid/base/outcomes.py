"""The outcome vocabulary shared by the recorder, results and grids."""

from __future__ import annotations

from typing import Final, Literal

# The vocabulary as a type (records, grids: accelgrid.results.records); ALL below is the
# same words in display order (tests/results/test_records.py keeps the two equal).
Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "timeout",
                  "crashed", "not-run", "flaky"]

PASSED: Final = "passed"
FAILED: Final = "failed"
ERROR: Final = "error"
SKIPPED: Final = "skipped"
XFAILED: Final = "xfailed"
XPASSED: Final = "xpassed"
TIMEOUT: Final = "timeout"
CRASHED: Final = "crashed"
NOT_RUN: Final = "not-run"
# Passed only after failing first inside the run (pytest-rerunfailures' reruns, the
# matrix's ``reruns``): never plain "passed", never bad (docs/reference/history.md, gate policy).
FLAKY: Final = "flaky"

ALL: tuple[Outcome, ...] = (PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED, TIMEOUT,
                            CRASHED, NOT_RUN, FLAKY)
# Outcomes that mean "something is broken" for grids and baselines.
BAD: tuple[Outcome, ...] = (FAILED, ERROR, XPASSED, TIMEOUT, CRASHED)

NOT_RUN_PREFIX = "not-run: "
# Shown wherever counts are: pytest prints these tests among its "skipped".
NOT_RUN_MEANING = ("not-run: accelgrid's outcome for a test that could not run on this host "
                   "or env, for the reason it records (a package or checkout missing, the "
                   "run ended first); pytest counts it as skipped")


def not_run(reason: str) -> None:
    """Stop the current test and record it as ``not-run`` (e.g. a model class missing
    from the installed transformers), which grids show apart from ordinary skips."""
    import pytest  # here: the CLI and the runner import this module, and need no pytest

    pytest.skip(NOT_RUN_PREFIX + reason)
