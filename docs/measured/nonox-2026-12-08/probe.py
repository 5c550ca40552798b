"""Issue 47's question: could a warm `accelgrid run` skip nox (and the head start)?

A probe, not a feature: the cell session's own named steps (accelgrid.commands.sessions)
run without nox, through a stand-in for the nox session, with no run started ahead
(``sessions.HEAD_START`` None): pytest starts once the checks are done, as a nox-free
door would start it. Timed in interleaved triples against the command as it stands
(`accelgrid run`, nox in process and the head start) and bare pytest on the same tests in
the same env (``python -m pytest suites/smoke -k smoke``, every plugin of the env loaded,
as tools.selfbench's bare pytest).

    ACCELGRID_ENVDIR=<warm env folder> python docs/measured/nonox-2026-12-08/probe.py [N]

Run from the checkout's root; prints one line per triple and the medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CELL, ARGS = "cpu-2.13", ("-k", "smoke")


def nonox() -> int:
    """The session's steps without nox: a warm env (nothing installed), pytest after them."""
    from accelgrid import results
    from accelgrid.commands import sessions
    from accelgrid.config.matrix import load_matrix
    from accelgrid.host import venvs

    matrix = load_matrix(ROOT / "matrix.yaml")
    cell = matrix.cell(CELL)
    envdir = venvs.env_dir(matrix.root, cell)

    def refuse(*_: Any, **__: Any) -> None:
        raise SystemExit("the probe installs nothing: run it on a warm env")

    def error(message: str) -> None:
        raise SystemExit(message)

    stand_in: Any = SimpleNamespace(
        bin=str(envdir / "bin"), env={}, posargs=list(ARGS), virtualenv=object(),
        log=lambda *a, **k: None, warn=lambda *a, **k: print(*a, file=sys.stderr),
        error=error, install=refuse, run=refuse,
        _runner=SimpleNamespace(global_config=SimpleNamespace(install_only=False)))
    state = sessions.CellSession(stand_in, matrix, cell, results.results_root(matrix.root))
    state = sessions.run_steps(state, sessions.steps_of(state))
    return state.rc


def _timed(cmd: list[str]) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{cmd}: rc {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return took


def main(n: int) -> None:
    from accelgrid.config.matrix import load_matrix
    from accelgrid.host import venvs

    matrix = load_matrix(ROOT / "matrix.yaml")
    python = str(venvs.env_dir(matrix.root, matrix.cell(CELL)) / "bin" / "python")
    bin_dir = Path(sys.executable).parent
    runs = {
        "accelgrid run (nox, head start)": [str(bin_dir / "accelgrid"), "run", CELL, "--", *ARGS],
        "no nox, no head start (probe)": [sys.executable, __file__, "--nonox"],
        "bare pytest": [python, "-m", "pytest", "suites/smoke", *ARGS, "-q",
                        "-p", "no:cacheprovider"],
    }
    for cmd in runs.values():   # warm: caches, the launch record, bytecode
        _timed(cmd)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(n):
        order = list(runs) if i % 2 == 0 else list(reversed(runs))
        for name in order:
            times[name].append(_timed(runs[name]))
        print(f"#{i + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in runs)
              + f" (load {os.getloadavg()[0]:.2f})", flush=True)
    bare = statistics.median(times["bare pytest"])
    for name, got in times.items():
        ratios = [a / b for a, b in zip(got, times["bare pytest"], strict=True)]
        print(f"{name}: median {statistics.median(got):.3f} s (bare {bare:.3f} s), "
              f"ratio of pairs median {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]")


if __name__ == "__main__":
    if sys.argv[1:] == ["--nonox"]:
        sys.exit(nonox())
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
