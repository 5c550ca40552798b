"""``accelgrid bench devices``: how a whole cell run scales with the devices it is given.

Runs the cell (``nox -s CELL``, ``--no-venv`` on hosts with torch preinstalled) once per
device count: 1, 2, 4, ... up to the devices this host has (or ``--counts``), each time
with ``ACCELGRID_DEVICES`` naming the first N of them, ``--repeat`` times. Each run's
``summary.json`` and ``env.json`` give its passes (the pinned pass, the all-devices pass
beside or after it), their wall times, the workers' start-up (first test after the pass
started), the tests' own durations per suite (when they grow with the count, the workers
contend) and the outcomes; the report puts each count's median wall time beside one
device's (aims: at most 0.6 of it on 2 devices, 0.4 on 4) with the devices' names, the
driver and the host. Each run is printed as it ends. Writes bench-devices.{json,md} to
``--out`` (``results/bench-devices``; ``docs/measured`` for committed figures).

``--workers-per-device 1,8`` (a sweep) runs each count once per number of workers sharing
each device (``ACCELGRID_WORKERS_PER_DEVICE``; ``auto``: the runner's own choice for this
host) and reports each one's median against one device with one worker (aim: at most
0.33 of it with several workers on one device), with each run's failures by name.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import results
from ..base import contract, jsonio, lifetime, outcomes
from ..base.errors import AccelgridError, InvalidInput
from ..config.model import Matrix
from ..host import detect
from ..results import provenance
from ..results.provenance import now
from ..results.records import TestRecord
from ..run import console
from ..run import passes as pass_plan
from . import STOP_GRACE_S, load_average, machine, stoppable, write_outputs

DEFAULT_OUT = "results/bench-devices"
DEFAULT_REPEAT = 1
AIMS = {2: 0.6, 4: 0.4}   # whole-cell wall time on N devices / on one, median
SHARED_AIM = 0.33         # one device, several workers sharing it / one worker, median
AUTO = "auto"             # --workers-per-device: the runner's choice for this host


def parse_per_device(value: str | None) -> list[str] | None:
    """``--workers-per-device``: comma-separated whole numbers (1..64) or ``auto``, in the
    order they run; one given twice runs twice (``1,auto,auto``: one run with a worker,
    then two more of the runner's choice, each ``--repeat`` times)."""
    if value is None:
        return None
    items = [x.strip() for x in value.split(",") if x.strip()]
    wrong = [x for x in items if x != AUTO and not (x.isdigit() and
                                                   1 <= int(x) <= pass_plan.MAX_WORKERS_PER_DEVICE)]
    if not items or wrong:
        raise InvalidInput(f"--workers-per-device {value!r}: whole numbers from 1 to "
                           f"{pass_plan.MAX_WORKERS_PER_DEVICE} or {AUTO}, comma-separated")
    return items


def counts_for(available: int, asked: Sequence[int] | None = None) -> list[int]:
    """The device counts to run: ``asked`` (each within 1..available), else 1, 2, 4, ...
    up to ``available`` and ``available`` itself."""
    if available < 1:
        raise InvalidInput(f"no device of the cell's kind here (set {contract.DEVICES} to "
                           "name them when detection cannot)")
    if asked:
        wrong = [n for n in asked if not 1 <= n <= available]
        if wrong:
            raise InvalidInput(f"device counts {wrong} are outside 1..{available} (the "
                               "devices this host has)")
        return sorted(set(asked))
    counts, n = [], 1
    while n < available:
        counts.append(n)
        n *= 2
    return [*counts, available]


def _pass_facts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: p.get(k) for k in ("name", "workers", "beside", "wall_s", "first_test_s",
                                   "tests")} for p in summary.get("passes") or []]


def _devices_of(env: dict[str, Any]) -> dict[str, Any]:
    torch = env.get("torch") or {}
    return {"names": sorted({d.get("name") for d in torch.get("devices") or []
                             if d.get("name")}),
            "driver": torch.get("driver"), "torch": torch.get("version"),
            "host_cpus": (env.get("host") or {}).get("cpus")}


def run(matrix: Matrix, cell_name: str, *, counts: Sequence[int] | None = None,
        repeat: int = DEFAULT_REPEAT, no_venv: bool = False,
        pytest_args: Sequence[str] = (), out: str | Path | None = DEFAULT_OUT,
        per_device: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``cell_name`` on 1, 2, 4, ... of this host's devices and report the scaling
    (see the module's docstring); InvalidInput for a cell whose device cannot be split."""
    cell = matrix.cell(cell_name)
    if not cell.device_type.visibility_var:
        raise InvalidInput(f"{cell.name}: a {cell.device} cell runs on one device; the "
                           "bench needs a device type with several devices (cuda, xpu)")
    if repeat < 1:
        raise InvalidInput("--repeat must be at least 1")
    ids = detect.device_ids(cell.device_type)
    plan = counts_for(len(ids), counts)
    root = matrix.root.resolve()
    commit, dirty = provenance.project_commit(root)
    command = ["accelgrid", "bench", "devices", "--cell", cell.name, "--repeat", str(repeat),
               *(["--counts", ",".join(map(str, counts))] if counts else []),
               *(["--workers-per-device", ",".join(per_device)] if per_device else []),
               *(["--no-venv"] if no_venv else []),
               *(["--", *pytest_args] if pytest_args else [])]
    sweep: list[str | None] = list(per_device) if per_device else [None]
    report: dict[str, Any] = {
        "cell": cell.name, "command": shlex.join(command), "date": now(), "commit": commit,
        "dirty": dirty, "machine": machine(), "device_ids": ids, "aims": AIMS, "runs": []}
    nox = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"),
           *(["--no-venv"] if no_venv else []), "-s", cell.name,
           *(["--", *pytest_args] if pytest_args else [])]
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-devices-"))
    print(f"{cell.name}: {len(ids)} {cell.device} device(s) here ({','.join(ids)}); runs "
          f"with {', '.join(map(str, plan))} of them, {repeat} each"
          + (f", {' / '.join(map(str, sweep))} workers per device" if per_device else ""),
          flush=True)
    total = len(plan) * len(sweep) * repeat
    try:
        with stoppable():   # SIGTERM cleans up as Ctrl-C does
            for n, k, rep in ((n, k, rep) for n in plan for k in sweep
                              for rep in range(repeat)):
                entry, wall = _one_run(matrix, cell.name, nox, tmp / f"{n}-{k}-{rep}",
                                       ids[:n], k)
                report["runs"].append(entry)
                if out:  # as each run ends: a bench stopped later keeps this one
                    write_outputs(out, "bench-devices", _summed(report, per_device),
                                  markdown(_summed(report, per_device)))
                print(f"[{len(report['runs'])}/{total}] {n} device(s)"
                      + (f", {k} worker(s) each" if k else "") + ": "
                      f"{wall:.1f} s (pytest passes {entry['passes_wall_s']} s; "
                      + ", ".join(f"{p['name']} {p['wall_s']} s" for p in entry["passes"])
                      + f"; load {entry['load']})"
                      + "".join(f"\n    went wrong: {x}: {m[:200]}"
                                for x, m in entry["messages"].items()),
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["load_end"] = load_average()
    report = _summed(report, per_device)
    if out:
        where = write_outputs(out, "bench-devices", report, markdown(report))
        print(f"wrote {where / 'bench-devices.json'} and {where / 'bench-devices.md'}")
    return report


def _one_run(matrix: Matrix, cell: str, nox: list[str], where: Path, ids: list[str],
             per_device: str | None) -> tuple[dict[str, Any], float]:
    """One run of the cell on ``ids`` (``per_device`` workers each: None, the run's
    default; ``auto``, the runner's choice), its results in ``where``: the run's entry of
    the report, and its wall time."""
    root = matrix.root.resolve()
    env = {**os.environ, **matrix.nox_env, contract.RESULTS_DIR: str(where),
           contract.DEVICES: ",".join(ids)}
    if per_device == AUTO:
        env.pop(contract.WORKERS_PER_DEVICE, None)
    elif per_device is not None:
        env[contract.WORKERS_PER_DEVICE] = per_device
    load = load_average()
    start = time.perf_counter()
    proc = lifetime.run_group(nox, cwd=root, env=env, grace=STOP_GRACE_S)
    wall = time.perf_counter() - start
    folder = _run_folder(where / cell, proc)
    summary, _ = jsonio.read_json(folder / contract.SUMMARY_FILE)
    env_json, _ = jsonio.read_json(folder / contract.ENV_FILE)
    records, _ = results.read_records(folder / contract.TESTS_FILE)
    entry: dict[str, Any] = {"devices": len(ids), "ids": ids, "wall_s": round(wall, 2),
                             "test_seconds": own_time_per_suite(records),
                             "rc": proc.returncode,
                             "passes_wall_s": (summary or {}).get("wall_s"),
                             "passes": _pass_facts(summary or {}),
                             "counts": (summary or {}).get("counts"), "load": load,
                             "device_facts": _devices_of(env_json or {}),
                             "per_device": per_device, "failed": _went_wrong(records)}
    last = results.last_outcomes(list(records))
    entry["messages"] = {x: str(last[x].get("message") or "")[:500] for x in entry["failed"]}
    return entry, wall


def _summed(report: dict[str, Any], per_device: Sequence[str] | None) -> dict[str, Any]:
    """The report with its tables computed from the runs so far."""
    report = {**report, "scaling": scaling(report["runs"])}
    if per_device:
        report["sharing"] = sharing(report["runs"])
    return report


def _went_wrong(records: Sequence[TestRecord]) -> list[str]:
    """The node ids of a run's tests whose last outcome went wrong (failed, error,
    crashed, xpassed): which tests cannot share a device shows here."""
    return sorted(nid for nid, r in results.last_outcomes(list(records)).items()
                  if r.get("outcome") in outcomes.BAD)


def _run_folder(cell_results: Path, proc: Any) -> Path:
    """The run's results folder; AccelgridError with the end of nox's output when the
    run did not get as far as recording (a failed test still counts: exit 1)."""
    folder = results.last_run(cell_results)[1]
    if proc.returncode not in (0, 1) or not (folder / contract.SUMMARY_FILE).is_file():
        raise AccelgridError(f"the cell run failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return folder


def own_time_per_suite(records: Sequence[TestRecord]) -> dict[str, float]:
    """The tests' own durations summed per suite: what grows with the device count is
    contention between the workers (the same tests, slower side by side), not start-up."""
    sums: dict[str, float] = {}
    for r in records:
        suite = results.suite_of(str(r.get("nodeid", "")))
        sums[suite] = sums.get(suite, 0.0) + float(r.get("duration") or 0.0)
    return {k: round(v, 1) for k, v in sorted(sums.items())}


def scaling(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per device count: the median wall time, its ratio to one device's, and the aim."""
    by_count: dict[int, list[float]] = {}
    for r in runs:
        by_count.setdefault(r["devices"], []).append(r["wall_s"])
    one = statistics.median(by_count[1]) if 1 in by_count else None
    rows = []
    for n in sorted(by_count):
        median = statistics.median(by_count[n])
        ratio = round(median / one, 3) if one else None
        aim = AIMS.get(n)
        rows.append({"devices": n, "median_s": round(median, 2), "ratio": ratio, "aim": aim,
                     "met": None if aim is None or ratio is None else ratio <= aim})
    return rows


def sharing(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (devices, workers per device): the median wall, its ratio to one device with one
    worker, the aim on one shared device, and how many runs had a test go wrong."""
    by: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["devices"], str(r.get("per_device"))), []).append(r)
    base = by.get((1, "1"))
    one = statistics.median(r["wall_s"] for r in base) if base else None
    rows = []
    for (n, k), group in sorted(by.items(), key=lambda x: (x[0][0], x[0][1] != "1", x[0][1])):
        median = statistics.median(r["wall_s"] for r in group)
        ratio = round(median / one, 3) if one else None
        aim = SHARED_AIM if n == 1 and k != "1" else None
        rows.append({"devices": n, "per_device": k, "runs": len(group),
                     "median_s": round(median, 2), "ratio": ratio, "aim": aim,
                     "met": None if aim is None or ratio is None else ratio <= aim,
                     "runs_with_failures": sum(1 for r in group if r.get("failed")
                                               or r.get("rc"))})
    return rows


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    facts = next((r["device_facts"] for r in report["runs"] if r["device_facts"]["names"]),
                 report["runs"][0]["device_facts"] if report["runs"] else {})
    lines = [f"# Device scaling: {report['cell']} on {m['host']}", "",
             f"Machine: {', '.join(facts.get('names') or ['?'])} × {len(report['device_ids'])}"
             f" (driver {facts.get('driver') or '?'}, torch {facts.get('torch') or '?'}); "
             f"{m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, {m['os']}, "
             f"{m['python']}.", "",
             f"Command: `{report['command']}` at commit {(report['commit'] or '?')[:12]}"
             f"{' (dirty)' if report['dirty'] else ''}, {report['date']}.", "",
             f"Each run: the whole cell (`nox -s CELL`) with `{contract.DEVICES}` naming the "
             "first N devices; wall time of the command, and of each pytest pass.", "",
             "| devices | median wall | of one device | aim |", "| --- | --- | --- | --- |"]
    for row in report["scaling"]:
        aim = "" if row["aim"] is None else (
            f"<= {row['aim']}: {'met' if row['met'] else 'missed'}")
        ratio = "" if row["ratio"] is None else f"**{row['ratio']:.2f}**"
        lines.append(f"| {row['devices']} | {row['median_s']:.1f} s | {ratio} | {aim} |")
    if report.get("sharing"):
        lines += ["", f"Workers sharing each device (`{contract.WORKERS_PER_DEVICE}`; auto: the "
                  "runner's choice), against one device with one worker:", "",
                  "| devices | workers per device | runs | median wall | of one worker | aim "
                  "| runs with a failure |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in report["sharing"]:
            aim = "" if row["aim"] is None else (
                f"<= {row['aim']}: {'met' if row['met'] else 'missed'}")
            ratio = "" if row["ratio"] is None else f"**{row['ratio']:.2f}**"
            lines.append(f"| {row['devices']} | {row['per_device']} | {row['runs']} | "
                         f"{row['median_s']:.1f} s | {ratio} | {aim} | "
                         f"{row['runs_with_failures']} |")
    lines += ["", "| run | devices | wall | passes | first test (s) | tests' own time per "
              "suite (s) | outcomes | load |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(report["runs"], 1):
        passes = "; ".join(
            f"{p['name']} ({p['workers']} worker{'' if p['workers'] == 1 else 's'}"
            f"{', beside ' + p['beside'] if p['beside'] else ''}) {p['wall_s']} s"
            for p in r["passes"])
        first = ", ".join(f"{p['name']} {p['first_test_s']}" for p in r["passes"])
        counts = console.count_text(r["counts"] or {})
        own = ", ".join(f"{k} {v}" for k, v in (r.get("test_seconds") or {}).items())
        shared = f" × {r['per_device']}" if r.get("per_device") else ""
        lines.append(f"| {i} | {r['devices']}{shared} | {r['wall_s']:.1f} s | {passes} | "
                     f"{first} | {own} | {counts} | {r['load']} |")
        lines += [f"|  | went wrong: `{x}` | | | | | | |" for x in r.get("failed") or []]
    if len(report["device_ids"]) == 1:
        lines += ["", "One device on this host: nothing to scale, one device's figure only."]
    return "\n".join(lines) + "\n"
