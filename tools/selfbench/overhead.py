"""``python -m tools.selfbench overhead``: what a warm cell run costs over bare pytest.

Pairs, each a warm cell run (``accelgrid run CELL -- ARGS``: its env reused, nothing
installed while its stamp matches) and bare ``python -m pytest`` on the same tests in the
same env, side by side (every other pair bare pytest first):

- partial (``--partial``, default ``-k smoke``): a selected run; bare pytest gets the
  suites the cell run's tests came from and the same arguments (aim: ratio <= 1.05). One
  untimed cell run first says which suites those are (and warms the caches);
- full (``--repeat``): the whole cell against bare pytest on its suites (aim: <= 1.05).

Each pair reports wall times, their ratio, and the CPU time (user + system) of every
process of each run, which other load on the host sways less than the wall time. With
the defaults (5 partial pairs, 1 full pair between them) it takes about 3 minutes on the
cpu-2.13 cell of an idle 2-core host. Each pair is printed when it finishes, with the load
average. Ctrl-C or SIGTERM stops the running command, removes the temporary folder and
writes nothing. ``--env-creation`` also times creating the cell's env with uv and with
virtualenv, cold and warm (minutes). Writes bench-overhead.{json,md} to ``--out``
(``docs/measured`` for the committed figures).
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from accelgrid import results
from accelgrid.base import contract, jsonio, lifetime
from accelgrid.base.errors import AccelgridError, InvalidInput
from accelgrid.bench import STOP_GRACE_S, load_average, machine, stoppable, write_outputs
from accelgrid.config.model import Matrix
from accelgrid.results.provenance import now

DEFAULT_CELL = "cpu-2.13"
DEFAULT_PARTIAL = "-k smoke"
DEFAULT_PARTIAL_REPEAT = 5
DEFAULT_REPEAT = 1
DEFAULT_OUT = "results/bench-overhead"  # docs/measured only when asked (--out docs/measured)
ENV_BACKENDS = ("uv", "virtualenv")
AIMS = {"partial": 1.05, "full": 1.05}   # cell run / bare pytest, median (issue 36)
BYTECODE_VARS = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``cmd`` (its own process group, stopped with the benchmark); its wall time, the
    CPU time of its processes (user + system: less swayed by other load on the host than
    the wall time) and its output. Test failures (exit 1) still count."""
    cpu0, t0 = _cpu(), time.perf_counter()
    proc = lifetime.run_group(cmd, cwd=cwd, env=env, grace=STOP_GRACE_S)
    elapsed, cpu = time.perf_counter() - t0, _cpu() - cpu0
    if proc.returncode not in (0, 1):
        raise AccelgridError(f"command failed ({proc.returncode}): {shlex.join(cmd)}\n"
                             f"{proc.stdout[-4000:]}")
    return elapsed, cpu, proc.stdout


_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")


def bare_count(output: str) -> int | None:
    """How many tests bare pytest ran, from its last summary line."""
    lines = [ln for ln in output.splitlines() if _COUNTS.search(ln) and " in " in ln]
    return sum(int(n) for n, _ in _COUNTS.findall(lines[-1])) if lines else None


def _cell_tests(results_dir: Path, cell: str) -> tuple[list[str], float]:
    """The node ids the cell's latest run recorded, and the sum of their durations."""
    records, _ = jsonio.read_jsonl(results.last_run(results_dir / cell)[1] / contract.TESTS_FILE)
    return ([r["nodeid"] for r in records],
            sum(float(r.get("duration") or 0.0) for r in records))


def _cell_stages(results_dir: Path, cell: str, started: float, ended: float
                 ) -> list[float] | None:
    """A cell run's wall time in three: until its first pass's pytest started, its
    passes (first start to last end), after them; from the run's summary.json (the
    passes' start times, millisecond precision) and the command's own start and end."""
    summary, err = jsonio.read_json(results.last_run(results_dir / cell)[1]
                                    / contract.SUMMARY_FILE)
    passes = summary.get("passes") if isinstance(summary, dict) and not err else None
    if not passes:
        return None
    from datetime import datetime

    starts = [datetime.fromisoformat(p["start"]).timestamp() for p in passes]
    ends = [start + float(p["wall_s"]) for start, p in zip(starts, passes, strict=True)]
    first, last = min(starts), max(ends)
    return [first - started, last - first, ended - last]


def _launched(results_dir: Path, cell: str) -> bool:
    """Whether the cell's latest run's pytest started with the command (summary.json's
    first pass: ``launched``, run.headstart.relaunch)."""
    summary, err = jsonio.read_json(results.last_run(results_dir / cell)[1]
                                    / contract.SUMMARY_FILE)
    passes = summary.get("passes") if isinstance(summary, dict) and not err else None
    if not passes:
        return False
    return isinstance(passes[0], dict) and passes[0].get("launched") is True


def _junit_seconds(path: Path) -> float | None:
    """The sum of the test durations in a junit XML file (pytest's: setup, call and
    teardown of each), or None when there is none."""
    try:
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError):
        return None
    return sum(float(case.get("time") or 0.0) for case in tree.iter("testcase"))


def _touched(nodeids: Sequence[str], suites: Sequence[str]) -> list[str]:
    """The suites the node ids come from (all of them when none matches)."""
    hit = [s for s in suites if any(n.startswith(s.rstrip("/") + "/") for n in nodeids)]
    return hit or list(suites)


def _schedule(partial: int, full: int) -> list[str]:
    """The order of the pairs: the full ones spread between the partial ones (5, 1:
    partial, partial, full, partial, partial, partial)."""
    order = ["partial"] * partial
    for i in range(full):
        order.insert((i + 1) * partial // (full + 1) + i, "full")
    return order


def run(matrix: Matrix, cell: str = DEFAULT_CELL, *, suites: Sequence[str] | None = None,
        partial: str = DEFAULT_PARTIAL, partial_repeat: int = DEFAULT_PARTIAL_REPEAT,
        repeat: int = DEFAULT_REPEAT, env_creation: bool = False,
        out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Time ``cell``'s warm runs against bare pytest, pair by pair (and env creation with
    ``env_creation``); write ``bench-overhead.{json,md}`` to ``out`` (None: write nothing)
    and return the report.

    ``suites``: test paths relative to the matrix root for the full pairs (default: the
    cell's suites). ``partial``: pytest arguments of the partial pairs ('' for none).
    Raises UnknownName for an unknown cell, InvalidInput for a bad count or nothing to
    time, AccelgridError when a timed command fails (exit status other than 0 or 1),
    KeyboardInterrupt (:class:`accelgrid.bench.Stopped` for SIGTERM) when stopped: then
    nothing is written and the temporary folder is gone.
    """
    if repeat < 0 or partial_repeat < 0:
        raise InvalidInput(f"--repeat and --partial-repeat must be >= 0, not {repeat}, "
                           f"{partial_repeat}")
    partial_args = shlex.split(partial)
    if not partial_args:
        partial_repeat = 0
    if repeat + partial_repeat == 0 and not env_creation:
        raise InvalidInput("nothing to time: --repeat and --partial-repeat are both 0")
    from accelgrid.commands import sessions
    from accelgrid.results import provenance

    the_cell = matrix.cell(cell)
    root = matrix.root
    paths = list(suites) if suites else list(the_cell.suite_paths)
    commit, dirty = provenance.project_commit(root)
    command = ["python", "-m", "tools.selfbench", "overhead", "--cell", the_cell.name,
               "--partial", partial, "--partial-repeat", str(partial_repeat),
               "--repeat", str(repeat), *(["--suites", ",".join(suites)] if suites else []),
               *(["--env-creation"] if env_creation else [])]
    report: dict[str, Any] = {
        "cell": the_cell.name, "suites": paths, "command": shlex.join(command), "date": now(),
        "commit": commit, "dirty": dirty, "machine": machine(), "load_start": load_average(),
        # Set, every process compiles its sources and pytest rewrites asserts anew (no .pyc
        # is written): a cell run starts more processes than bare pytest.
        "python_env": {k: os.environ[k] for k in BYTECODE_VARS if k in os.environ},
        "aims": AIMS, "pairs": {}}
    accelgrid = [sys.executable, "-m", "accelgrid", "--matrix", str(matrix.path), "run",
                 the_cell.name]
    nox = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py")]
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-"))
    results_dir = tmp / "results"
    env = {**os.environ, **matrix.nox_env, contract.RESULTS_DIR: str(results_dir)}
    # As the runner sets it: the checkout's src first (the plugin comes from there).
    pythonpath = os.pathsep.join(p for p in (str(root / "src"), os.environ.get("PYTHONPATH"))
                                 if p)
    bare_env = {**os.environ, "PYTHONPATH": pythonpath, **the_cell.env,
                contract.DEVICE: the_cell.device}
    order = _schedule(partial_repeat, repeat)
    try:
        with stoppable():
            print(f"preparing {the_cell.name}'s env (nox --install-only; a cold one takes "
                  "minutes)", flush=True)
            python = sessions.prepared_python(root, the_cell, env)
            bare_partial: list[str] | None = None
            for n, kind in enumerate(order, start=1):
                entry = report["pairs"].setdefault(kind, {
                    "args": partial_args if kind == "partial" else paths, "cell": [],
                    "bare": [], "ratios": [], "cell_cpu": [], "bare_cpu": [],
                    "cpu_ratios": [], "load": [], "tests": [], "bare_first": [],
                    "outside_tests": [], "cell_stages": [], "launched": []})
                cell_cmd = [*accelgrid, "--", *partial_args] if kind == "partial" else \
                    [*accelgrid, *(["--", *suites] if suites else [])]
                if kind == "partial" and bare_partial is None:
                    # The suites its tests come from: known once a cell run has run.
                    _timed(cell_cmd, root, env)
                    bare_partial = _touched(_cell_tests(results_dir, the_cell.name)[0],
                                            the_cell.suite_paths)
                    entry["bare_paths"] = bare_partial
                bare_paths = paths
                if kind == "partial":
                    assert bare_partial is not None  # set above, by the first partial pair
                    bare_paths = bare_partial
                junit = tmp / f"bare-{n}.xml"
                bare_cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            f"--junitxml={junit}", *bare_paths,
                            *(partial_args if kind == "partial" else [])]
                # Every other pair of a kind runs bare pytest first: neither side always
                # gets the caches the other warmed.
                bare_first = len(entry["ratios"]) % 2 == 1
                load = load_average()
                runs = {}
                for side in (("bare", "cell") if bare_first else ("cell", "bare")):
                    if side == "cell":
                        began = time.time()
                        runs[side] = _timed(cell_cmd, root, env)
                        stages = _cell_stages(results_dir, the_cell.name, began, time.time())
                        launched = _launched(results_dir, the_cell.name)
                        ids, cell_tests_s = _cell_tests(results_dir, the_cell.name)
                    else:
                        runs[side] = _timed(bare_cmd, root, bare_env)
                (cell_s, cell_cpu, _), (bare_s, bare_cpu, bare_out) = runs["cell"], runs["bare"]
                values = {"cell": cell_s, "bare": bare_s, "ratios": cell_s / bare_s,
                          "cell_cpu": cell_cpu, "bare_cpu": bare_cpu,
                          "cpu_ratios": cell_cpu / bare_cpu if bare_cpu else None,
                          "load": load, "tests": [len(ids), bare_count(bare_out)],
                          "bare_first": bare_first,
                          # Wall time outside the tests' own durations: the runner's fixed
                          # cost, whatever the tests themselves took this time.
                          "outside_tests": [cell_s - cell_tests_s,
                                            None if (b := _junit_seconds(junit)) is None
                                            else bare_s - b],
                          "cell_stages": stages, "launched": launched}
                for key, value in values.items():
                    entry[key].append(value)
                print(f"[{n}/{len(order)}] {kind} ({shlex.join(entry['args'])}): cell "
                      f"{cell_s:.1f} s, bare {bare_s:.1f} s, ratio {cell_s / bare_s:.2f}; "
                      f"CPU {cell_cpu:.1f} s / {bare_cpu:.1f} s (tests {len(ids)} / "
                      f"{bare_count(bare_out)}, load {load})", flush=True)
            for entry in report["pairs"].values():
                entry["ratio_median"] = statistics.median(entry["ratios"])
                cpu = [r for r in entry["cpu_ratios"] if r is not None]
                entry["cpu_ratio_median"] = statistics.median(cpu) if cpu else None
            if env_creation:
                report["env_creation"] = _env_creation(nox, the_cell.name, root, env, tmp)
    except KeyboardInterrupt:
        done = sum(len(e["ratios"]) for e in report["pairs"].values())
        print(f"bench overhead: stopped after {done} of {len(order)} pairs; "
              f"{tmp} removed, nothing written", file=sys.stderr, flush=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["load_end"] = load_average()
    md = render_markdown(report)
    if out is not None:
        write_outputs(out, "bench-overhead", report, md)
    print(md, end="")
    return report


def _env_creation(nox: list[str], cell: str, root: Path, env: dict[str, str], tmp: Path
                  ) -> dict[str, dict[str, float]]:
    envs: dict[str, dict[str, float]] = {}
    for backend in ENV_BACKENDS:
        envdir = tmp / f"env-{backend}"
        # -fb: the cell sessions name uv explicitly, -db would not override it.
        base = [*nox, "-s", cell, "--install-only", "-fb", backend, "--envdir", str(envdir)]
        cold = _timed([*base, "--reuse-venv", "no"], root, env)[0]
        warm = _timed([*base, "--reuse-venv", "yes"], root, env)[0]
        envs[backend] = {"cold_s": cold, "warm_s": warm}
        print(f"env creation with {backend}: cold {cold:.1f} s, warm {warm:.1f} s", flush=True)
        shutil.rmtree(envdir, ignore_errors=True)
    return envs


LABELS = {"partial": "a selected run", "full": "the whole cell"}


def render_markdown(report: dict[str, Any]) -> str:
    """bench-overhead.md from a report as :func:`run` returns it."""
    m = report["machine"]
    cpus = f"{m['cpus']} CPUs" + (f" ({m['cpus_usable']} usable)"
                                  if m.get("cpus_usable") not in (None, m["cpus"]) else "")
    facts = ", ".join(str(x) for x in (m.get("cpu_model"), cpus,
                                       m.get("memory_gib") and f"{m['memory_gib']} GiB",
                                       m.get("os"), m.get("python")) if x)
    commit = (report.get("commit") or "?")[:12] + (" (uncommitted changes)"
                                                     if report.get("dirty") else "")
    lines = [
        f"# Runner overhead: {report['cell']} on {m['host']}", "",
        f"Machine: {facts}. Load average (1 min): {report.get('load_start')} at the start, "
        f"{report.get('load_end')} at the end.", "",
        f"Command: `{report['command']}` at commit {commit}, {report['date']}."
        + "".join(f" {k}={v} in the environment." for k, v in
                  report.get("python_env", {}).items()), "",
        "Each pair: a warm cell run (`accelgrid run`: env reused, nothing installed) and "
        "bare `python -m pytest` on the same tests in the cell's env, one after the other "
        "(`first` says which); CPU time is user + system of every process of the run; "
        "outside the tests is the wall time less the tests' own durations (the cell's "
        "records, bare pytest's junit XML): the fixed cost of a run, whatever the tests "
        "took this time; the cell run's wall time in three: until its pytest started, "
        "its pytest (its passes), after it (its summary.json's pass times). "
        "The cell run loads only its own pytest plugins (xdist, timeout); "
        "bare pytest loads every plugin the env has, as a plain `pytest` does.", "",
    ]
    for kind, entry in report["pairs"].items():
        n = len(entry["ratios"])
        args = " ".join(entry["args"])
        bare = (f"bare pytest on {', '.join(entry['bare_paths'])} with `{args}`"
                if kind == "partial" else f"bare pytest on {args}")
        lines += [f"## {kind}: {LABELS[kind]}" + (f" (`-- {args}`)" if kind == "partial"
                                                  else ""), "",
                  "| run | " + " | ".join(f"#{i + 1}" for i in range(n)) + " | median |",
                  "|" + " --- |" * (n + 2)]
        for key, label in (("cell", "cell run"), ("bare", bare)):
            vals = entry[key]
            lines.append(f"| {label} | " + " | ".join(f"{v:.1f} s" for v in vals)
                         + f" | {statistics.median(vals):.1f} s |")
        lines.append("| ratio | " + " | ".join(f"{r:.2f}" for r in entry["ratios"])
                     + f" | **{entry['ratio_median']:.2f}** |")
        lines.append("| CPU time, cell / bare | " + " | ".join(
            f"{c:.1f} / {b:.1f} s" for c, b in zip(entry["cell_cpu"], entry["bare_cpu"],
                                                     strict=True)) + " | |")
        cpu_median = entry.get("cpu_ratio_median")
        lines.append("| CPU ratio | " + " | ".join(
            "-" if r is None else f"{r:.2f}" for r in entry["cpu_ratios"])
            + f" | {'-' if cpu_median is None else f'{cpu_median:.2f}'} |")
        lines.append("| outside the tests, cell / bare | " + " | ".join(
            f"{c:.1f} / {'-' if b is None else f'{b:.1f}'} s"
            for c, b in entry.get("outside_tests", [])) + " | |")
        if entry.get("cell_stages"):
            lines.append("| cell run: before its pytest / pytest / after | " + " | ".join(
                "-" if st is None else " / ".join(f"{v:.2f}" for v in st) + " s"
                for st in entry["cell_stages"]) + " | |")
        if entry.get("launched"):
            lines.append("| cell run's pytest started with the command (launched) | "
                         + " | ".join("yes" if b else "no" for b in entry["launched"])
                         + " | |")
        lines.append("| first | " + " | ".join("bare" if b else "cell"
                                                for b in entry["bare_first"]) + " | |")
        lines.append("| load average | " + " | ".join(str(v) for v in entry["load"]) + " | |")
        lines.append("| tests (cell / bare) | " + " | ".join(
            f"{c} / {b}" for c, b in entry["tests"]) + " | |")
        aim = report["aims"][kind]
        verdict = "met" if entry["ratio_median"] <= aim else "missed"
        lines += ["", f"Median ratio cell/bare: **{entry['ratio_median']:.3f}** "
                      f"(aim <= {aim}: {verdict})"
                      + ("" if cpu_median is None else
                         f"; of CPU time: {cpu_median:.3f}") + ".", ""]
    if "env_creation" in report:
        lines += ["## env creation", "", "| env backend | cold | warm (reused) |",
                  "| --- | --- | --- |"]
        for backend, t in report["env_creation"].items():
            lines.append(f"| {backend} | {t['cold_s']:.1f} s | {t['warm_s']:.1f} s |")
        lines.append("")
    return "\n".join(lines)
