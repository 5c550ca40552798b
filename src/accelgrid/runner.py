"""The runner: run one cell's suites with pytest in a given interpreter, to results.

It sets the cell's env before the interpreter starts (torch reads its flags at import),
runs pytest with pytest-xdist (so a crashing test only loses its worker, however many
crash) and pytest-timeout (thread method: survives C-level hangs), enforces the cell's
time limit, and closes the results folder however the run ends.

A cell on several devices runs a pass pinned per device and one that sees them all
(:func:`passes`); where processes can share a device, at the same time, the second
writing its own log, appended to the run's ``pytest.log`` once both ended.

Each run has an id and holds the cell's lock (:func:`cell_lock`): a second run of the
cell stops with one line instead of writing into the same folder. A run narrowed by its
pytest arguments (:func:`selection`) writes ``results/<cell>/runs/<run-id>/`` and leaves
the cell's full run in ``results/<cell>/``. Nothing the run starts outlives it
(:mod:`accelgrid.lifetime`): pytest gets a parent-death signal and a guard in its process
group kills the group when the runner ends the pass or dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import contract, detect, devices, known_issues, lifetime, ops, progress, results, suite_scope
from .errors import AccelgridError, InvalidInput
from .matrix import Cell
from .versions import version_key

EXIT_CELL_TIMEOUT = 124
HARDWARE_JSON = "hardware.json"   # in the results folder: the runner's family, driver, GPUs
RUNS_KEPT = 20  # runs with a selection kept in results/<cell>/runs/ (the newest)


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


# The pytest plugins of every run (the matrix's tools): crash isolation and time limits.
RUN_PLUGINS = ("xdist.plugin", "pytest_timeout")


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
        contract.TORCH_CHANNEL: cell.channel,
        contract.PROFILE: cell.profile,
        contract.RESULTS: str(folder),
        contract.COMMIT: commit or "",
        contract.DIRTY: "1" if dirty else "0",
        # The plugin and the suites' helpers come from this checkout, not an install.
        "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        # pytest loads the plugins a run needs, not every one the interpreter has: on the
        # --no-venv H200 machine (nine plugins) a worker's first test came 5.0-5.8 s after
        # its start instead of 6.4-7.3 s, and a stray plugin can change how tests run.
        # More: PYTEST_PLUGINS in the caller's environment, or `-p NAME` after `--`.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_PLUGINS": ",".join(dict.fromkeys(
            [*RUN_PLUGINS, *(p.strip() for p in env.get("PYTEST_PLUGINS", "").split(",")
                             if p.strip())])),
    })
    # The cell's known_issues.yaml entries, as JSON for the in-cell plugin.
    env.pop(contract.KNOWN_ISSUES, None)
    env.pop(contract.RECORDER_PID, None)  # a run started from inside a cell's test records
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


MULTI_DEVICE_MARK = "multi_device"
SEES_ACCELERATORS_MARK = "sees_accelerators"   # in a cpu cell: run where accelerators show
DEVICE_ALONE_MARK = "device_alone"   # needs its device to itself: after the shared workers
# Passes that run only what an earlier pass left them (a file in the results folder),
# unless they run beside it: then they collect their tests themselves.
LEFT_FOR = {contract.PASS_ALL_DEVICES: results.MULTI_DEVICE,
            contract.PASS_HOST_ACCELERATORS: results.HOST_ACCELERATORS,
            contract.PASS_DEVICE_ALONE: results.DEVICE_ALONE}
# Several workers per device where processes can share it: the cell's tests are mostly
# host-bound (Python, small kernels), so one worker leaves the GPU and most cores idle.
# Each shared worker gets at least CORES_PER_WORKER cores and WORKER_GIB of the device's
# memory; at most MAX_PER_DEVICE (the gain flattens, contention grows; measured in
# docs/h200-2026-12-01/workers-per-device/); where the device's memory is unknown, at most
# UNKNOWN_MEMORY_PER_DEVICE.
CORES_PER_WORKER = 2
WORKER_GIB = 12.0
MAX_PER_DEVICE = 8
UNKNOWN_MEMORY_PER_DEVICE = 2
MAX_WORKERS_PER_DEVICE = 64   # ACCELGRID_WORKERS_PER_DEVICE's bound
# Whether processes may use one device of this type at the same time: then the pass that
# sees every device runs beside the pinned workers (its ranks share their GPUs) instead of
# after them: each device module's shared_by_processes (accelgrid.devices).
SHARED_BY_PROCESSES: dict[str, bool] = {d.name: d.shared_by_processes
                                        for d in devices.BUILTIN if d.accelerator}
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
    junit: str = results.JUNIT
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
    cannot be shared by processes (:data:`SHARED_BY_PROCESSES`) or the run is ``serial``;
    else ``ACCELGRID_WORKERS_PER_DEVICE``, else the cell's own ``workers`` when the matrix
    sets more than one, else what the host affords: :data:`CORES_PER_WORKER` cores and
    :data:`WORKER_GIB` of the smallest device's memory per worker, at most
    :data:`MAX_PER_DEVICE` (:data:`UNKNOWN_MEMORY_PER_DEVICE` where the memory is unknown)."""
    env = dict(os.environ if env is None else env)
    if serial or not SHARED_BY_PROCESSES.get(cell.device, False) or devices < 1:
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
    memory = list(detect.device_memory_gib(cell.device) if memory_gib is None
                  else memory_gib)
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
    most of the pass: docs/h200-2026-12-01b)."""
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
    by processes (:data:`SHARED_BY_PROCESSES`), unless ``serial``; else after it. Where
    several workers share a device (:func:`workers_per_device`), the ``device_alone``
    tests run afterwards, one worker per device, their pytest started with the shared
    workers."""
    var = detect.VISIBILITY_VAR.get(cell.device)
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
        beside = not serial and SHARED_BY_PROCESSES.get(cell.device, False)
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
    if cell.device == "cpu":
        return cpu_passes(cell, workers)
    return [Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)))]


def cpu_passes(cell: Cell, workers: int | None = None) -> list[Pass]:
    """A cpu cell: its tests run with every accelerator hidden (detect.HIDE_ACCELERATORS),
    so that nothing picks a GPU behind the cell's back (pytorch/ao#958 would pass on a GPU
    host); tests marked ``sees_accelerators`` run afterwards in a pass that sees them.
    With the cell's ``workers`` (1 unless set: on the 2-core CI-like box two workers took
    1.14x one's wall, docs/cpu-workers-2026-12-01/)."""
    return [
        Pass(contract.PASS_SINGLE, ("-n", str(workers or cell.workers)),
             ("-m", f"not {SEES_ACCELERATORS_MARK}"),
             env=tuple(detect.HIDE_ACCELERATORS.items()),
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


# pytest options that change how a run reports, not which tests run nor how far it gets.
_NEUTRAL_FLAGS = {
    "-v", "--verbose", "-q", "--quiet", "-s", "-l", "--showlocals", "--full-trace",
    "--no-header", "--no-summary", "--strict-markers", "--disable-warnings",
    "--disable-pytest-warnings", "--cache-clear", "-rA",
}
_NEUTRAL_WITH_VALUE = {
    "-n", "--numprocesses", "--maxprocesses", "--dist", "--max-worker-restart", "--tb",
    "-r", "-p", "-W", "--pythonwarnings", "--durations", "--durations-min", "--timeout",
    "--timeout-method", "--color", "--capture", "--log-level", "--log-cli-level",
    # pytest-rerunfailures: reruns change outcomes (to flaky), not which tests run.
    "--reruns", "--reruns-delay", "--only-rerun", "--rerun-except",
}
# Options that narrow the run and take a value (kept with it in the selection).
_SELECTING_WITH_VALUE = {
    "-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--maxfail", "-c",
    "--config-file", "--rootdir", "-o", "--override-ini", "--confcutdir",
    "--last-failed-no-failures", "--lfnf",
}


def selection(args: Sequence[str]) -> list[str]:
    """The pytest arguments that narrow a run to part of the cell: test paths, ``-k``,
    ``-m``, ``-x``, ``--lf``, ``--deselect``, ... (with their values), in order. Only
    options known to change reporting alone (``-v``, ``--tb``, ``-n``, ``-p``, ...) are
    left out: an option this list does not know counts as narrowing, so a partial run
    never passes for the whole cell. [] means the whole cell."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, eq, _ = arg.partition("=")
        if arg in _NEUTRAL_FLAGS or re.fullmatch(r"-[vqsl]+", arg):
            continue
        if name in _NEUTRAL_WITH_VALUE:
            i += 0 if eq else 1  # skip its value too
            continue
        if not arg.startswith("--") and arg[:2] in {"-n", "-r", "-p", "-W"}:
            continue  # a neutral short option with its value attached: -n4, -rA, -pno:x
        out.append(arg)
        if name in _SELECTING_WITH_VALUE and not eq and i < len(args):
            out.append(args[i])
            i += 1
    return out


class CellBusy(AccelgridError):
    """Another run of the cell holds its results folder."""


LOCK_NAME = "accelgrid-cell-lock-"  # + a digest of the cell folder's real path


def name_lock(cell_folder: Path) -> socket.socket | None:
    """The cell's lock that no file operation can undo (Linux): a Unix socket bound to an
    abstract name made from the cell folder's real path. The kernel frees the name when
    the last process holding the socket ends, so a test that deletes ``.lock``, its cell
    folder or results/ cannot let a second run in, which a flock on a file it deleted
    would (the second run locks a new file). None where there are no abstract names
    (macOS, Windows) or the bind fails otherwise: the flock alone guards the folder.
    Raises :class:`BlockingIOError` when another process holds the name. Abstract names
    are per network namespace: across namespaces (two containers sharing the folder) the
    flock still guards it."""
    if not sys.platform.startswith("linux"):
        return None
    import hashlib

    digest = hashlib.sha256(os.path.realpath(cell_folder).encode()).hexdigest()[:48]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind("\0" + LOCK_NAME + digest)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BlockingIOError(exc.errno, "held by another run") from None
        return None
    return sock


@contextlib.contextmanager
def cell_lock(cell_folder: Path, cell: str, run_id: str) -> Iterator[tuple[int, ...]]:
    """Hold the cell's :func:`name_lock` and ``results/<cell>/.lock`` (flock) for the run;
    yields their fds (pytest inherits them, so even a pytest that outlived its runner
    keeps the folder locked). Raises :class:`CellBusy` with one line naming the holder
    when another run has it."""
    path = cell_folder / results.LOCK
    try:
        held = name_lock(cell_folder)
    except BlockingIOError:
        raise CellBusy(_busy(cell, cell_folder)) from None
    try:
        cell_folder.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # Windows: no flock; runs are not guarded against each other
            yield ()
            return
        results.refuse_symlink(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CellBusy(_busy(cell, cell_folder)) from None
            except OSError as exc:  # e.g. a file system without locks: say so, run anyway
                if held is None:
                    print(f"accelgrid: {cell}: cannot lock {path} ({exc}); running unguarded",
                          file=sys.stderr, flush=True)
            from .provenance import now

            holder_text = json.dumps({"run_id": run_id, "pid": os.getpid(),
                                      "host": socket.gethostname(), "start": now()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder_text.encode(), 0)
            yield (fd,) if held is None else (fd, held.fileno())
        finally:
            os.close(fd)
    finally:
        if held is not None:
            held.close()


def _busy(cell: str, cell_folder: Path) -> str:
    """The one line saying which run holds the cell (as its lock file names it)."""
    holder, _ = results.read_json(cell_folder / results.LOCK)
    who = " (its lock file is gone or unreadable)"
    if isinstance(holder, dict):
        who = (f" (run {holder.get('run_id')}, pid {holder.get('pid')} on "
               f"{holder.get('host')}, since {holder.get('start')})")
    return (f"{cell}: another run of this cell is in progress{who}; "
            f"{cell_folder} is locked until it ends")


def run_cell(cell: Cell, python: str, root: Path, results_root: Path,
             pytest_args: Sequence[str] = (), workers: int | None = None,
             limit_s: float | None = None) -> int:
    """Run ``cell`` with ``python``; returns pytest's exit code (124 past the cell limit).
    Raises :class:`CellBusy` when another run of the cell is in progress."""
    # Not resolved: a symlink planted as the cell folder is refused, never followed.
    cell_folder = Path(os.path.abspath(results_root / cell.name))
    # Everything the run reads is checked before the results folder is touched; nothing
    # it writes or deletes under results/ may be a symlink (it would act outside).
    for name in ("", results.RUNS, results.LOCK, results.LAST_RUN):
        results.refuse_symlink(cell_folder / name if name else cell_folder, results_root)
    known_issues.registry_for_run(root)
    problem = detect.resolve_hardware(cell).problem
    if problem:
        raise AccelgridError(problem)
    run_start = time.time()
    run_id = uuid.uuid4().hex
    chosen = selection(pytest_args)
    with cell_lock(cell_folder, cell.name, run_id) as lock_fds:
        folder = results.run_folder(cell_folder, run_id, partial=bool(chosen))
        if chosen:
            results.prune_runs(cell_folder, RUNS_KEPT - 1)
            folder.mkdir(parents=True)
        else:
            results.clear_for_run(cell_folder)
        results.write_last_run(cell_folder, run_id, folder, chosen)
        run = {"run_id": run_id, "pytest_args": list(pytest_args), "selection": chosen}
        env = cell_env(cell, root, folder)
        env.update({contract.RUN_ID: run_id,
                    contract.PYTEST_ARGS: json.dumps(results.safe(run["pytest_args"])),
                    contract.SELECTION: json.dumps(results.safe(chosen))})
        if chosen:
            print(f"accelgrid: {cell.name}: a selected run (pytest "
                  f"{results.safe_text(' '.join(chosen))}): results in {folder}; "
                  f"the cell's full run stays in {cell_folder}", flush=True)
            scope = suite_scope.suite_paths(cell.suite_paths, pytest_args, root)
            if scope and len(scope) < len(cell.suite_paths):
                print(f"accelgrid: {cell.name}: collecting {', '.join(scope)} only (the "
                      "selection can take no test from the other suites)", flush=True)
        return _run_passes(cell, python, root, folder, env, pytest_args, workers, limit_s,
                           run, lock_fds, run_start)


def serial_reason(env: dict[str, str], pytest_args: Sequence[str]) -> str | None:
    """Why this run's passes must run one after another (even where the device could be
    shared), or None."""
    if env.get(contract.SERIAL_PASSES, "") not in ("", "0"):
        return f"{contract.SERIAL_PASSES}={env[contract.SERIAL_PASSES]}"
    used = sorted({a.partition("=")[0] for a in pytest_args} & CACHE_OPTIONS)
    if used:
        return f"{' '.join(used)} uses pytest's cache"
    return None


def _stages(plan: list[Pass]) -> list[list[Pass]]:
    """The plan as stages run one after another: a pass and the passes beside it."""
    stages: list[list[Pass]] = []
    for run_pass in plan:
        if run_pass.beside and stages:
            stages[-1].append(run_pass)
        else:
            stages.append([run_pass])
    return stages


def _pass_args(run_pass: Pass, folder: Path, root: Path, pytest_args: Sequence[str]
               ) -> list[str] | None:
    """The pytest args of ``run_pass``; None when it has nothing to run."""
    if run_pass.name not in LEFT_FOR or run_pass.beside:
        # A pass beside another collects its own tests (its marker, the user's selection
        # with its paths and node ids): the list the other would leave is not there yet.
        return list(pytest_args)
    # Only what the first pass left for us: no re-collecting every suite.
    left, err = results.read_json(folder / LEFT_FOR[run_pass.name])
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


def _run_passes(cell: Cell, python: str, root: Path, folder: Path, env: dict[str, str],
                pytest_args: Sequence[str], workers: int | None, limit_s: float | None,
                run: dict[str, object], keep_fds: tuple[int, ...],
                run_start: float | None = None) -> int:
    run_start = time.time() if run_start is None else run_start
    limit = limit_s if limit_s is not None else cell.cell_minutes * 60
    deadline = time.monotonic() + limit
    ids, how = (detect.device_ids_how(cell.device, env, python, cell.torch)
                if workers is None else ([], ""))
    if cell.device == "xpu" and how:
        print(f"accelgrid: {cell.name}: {len(ids)} xpu devices: {how}", flush=True)
    # Children this process had before the cell (none, from the CLI): not the tests'.
    keep_children = set(lifetime.children(os.getpid())) if lifetime.become_subreaper() \
        else None
    serial = serial_reason(env, pytest_args)
    plan = passes(cell, workers, ids, serial=serial is not None)
    if plan[0].name == contract.PASS_PINNED:
        beside = any(p.beside and not p.gated for p in plan)
        each = plan[0].workers // len(ids)
        print(f"accelgrid: {cell.name}: {len(ids)} {cell.device} devices ({', '.join(ids)}): "
              + ("one pinned worker each, " if each == 1 else f"{each} pinned workers each, ")
              + ("multi-device tests beside them" if beside else
                 "then multi-device tests" + (f" ({serial})" if serial else "")), flush=True)
    stop_reason: list[str] = []
    left_behind: list[int] = []   # pids of what the tests left running, ended
    rc = 0
    watch = progress.Progress(cell.name, folder)
    log = folder / results.PYTEST_LOG
    timed: list[dict[str, object]] = []
    for stage in _stages(plan):
        jobs: list[tuple[Pass, list[str]]] = []
        for run_pass in stage:
            args = _pass_args(run_pass, folder, root, pytest_args)
            if args is not None:
                jobs.append((run_pass, pytest_command(cell, python, folder, args, workers,
                                                      root, run_pass)))
        if not jobs:
            continue
        left = deadline - time.monotonic()
        logs = [log if i == 0 else folder / f"pytest-{run_pass.name}.log"
                for i, (run_pass, _) in enumerate(jobs)]
        for (run_pass, cmd), pass_log in zip(jobs, logs, strict=True):
            n = run_pass.workers
            print(f"accelgrid: {cell.name}: running {run_pass.title} ({n} worker"
                  f"{'s' if n > 1 else ''}, time limit {progress.elapsed(left)})"
                  + _beside_note(run_pass, jobs[0][0]) + "; pytest's output goes to "
                  f"{progress.shown_path(log)}", flush=True)
            with open(pass_log, "a", encoding="utf-8") as fh:
                fh.write(f"accelgrid: pass {run_pass.name} ({run_pass.title}): "
                         f"{results.safe_text(' '.join(cmd))}\n")
        gates = [folder / f".gate-{run_pass.name}" if run_pass.gated else None
                 for run_pass, _ in jobs]
        ended = _run_pytests(
            [(cmd, {**env, **dict(run_pass.env), contract.PASS: run_pass.name,
                    **({contract.GATE: str(gate)} if gate else {})}, pass_log)
             for (run_pass, cmd), pass_log, gate in zip(jobs, logs, gates, strict=True)],
            root, left, stop_reason, keep_fds, tick=watch.poll, ended=left_behind,
            gates=gates)
        for gate in gates:
            if gate is not None:
                gate.unlink(missing_ok=True)
        _append_logs(log, logs[1:])
        # (a pass the run was stopped before starting has no entry)
        for (run_pass, _), (pass_rc, start, end, opened) in zip(jobs, ended, strict=False):
            if run_pass.empty_ok and pass_rc == 5:  # no multi-device (etc.) tests selected
                pass_rc = 0
            if pass_rc in PYTEST_TROUBLE:  # usage error, interrupted, internal error, none
                which = f" in {run_pass.title}" if len(jobs) > 1 else ""
                print(f"accelgrid: {cell.name}: pytest exited with {pass_rc} "
                      f"({PYTEST_TROUBLE[pass_rc]}){which}; the end of its output:",
                      file=sys.stderr, flush=True)
                for line in progress.log_tail(log):
                    print(f"    {line}", file=sys.stderr, flush=True)
            rc = rc or pass_rc
            timed.append({"name": run_pass.name, "workers": run_pass.workers, "rc": pass_rc,
                          "beside": jobs[0][0].name if run_pass.beside else None,
                          "start": start, "end": end,
                          **({"gate": opened} if run_pass.gated else {})})
        if stop_reason:
            break
    # Daemons the tests left (double fork + setsid, out of every process group): ended
    # with their pass's cgroup where there is one, else now, at the cell's end, never after
    # it (this process adopted them: subreaper).
    if keep_children is not None:
        left_behind += lifetime.end_adopted(keep=keep_children)
    if left_behind:
        print(f"accelgrid: {cell.name}: ended {len(left_behind)} process(es) the tests left "
              f"running (pid {', '.join(map(str, left_behind[:5]))})", flush=True)
    reason = "; ".join(stop_reason) or f"pytest exited with {rc} before running it"
    full = results.storage_failure(folder) if rc and not stop_reason else None
    if full is not None:  # the disk filled (or went read-only) under pytest: say that
        with contextlib.suppress(OSError):
            results.finalize(folder, str(results.storage_problem(full)), run,
                             timing={"passes": timed, "run_start": run_start})
        raise full
    summary = results.finalize(folder, reason, run,
                               timing={"passes": timed, "run_start": run_start})
    captured = ops.aggregate(folder)
    if captured is not None:
        from .report import ops_pages  # only then: the report package brings jinja2

        ops_pages.write_cell(folder, captured)
        print(f"accelgrid: {cell.name}: op coverage in {folder / 'ops.md'}", flush=True)
    watch.poll(final=True)   # suites whose last tests finalize marked
    records = results.last_outcomes(results.run_records(folder, str(run["run_id"]))[0])
    for line in progress.summary_lines(summary, records, folder, log):
        print(f"accelgrid: {cell.name}: {line}", flush=True)
    print_timing(cell.name, summary)
    if stop_reason:
        print(f"accelgrid: {cell.name}: {reason}", file=sys.stderr, flush=True)
        return rc if rc > 0 else 128 + (-rc if rc < 0 else 15)
    return rc


def _beside_note(run_pass: Pass, front: Pass) -> str:
    if run_pass.gated:
        return f", started now, its tests once {front.title} ended"
    return (f", at the same time as {front.title}" if run_pass.beside else "")


def print_timing(cell: str, summary: dict[str, object]) -> None:
    """One line: the run's wall time and each pass's, with its workers' start-up (pass
    start to their first test), as summary.json records them."""
    parts = []
    for p in summary.get("passes") or []:  # type: ignore[union-attr]
        first = sorted((p.get("workers_first_test_s") or {}).values())
        start_up = (f", first test at {first[0]:.1f} s" if len(first) == 1 else
                    f", first tests at {first[0]:.1f}-{first[-1]:.1f} s" if first else "")
        waited = p.get("waited_s")
        parts.append(f"{p['name']} {p['wall_s']:.1f} s"
                     + (f" beside {p['beside']}" if p.get("beside") else "")
                     + (f", its tests after {waited:.1f} s" if waited is not None else "")
                     + f" ({p['workers']} worker{'s' if p['workers'] != 1 else ''}{start_up})")
    if parts:
        print(f"accelgrid: {cell}: wall {summary['wall_s']:.1f} s: " + "; ".join(parts),
              flush=True)


FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM) + (
    (signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
# pytest's exit codes that mean it ran no test or stopped on its own: the console shows
# the end of its output (it goes to pytest.log, not the console).
PYTEST_TROUBLE = {2: "interrupted", 3: "internal error", 4: "usage error",
                  5: "no tests collected"}
TICK_S = 1.0  # how often the console's progress is updated while pytest runs


def _run_pytests(jobs: Sequence[tuple[list[str], dict[str, str], Path | None]], root: Path,
                 limit: float, stop_reason: list[str], keep_fds: tuple[int, ...] = (),
                 tick: Callable[[], None] | None = None, ended: list[int] | None = None,
                 gates: Sequence[Path | None] = ()
                 ) -> list[tuple[int, float, float, float | None]]:
    """Run pytest commands at once: ``jobs`` are (command, env, log); each one's whole
    output goes to its log file (a file, not a pipe: kept even when this process dies
    first), ``tick`` runs about every :data:`TICK_S` while they run. Each runs in a
    cgroup of its own where one can be made (:func:`accelgrid.lifetime.cell_cgroup`),
    ended with it; the pids ended that way (what its tests left) go to ``ended``. A job
    with a gate file in ``gates`` (its pytest waits for it: contract.GATE) gets it once
    every job without one has ended.
    Returns (exit code, start, end, gate opened or None) per started job, epoch seconds."""
    # Each in its own process group (the cell limit and signals reach every xdist worker
    # and what the tests start), no terminal input (a background group reading it would
    # be stopped), killed by the kernel if this process dies, and a guard in that group
    # (lifetime).
    posix = os.name == "posix"
    procs: list[subprocess.Popen] = []
    guards: list[subprocess.Popen | None] = []
    cgroups: list[str] = []
    starts: list[float] = []

    def _forward(signum: int, _frame: object) -> None:
        stop_reason.append(f"interrupted by {signal.Signals(signum).name}")
        _terminate(*procs)

    old = {s: signal.signal(s, _forward) for s in FORWARDED_SIGNALS}
    try:
        for cmd, env, log in jobs:
            if stop_reason:
                break
            extra: dict[str, object] = {}
            cgroup = None
            if posix:
                cgroup = lifetime.cell_cgroup(f"{env.get(contract.RUN_ID, uuid.uuid4().hex)}-"
                                              f"{env.get(contract.PASS, len(procs))}")
                if cgroup is not None:
                    cgroups.append(cgroup)
                extra = {"process_group": 0, "pass_fds": keep_fds,
                         "preexec_fn": lifetime.death_signal_preexec(cgroup=cgroup)}
            starts.append(time.time())
            with open(log, "ab") if log is not None else contextlib.nullcontext() as out:
                proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT if out else None,
                                        **extra)
            procs.append(proc)
            guards.append(_start_guard(proc.pid, cgroup) if posix else None)
        gated = list(gates)[:len(procs)] + [None] * (len(procs) - len(gates))
        opened: list[float | None] = [None] * len(procs)
        ends = _wait_all(procs, time.monotonic() + max(limit, 1.0), limit, stop_reason, tick,
                         gated, opened)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for cgroup in cgroups:  # what the tests left, daemons included
            gone = lifetime.end_cgroup(cgroup)
            if ended is not None:
                ended.extend(gone)
        for guard in guards:
            _end_guard(guard)  # whatever a pass left in its group goes with it
    out = []
    for proc, start, end, gate in zip(procs, starts, ends, opened, strict=True):
        rc = EXIT_CELL_TIMEOUT if proc.returncode is None else proc.returncode
        if end[1]:
            rc = EXIT_CELL_TIMEOUT
        elif rc < 0:
            stop_reason.append(f"pytest killed by {signal.Signals(-rc).name}")
        out.append((rc, start, end[0], gate))
    return out


def _wait_all(procs: list[subprocess.Popen], deadline: float, limit: float,
              stop_reason: list[str], tick: Callable[[], None] | None = None,
              gates: Sequence[Path | None] = (), opened: list[float | None] | None = None
              ) -> list[tuple[float, bool]]:
    """Wait for every process; (end time, whether the cell limit ended it) for each. The
    gate files in ``gates`` are made (and the time put in ``opened``) once every process
    without one has ended."""
    ends: dict[int, tuple[float, bool]] = {}
    last_tick = time.monotonic()
    shut = [i for i, gate in enumerate(gates) if gate is not None]
    while len(ends) < len(procs):
        for i, proc in enumerate(procs):
            if i not in ends and proc.poll() is not None:
                ends[i] = (time.time(), False)
        if shut and all(i in ends for i in range(len(procs)) if i not in shut):
            for i in shut:
                gates[i].touch()  # type: ignore[union-attr]
                if opened is not None:
                    opened[i] = time.time()
            shut = []
        if len(ends) == len(procs):
            break
        if time.monotonic() >= deadline:
            stop_reason.append(f"cell time limit of {limit:.0f} s reached")
            running = [i for i in range(len(procs)) if i not in ends]
            _terminate(*(procs[i] for i in running))
            for i in running:
                ends[i] = (time.time(), True)
            break
        if tick is not None and time.monotonic() - last_tick >= TICK_S:
            tick()
            last_tick = time.monotonic()
        # Returns as soon as that pass ends (a short run is not rounded up to a tick); a
        # gated pass is waited for last (the gate opens when the others end).
        pending = next((p for i, p in enumerate(procs) if i not in ends and i not in shut),
                       None) or next(p for i, p in enumerate(procs) if i not in ends)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pending.wait(timeout=0.05)
    return [ends[i] for i in range(len(procs))]


def _append_logs(log: Path, others: Sequence[Path]) -> None:
    """A pass that ran beside another wrote its own log (two writers would mix their
    lines): appended whole to the run's log once both ended, then removed."""
    for other in others:
        if not other.exists():
            continue
        with open(log, "ab") as out, open(other, "rb") as src:
            out.write(src.read())
        other.unlink()


def _start_guard(pgid: int, cgroup: str | None = None) -> subprocess.Popen | None:
    """The guard (:data:`accelgrid.lifetime.GUARD_CODE`) in process group ``pgid``: it
    kills the group (and ``cgroup``) once its stdin closes, i.e. when this process ends
    the pass or dies."""
    try:
        guard = subprocess.Popen([sys.executable, "-I", "-c", lifetime.GUARD_CODE,
                                  *([cgroup] if cgroup else [])],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 process_group=pgid)
        # Ready once it ignores the group's SIGTERM/SIGINT (a signal sent before then
        # would end it early): it says so with one byte.
        ready = guard.stdout.read(1)  # type: ignore[union-attr]
        guard.stdout.close()  # type: ignore[union-attr]
        if ready != b"+":
            guard.wait()
            raise OSError(f"it exited with {guard.returncode}")
        return guard
    except (OSError, subprocess.SubprocessError) as exc:  # pytest already gone, or no python
        print(f"accelgrid: no guard for pytest's process group ({exc}); it relies on "
              "the parent-death signal alone", file=sys.stderr, flush=True)
        return None


def _end_guard(guard: subprocess.Popen | None) -> None:
    if guard is None:
        return
    with contextlib.suppress(OSError):
        guard.stdin.close()  # type: ignore[union-attr]
    try:
        guard.wait(timeout=30)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


def _terminate(*procs: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to each process's group, then SIGKILL to the groups whose leader is still
    there after ``grace`` seconds (passes beside each other stop together)."""
    alive = []
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            alive.append(proc)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in alive):
        time.sleep(0.1)
    for proc in alive:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
