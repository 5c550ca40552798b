"""``python -m tools.selfbench grid``: how long grids take for a large matrix (aim: 50 cells x 2,000
tests aggregated and rendered in a median of at most 3 s on a 2-core machine).

Synthesizes results folders (realistic mix: mostly passes, failures with messages and
tracebacks, skips, known-issue xfails with links, a crash, a timeout, one errored cell),
a baseline per cell, then times ``grid.build_model`` (reading every folder, comparing with the
baselines) and ``grid.write`` (grid.json, grid.md, grid.html), ``--repeat`` times: wall
and CPU time of each, with the load average (other work on the machine stretches wall
times, hardly CPU times). Prints the figures and the size of each file, and writes
``bench-grid.json`` and ``bench-grid.md`` (the machine, the command, accelgrid's commit)
to ``results/bench-grid/`` (``--out docs/measured`` updates the committed figures), with one more
run timed step by step (model, baseline comparison, each renderer, writing). ``--profile``
adds the functions one more run spends most time in (cProfile).
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import random
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from accelgrid import devices
from accelgrid import report as grid
from accelgrid.base import contract, jsonio, outcomes
from accelgrid.base.errors import InvalidInput
from accelgrid.base.jsonio import dumps
from accelgrid.bench import load_average, machine, write_outputs
from accelgrid.report import compare as baseline
from accelgrid.results import cellresults
from accelgrid.results.provenance import now, project_commit

DEVICES = tuple(d.name for d in devices.BUILTIN)
SERIES = ("2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13")
PROFILES = ("default", "fp64-emulation", "fallback-debug")
SUITES = ("smoke", "offload", "hf_examples", "ops", "dist")
DEFAULT_CELLS = 50
DEFAULT_TESTS = 2000
DEFAULT_REPEAT = 5
DEFAULT_BUDGET = 3.0  # seconds, the median run's (issue #18)
# docs/measured only when asked (--out docs/measured): never dirty a checkout
DEFAULT_OUT = "results/bench-grid"
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
        jsonio.write_json(folder / contract.ENV_FILE, {
            "cell": name, "device_type": device, "start": "2026-11-30T09:00:00+00:00",
            "end": "2026-11-30T09:40:00+00:00", "status": "ended",
            "torch": {"version": f"{name.split('-')[1]}.0+{device}", "device_count": 2,
                      "devices": [{"index": 0, "name": f"{device.upper()} Card 9000"}],
                      "driver": "1.2.3", "git_version": "abc123"},
            "python": {"version": "3.11.7"}, "packages": {"torch": "x", "torchao": "y"},
            "env": {contract.CELL: name}, "host": {"name": f"runner-{k}"},
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
        (folder / contract.TESTS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folders


def _baselines(folders: list[Path], out: Path, seed: int) -> None:
    """Baselines from the results, with a few outcomes flipped so the grid has changes."""
    rng = random.Random(seed + 1)
    for folder in folders:
        cell = cellresults.load_cell(folder)
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


def _timed_run(artifacts: Path, baselines: Path, out: Path
               ) -> tuple[dict[str, Any], dict[str, Path]]:
    """One build + write: wall and CPU seconds of each, the load average before it."""
    gc.collect()  # each run starts from the same heap, not the last run's garbage
    load = load_average()
    w0, c0 = time.perf_counter(), time.process_time()
    # The artifacts folder, not the cell list: discovery is part of the work.
    model = grid.build_model([artifacts], baseline_dir=baselines)
    w1, c1 = time.perf_counter(), time.process_time()
    paths = grid.write(model, out)
    w2, c2 = time.perf_counter(), time.process_time()
    return {"build": w1 - w0, "write": w2 - w1, "total": w2 - w0, "build_cpu": c1 - c0,
            "write_cpu": c2 - c1, "cpu": c2 - c0, "load": load}, paths


def _where(filename: str, line: int, func: str) -> str:
    """A profile entry's function without the machine's paths: accelgrid/report/x.py:f,
    json/decoder.py:f (the last two parts outside accelgrid), or a builtin's name."""
    if filename == "~":
        return re.sub(r" at 0x[0-9a-fA-F]+", "", func)  # no addresses: they vary per run
    path = Path(filename)
    package = Path(jsonio.__file__).resolve().parents[1]  # accelgrid/, above base/
    where = (Path(package.name) / path.relative_to(package) if path.is_relative_to(package)
             else Path(*path.parts[-2:]))
    return f"{where.as_posix()}:{line}({func})"


def _stages(artifacts: Path, baselines: Path, out: Path) -> list[dict[str, Any]]:
    """One more build + write, step by step as :func:`accelgrid.report.build_model` and
    :func:`~accelgrid.report.write` take them, each step timed (wall and CPU); and, apart,
    how much of the model's step reading the results folders is."""
    steps: list[dict[str, Any]] = []

    def step(label: str, work: Any, *args: Any) -> Any:
        w0, c0 = time.perf_counter(), time.process_time()
        value = work(*args)
        steps.append({"stage": label, "seconds": time.perf_counter() - w0,
                      "cpu": time.process_time() - c0})
        return value

    gc.collect()
    model = step("grid model (report.model.from_folders)", grid.model.from_folders, [artifacts])
    step("baseline comparison (report.compare.mark)", baseline.mark, model, baselines)
    texts = {k: step(f"grid.{k} (report.render_{name}.render)", module.render, model)
             for k, name, module in (("json", "json", grid.render_json),
                                     ("md", "markdown", grid.render_markdown),
                                     ("html", "html", grid.render_html))}
    out.mkdir(parents=True, exist_ok=True)
    step("writing the three files", lambda: [(out / f"grid.{k}").write_text(t, encoding="utf-8")
                                             for k, t in texts.items()])
    model, texts = None, {}  # drop them before timing the model on its own
    gc.collect()
    folders, _ = cellresults.discover([artifacts])
    step("of the model: reading the results folders (cellresults.read_cell)",
         lambda: [cellresults.read_cell(f) for f in folders])
    return steps


def _profile(artifacts: Path, baselines: Path, out: Path, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions by own time in one more build + write under cProfile (which
    adds a cost to every call, C built-ins' too: call-heavy code looks bigger than it is)."""
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    grid.write(grid.build_model([artifacts], baseline_dir=baselines), out)
    prof.disable()
    stats = [(_where(*key), s)
             for key, s in pstats.Stats(prof).stats.items()]  # type: ignore[attr-defined]
    total = sum(s[2] for _, s in stats) or 1.0
    rows = sorted(stats, key=lambda kv: kv[1][2], reverse=True)[:top]
    return [{"function": where, "calls": s[1], "own": s[2], "cumulative": s[3],
             "share": s[2] / total} for where, s in rows]


def command(cells: int, tests: int, repeat: int, budget: float, out: str | Path | None,
            profile: int) -> str:
    """The ``python -m tools.selfbench grid`` command line that runs what :func:`run` was
    asked."""
    words = ["python", "-m", "tools.selfbench", "grid", "--cells", str(cells),
             "--tests", str(tests), "--repeat", str(repeat), "--budget", f"{budget:g}",
             "--out", str(out or "''")]
    return " ".join(words + (["--profile", str(profile)] if profile else []))


def run(cells: int = DEFAULT_CELLS, tests: int = DEFAULT_TESTS, *, repeat: int = DEFAULT_REPEAT,
        budget: float = DEFAULT_BUDGET, out: str | Path | None = DEFAULT_OUT,
        profile: int = 0) -> dict[str, Any]:
    """Synthesize ``cells`` x ``tests`` results with baselines in a temporary folder, time
    ``grid.build_model`` + ``grid.write`` ``repeat`` times (``profile`` > 0: then list that many
    functions of a profiled run), write ``bench-grid.json`` and ``bench-grid.md`` to
    ``out`` (None or "": write nothing) and return the figures; ``report["ok"]``: the
    median run stayed within ``budget`` seconds. Raises InvalidInput for counts out of
    range.
    """
    if not 1 <= cells <= max_cells():
        raise InvalidInput(f"--cells must be between 1 and {max_cells()} "
                           f"(the synthetic cells), not {cells}")
    if tests < 1 or repeat < 1 or profile < 0:
        raise InvalidInput(f"--tests and --repeat must be >= 1 and --profile >= 0, not "
                           f"{tests}, {repeat} and {profile}")

    commit, dirty = project_commit(Path(__file__).resolve().parent)
    report: dict[str, Any] = {
        "cells": cells, "tests": tests, "budget": budget,
        "command": command(cells, tests, repeat, budget, out, profile), "date": now(),
        "commit": commit, "dirty": dirty, "machine": machine()}
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-grid-"))
    try:
        t0 = time.perf_counter()
        folders = synthesize(tmp / "artifacts", cells, tests)
        _baselines(folders, tmp / "baselines", 0)
        print(f"synthesized {cells} cells x {tests} tests in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        runs = []
        for n in range(repeat):
            figures, paths = _timed_run(tmp / "artifacts", tmp / "baselines", tmp / "out")
            runs.append(figures)
            print(f"run {n + 1}: build {figures['build']:.2f} s + write {figures['write']:.2f} "
                  f"s = {figures['total']:.2f} s (CPU {figures['cpu']:.2f} s, load "
                  f"{figures['load']})", flush=True)
        sizes = {k: p.stat().st_size for k, p in paths.items()}
        report["stages"] = _stages(tmp / "artifacts", tmp / "baselines", tmp / "out")
        if profile:
            report["profile"] = _profile(tmp / "artifacts", tmp / "baselines", tmp / "out",
                                         profile)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keys = ("build", "write", "total", "build_cpu", "write_cpu", "cpu")
    median = {k: statistics.median(r[k] for r in runs) for k in keys}
    report.update(runs=runs, median=median, worst=max(r["total"] for r in runs),
                  ok=median["total"] <= budget, sizes=sizes, load_after=load_average())
    print(f"median {median['total']:.2f} s (build {median['build']:.2f} + write "
          f"{median['write']:.2f}; CPU {median['cpu']:.2f} s), worst {report['worst']:.2f} s: "
          f"{'within' if report['ok'] else 'OVER'} the {budget:g} s budget")
    print("sizes: " + ", ".join(f"grid.{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
    print("one more run, step by step:")
    for p in report["stages"]:
        print(f"  {p['seconds']:6.3f} s (CPU {p['cpu']:6.3f} s)  {p['stage']}")
    for p in report.get("profile", []):
        print(f"  {p['share']:6.1%} {p['own']:6.3f} s own {p['cumulative']:6.3f} s cum "
              f"{p['calls']:>8} calls  {p['function']}")
    if out:
        write_outputs(out, "bench-grid", report, render_markdown(report))
        print(f"wrote {Path(out) / 'bench-grid.json'} and {Path(out) / 'bench-grid.md'}")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """bench-grid.md from a report as :func:`run` returns it."""
    runs, median, sizes = report["runs"], report["median"], report["sizes"]
    host = report["machine"]
    loads = [r["load"] for r in runs if r["load"] is not None]
    lines = [
        "# Grid benchmark", "",
        "`python -m tools.selfbench grid` (tools/selfbench/grid.py): synthetic results of "
        f"{report['cells']} cells × {report['tests']} tests (≈3% failed with tracebacks, 5% "
        "skipped, 2% known-issue xfails, a crash and a timeout in most cells, one errored "
        "cell), a baseline per cell; timed: `grid.build_model` over the artifacts folder "
        "(discovery, reading, baseline comparison) and `grid.write` (grid.json, grid.md, "
        "grid.html).",
        "",
        f"Command: `{report['command']}`, on accelgrid {(report['commit'] or 'unknown')[:12]}"
        + (" with uncommitted changes" if report["dirty"] else "") + f", {report['date']}.",
        "",
        f"Machine: {host['host']}, {host['cpus']} CPUs"
        + (f" ({host['cpus_usable']} usable)" if host["cpus_usable"] not in (None, host["cpus"])
           else "")
        + f", {host['cpu_model']}, {host['memory_gib']} GiB, {host['os']}, {host['python']}.",
        "",
        "Load average (1 min) before each run: "
        + (f"{min(loads):g} to {max(loads):g}" if loads else "unknown")
        + f"; after: {report['load_after']}. Other work on the machine stretches wall "
        "times; the CPU times are this process's own.", "",
        "| run | build (s) | write (s) | total (s) | CPU (s) | load |",
        "| --- | --- | --- | --- | --- | --- |",
        *[f"| {i + 1} | {r['build']:.2f} | {r['write']:.2f} | {r['total']:.2f} | "
          f"{r['cpu']:.2f} | {r['load']} |" for i, r in enumerate(runs)],
        f"| median | {median['build']:.2f} | {median['write']:.2f} | {median['total']:.2f} | "
        f"{median['cpu']:.2f} | |", "",
        f"Median run {median['total']:.2f} s (worst {report['worst']:.2f} s) against a "
        f"{report['budget']:g} s budget: {'met' if report['ok'] else 'NOT met'}.", "",
        "Output sizes: " + ", ".join(f"grid.{k} {v / 1e6:.2f} MB"
                                      for k, v in sizes.items())
        + f" (grid.md stays under its {grid.GITHUB_SUMMARY_LIMIT // 2048} KiB budget "
        "by keeping only rows with a bad result or a change).", "",
    ]
    if report.get("stages"):
        lines += ["One more run, step by step as `grid.build_model` and `grid.write` take them:",
                  "",
                  "| step | wall (s) | CPU (s) |", "| --- | --- | --- |",
                  *[f"| {p['stage']} | {p['seconds']:.3f} | {p['cpu']:.3f} |"
                    for p in report["stages"]], ""]
    if report.get("profile"):
        lines += ["The functions one more run spends most time in, under cProfile (which "
                  "adds a cost to every call, C built-ins' too: call-heavy code looks bigger "
                  "than it is):", "",
                  "| function | calls | own (s) | share | cumulative (s) |",
                  "| --- | --- | --- | --- | --- |",
                  *[f"| `{p['function']}` | {p['calls']} | {p['own']:.3f} | "
                    f"{p['share']:.1%} | {p['cumulative']:.3f} |" for p in report["profile"]],
                  ""]
    return "\n".join(lines)
