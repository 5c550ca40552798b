"""A run's ``tests.jsonl`` written: one record per finished test, appended whole under the
folder's lock (:func:`append_record`, :func:`append_record_once`), through an fd a test
cannot take away (:class:`RecordFile`). Every field but a test's identity is redacted and
bounded (:func:`bounded_record`: a longer text is kept whole in ``full-text/``).

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import contract
from ..base.jsonio import (
    NOFOLLOW,
    locked,
    naming_path,
    open_nofollow,
    read_jsonl,
    safe_dumps,
    safe_text,
)
from ..base.redact import redact_value

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import TestRecord

__all__ = [
    "FIELD_LIMITS", "MAX_FIELD_CHARS", "MAX_FULL_TEXT_BYTES", "RESTORE_TRIES", "RecordFile",
    "append_record", "append_record_once", "bounded_record",
]


MAX_FIELD_CHARS = 64 * 1024  # a record field longer than this is cut (whole in full-text/)
MAX_FULL_TEXT_BYTES = 256 * 1024 * 1024  # what one full-text file keeps of a field
# Tracebacks with captured output: the record keeps their ends (what grids show).
FIELD_LIMITS = {"longrepr": 8000, "output": 8000}
_KEEP_WHOLE = ("nodeid", "outcome", "run_id")


def _field_file(folder: Path, nodeid: str, name: str, text: str) -> str:
    """Write ``text`` (one record field) whole into ``folder/full-text/``; its name
    relative to ``folder``."""
    import hashlib  # only for the rare record that needs it

    digest = hashlib.sha256(safe_text(nodeid).encode("utf-8")).hexdigest()[:16]
    rel = f"{contract.FULL_TEXT_DIR}/{digest}-{time.time_ns()}-{name}.txt"
    data = text.encode("utf-8", errors="backslashreplace")[:MAX_FULL_TEXT_BYTES]
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return rel


def bounded_record(record: Mapping[str, Any], folder: Path | None) -> dict[str, Any]:
    """``record`` with every field but its identity at most :data:`MAX_FIELD_CHARS`
    long: a longer text (a multi-MiB assertion message, captured output) is cut in the
    middle with a marker and kept whole in ``folder/full-text/`` (``full_text`` names the
    files), so a failure of any size stays a record readers accept. Without ``folder``
    the marker says the rest was dropped."""
    out: dict[str, Any] = {}
    full: dict[str, str] = {}
    for name, value in record.items():
        if name in _KEEP_WHOLE or value is None or isinstance(value, (bool, int, float)):
            out[name] = value
            continue
        limit = FIELD_LIMITS.get(name, MAX_FIELD_CHARS)
        text = value if isinstance(value, str) else None
        if text is None:  # a mapping or list (properties): its JSON size decides
            encoded = safe_dumps(value, sort_keys=False)
            if len(encoded) <= limit:
                out[name] = value
                continue
            text = encoded
        elif len(text) <= limit:
            out[name] = value
            continue
        where = "dropped"
        if folder is not None:
            try:
                full[name] = _field_file(folder, str(record.get("nodeid")), name, text)
                where = f"whole text in {full[name]}"
            except OSError as exc:
                where = f"the whole could not be kept: {exc.strerror or exc}"
        half = limit // 2
        marker = f"\n... [{len(text) - 2 * half} characters cut; {where}] ...\n"
        cut = text[:half] + marker + text[-half:]
        # A mapping's cut text starts with what was cut: readers bound each property's
        # text again (clean_properties) and keep its start.
        out[name] = cut if isinstance(value, str) else {
            "truncated": f"[{len(text) - 2 * half} characters cut; {where}] {cut}"}
    if full:
        out["full_text"] = full
    return out


def _encoded_record(record: Mapping[str, Any], folder: Path | None = None) -> bytes:
    # Every field a test can fill (message, traceback, output, properties) may hold a
    # token; the test's identity stays as collected (collected.json has it so).
    record = {k: v if k in _KEEP_WHOLE else redact_value(v) for k, v in record.items()}
    return (safe_dumps(bounded_record(record, folder), sort_keys=False) + "\n").encode("utf-8")


def _write_line(fd: int, line: bytes, durable: bool, path: Path) -> None:
    """Append ``line`` to the O_APPEND ``fd`` whole, or not at all: a write the disk cut
    short (full, quota) is truncated away, so the records before it stay readable."""
    start = os.fstat(fd).st_size
    try:
        view = memoryview(line)
        while view:  # one write(2) but for a short write (a full disk, a signal)
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise naming_path(exc, path) from exc


def _append(path: Path, line: bytes, durable: bool) -> None:
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _write_line(fd, line, durable, path)
    finally:
        os.close(fd)


def append_record(path: Path, record: Mapping[str, Any], durable: bool = False) -> None:
    """Append one test record, whole, under the folder's lock (passes running at once
    append to one tests.jsonl): once this returns, killing the process (or the whole
    session) cannot lose it. ``durable`` also fsyncs, against a host crash."""
    line = _encoded_record(record, path.parent)
    with locked(path.parent):
        _append(path, line, durable)


def append_record_once(path: Path, record: TestRecord) -> bool:
    """Append ``record`` unless one of the same run (``run_id``) and ``nodeid`` is there
    already: two passes that collect the same module both see its import error. Returns
    whether it was appended."""
    line = _encoded_record(record, path.parent)
    with locked(path.parent):
        earlier, _ = read_jsonl(path, ("nodeid",))
        if any(r["nodeid"] == record["nodeid"] and r.get("run_id") == record.get("run_id")
               for r in earlier):
            return False
        _append(path, line, False)
    return True


RESTORE_TRIES = 10   # a folder deleted again while its records are put back


class RecordFile:
    """A session's tests.jsonl, written through an fd opened before the tests run: a
    test that deletes ``results/``, its cell folder or the file (or replaces them) cannot
    lose the records written so far. Before each append (and by :meth:`restore`), when
    the path no longer names the file the fd writes, the path gets the fd's records
    back, merged with any another process wrote there since, and the fd is reopened."""

    def __init__(self, path: Path):
        self.path = Path(path).absolute()  # a test's chdir does not move it
        self.fd = -1
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = open_nofollow(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)

    def _whole(self, fd: int) -> bytes:
        chunks: list[bytes] = []
        offset = 0
        while True:
            chunk = os.pread(fd, 1 << 20, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def restore(self) -> bool:
        """Put the records back where the path lost them; whether it had to. Call it
        under the folder's lock (:meth:`append` does)."""
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        mine = os.fstat(self.fd)
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return False
        kept = self._whole(self.fd)
        there = b""
        if now is not None and stat.S_ISREG(now.st_mode):
            fd = os.open(self.path, os.O_RDONLY | NOFOLLOW)
            try:
                there = self._whole(fd)
            finally:
                os.close(fd)
        # Line sets: another pass's fd may hold the same early records (all opened the
        # same file); each record line is unique (it carries its finish time).
        seen = set(there.splitlines(keepends=True))
        merged = there + b"".join(ln for ln in kept.splitlines(keepends=True)
                                  if ln not in seen and ln.endswith(b"\n"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(merged)
            os.replace(tmp, self.path)  # a symlink planted at the path is replaced
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        os.close(self.fd)
        self._open()
        return True

    @contextlib.contextmanager
    def _restored(self) -> Iterator[None]:
        """Hold the folder's lock with the path restored (:meth:`restore`); again, up to
        :data:`RESTORE_TRIES` times, while the folder is deleted under it meanwhile (a
        test removing the results folder in a loop: the lock is advisory)."""
        for attempt in range(1, RESTORE_TRIES + 1):
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(locked(self.path.parent))
                self.restore()
            except FileNotFoundError:
                stack.close()
                if attempt == RESTORE_TRIES:
                    raise
                continue
            except BaseException:
                stack.close()
                raise
            with stack:
                yield
            return

    def append(self, record: TestRecord, durable: bool = False, once: bool = False
               ) -> bool:
        """Append ``record`` whole (:func:`append_record`; ``once``:
        :func:`append_record_once`); whether it was appended."""
        line = _encoded_record(record, self.path.parent)
        with self._restored():
            if once:
                earlier, _ = read_jsonl(self.path, ("nodeid",))
                if any(r["nodeid"] == record["nodeid"] and r.get("run_id") ==
                       record.get("run_id") for r in earlier):
                    return False
            _write_line(self.fd, line, durable, self.path)
        return True

    def close(self) -> None:
        """Restore the path if a test took it (under the lock), fsync and close."""
        if self.fd < 0:
            return
        with self._restored():
            pass
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
