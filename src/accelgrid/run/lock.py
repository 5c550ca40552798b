"""The cell's lock: one run of a cell at a time, held by the run's id (:func:`new_run_id`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from ..base import contract, jsonio
from ..base.errors import AccelgridError


class CellBusy(AccelgridError):
    """Another run of the cell holds its results folder."""


def new_run_id() -> str:
    """A run's id: a random UUID (version 4) in hex, made without the uuid module (its
    import costs the head start's early launch milliseconds)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40   # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80   # RFC 4122 variant
    return raw.hex()


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
    path = cell_folder / contract.LOCK_FILE
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
        jsonio.refuse_symlink(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CellBusy(_busy(cell, cell_folder)) from None
            except OSError as exc:  # e.g. a file system without locks: say so, run anyway
                if held is None:
                    from .console import say  # (not at import: the early launch's path)

                    say(cell, f"cannot lock {path} ({exc}); running unguarded", err=True)
            from ..base.clock import now

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
    holder, _ = jsonio.read_json(cell_folder / contract.LOCK_FILE)
    who = " (its lock file is gone or unreadable)"
    if isinstance(holder, dict):
        who = (f" (run {holder.get('run_id')}, pid {holder.get('pid')} on "
               f"{holder.get('host')}, since {holder.get('start')})")
    return (f"{cell}: another run of this cell is in progress{who}; "
            f"{cell_folder} is locked until it ends")
