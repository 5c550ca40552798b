"""``accelgrid bench overhead``: what the runner costs over bare pytest, and env creation.

1. A warm cell run (``nox -R -s CELL``: env reused, installs skipped) against bare
   ``python -m pytest`` on the same suites in the same env, alternating, ``--repeat`` times;
   reports the median ratio (aim: <= 1.10).
2. Environment creation for the cell with uv and with virtualenv, cold (new env folder)
   and warm (reused), via ``nox --install-only --envdir``.

Prints progress, writes JSON and a Markdown table.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import AccelgridError, InvalidInput
from ..matrix import Matrix
from . import write_outputs

DEFAULT_CELL = "cpu-2.13"
DEFAULT_REPEAT = 3
DEFAULT_OUT = "results/bench-overhead"  # docs/ only when asked (--out docs)
ENV_BACKENDS = ("uv", "virtualenv")


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # test failures still time the run
        raise AccelgridError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def run(matrix: Matrix, cell: str = DEFAULT_CELL, *, suites: Sequence[str] | None = None,
        repeat: int = DEFAULT_REPEAT, skip_env: bool = False,
        out: str | Path | None = DEFAULT_OUT) -> dict[str, Any]:
    """Time ``cell``'s warm runs against bare pytest (and env creation unless ``skip_env``);
    write ``bench-overhead.{json,md}`` to ``out`` (None: write nothing) and return the report.

    ``suites``: test paths relative to the matrix root (default: the cell's suites).
    Raises UnknownName for an unknown cell, InvalidInput for ``repeat < 1``, AccelgridError
    when a timed command fails (exit status other than 0 or 1).
    """
    if repeat < 1:
        raise InvalidInput(f"--repeat must be >= 1, not {repeat}")
    from .. import sessions  # imports nox: only when a benchmark runs

    the_cell = matrix.cell(cell)
    root = matrix.root
    paths = list(suites) if suites else list(the_cell.suite_paths)
    nox = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py")]
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-"))
    env = {**os.environ, "ACCELGRID_RESULTS_DIR": str(tmp / "results")}
    report: dict[str, Any] = {"cell": the_cell.name, "suites": paths, "host": platform.node(),
                              "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        print(f"[1/3] preparing {the_cell.name}'s env (nox --install-only)", flush=True)
        venv_python = sessions.prepared_python(root, the_cell, env)
        runs: dict[str, list[float]] = {"cell": [], "bare": []}
        for i in range(repeat):
            print(f"[2/3] run {i + 1}/{repeat}: cell run, then bare pytest", flush=True)
            runs["cell"].append(_timed([*nox, "-R", "-s", the_cell.name, "--", *paths],
                                       root, env))
            bare = {**os.environ, "PYTHONPATH": str(root / "src"), **the_cell.env,
                    "ACCELGRID_DEVICE": the_cell.device}
            runs["bare"].append(_timed([venv_python, "-m", "pytest", "-q", *paths,
                                        "-p", "no:cacheprovider"], root, bare))
        ratios = [c / b for c, b in zip(runs["cell"], runs["bare"], strict=True)]
        report["runs"] = runs
        report["ratio_median"] = statistics.median(ratios)
        print(f"      ratio cell/bare: median {report['ratio_median']:.3f}", flush=True)
        if not skip_env:
            envs: dict[str, dict[str, float]] = {}
            for backend in ENV_BACKENDS:
                envdir = tmp / f"env-{backend}"
                # -fb: the cell sessions name uv explicitly, -db would not override it.
                base = [*nox, "-s", the_cell.name, "--install-only", "-fb", backend,
                        "--envdir", str(envdir)]
                print(f"[3/3] env creation with {backend}: cold", flush=True)
                cold = _timed([*base, "--reuse-venv", "no"], root, env)
                print(f"[3/3] env creation with {backend}: warm", flush=True)
                warm = _timed([*base, "--reuse-venv", "yes"], root, env)
                envs[backend] = {"cold_s": cold, "warm_s": warm}
                shutil.rmtree(envdir, ignore_errors=True)
            report["env_creation"] = envs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    md = render_markdown(report)
    if out is not None:
        write_outputs(out, "bench-overhead", report, md)
    print(md, end="")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """bench-overhead.md from a report as :func:`run` returns it."""
    runs = report["runs"]
    repeat = len(runs["cell"])
    lines = [
        f"# Runner overhead: {report['cell']} on {report['host']} ({report['cpus']} CPUs)", "",
        f"Suites: {', '.join(report['suites'])}; {repeat} alternating runs each.", "",
        "| run | " + " | ".join(f"#{i + 1}" for i in range(repeat)) + " | median |",
        "|" + " --- |" * (repeat + 2),
    ]
    for key, label in (("cell", "cell run (nox -R, xdist, recording)"), ("bare", "bare pytest")):
        vals = runs[key]
        lines.append(f"| {label} | " + " | ".join(f"{v:.1f} s" for v in vals)
                     + f" | {statistics.median(vals):.1f} s |")
    lines += ["", f"Median ratio cell/bare: **{report['ratio_median']:.3f}** (aim <= 1.10).", ""]
    if "env_creation" in report:
        lines += ["| env backend | cold | warm (reused) |", "| --- | --- | --- |"]
        for backend, t in report["env_creation"].items():
            lines.append(f"| {backend} | {t['cold_s']:.1f} s | {t['warm_s']:.1f} s |")
    return "\n".join(lines) + "\n"
