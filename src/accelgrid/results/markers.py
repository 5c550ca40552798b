"""The marker files of a run's folder: ``running/<worker>.json`` names the test each
worker is in (a dead worker's test becomes crashed or timeout: :func:`crash_outcome`),
``importing/<pid>.json`` the file each test process is importing (one that ends itself
there leaves it: :func:`import_deaths`).

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from ..base import contract, outcomes
from ..base.jsonio import open_nofollow, read_json, safe_dumps
from ..base.outcomes import Outcome

__all__ = [
    "IMPORTING_DIR", "clear_importing", "clear_running", "crash_outcome",
    "drop_cleared_markers", "import_deaths", "mark_importing", "mark_running", "running",
]


def mark_running(results: Path, worker: str, nodeid: str, timeout: float | None,
                 slot: str | None = None) -> None:
    """Note that ``worker`` is in ``nodeid`` now, in ``running/<slot>.json`` (``slot``:
    the worker's id, qualified by its pass where passes run at once: both have a gw0)."""
    # Once per test: one small write in place, no temp file. A reader that finds it
    # half-written ignores it (read_json error), which only costs crash attribution.
    path = results / contract.RUNNING_DIR / f"{slot or worker}.json"
    _write_marker(path, safe_dumps({"nodeid": nodeid, "start": time.time(),
                                    "timeout": timeout, "worker": worker}))


def _write_marker(path: Path, data: str) -> None:
    """A small marker file written in place (no temporary file, never through a planted
    link), its folder made on first use: a reader that finds it half-written ignores it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = open_nofollow(path, flags)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(path, flags)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)


IMPORTING_DIR = "importing"  # a run's folder: what each test process is importing now


def mark_importing(results: Path, what: str, path: str) -> Path:
    """Note that this process is importing ``path`` (a test file, the device spec file:
    ``what``), in ``importing/<pid>.json``: a process that ends itself there (``os._exit``
    at import) leaves the note, which the runner reads (:func:`import_deaths`)."""
    marker = results / IMPORTING_DIR / f"{os.getpid()}.json"
    _write_marker(marker, safe_dumps({"path": path, "what": what}))
    return marker


def clear_importing(results: Path) -> None:
    """This process got through the import :func:`mark_importing` noted."""
    with contextlib.suppress(OSError):
        (results / IMPORTING_DIR / f"{os.getpid()}.json").unlink()


def import_deaths(results: Path) -> list[dict[str, str]]:
    """The imports test processes never came back from (``path``, ``what``), once each,
    and the notes cleared: call it once the pass's processes have ended."""
    folder = results / IMPORTING_DIR
    found: dict[str, dict[str, str]] = {}
    if folder.is_dir() and not folder.is_symlink():
        for marker in sorted(folder.glob("*.json")):
            data, err = read_json(marker)
            if not err and isinstance(data, dict) and isinstance(data.get("path"), str):
                found.setdefault(data["path"], {"path": data["path"],
                                                "what": str(data.get("what"))})
            with contextlib.suppress(OSError):
                marker.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()
    return list(found.values())


def clear_running(results: Path, worker: str) -> None:
    """Clear ``running/<worker>.json`` (``worker``: the slot :func:`mark_running` used)."""
    path = results / contract.RUNNING_DIR / f"{worker}.json"
    if path.exists():
        path.write_text("", encoding="utf-8")


def drop_cleared_markers(results: Path) -> None:
    """At a run's end, the markers its workers cleared (empty files) go, and ``running/``
    with them when nothing else is there: a finished run leaves no running files."""
    folder = results / contract.RUNNING_DIR
    try:
        for marker in folder.glob("*.json"):
            if marker.is_file() and not marker.is_symlink() and marker.stat().st_size == 0:
                marker.unlink()
        folder.rmdir()
    except OSError:
        pass  # absent, not empty (a marker of a test that was running stays), or read-only


def running(results: Path) -> dict[str, dict[str, Any]]:
    """nodeid -> {start, timeout, worker} for tests a worker was in when it stopped."""
    out = {}
    folder = results / contract.RUNNING_DIR
    if folder.is_dir():
        for f in folder.glob("*.json"):
            data, err = read_json(f)
            if not err and isinstance(data, dict) and "nodeid" in data:
                out[data["nodeid"]] = {**data, "worker": data.get("worker") or f.stem}
    return out


def crash_outcome(started: float | None, timeout: float | None, now: float | None = None
                  ) -> Outcome:
    """A test whose worker died: ``timeout`` if it had run for (nearly) its limit."""
    if started is not None and timeout:
        elapsed = (now or time.time()) - started
        # pytest-timeout fires at the limit; allow for clock and dump time.
        if elapsed >= 0.95 * float(timeout):
            return outcomes.TIMEOUT
    return outcomes.CRASHED
