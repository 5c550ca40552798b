"""How a cell's tests are spread over pytest passes, and each pass's pytest command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import devices
from ..base import contract, jsonio
from ..base.contract import DEVICE_ALONE_MARK, MULTI_DEVICE_MARK, SEES_ACCELERATORS_MARK
from ..base.errors import InvalidInput
from ..config.model import Cell
from ..host import detect
from . import suite_scope

# Several workers per device where processes can share it: the cell's tests are mostly
# host-bound (Python, small kernels), so one worker leaves the GPU and most cores idle.
# Each shared worker gets at least CORES_PER_WORKER cores and WORKER_GIB of the device's
# memory; at most MAX_PER_DEVICE (the gain flattens, contention grows; measured in
# docs/measured/h200-2026-12-01/workers-per-device/); where the device's memory is unknown, at most
# UNKNOWN_MEMORY_PER_DEVICE.
CORES_PER_WORKER = 2
WORKER_GIB = 12.0
MAX_PER_DEVICE = 8
UNKNOWN_MEMORY_PER_DEVICE = 2
MAX_WORKERS = 256  # as matrix.yaml's workers


def workers_override() -> int | None:
    """$ACCELGRID_WORKERS as a number of workers (InvalidInput for anything else)."""
    text = os.environ.get(contract.WORKERS, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise InvalidInput(f"{contract.WORKERS}={text[:40]!r}: expected a whole number of "
                           f"workers from 1 to {MAX_WORKERS}")
    return int(text)


MAX_WORKERS_PER_DEVICE = 64   # ACCELGRID_WORKERS_PER_DEVICE's bound
# pytest options that read or write pytest's cache (.pytest_cache): two sessions at once
# would lose each other's last-failed list, so a run using them keeps its passes serial.
CACHE_OPTIONS = {
    "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
    "--stepwise", "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset",
    "--lfnf", "--last-failed-no-failures", "--cache-show", "--cache-clear",
}


@dataclass(frozen=True)
class Pass:
    """One pytest invocation of a cell run."""

    name: str
    xdist: tuple[str, ...]          # -n N, or one --tx per pinned device
    select: tuple[str, ...] = ()    # marker selection
    junit: str = contract.JUNIT_FILE
    empty_ok: bool = False          # "no tests collected" is fine for this pass
    env: tuple[tuple[str, str], ...] = ()   # extra env for the whole pass
    title: str = "the cell's tests"  # what the pass runs, in the user's words
    beside: bool = False            # runs at the same time as the pass before it
    # Started beside the passes before it, so its start-up and collection overlap them,
    # but its tests run only once they have all ended (contract.GATE): device-alone.
    gated: bool = False

    @property
    def workers(self) -> int:
        """How many xdist workers the pass runs at once."""
        if "-n" in self.xdist:
            value = self.xdist[self.xdist.index("-n") + 1]
            return int(value) if value.isdigit() else os.cpu_count() or 1
        return max(1, self.xdist.count("--tx"))


def workers_per_device(cell: Cell, devices: int, serial: bool = False,
                       env: dict[str, str] | None = None,
                       memory_gib: Sequence[float] | None = None) -> int:
    """How many xdist workers share each of ``devices`` devices: 1 where the device type
    cannot be shared by processes (its ``shared_by_processes``) or the run is ``serial``;
    else ``ACCELGRID_WORKERS_PER_DEVICE``, else the cell's own ``workers`` when the matrix
    sets more than one, else what the host affords: :data:`CORES_PER_WORKER` cores and
    :data:`WORKER_GIB` of the smallest device's memory per worker, at most
    :data:`MAX_PER_DEVICE` (:data:`UNKNOWN_MEMORY_PER_DEVICE` where the memory is unknown)."""
    env = dict(os.environ if env is None else env)
    if serial or not cell.device_type.shared_by_processes or devices < 1:
        return 1
    text = env.get(contract.WORKERS_PER_DEVICE, "").strip()
    if text:
        if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS_PER_DEVICE:
            raise InvalidInput(f"{contract.WORKERS_PER_DEVICE}={text[:40]!r}: expected a "
                               f"whole number from 1 to {MAX_WORKERS_PER_DEVICE}")
        return int(text)
    if cell.workers > 1:
        return cell.workers
    by_cores = (os.cpu_count() or 1) // (devices * CORES_PER_WORKER)
    memory = list(cell.device_type.host_memory_gib() if memory_gib is None else memory_gib)
    cap = int(min(memory) // WORKER_GIB) if memory else UNKNOWN_MEMORY_PER_DEVICE
    return max(1, min(by_cores, cap, MAX_PER_DEVICE))


def _thread_share(workers: int) -> tuple[tuple[str, str], ...]:
    """Each of ``workers`` workers' share of the CPU as OMP_NUM_THREADS (unless the user
    chose): N workers each running torch's one-thread-per-core pools oversubscribe the
    host."""
    if os.environ.get("OMP_NUM_THREADS"):
        return ()
    return (("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers))),)


def _device_alone(cell: Cell, var: str, device_ids: Sequence[str]) -> Pass:
    """The pass after the shared workers: the ``device_alone`` tests, one worker pinned to
    each device, so nothing else runs on it meanwhile. Gated: its pytest starts with the
    shared workers and waits for them before its first test (its 4-9 s of start-up was
    most of the pass: docs/measured/h200-2026-12-01b)."""
    specs: list[str] = ["--dist", "worksteal"] if len(device_ids) > 1 else ["-n", "1"]
    env: tuple[tuple[str, str], ...] = ()
    if len(device_ids) > 1:
        share = "".join(f"//env:{k}={v}" for k, v in _thread_share(len(device_ids)))
        specs += [x for dev in device_ids for x in (
            "--tx", f"popen//env:{var}={dev}//env:{contract.DEVICE_INDEX}={dev}{share}")]
    else:
        env = ((var, device_ids[0]), (contract.DEVICE_INDEX, device_ids[0]))
    return Pass(contract.PASS_DEVICE_ALONE, tuple(specs), ("-m", DEVICE_ALONE_MARK),
                junit="junit-device-alone.xml", empty_ok=True, env=env,
                title=f"the tests that need the device to itself ({DEVICE_ALONE_MARK})",
                beside=True, gated=True)


def passes(cell: Cell, workers: int | None = None, device_ids: Sequence[str] = (),
           serial: bool = False) -> list[Pass]:
    """How the cell's tests are spread. With several devices: xdist workers pinned to
    each device (per-device ``--tx`` specs, so a replacement worker keeps its device),
    and a pass with one worker that sees every device of the run for ``multi_device``
    tests: the visibility variable lists them, so a chosen subset (``ACCELGRID_DEVICES``)
    holds there too. That pass runs beside the pinned one where the device can be shared
    by processes (the type's ``shared_by_processes``), unless ``serial``; else after it. Where
    several workers share a device (:func:`workers_per_device`), the ``device_alone``
    tests run afterwards, one worker per device, their pytest started with the shared
    workers."""
    var = cell.device_type.visibility_var
    per_device = (workers_per_device(cell, len(device_ids), serial)
                  if var and device_ids and workers is None else 1)
    alone = [_device_alone(cell, var, device_ids)] if var and per_device > 1 else []
    if var and len(device_ids) == 1 and workers is None:
        # One device (or a one-device subset): pin it, so nothing else on the host is seen
        # (the HF Trainer, for one, switches to DataParallel when it sees several GPUs).
        pin = ((var, device_ids[0]), (contract.DEVICE_INDEX, device_ids[0]))
        if per_device == 1:
            return [Pass(contract.PASS_SINGLE, ("-n", str(cell.workers)), env=pin,
                         title=f"the cell's tests on {cell.device} device {device_ids[0]}")]
        return [Pass(contract.PASS_SINGLE, ("-n", str(per_device), "--dist", "worksteal"),
                     ("-m", f"not {DEVICE_ALONE_MARK}"), env=(*pin, *_thread_share(per_device)),
                     title=f"the cell's tests on {cell.device} device {device_ids[0]}, "
                           f"{per_device} workers sharing it"), *alone]
    if var and len(device_ids) > 1 and workers is None:
        # worksteal: durations are very uneven (a 20 s test beside 0.1 s ones).
        specs: list[str] = ["--dist", "worksteal"]  # --tx specs are ignored without --dist
        share = _thread_share(len(device_ids) * per_device)
        threads = "".join(f"//env:{k}={v}" for k, v in share)
        for dev in device_ids:  # k workers per device: its spec k times
            specs += ["--tx", f"popen//env:{var}={dev}//env:{contract.DEVICE_INDEX}={dev}"
                              + threads] * per_device
        beside = not serial and cell.device_type.shared_by_processes
        pinned_select = (f"not {MULTI_DEVICE_MARK}" if not alone
                         else f"not {MULTI_DEVICE_MARK} and not {DEVICE_ALONE_MARK}")
        each = "one worker" if per_device == 1 else f"{per_device} workers"
        return [
            Pass(contract.PASS_PINNED, tuple(specs), ("-m", pinned_select),
                 title=f"the cell's tests, {each} pinned to each device"),
            Pass(contract.PASS_ALL_DEVICES, ("-n", "1"), ("-m", MULTI_DEVICE_MARK),
                 junit="junit-all-devices.xml", empty_ok=True,
                 # Beside the pinned workers: no more than a worker's share of the CPU.
                 env=((var, ",".join(device_ids)),
                      (contract.DEVICE_INDEX, ",".join(device_ids)),
                      *(share if beside else ())),
                 title=f"the tests that use every device at once ({MULTI_DEVICE_MARK})",
                 beside=beside),
            *alone,
        ]
    if not cell.device_type.accelerator:
        return cpu_passes(cell, workers)
    return [Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)))]


def cpu_passes(cell: Cell, workers: int | None = None) -> list[Pass]:
    """A cpu cell: its tests run with every accelerator hidden (devices.hidden_accelerators()),
    so that nothing picks a GPU behind the cell's back (pytorch/ao#958 would pass on a GPU
    host); tests marked ``sees_accelerators`` run afterwards in a pass that sees them.
    With the cell's ``workers`` (1 unless set: on the 2-core CI-like box two workers took
    1.14x one's wall, docs/measured/cpu-workers-2026-12-01/)."""
    return [
        Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)),
             ("-m", f"not {SEES_ACCELERATORS_MARK}"),
             env=tuple(devices.hidden_accelerators().items()),
             title="the cell's tests, with the host's accelerators hidden"),
        Pass(contract.PASS_HOST_ACCELERATORS, ("-n", "1"), ("-m", SEES_ACCELERATORS_MARK),
             junit="junit-host-accelerators.xml", empty_ok=True,
             title=f"the tests that see the host's accelerators ({SEES_ACCELERATORS_MARK})"),
    ]


def pytest_command(cell: Cell, python: str, folder: Path, args: Sequence[str] = (),
                   workers: int | None = None, root: Path | None = None,
                   run_pass: Pass | None = None) -> list[str]:
    # Only the suites the arguments can select from (none when they name test paths).
    paths = (list(cell.suite_paths) if root is None
             else suite_scope.suite_paths(cell.suite_paths, args, root))
    run_pass = run_pass or passes(cell, workers)[0]
    select, args = _with_markers(run_pass.select, args)
    return [
        python, "-m", "pytest", *paths,
        *run_pass.xdist, *select,
        # Beside another pass: leave pytest's cache to it (both would write last-failed).
        *(("-p", "no:cacheprovider") if run_pass.beside else ()),
        # Dead workers no test explains (one dying at start, again and again) end the run
        # after this many; each test that kills its worker raises it (RestartBudget).
        f"--max-worker-restart={4 * run_pass.workers}",
        f"--timeout={cell.test_seconds}", "--timeout-method=thread",
        # A file that fails to import (or exits at import) is a collection error record of
        # its own (the plugin); the other files' tests still run.
        "--continue-on-collection-errors",
        # The matrix's reruns (0: neither the plugin, which the cell then lacks, nor the
        # option); plugin autoload is off, so it is named.
        *(("-p", "pytest_rerunfailures", f"--reruns={cell.reruns}") if cell.reruns else ()),
        f"--junitxml={folder / run_pass.junit}", "-o", "junit_family=xunit2",
        "-o", f"junit_suite_name={cell.name}",
        "-rA", *args,
    ]


def _markers_of(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """The user's ``-m`` expression (pytest keeps the last) and the args without any."""
    expr: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "-m" and i < len(args):
            expr = args[i]
            i += 1
        elif arg.startswith("-m") and not arg.startswith("--") and len(arg) > 2:
            expr = arg[2:].removeprefix("=")   # -mEXPR, -m=EXPR
        else:
            rest.append(arg)
    return expr, rest


def _with_markers(select: Sequence[str], args: Sequence[str]) -> tuple[list[str], list[str]]:
    """A pass's marker selection joined with the user's ``-m`` (pytest takes only the last
    ``-m``: the user's would undo the pass's split, and run multi-device tests in pinned
    workers and every test in the all-devices pass)."""
    user, rest = _markers_of(args)
    if user is None:
        return list(select), list(args)
    if len(select) == 2 and select[0] == "-m":
        return ["-m", f"({select[1]}) and ({user})"], rest
    return [*select, "-m", user], rest


def serial_reason(env: dict[str, str], pytest_args: Sequence[str]) -> str | None:
    """Why this run's passes must run one after another (even where the device could be
    shared), or None."""
    if env.get(contract.SERIAL_PASSES, "") not in ("", "0"):
        return f"{contract.SERIAL_PASSES}={env[contract.SERIAL_PASSES]}"
    used = sorted({a.partition("=")[0] for a in pytest_args} & CACHE_OPTIONS)
    if used:
        return f"{' '.join(used)} uses pytest's cache"
    return None


def stages(plan: list[Pass]) -> list[list[Pass]]:
    """The plan as stages run one after another: a pass and the passes beside it."""
    stages: list[list[Pass]] = []
    for run_pass in plan:
        if run_pass.beside and stages:
            stages[-1].append(run_pass)
        else:
            stages.append([run_pass])
    return stages


def pass_args(run_pass: Pass, folder: Path, root: Path, pytest_args: Sequence[str]
               ) -> list[str] | None:
    """The pytest args of ``run_pass``; None when it has nothing to run."""
    if run_pass.name not in contract.HANDOFF or run_pass.beside:
        # A pass beside another collects its own tests (its marker, the user's selection
        # with its paths and node ids): the list the other would leave is not there yet.
        return list(pytest_args)
    # Only what the first pass left for us: no re-collecting every suite.
    left, err = jsonio.read_json(folder / contract.HANDOFF[run_pass.name].file)
    if err or not isinstance(left, list):
        # No list: host-accelerators had no test asking for them; all-devices collects.
        return None if run_pass.name in (contract.PASS_HOST_ACCELERATORS,
                                         contract.PASS_DEVICE_ALONE) else list(pytest_args)
    if not left:
        return None
    # The user's arguments without their test paths (the list replaces those); an option's
    # value that names a path (`-k suites`) stays.
    named = set(suite_scope.named_paths(pytest_args, root))
    return [*left, *(a for i, a in enumerate(pytest_args) if i not in named)]


@dataclass(frozen=True)
class RunPlan:
    """The passes a run uses and each one's pytest command, as :func:`plan_run` makes them
    for the run and for ``accelgrid plan``. A pass that gets the tests an earlier one left
    (:data:`accelgrid.base.contract.HANDOFF`) runs its command with that list in place of the
    user's test paths (:func:`pass_args`): known once the earlier pass ended."""

    device_ids: list[str]
    how: str                      # how the device ids were known ("" without a count)
    serial: str | None            # why the passes run one after another, or None
    passes: list[Pass]
    commands: list[list[str]]     # per pass, with the user's pytest arguments


def plan_run(cell: Cell, python: str, folder: Path, root: Path,
             pytest_args: Sequence[str] = (), workers: int | None = None,
             env: dict[str, str] | None = None) -> RunPlan:
    """How a run of ``cell`` with ``python`` into ``folder`` spreads its tests on this host
    (``env``: the cell's environment, where the device ids and the serial switch are
    read) and the pytest command of each pass."""
    env = dict(os.environ if env is None else env)
    ids, how = (detect.device_ids_how(cell.device_type, env, python, cell.torch)
                if workers is None else ([], ""))
    serial = serial_reason(env, pytest_args)
    plan = passes(cell, workers, ids, serial=serial is not None)
    return RunPlan(ids, how, serial, plan,
                   [pytest_command(cell, python, folder, pytest_args, workers, root, p)
                    for p in plan])
