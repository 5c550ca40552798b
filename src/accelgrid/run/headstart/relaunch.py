"""A warm selected run's pytest started at the command's first moment, as its session
started and took it last time (``accelgrid run CELL -- ARGS``, run again).

:mod:`.prestart` starts a selected run's pytest before nox checks the env, but only once
accelgrid is loaded and the matrix validated: a fifth of a second, in a run of 2 to 3.
When a session takes the run started ahead (the env checked, the very run it would
start), :func:`record` keeps that launch beside the cell's env: its pytest commands, the
variables the cell set (not the rest of the environment: a digest of it), its
known-issues file, and what it came from (the command line, working folder,
interpreter, accelgrid's version, the environment's digest, and the stat keys of the
matrix, the noxfile, the known-issue registry and the env's stamp). The next identical
command, before it loads anything else (:func:`early`, the first thing the CLI's
``main`` does), takes the cell's lock and starts those commands for a new run id, held
at their gate.

Nothing in the record is trusted: :func:`.prestart.start` opens the run as always (with
this run id and lock) and keeps the processes only when each command, its env, its
log's first line and the known-issues file are exactly what it would start
(:func:`matches`); else it ends them and starts its own. Until the session has checked
the env, no test runs (the gate); a launch nobody claimed is ended when the command
exits (:func:`drop`). ``ACCELGRID_NO_RELAUNCH=1`` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ...base import contract, statkey

VERSION = 1
RECORD_PREFIX = ".accelgrid-launch-"   # + the cell's name + .json, in the envs' folder
OFF = "ACCELGRID_NO_RELAUNCH"
_FOLDER = "@FOLDER@"   # the run's folder and id in a recorded launch
_RUN_ID = "@RUN_ID@"

Job = tuple[list[str], dict[str, str], Path]


class Launch:
    """A run's first stage started by :func:`early`: its id and folder, the cell's lock
    (``stack`` releases it), the pytest jobs with their log's first line, the
    known-issues file written for them, and what :func:`~.supervise.start_pytests`
    started."""

    def __init__(self, cell: str, run_id: str, folder: Path, stack: contextlib.ExitStack,
                 fds: tuple[int, ...], jobs: list[Job], heads: list[str],
                 known_issues: bytes | None) -> None:
        self.cell, self.run_id, self.folder = cell, run_id, folder
        self.stack, self.fds, self.jobs, self.heads = stack, fds, jobs, heads
        self.known_issues = known_issues
        self.start = time.time()   # the run's start
        self.started: Any = None   # supervise.Started, once started


_KEY: dict[str, Any] | None = None     # this command's launch key (early saw `run`)
_ENVIRON: dict[str, str] = {}          # the environment as the command started
_LAUNCH: Launch | None = None


def record_path(root: Path, cell: str) -> Path:
    """Where ``cell``'s launch is kept: beside the cell envs (``.nox``, or
    ``$ACCELGRID_ENVDIR``)."""
    return contract.envs_folder(root) / f"{RECORD_PREFIX}{cell}.json"


def _key(argv: list[str], environ: dict[str, str]) -> dict[str, Any]:
    from ... import __file__ as package_init
    from ... import __version__

    digest = hashlib.sha256()
    for name in sorted(environ):
        digest.update(f"{name}={environ[name]}\0".encode("utf-8", "surrogateescape"))
    return {"argv": argv, "cwd": os.getcwd(), "python": sys.executable,
            "accelgrid": [__version__, str(Path(package_init).resolve().parent)],
            "environ": digest.hexdigest()}


def _parse(argv: list[str]) -> tuple[Path, str] | None:
    """The project folder and cell of ``accelgrid [--matrix M] run CELL -- ARGS`` (that
    form exactly), else None."""
    matrix = "matrix.yaml"   # the CLI's default (config.matrix.DEFAULT_MATRIX)
    if len(argv) > 1 and argv[0] == "--matrix":
        matrix, argv = argv[1], argv[2:]
    if len(argv) > 3 and argv[0] == "run" and argv[2] == "--" \
            and not argv[1].startswith("-") and "/" not in argv[1] and "\0" not in argv[1]:
        return Path(matrix).parent, argv[1]
    return None


def early(argv: list[str]) -> None:
    """Called by the CLI's ``main`` before it loads anything else: when ``argv`` is a
    selected run whose launch was recorded with the same key, start it (held at its
    gate) for :func:`claim`. Never fails the command: anything in the way starts nothing."""
    global _KEY, _ENVIRON
    parsed = _parse(argv)
    if parsed is None or os.environ.get(OFF) or os.environ.get(contract.SHARD):
        return
    _ENVIRON = dict(os.environ)
    _KEY = _key(argv, _ENVIRON)
    try:
        _start(parsed[1], parsed[0])
    except Exception:   # noqa: BLE001  # a best effort: the session starts the run itself
        drop()


def _start(cell: str, root: Path) -> None:
    global _LAUNCH
    from ...base import jsonio

    kept, _ = jsonio.read_json(record_path(root, cell))
    if not isinstance(kept, dict) or kept.get("version") != VERSION \
            or kept.get("key") != _KEY or kept.get("cell") != cell:
        return
    files = kept["files"]
    if any(statkey.key(f) != (None if k is None else tuple(k)) for f, k in files.items()):
        return
    from ...base import lifetime
    from ..lock import cell_lock, new_run_id
    from ..supervise import Started, start_pytests

    cell_folder = Path(kept["cell_folder"])
    results_root = Path(kept["results_root"])
    for name in ("", contract.RUNS_DIR, contract.LOCK_FILE):
        jsonio.refuse_symlink(cell_folder / name if name else cell_folder, results_root)
    run_id = new_run_id()
    folder = cell_folder / contract.RUNS_DIR / run_id

    def fill(text: str) -> str:
        return text.replace(_FOLDER, str(folder)).replace(_RUN_ID, run_id)

    jobs: list[Job] = []
    for job in kept["jobs"]:
        env = {k: v for k, v in _ENVIRON.items() if k not in job["unset"]}
        env.update({k: fill(v) for k, v in job["env"].items()})
        jobs.append(([fill(c) for c in job["cmd"]], env, Path(fill(job["log"]))))
    heads = [fill(job["head"]) for job in kept["jobs"]]
    known = None if kept["known_issues"] is None else str(kept["known_issues"]).encode()
    stack = contextlib.ExitStack()
    fds = stack.enter_context(cell_lock(cell_folder, cell, run_id))
    launch = _LAUNCH = Launch(cell, run_id, folder, stack, fds, jobs, heads, known)
    atexit.register(drop)
    folder.mkdir(parents=True)
    if known is not None:
        (folder / contract.KNOWN_ISSUES_FILE).write_bytes(known)
    for (_, _, log), head in zip(jobs, heads, strict=True):
        log.write_text(head, encoding="utf-8")
    lifetime.become_subreaper()   # before its pytest can leave anything behind
    # Filled as each starts: whatever started before a failure is ended with the launch.
    launch.started = Started()
    start_pytests(jobs, root, fds, into=launch.started)


def claim(cell: str) -> Launch | None:
    """The launch :func:`early` started for ``cell``, now the caller's to keep or end
    (:func:`end`); None when there is none."""
    global _LAUNCH
    launch, _LAUNCH = _LAUNCH, None
    if launch is not None and launch.cell != cell:
        end(launch)
        return None
    return launch


def matches(launch: Launch, jobs: list[Job], heads: list[str],
            known_issues: bytes | None) -> bool:
    """Whether ``launch`` started exactly ``jobs`` (commands, envs, logs), with these
    first log lines and known-issues file."""
    return (launch.started is not None and len(launch.started.procs) == len(jobs)
            and launch.jobs == jobs
            and launch.heads == heads and launch.known_issues == known_issues)


def end(launch: Launch, keep_folder: bool = False) -> None:
    """``launch``'s processes ended (no test of theirs ran: they wait for the gate), its
    folder removed (unless ``keep_folder``: the caller's run uses it) and the cell's
    lock released."""
    if launch.started is not None:
        from ..supervise import end_started

        end_started(launch.started)
        launch.started = None
    if not keep_folder:
        import shutil

        shutil.rmtree(launch.folder, ignore_errors=True)
    launch.stack.close()


def drop() -> None:
    """End a launch nobody claimed (the command did not get to its session)."""
    global _LAUNCH
    launch, _LAUNCH = _LAUNCH, None
    if launch is not None:
        end(launch)


def record(root: Path, cell: str, folder: Path, run_id: str,
           jobs: list[tuple[list[str], dict[str, str], Path, str]],
           files: list[Path], results_root: Path) -> None:
    """Keep the launch of a run its session took (``jobs``: command, env, log, the log's
    first line) for the next identical command; only when :func:`early` saw this
    command (the CLI's ``accelgrid run CELL -- ARGS``). Best effort: a launch that
    cannot be kept is not."""
    if _KEY is None:
        return
    try:
        _record(root, cell, folder, run_id, jobs, files, results_root)
    except (OSError, ValueError):
        forget(root, cell)   # none rather than a stale one


def _record(root: Path, cell: str, folder: Path, run_id: str,
            jobs: list[tuple[list[str], dict[str, str], Path, str]],
            files: list[Path], results_root: Path) -> None:
    from ...base import jsonio

    def blank(text: str) -> str:
        return text.replace(str(folder), _FOLDER).replace(run_id, _RUN_ID)

    issues = folder / contract.KNOWN_ISSUES_FILE
    kept = {
        "version": VERSION, "key": _KEY, "cell": cell,
        "cell_folder": str(folder.parent.parent), "results_root": str(results_root),
        "files": {str(f.absolute()): statkey.key(f) for f in files},
        "known_issues": issues.read_text(encoding="utf-8") if issues.exists() else None,
        "jobs": [{"cmd": [blank(c) for c in cmd],
                  "env": {k: blank(v) for k, v in env.items() if _ENVIRON.get(k) != v},
                  "unset": sorted(k for k in _ENVIRON if k not in env),
                  "log": blank(str(log)), "head": blank(head)}
                 for cmd, env, log, head in jobs]}
    # Every value exactly (json escapes a lone surrogate, from a variable that is not
    # UTF-8): write_json's safe text would replace it, and the record would never match.
    jsonio.write_text(record_path(root, cell), json.dumps(kept, indent=1) + "\n")


def forget(root: Path, cell: str) -> None:
    """Remove ``cell``'s recorded launch (it no longer matched)."""
    with contextlib.suppress(OSError):
        record_path(root, cell).unlink()
