"""The runner: run one cell's suites with pytest in a given interpreter, to results.

It sets the cell's env before the interpreter starts (torch reads its flags at import),
runs pytest with pytest-xdist (so a crashing test only loses its worker) and
pytest-timeout (thread method: survives C-level hangs), enforces the cell's time limit,
and closes the results folder however the run ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import contract, detect, known_issues, results
from .errors import AccelgridError
from .matrix import Cell
from .report import ops_pages
from .versions import version_key

EXIT_CELL_TIMEOUT = 124
HARDWARE_JSON = "hardware.json"   # in the results folder: the runner's family, driver, GPUs


def installed_version(python: str, package: str = "torch") -> str | None:
    """``package``'s version in ``python``'s environment, without importing it."""
    code = ("import importlib.metadata as m, sys\n"
            f"try: print(m.version({package!r}))\n"
            "except m.PackageNotFoundError: sys.exit(3)\n")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def torch_mismatch(cell: Cell, python: str) -> str | None:
    """Why ``python``'s torch cannot run ``cell`` (wrong or missing), or None."""
    version = installed_version(python)
    if version is None:
        return f"{cell.name}: torch is not installed for {python}"
    if version_key(version).release[:2] != version_key(cell.torch).release[:2]:
        return (f"{cell.name}: {python} has torch {version}, the cell needs torch "
                f"{cell.torch}.x (pin {cell.torch_requirement})")
    return None


def project_commit(root: Path) -> tuple[str | None, bool]:
    """HEAD of the project and whether the tree has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=False)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, False
    if head.returncode != 0:
        return None, False
    return head.stdout.strip(), bool(status.stdout.strip())


def cell_env(cell: Cell, root: Path, folder: Path, base: dict[str, str] | None = None
             ) -> dict[str, str]:
    """The environment the cell's pytest starts with: the host's, the cell's (device and
    profile), its hardware family's and driver's (``hardware.json`` in ``folder`` says which
    and how they were known), and accelgrid's own variables."""
    env = dict(os.environ if base is None else base)
    hardware = detect.resolve_hardware(cell, env)
    env.update(cell.env)
    if hardware.problem:
        raise AccelgridError(hardware.problem)
    env.update(hardware.env(cell))
    commit, dirty = project_commit(root)
    src = str(root / "src")
    env.update({
        contract.CELL: cell.name,
        contract.DEVICE: cell.device,
        contract.TORCH: cell.torch,
        contract.PROFILE: cell.profile,
        contract.RESULTS: str(folder),
        contract.COMMIT: commit or "",
        contract.DIRTY: "1" if dirty else "0",
        # The plugin and the suites' helpers come from this checkout, not an install.
        "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
    })
    # The cell's known_issues.yaml entries, as JSON for the in-cell plugin.
    env.pop(known_issues.runtime.ENV_KNOWN_ISSUES, None)
    env.update(known_issues.cell_env(cell, root, folder, hardware=hardware.family,
                                     driver=hardware.driver))
    if cell.hardware_env or cell.driver_env:
        extra = " ".join(f"{k}={v}" for k, v in hardware.env(cell).items()
                         if not k.startswith(contract.PREFIX))
        print(f"accelgrid: {cell.name}: {hardware.describe()}"
              + (f": {extra}" if extra else ""), flush=True)
        results.write_json(folder / HARDWARE_JSON, {
            "family": hardware.family, "how": hardware.how, "driver": hardware.driver,
            "note": hardware.note, "env": hardware.env(cell),
            **detect.xpu_inventory()})
    return env


def _selects_paths(args: Sequence[str], root: Path) -> bool:
    """Whether the user's pytest args name test paths themselves (then suites are not added)."""
    return any(not a.startswith("-") and (root / a.split("::", 1)[0]).exists() for a in args)


MULTI_DEVICE_MARK = "multi_device"
SEES_ACCELERATORS_MARK = "sees_accelerators"   # in a cpu cell: run where accelerators show
# Passes that run only what an earlier pass left them (a file in the results folder).
LEFT_FOR = {contract.PASS_ALL_DEVICES: results.MULTI_DEVICE,
            contract.PASS_HOST_ACCELERATORS: results.HOST_ACCELERATORS}


@dataclass(frozen=True)
class Pass:
    """One pytest invocation of a cell run."""

    name: str
    xdist: tuple[str, ...]          # -n N, or one --tx per pinned device
    select: tuple[str, ...] = ()    # marker selection
    junit: str = results.JUNIT
    empty_ok: bool = False          # "no tests collected" is fine for this pass
    env: tuple[tuple[str, str], ...] = ()   # extra env for the whole pass


def passes(cell: Cell, workers: int | None = None, device_ids: Sequence[str] = ()
           ) -> list[Pass]:
    """How the cell's tests are spread. With several devices: one xdist worker pinned to
    each device (per-device ``--tx`` specs, so a replacement worker keeps its device),
    then a pass with one worker that sees every device for ``multi_device`` tests."""
    var = detect.VISIBILITY_VAR.get(cell.device)
    if var and len(device_ids) == 1 and workers is None:
        # One device (or a one-device subset): pin it, so nothing else on the host is seen
        # (the HF Trainer, for one, switches to DataParallel when it sees several GPUs).
        return [Pass(contract.PASS_SINGLE, ("-n", str(cell.workers)),
                     env=((var, device_ids[0]), (contract.DEVICE_INDEX, device_ids[0])))]
    if var and len(device_ids) > 1 and workers is None:
        # worksteal: durations are very uneven (a 20 s test beside 0.1 s ones).
        specs: list[str] = ["--dist", "worksteal"]  # --tx specs are ignored without --dist
        # Each worker gets its share of the CPU (unless the user chose): N workers each
        # running torch's one-thread-per-core pools oversubscribe the host.
        threads = "" if os.environ.get("OMP_NUM_THREADS") else (
            f"//env:OMP_NUM_THREADS={max(1, (os.cpu_count() or 1) // len(device_ids))}")
        for dev in device_ids:
            specs += ["--tx", f"popen//env:{var}={dev}//env:{contract.DEVICE_INDEX}={dev}"
                              + threads]
        return [
            Pass(contract.PASS_PINNED, tuple(specs), ("-m", f"not {MULTI_DEVICE_MARK}")),
            Pass(contract.PASS_ALL_DEVICES, ("-n", "1"), ("-m", MULTI_DEVICE_MARK),
                 junit="junit-all-devices.xml", empty_ok=True),
        ]
    if cell.device == "cpu":
        return cpu_passes(cell, workers)
    return [Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)))]


def cpu_passes(cell: Cell, workers: int | None = None) -> list[Pass]:
    """A cpu cell: its tests run with every accelerator hidden (detect.HIDE_ACCELERATORS),
    so that nothing picks a GPU behind the cell's back (pytorch/ao#958 would pass on a GPU
    host); tests marked ``sees_accelerators`` run afterwards in a pass that sees them."""
    return [
        Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)),
             ("-m", f"not {SEES_ACCELERATORS_MARK}"),
             env=tuple(detect.HIDE_ACCELERATORS.items())),
        Pass(contract.PASS_HOST_ACCELERATORS, ("-n", "1"), ("-m", SEES_ACCELERATORS_MARK),
             junit="junit-host-accelerators.xml", empty_ok=True),
    ]


def pytest_command(cell: Cell, python: str, folder: Path, args: Sequence[str] = (),
                   workers: int | None = None, root: Path | None = None,
                   run_pass: Pass | None = None) -> list[str]:
    paths = [] if root is not None and _selects_paths(args, root) else list(cell.suite_paths)
    run_pass = run_pass or passes(cell, workers)[0]
    return [
        python, "-m", "pytest", *paths,
        *run_pass.xdist, *run_pass.select,
        f"--timeout={cell.test_seconds}", "--timeout-method=thread",
        f"--junitxml={folder / run_pass.junit}", "-o", "junit_family=xunit2",
        "-o", f"junit_suite_name={cell.name}",
        "-rA", *args,
    ]


def prepare(folder: Path) -> None:
    """An empty results folder for a new run of the cell."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def run_cell(cell: Cell, python: str, root: Path, results_root: Path,
             pytest_args: Sequence[str] = (), workers: int | None = None,
             limit_s: float | None = None) -> int:
    """Run ``cell`` with ``python``; returns pytest's exit code (124 past the cell limit)."""
    folder = (results_root / cell.name).resolve()
    known_issues.registry_for_run(root)  # an invalid registry fails before results go
    problem = detect.resolve_hardware(cell).problem
    if problem:   # before the results folder is touched
        raise AccelgridError(problem)
    prepare(folder)
    env = cell_env(cell, root, folder)
    limit = limit_s if limit_s is not None else cell.cell_minutes * 60
    deadline = time.monotonic() + limit
    ids = detect.device_ids(cell.device, env) if workers is None else []
    plan = passes(cell, workers, ids)
    if plan[0].name == contract.PASS_PINNED:
        print(f"accelgrid: {cell.name}: {len(ids)} {cell.device} devices ({', '.join(ids)}): "
              "one pinned worker each, then multi-device tests", flush=True)
    stop_reason: list[str] = []
    rc = 0
    for run_pass in plan:
        args = list(pytest_args)
        if run_pass.name in LEFT_FOR:
            # Only what the first pass left for us: no re-collecting every suite.
            left, err = results.read_json(folder / LEFT_FOR[run_pass.name])
            if (err or not isinstance(left, list)) and \
                    run_pass.name == contract.PASS_HOST_ACCELERATORS:
                continue   # no test asked for the host's accelerators
            if not err and isinstance(left, list):
                if not left:
                    continue
                args = [*left, *(a for a in pytest_args
                                 if a.startswith("-") or not (root / a.split("::")[0]).exists())]
        cmd = pytest_command(cell, python, folder, args, workers, root, run_pass)
        left = deadline - time.monotonic()
        print(f"accelgrid: {cell.name}: pass {run_pass.name}: {' '.join(cmd[1:3])} ... "
              f"(limit {left:.0f} s)", flush=True)
        pass_env = {**env, **dict(run_pass.env), contract.PASS: run_pass.name}
        pass_rc = _run_pytest(cmd, root, pass_env, left, stop_reason)
        if run_pass.empty_ok and pass_rc == 5:  # no multi-device (etc.) tests selected
            pass_rc = 0
        rc = rc or pass_rc
        if stop_reason:
            break
    reason = "; ".join(stop_reason) or f"pytest exited with {rc} before running it"
    summary = results.finalize(folder, reason)
    if ops_pages.write_cell(folder) is not None:
        print(f"accelgrid: {cell.name}: op coverage in {folder / 'ops.md'}", flush=True)
    counts = ", ".join(f"{n} {o}" for o, n in summary["counts"].items() if n)
    print(f"accelgrid: {cell.name}: {summary['total']} tests: {counts or 'none'} "
          f"-> {folder}", flush=True)
    if stop_reason:
        print(f"accelgrid: {cell.name}: {reason}", file=sys.stderr, flush=True)
        return rc if rc > 0 else 128 + (-rc if rc < 0 else 15)
    return rc


def _run_pytest(cmd: list[str], root: Path, env: dict[str, str], limit: float,
                stop_reason: list[str]) -> int:
    # Own process group: the cell limit and signals reach every xdist worker.
    proc = subprocess.Popen(cmd, cwd=root, env=env, start_new_session=True)

    def _forward(signum: int, _frame: object) -> None:
        stop_reason.append(f"interrupted by {signal.Signals(signum).name}")
        _terminate(proc)

    old = {s: signal.signal(s, _forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            rc = proc.wait(timeout=max(limit, 1.0))
        except subprocess.TimeoutExpired:
            stop_reason.append(f"cell time limit of {limit:.0f} s reached")
            _terminate(proc)
            rc = EXIT_CELL_TIMEOUT
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if rc < 0:
        stop_reason.append(f"pytest killed by {signal.Signals(-rc).name}")
    return rc


def _terminate(proc: subprocess.Popen, grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
