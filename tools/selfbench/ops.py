"""``python -m tools.selfbench ops``: what op capture costs, measured side by side.

Runs the same suites in the same cell env through the runner with and without
``ACCELGRID_CAPTURE_OPS=1``, alternating, ``--repeat`` times, and reports the median
ratio of wall times (aim: <= 1.5). Prints progress; writes JSON and Markdown.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from accelgrid.base import contract
from accelgrid.base.errors import InvalidInput
from accelgrid.bench import write_outputs
from accelgrid.config.model import Matrix

DEFAULT_CELL = "cpu-2.13"
DEFAULT_SUITES = ("suites/hf_examples/test_workloads.py",)
DEFAULT_REPEAT = 2
DEFAULT_OUT = "results/bench-ops"  # docs/measured only when asked (--out docs/measured)
MODES = ("plain", "capture")


@contextlib.contextmanager
def _capture(on: bool) -> Iterator[None]:
    """``ACCELGRID_CAPTURE_OPS=1`` (or unset) for the runs inside; restored afterwards."""
    before = os.environ.pop(contract.CAPTURE_OPS, None)
    if on:
        os.environ[contract.CAPTURE_OPS] = "1"
    try:
        yield
    finally:
        os.environ.pop(contract.CAPTURE_OPS, None)
        if before is not None:
            os.environ[contract.CAPTURE_OPS] = before


def run(matrix: Matrix, cell: str = DEFAULT_CELL, *, suites: Sequence[str] = DEFAULT_SUITES,
        repeat: int = DEFAULT_REPEAT, out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Time ``cell``'s runner on ``suites`` without and with op capture, alternating
    ``repeat`` times; write ``bench-ops.{json,md}`` to ``out`` (None: write nothing) and
    return the report.

    Raises UnknownName for an unknown cell, InvalidInput for ``repeat < 1`` or no suites.
    """
    if repeat < 1:
        raise InvalidInput(f"--repeat must be >= 1, not {repeat}")
    paths = list(suites)
    if not paths:
        raise InvalidInput("--suites names no test paths")
    from accelgrid import results
    from accelgrid.commands import sessions  # imports nox: only when a benchmark runs
    from accelgrid.run import preflight
    from accelgrid.run.cell import run_cell
    from accelgrid.run.request import RunRequest

    the_cell = matrix.cell(cell)
    print(f"[1/2] preparing {the_cell.name}'s env", flush=True)
    python = sessions.prepared_python(matrix.root, the_cell, {**os.environ, **matrix.nox_env})
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    ops_seen = 0
    with tempfile.TemporaryDirectory(prefix="accelgrid-bench-ops-") as tmp:
        for i in range(repeat):
            for mode in MODES:
                folder = Path(tmp) / f"{mode}-{i}"
                t0 = time.perf_counter()
                with _capture(mode == "capture"), contextlib.redirect_stdout(io.StringIO()):
                    rc = run_cell(RunRequest(
                        the_cell, python, matrix.root, folder,
                        preflight.check(the_cell, matrix.root), tuple(paths),
                        finalized=sessions.write_op_pages))
                times[mode].append(time.perf_counter() - t0)
                print(f"[2/2] run {i + 1}/{repeat} {mode}: {times[mode][-1]:.1f} s "
                      f"(pytest exit {rc})", flush=True)
                if mode == "capture":
                    run_folder = results.last_run(folder / the_cell.name)[1]
                    data = json.loads((run_folder / contract.OPS_FILE).read_text())
                    ops_seen = len(data["ops"])
    ratios = [c / p for c, p in zip(times["capture"], times["plain"], strict=True)]
    report = {"cell": the_cell.name, "suites": paths, "host": platform.node(),
              "cpus": os.cpu_count(), "times": times, "ratio_median": statistics.median(ratios),
              "ops_classified": ops_seen}
    md = render_markdown(report)
    if out is not None:
        write_outputs(out, "bench-ops", report, md)
    print(md, end="")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """bench-ops.md from a report as :func:`run` returns it."""
    times = report["times"]
    repeat = len(times["plain"])
    lines = [f"# Op capture overhead: {report['cell']} on {report['host']} "
             f"({report['cpus']} CPUs)",
             "", f"Suites: {', '.join(report['suites'])}; runner wall time, {repeat} "
             "alternating runs.",
             "", "| mode | " + " | ".join(f"#{i + 1}" for i in range(repeat)) + " | median |",
             "|" + " --- |" * (repeat + 2)]
    for mode in MODES:
        lines.append(f"| {mode} | " + " | ".join(f"{t:.1f} s" for t in times[mode])
                     + f" | {statistics.median(times[mode]):.1f} s |")
    lines += ["", f"Median ratio capture/plain: **{report['ratio_median']:.2f}** (aim <= 1.5); "
              f"{report['ops_classified']} distinct aten ops classified."]
    return "\n".join(lines) + "\n"
