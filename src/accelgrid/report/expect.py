"""Lost cells: the cells a run was expected to produce (the workflow's selection, the
matrix, the baselines) that left no results, as a ``lost`` column with why; the gate
fails on them (exit 3, :meth:`accelgrid.report.GridReport.check`).

Without this, a nightly run whose xpu runners were offline shows a green grid: the cells
are simply absent. An expected cell whose folder is there but recorded no test (an
errored column: the run ended early) is lost too; its column keeps its own reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from ..base.errors import InvalidInput
from ..base.jsonio import read_json
from ..results.cellresults import CELL_NAME
from ..results.records import Column, Grid
from .model import _parse_name, _sort_key

LOST: Final = "lost"
NO_RESULTS = ("no results uploaded: the runner never started, or the job ended before "
              "uploading them")


def parse(specs: list[str], matrix_cells: list[str] | None = None,
          baseline_cells: list[str] | None = None) -> list[str]:
    """Cell names from ``--expect`` values: names, comma-separated names, ``matrix``
    (every cell of the matrix), ``baselines`` (every cell with a baseline) or ``@FILE``
    (a JSON list of names, or one name per line: e.g. the plan job's selection)."""
    names: list[str] = []
    for spec in specs:
        for word in (w.strip() for w in spec.split(",")):
            if not word:
                continue
            if word == "matrix":
                if matrix_cells is None:
                    raise InvalidInput("--expect matrix: no matrix loaded")
                names += matrix_cells
            elif word == "baselines":
                if baseline_cells is None:
                    raise InvalidInput("--expect baselines needs --baseline DIR")
                names += baseline_cells
            elif word.startswith("@"):
                names += _from_file(Path(word[1:]))
            elif CELL_NAME.match(word):
                names.append(word)
            else:
                raise InvalidInput(f"--expect: {word[:60]!r} is not a cell name")
    return list(dict.fromkeys(names))


def _from_file(path: Path) -> list[str]:
    data, err = read_json(path)
    if err and err.endswith("missing"):
        raise InvalidInput(f"--expect @{path}: no such file")
    if err:  # not JSON: one name per line
        try:
            data = path.read_text(encoding="utf-8").split()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--expect @{path}: {exc}") from exc
    if isinstance(data, list) and all(isinstance(d, dict) and "cell" in d for d in data):
        data = [d["cell"] for d in data]  # the plan job's [{"cell": ..., "timeout": ...}]
    if not isinstance(data, list) or not all(isinstance(d, str) and CELL_NAME.match(d)
                                             for d in data):
        raise InvalidInput(f"--expect @{path}: expected a list of cell names")
    return data


def lost_column(cell: str, reason: str) -> Column:
    """A grid column for an expected cell with no results (every field a column has)."""
    device, series, profile = _parse_name(cell)
    return {
        "name": cell, "cell": cell, "device": device, "torch_series": series,
        "profile": profile, "torch_version": None, "torch_build": "?",
        "torch_channel": "release", "torch_git": None,
        "device_name": None, "device_count": None, "driver": None, "host": None,
        "python": None, "commit": None, "start": None, "end": None, "packages": {},
        "env_flags": {}, "counts": {}, "total": 0, "reasons": [], "status": LOST,
        "error": reason, "problems": [], "reason": reason, "selection": [], "path": "",
        "baseline": None, "ops_vs_predicted": None, "expected": True,
    }


def mark(model: Grid, expected: list[str],
         last_seen: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Add a ``lost`` column for each of ``expected`` without one, mark the expected
    errored columns lost too, and set the model's ``lost`` (names, with why). With
    ``last_seen`` (cell -> its latest run in the history) the reason says when it last
    reported. Returns the lost cells."""
    from ..base import outcomes

    have = {c["cell"]: c for c in model["columns"]}
    lost: dict[str, str] = {}
    for cell in expected:
        col = have.get(cell)
        if col is not None:
            col["expected"] = True
            if col["status"] == "errored":
                lost[cell] = f"ran but recorded no test (the run ended early?): {col['error']}"
                col["lost"] = lost[cell]
            continue
        reason = NO_RESULTS
        seen = (last_seen or {}).get(cell)
        if seen:
            reason += f"; last results in the history: {seen.get('start')} " \
                      f"(run {seen.get('run_id')}, commit {str(seen.get('commit_sha'))[:12]})"
        elif last_seen is not None:
            reason += "; never reported in the history"
        col = lost_column(cell, reason)
        col["counts"] = {o: 0 for o in outcomes.ALL}
        model["columns"].append(col)
        lost[cell] = reason
    model["columns"].sort(key=_sort_key)
    model["lost"] = [{"cell": c, "why": w} for c, w in lost.items()]
    return list(lost)
