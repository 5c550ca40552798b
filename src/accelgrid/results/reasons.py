"""Why tests did not run: the skip and not-run reasons of a run, grouped per suite.

A cpu cell skips a third of its tests on purpose (torchao's CPU offload needs an
accelerator, the example scripts need a transformers checkout): counts alone read like
breakage. :func:`group` gives each (suite, outcome, reason) its number of tests, for the
runner's summary and the grids. Standard library only (read beside the results).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..base import outcomes
from .folders import suite_of

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import Outcome, Reason, TestRecord

# The outcomes whose reasons are grouped: a test that did not run, and why.
GROUPED = (outcomes.SKIPPED, outcomes.NOT_RUN)
MAX_REASON = 240   # characters of a reason shown; the records keep it whole


def _reason(rec: Mapping[str, Any]) -> str:
    lines = [ln.strip() for ln in str(rec.get("message") or "").splitlines() if ln.strip()]
    text = lines[0] if lines else "no reason given"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def group(records: Iterable[TestRecord]) -> list[Reason]:
    """``[{"suite", "outcome", "reason", "count"}]`` over the skipped and not-run records
    (one per test): suites in the order they first appear, skipped before not-run, the
    most frequent reason first."""
    counts: dict[tuple[str, Outcome, str], int] = {}
    suites: dict[str, int] = {}
    for rec in records:
        if rec.get("outcome") not in GROUPED:
            continue
        suite = suite_of(str(rec.get("nodeid") or ""))
        suites.setdefault(suite, len(suites))
        key = (suite, rec["outcome"], _reason(rec))
        counts[key] = counts.get(key, 0) + 1
    order = sorted(counts, key=lambda k: (suites[k[0]], GROUPED.index(k[1]), -counts[k], k[2]))
    return [{"suite": s, "outcome": o, "reason": r, "count": counts[(s, o, r)]}
            for s, o, r in order]


def line(entry: Mapping[str, Any]) -> str:
    """``offload: 38 skipped — optim CPU offload requires CUDA or XPU ...``"""
    return f"{entry['suite']}: {entry['count']} {entry['outcome']} — {entry['reason']}"
