"""Results folders of a cell night by night, for the history's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.report_cases import write_cell

T = "suites/smoke/test_h.py::"


def night(root: Path, i: int, outcomes: dict[str, str], cell: str = "cpu-2.13",
          torch: str = "2.13.0+cpu", **extra: Any) -> Path:
    """One night's results of ``cell``: run id n<i>, started on day i, commit c<i>."""
    return write_cell(root / f"n{i}", cell, outcomes, torch=torch, run_id=f"{cell}-n{i}",
                      start=f"2026-11-{i + 1:02d}T03:00:00+00:00", project={"commit": f"c{i}"},
                      **extra)


def series(root: Path, strips: dict[str, str], cell: str = "cpu-2.13") -> list[Path]:
    """Nights from per-test strips (P passed, F failed, . absent), oldest first."""
    n = len(next(iter(strips.values())))
    word = {"P": "passed", "F": "failed", "S": "skipped"}
    return [night(root, i, {T + t: word[s[i]] for t, s in strips.items() if s[i] != "."},
                  cell=cell) for i in range(n)]
