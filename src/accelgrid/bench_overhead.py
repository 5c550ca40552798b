"""``accelgrid bench overhead``: what the runner costs over bare pytest, and env creation.

1. A warm cell run (``nox -R -s CELL``: env reused, installs skipped) against bare
   ``python -m pytest`` on the same suites in the same env, alternating, ``--repeat`` times;
   reports the median ratio (aim: <= 1.10).
2. Environment creation for the cell with uv and with virtualenv, cold (new env folder)
   and warm (reused), via ``nox --install-only --envdir``.

Prints progress, writes JSON and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import sessions
from .matrix import DEFAULT_MATRIX, load_matrix


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # test failures still time the run
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelgrid bench overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", default=DEFAULT_MATRIX)
    parser.add_argument("--cell", default="cpu-2.13")
    parser.add_argument("--suites", default=None,
                        help="comma-separated suite paths (default: the cell's suites)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-env", action="store_true", help="skip the env creation part")
    parser.add_argument("--out", default="docs", help="folder for bench-overhead.{json,md}")
    args = parser.parse_args(argv)

    matrix = load_matrix(args.matrix)
    cell = matrix.cell(args.cell)
    root = matrix.root
    paths = args.suites.split(",") if args.suites else list(cell.suite_paths)
    nox = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py")]
    tmp = Path(tempfile.mkdtemp(prefix="accelgrid-bench-"))
    env = {**os.environ, "ACCELGRID_RESULTS_DIR": str(tmp / "results")}
    report: dict = {"cell": cell.name, "suites": paths, "host": platform.node(),
                    "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        print(f"[1/3] preparing {cell.name}'s env (nox --install-only)", flush=True)
        venv_python = sessions.prepared_python(root, cell, env)
        runs: dict[str, list[float]] = {"cell": [], "bare": []}
        for i in range(args.repeat):
            print(f"[2/3] run {i + 1}/{args.repeat}: cell run, then bare pytest", flush=True)
            runs["cell"].append(_timed([*nox, "-R", "-s", cell.name, "--", *paths], root, env))
            bare = {**os.environ, "PYTHONPATH": str(root / "src"), **cell.env,
                    "ACCELGRID_DEVICE": cell.device}
            runs["bare"].append(_timed([venv_python, "-m", "pytest", "-q", *paths,
                                        "-p", "no:cacheprovider"], root, bare))
        ratios = [c / b for c, b in zip(runs["cell"], runs["bare"], strict=True)]
        report["runs"] = runs
        report["ratio_median"] = statistics.median(ratios)
        print(f"      ratio cell/bare: median {report['ratio_median']:.3f}", flush=True)
        if not args.skip_env:
            envs: dict[str, dict[str, float]] = {}
            for backend in ("uv", "virtualenv"):
                envdir = tmp / f"env-{backend}"
                # -fb: the cell sessions name uv explicitly, -db would not override it.
                base = [*nox, "-s", cell.name, "--install-only", "-fb", backend,
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

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# Runner overhead: {cell.name} on {report['host']} ({report['cpus']} CPUs)", "",
        f"Suites: {', '.join(paths)}; {args.repeat} alternating runs each.", "",
        "| run | " + " | ".join(f"#{i + 1}" for i in range(args.repeat)) + " | median |",
        "|" + " --- |" * (args.repeat + 2),
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
    (out / "bench-overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0
