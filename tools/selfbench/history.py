"""``python -m tools.selfbench history``: the history store and what reads it, on synthetic data
(default 90 nightly runs x 40 cells x 2,000 tests; aims on a 2-core machine: adding one
40-cell run <= 2 s, a grid with a 30-run history <= 3 s, the published site <= 10 s).

Tonight's 40 cells are written as results folders (:func:`tools.selfbench.grid.synthesize`,
each with its own run id); the 89 nights before are added from memory (the same tests,
a few flaky ones flipping, some tests breaking for good on a night), then timed, each
``--repeat`` times on a fresh copy of the database: ``history add`` of tonight's folders,
``grid --history --window 30`` of them (build, add (already there), history, render,
write) and ``publish``. Prints wall and CPU seconds with the load average, the
database's size and its size per run, and writes ``bench-history.json``/``.md`` to
``results/bench-history/`` (``--out docs/measured`` updates the committed figures).
"""

from __future__ import annotations

import copy
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from accelgrid import report
from accelgrid.base import contract, jsonio, outcomes
from accelgrid.base.errors import InvalidInput
from accelgrid.bench import load_average, machine, write_outputs
from accelgrid.report import site
from accelgrid.results.cellresults import read_cell
from accelgrid.results.history import open_store
from accelgrid.results.provenance import now, project_commit

from .grid import synthesize

DEFAULT_NIGHTS = 90
DEFAULT_CELLS = 40
DEFAULT_TESTS = 2000
DEFAULT_WINDOW = 30
DEFAULT_REPEAT = 3
AIMS = {"add": 2.0, "grid": 3.0, "site": 10.0}  # seconds (issue #25)
DEFAULT_OUT = "results/bench-history"


def _start(night: int) -> str:
    return f"2026-{8 + night // 30:02d}-{night % 30 + 1:02d}T03:00:00+00:00"


def _tonight(root: Path, cells: int, tests: int, night: int) -> list[Path]:
    folders = synthesize(root, cells, tests, errored=False)
    for folder in folders:
        env = jsonio.read_json(folder / contract.ENV_FILE)[0]
        env.update(run_id=f"{env['cell']}-night{night}", start=_start(night),
                   project={"commit": f"c{night:04d}"})
        jsonio.write_json(folder / contract.ENV_FILE, env)
    return folders


def _history(store: Any, folders: list[Path], nights: int, seed: int) -> float:
    """Add ``nights`` earlier runs of the cells in ``folders`` from memory; seconds."""
    rng = random.Random(seed)
    base = [(f, read_cell(f)) for f in folders]
    nodeids = sorted(base[0][1].tests)
    flaky = set(rng.sample(nodeids, max(1, len(nodeids) // 100)))
    t0 = time.perf_counter()
    for night in range(nights):
        batch = []
        for folder, cell in base:
            c = copy.copy(cell)
            c.env = {**cell.env, "run_id": f"{cell.name}-night{night}", "start": _start(night),
                     "project": {"commit": f"c{night:04d}"}}
            tests: dict[str, Any] = {}  # records as the store reads them (a pass: message None)
            for nodeid, rec in cell.tests.items():
                outcome = rec["outcome"]
                if nodeid in flaky and rng.random() < 0.3:
                    outcome = outcomes.FAILED if outcome == outcomes.PASSED else outcomes.PASSED
                tests[nodeid] = {"nodeid": nodeid, "outcome": outcome,
                                 "duration": rec.get("duration"), "message": rec.get("message")}
            c.tests = tests
            batch.append((folder, c))
        store.add_cells(batch)
    return time.perf_counter() - t0


class Timing(TypedDict):
    """One timed step: seconds of wall and CPU time, the load average before it."""
    wall: float
    cpu: float
    load: float | None


def _timed(work: Any) -> Timing:
    load = load_average()
    t0, c0 = time.perf_counter(), time.process_time()
    work()
    return {"wall": round(time.perf_counter() - t0, 3),
            "cpu": round(time.process_time() - c0, 3), "load": load}


def run(nights: int = DEFAULT_NIGHTS, cells: int = DEFAULT_CELLS, tests: int = DEFAULT_TESTS,
        *, window: int = DEFAULT_WINDOW, repeat: int = DEFAULT_REPEAT,
        out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Build the synthetic history, time add / grid / site ``repeat`` times each, write
    the report to ``out`` (None or "": nothing) and return it."""
    if nights < 2 or cells < 1 or tests < 1 or repeat < 1 or window < 1:
        raise InvalidInput("--nights must be >= 2 and --cells, --tests, --window, --repeat "
                           ">= 1")
    commit, dirty = project_commit(Path(__file__).resolve().parent)
    rep: dict[str, Any] = {
        "nights": nights, "cells": cells, "tests": tests, "window": window, "aims": AIMS,
        "command": (f"python -m tools.selfbench history --nights {nights} --cells {cells} --tests "
                    f"{tests} --window {window} --repeat {repeat} --out {out or chr(39) * 2}"),
        "date": now(), "commit": commit, "dirty": dirty, "machine": machine(),
        "load_before": load_average()}
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-history-"))
    try:
        t0 = time.perf_counter()
        folders = _tonight(tmp / "tonight", cells, tests, nights - 1)
        seed_db = tmp / "seed.sqlite"
        with open_store(seed_db) as store:
            rep["history_add_s"] = round(_history(store, folders, nights - 1, 0), 2)
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        print(f"synthesized {nights - 1} nights x {cells} cells x {tests} tests in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        runs: dict[str, list[Timing]] = {"add": [], "grid": [], "site": [],
                                                   "grid_plain": []}
        for n in range(repeat):
            db = tmp / f"run{n}.sqlite"
            shutil.copyfile(seed_db, db)

            def add(db: Path = db) -> None:
                with open_store(db) as store:
                    done, _ = store.add(folders)
                    assert all(a.status == "added" for a in done)

            runs["add"].append(_timed(add))
            runs["grid"].append(_timed(lambda db=db: report.grid(
                folders, tmp / "grid", history_db=db, window=window)))
            runs["site"].append(_timed(lambda db=db: site.publish(
                folders, tmp / "site", history_db=db, window=window)))
            # The same grid without history, side by side: what the history adds.
            runs["grid_plain"].append(_timed(lambda: report.grid(folders, tmp / "plain")))
            print(f"run {n + 1}: " + ", ".join(
                f"{k} {v[-1]['wall']:.2f} s (CPU {v[-1]['cpu']:.2f} s, load {v[-1]['load']}"
                + (f"; aim <= {AIMS[k]:g} s)" if k in AIMS else ")")
                for k, v in runs.items()), flush=True)
        with open_store(db) as store:
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size = store.size_bytes()
            total_runs = store.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        rep["db_bytes"] = size
        rep["db_runs"] = total_runs
        rep["db_bytes_per_night"] = round(size / nights)
        rep["db_bytes_per_cell_run"] = round(size / total_runs)
        rep["site_bytes"] = sum(p.stat().st_size for p in (tmp / "site").rglob("*")
                                if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep["runs"] = runs
    rep["median"] = {k: statistics.median(r["wall"] for r in v) for k, v in runs.items()}
    rep["median_cpu"] = {k: statistics.median(r["cpu"] for r in v) for k, v in runs.items()}
    rep["ok"] = {k: rep["median"][k] <= AIMS[k] for k in AIMS}
    rep["history_cpu_ratio"] = round(rep["median_cpu"]["grid"] / rep["median_cpu"]["grid_plain"],
                                     2) if rep["median_cpu"]["grid_plain"] else None
    rep["load_after"] = load_average()
    for k in AIMS:
        print(f"{k}: median {rep['median'][k]:.2f} s (CPU {rep['median_cpu'][k]:.2f} s): "
              f"{'within' if rep['ok'][k] else 'OVER'} the {AIMS[k]:g} s aim")
    print(f"grid without history (side by side): median {rep['median']['grid_plain']:.2f} s "
          f"(CPU {rep['median_cpu']['grid_plain']:.2f} s); with history "
          f"{rep['history_cpu_ratio']}x its CPU time")
    print(f"database: {size / 1e6:.1f} MB for {total_runs} cell runs ({nights} nights): "
          f"{rep['db_bytes_per_night'] / 1e6:.2f} MB per night, "
          f"{rep['db_bytes_per_cell_run'] / 1e3:.1f} kB per cell run; site "
          f"{rep['site_bytes'] / 1e6:.1f} MB")
    if out:
        write_outputs(out, "bench-history", rep, render_markdown(rep))
        print(f"wrote {Path(out) / 'bench-history.json'} and {Path(out) / 'bench-history.md'}")
    return rep


def render_markdown(rep: dict[str, Any]) -> str:
    m = rep["machine"]
    lines = [
        "# History benchmark (python -m tools.selfbench history)", "",
        f"{rep['nights']} nightly runs x {rep['cells']} cells x {rep['tests']} tests, "
        f"window {rep['window']}; {rep['date']}, accelgrid {rep['commit']}"
        + (" (dirty)" if rep["dirty"] else "") + ".", "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpus')} CPUs; load average before "
        f"{rep['load_before']}, after {rep['load_after']} (other work on the machine "
        "stretches wall times, hardly CPU times).", "",
        f"Command: `{rep['command']}`", "",
        "| step | aim (s) | median wall (s) | median CPU (s) | runs (wall s, load) |",
        "| --- | --- | --- | --- | --- |"]
    label = {"add": f"history add of one {rep['cells']}-cell night",
             "grid": f"grid --history --window {rep['window']}", "site": "publish (site)"}
    for k, aim in rep["aims"].items():
        lines.append(f"| {label[k]} | {aim:g} | {rep['median'][k]:.2f} | "
                     f"{rep['median_cpu'][k]:.2f} | "
                     + ", ".join(f"{r['wall']:.2f} ({r['load']})" for r in rep["runs"][k])
                     + " |")
    lines.append(f"| the same grid without history (side by side) | | "
                 f"{rep['median']['grid_plain']:.2f} | {rep['median_cpu']['grid_plain']:.2f} | "
                 + ", ".join(f"{r['wall']:.2f} ({r['load']})" for r in rep["runs"]["grid_plain"])
                 + " |")
    lines += ["", f"With history the grid takes {rep['history_cpu_ratio']}x the CPU time of "
              "the same grid without it.", ""]
    lines += ["", f"Database: {rep['db_bytes'] / 1e6:.1f} MB for {rep['db_runs']} cell runs: "
              f"{rep['db_bytes_per_night'] / 1e6:.2f} MB per night, "
              f"{rep['db_bytes_per_cell_run'] / 1e3:.1f} kB per cell run. Site: "
              f"{rep['site_bytes'] / 1e6:.1f} MB.", ""]
    return "\n".join(lines)
