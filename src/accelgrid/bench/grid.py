"""``accelgrid bench grid``: how long grids take for a large matrix (aim: 50 cells x 2,000
tests aggregated and rendered in under 10 s).

Synthesizes results folders (realistic mix: mostly passes, failures with messages and
tracebacks, skips, known-issue xfails with links, a crash, a timeout, one errored cell),
a baseline per cell, then times ``grid.build`` (reading every folder, comparing with the
baselines) and ``grid.write`` (grid.json, grid.md, grid.html), ``--repeat`` times.
Prints the figures and writes them to ``results/bench-grid/bench-grid.md`` (``--out docs``
updates the committed figures).
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import outcomes, results
from .. import report as grid
from ..errors import InvalidInput
from ..report import compare as baseline
from ..results import dumps

DEVICES = ("cpu", "cuda", "xpu", "mps")
SERIES = ("2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13")
PROFILES = ("default", "fp64-emulation", "fallback-debug")
SUITES = ("smoke", "offload", "hf_examples", "ops", "dist")
DEFAULT_CELLS = 50
DEFAULT_TESTS = 2000
DEFAULT_REPEAT = 3
DEFAULT_BUDGET = 10.0
DEFAULT_OUT = "results/bench-grid"  # docs/ only when asked (--out docs): never dirty a checkout
TRACEBACK = "".join(f"  File \"suites/x/helpers.py\", line {n}, in step\n    y = f(x)\n"
                    for n in range(20)) + "AssertionError: tensors are not close"


def _cell_names(n: int) -> list[str]:
    names = [f"{d}-{s}" + ("" if p == "default" else f"-{p}")
             for p in PROFILES for d in DEVICES for s in SERIES]
    return names[:n]


def _nodeids(n: int) -> list[str]:
    ids = []
    for i in range(n):
        suite = SUITES[i % len(SUITES)]
        func = f"test_case_{i // 20 % 40}"
        ids.append(f"suites/{suite}/test_{suite}_{i // 800}.py::{func}[w{i}-fp32]")
    return ids


def synthesize(root: Path, cells: int, tests: int, seed: int = 0,
               errored: bool = True) -> list[Path]:
    """Write ``cells`` results folders with ``tests`` tests each under ``root``."""
    rng = random.Random(seed)
    nodeids = _nodeids(tests)
    folders = []
    for k, name in enumerate(_cell_names(cells)):
        folder = root / name
        folder.mkdir(parents=True)
        folders.append(folder)
        device = name.split("-")[0]
        results.write_json(folder / results.ENV, {
            "cell": name, "device_type": device, "start": "2026-11-30T09:00:00+00:00",
            "end": "2026-11-30T09:40:00+00:00", "status": "ended",
            "torch": {"version": f"{name.split('-')[1]}.0+{device}", "device_count": 2,
                      "devices": [{"index": 0, "name": f"{device.upper()} Card 9000"}],
                      "driver": "1.2.3", "git_version": "abc123"},
            "python": {"version": "3.11.7"}, "packages": {"torch": "x", "torchao": "y"},
            "env": {"ACCELGRID_CELL": name}, "host": {"name": f"runner-{k}"},
            "project": {"commit": "deadbeef"}})
        if errored and k == cells - 1:
            continue  # no tests.jsonl: an errored column, as a lost artifact would be
        lines = []
        for i, nodeid in enumerate(nodeids):
            r = rng.random()
            rec = {"nodeid": nodeid, "outcome": outcomes.PASSED, "duration": r, "worker": "gw0",
                   "device": device, "cell": name}
            if r < 0.03:
                rec.update(outcome=outcomes.FAILED, message=f"AssertionError: mismatch {i}",
                           longrepr=TRACEBACK)
            elif r < 0.08:
                rec.update(outcome=outcomes.SKIPPED, message="needs 2 devices")
            elif r < 0.10:
                rec.update(outcome=outcomes.XFAILED, message="known issue",
                           issue={"id": "pytorch/pytorch#127929", "title": "an upstream bug",
                                  "url": "https://github.com/pytorch/pytorch/issues/127929"})
            elif r < 0.101:
                rec.update(outcome=outcomes.CRASHED, message="the test process died")
            elif r < 0.102:
                rec.update(outcome=outcomes.TIMEOUT, message="Timeout (>900.0s)")
            lines.append(dumps(rec))
        (folder / results.TESTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folders


def _baselines(folders: list[Path], out: Path, seed: int) -> None:
    """Baselines from the results, with a few outcomes flipped so the grid has changes."""
    rng = random.Random(seed + 1)
    for folder in folders:
        cell = results.load_cell(folder)
        if cell.error:
            continue
        doc = baseline.from_results(cell)
        for nodeid in rng.sample(sorted(doc["tests"]), 5):
            doc["tests"][nodeid] = rng.choice([outcomes.PASSED, outcomes.FAILED])
        path = baseline.path_for(out, cell.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(doc), encoding="utf-8")


def max_cells() -> int:
    """How many distinct synthetic cell names there are."""
    return len(_cell_names(10**6))


def run(cells: int = DEFAULT_CELLS, tests: int = DEFAULT_TESTS, *, repeat: int = DEFAULT_REPEAT,
        budget: float = DEFAULT_BUDGET, out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Synthesize ``cells`` x ``tests`` results with baselines in a temporary folder, time
    ``grid.build`` + ``grid.write`` ``repeat`` times, write ``bench-grid.md`` to ``out``
    (None or "": write nothing) and return the figures; ``report["ok"]``: the worst run
    stayed within ``budget`` seconds. Raises InvalidInput for counts out of range.
    """
    if not 1 <= cells <= max_cells():
        raise InvalidInput(f"--cells must be between 1 and {max_cells()} "
                           f"(the synthetic cells), not {cells}")
    if tests < 1 or repeat < 1:
        raise InvalidInput(f"--tests and --repeat must be >= 1, not {tests} and {repeat}")

    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-grid-"))
    try:
        t0 = time.perf_counter()
        folders = synthesize(tmp / "artifacts", cells, tests)
        _baselines(folders, tmp / "baselines", 0)
        print(f"synthesized {cells} cells x {tests} tests in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        runs = []
        for n in range(repeat):
            t0 = time.perf_counter()
            # The artifacts folder, not the cell list: discovery is part of the work.
            model = grid.build([tmp / "artifacts"], baseline_dir=tmp / "baselines")
            t1 = time.perf_counter()
            paths = grid.write(model, tmp / "out")
            t2 = time.perf_counter()
            runs.append({"build": t1 - t0, "write": t2 - t1, "total": t2 - t0})
            print(f"run {n + 1}: build {t1 - t0:.2f} s + write {t2 - t1:.2f} s = "
                  f"{t2 - t0:.2f} s", flush=True)
        sizes = {k: p.stat().st_size for k, p in paths.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = {k: statistics.median(r[k] for r in runs) for k in ("build", "write", "total")}
    worst = max(r["total"] for r in runs)
    report = {"cells": cells, "tests": tests, "budget": budget, "runs": runs,
              "median": median, "worst": worst, "ok": worst < budget, "sizes": sizes}
    print(f"median {median['total']:.2f} s (build {median['build']:.2f}, write "
          f"{median['write']:.2f}), worst {worst:.2f} s: "
          f"{'within' if report['ok'] else 'OVER'} the {budget:g} s budget")
    print("sizes: " + ", ".join(f"grid.{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench-grid.md").write_text(render_markdown(report), encoding="utf-8")
        print(f"wrote {out / 'bench-grid.md'}")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """bench-grid.md from a report as :func:`run` returns it."""
    runs, median, sizes = report["runs"], report["median"], report["sizes"]
    lines = [
        "# Grid benchmark", "",
        "`accelgrid bench grid` (src/accelgrid/bench/grid.py): synthetic results of "
        f"{report['cells']} cells × {report['tests']} tests (≈3% failed with tracebacks, 5% "
        "skipped, 2% known-issue xfails, a crash and a timeout in most cells, one errored "
        "cell), a baseline per cell; timed: `grid.build` over the artifacts folder (discovery, "
        "reading, baseline comparison) and `grid.write` (grid.json, grid.md, grid.html).",
        "",
        f"Host: {platform.node()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.machine()}; {len(runs)} runs.", "",
        "| run | build (s) | write (s) | total (s) |", "| --- | --- | --- | --- |",
        *[f"| {i + 1} | {r['build']:.2f} | {r['write']:.2f} | {r['total']:.2f} |"
          for i, r in enumerate(runs)],
        f"| median | {median['build']:.2f} | {median['write']:.2f} | "
        f"{median['total']:.2f} |", "",
        f"Worst run {report['worst']:.2f} s against a {report['budget']:g} s budget: "
        f"{'met' if report['ok'] else 'NOT met'}.", "",
        "Output sizes: " + ", ".join(f"grid.{k} {v / 1e6:.2f} MB"
                                      for k, v in sizes.items())
        + f" (grid.md stays under its {grid.GITHUB_SUMMARY_LIMIT // 2048} KiB budget "
        "by keeping only rows with a bad result or a change).", "",
    ]
    return "\n".join(lines)
