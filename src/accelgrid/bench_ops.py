"""``accelgrid bench ops``: what op capture costs, measured side by side.

Runs the same suites in the same cell env through the runner with and without
``ACCELGRID_CAPTURE_OPS=1``, alternating, ``--repeat`` times, and reports the median
ratio of wall times (aim: <= 1.5). Prints progress; writes JSON and Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from . import runner, sessions
from .matrix import DEFAULT_MATRIX, load_matrix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelgrid bench ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", default=DEFAULT_MATRIX)
    parser.add_argument("--cell", default="cpu-2.13")
    parser.add_argument("--suites", default="suites/hf_examples/test_workloads.py",
                        help="comma-separated test paths (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default="docs", help="folder for bench-ops.{json,md}")
    args = parser.parse_args(argv)

    matrix = load_matrix(args.matrix)
    cell = matrix.cell(args.cell)
    paths = args.suites.split(",")
    print(f"[1/2] preparing {cell.name}'s env", flush=True)
    python = sessions.prepared_python(matrix.root, cell)
    times: dict[str, list[float]] = {"plain": [], "capture": []}
    ops_seen = 0
    with tempfile.TemporaryDirectory(prefix="accelgrid-bench-ops-") as tmp:
        for i in range(args.repeat):
            for mode in ("plain", "capture"):
                os.environ.pop("ACCELGRID_CAPTURE_OPS", None)
                if mode == "capture":
                    os.environ["ACCELGRID_CAPTURE_OPS"] = "1"
                out = Path(tmp) / f"{mode}-{i}"
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    rc = runner.run_cell(cell, python, matrix.root, out, paths)
                times[mode].append(time.perf_counter() - t0)
                print(f"[2/2] run {i + 1}/{args.repeat} {mode}: {times[mode][-1]:.1f} s "
                      f"(pytest exit {rc})", flush=True)
                if mode == "capture":
                    data = json.loads((out / cell.name / "ops.json").read_text())
                    ops_seen = len(data["ops"])
        os.environ.pop("ACCELGRID_CAPTURE_OPS", None)
    ratios = [c / p for c, p in zip(times["capture"], times["plain"], strict=True)]
    report = {"cell": cell.name, "suites": paths, "host": platform.node(),
              "cpus": os.cpu_count(), "times": times, "ratio_median": statistics.median(ratios),
              "ops_classified": ops_seen}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench-ops.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Op capture overhead: {cell.name} on {report['host']} ({report['cpus']} CPUs)",
             "", f"Suites: {', '.join(paths)}; runner wall time, {args.repeat} alternating runs.",
             "", "| mode | " + " | ".join(f"#{i + 1}" for i in range(args.repeat)) + " | median |",
             "|" + " --- |" * (args.repeat + 2)]
    for mode in ("plain", "capture"):
        lines.append(f"| {mode} | " + " | ".join(f"{t:.1f} s" for t in times[mode])
                     + f" | {statistics.median(times[mode]):.1f} s |")
    lines += ["", f"Median ratio capture/plain: **{report['ratio_median']:.2f}** (aim <= 1.5); "
              f"{ops_seen} distinct aten ops classified."]
    (out_dir / "bench-ops.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0
