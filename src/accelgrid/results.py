"""The results folder of a cell run, ``results/<cell>/``, written as the run goes.

A run of the whole cell writes ``results/<cell>/`` itself (it replaces the previous full
run); a run narrowed by its pytest arguments (paths, ``-k``, ``-m``, ``-x``, ...) writes
``results/<cell>/runs/<run-id>/`` instead, so it never passes for the whole cell nor
destroys the full run's results. ``results/<cell>/last-run.json`` names the latest run's
folder; ``results/<cell>/.lock`` is held (flock) by the run in progress.

Files of a run's folder:
  ``tests.jsonl``     one JSON object per finished test, appended and fsynced as each ends
  ``collected.json``  every collected test id (so tests that never ran become not-run)
  ``running/``        one file per worker naming the test it is in (crash/timeout attribution)
  ``env.json``        provenance (:mod:`accelgrid.provenance`), start and end
  ``junit.xml``       pytest's JUnit XML (absent if the run was killed)
  ``summary.json``    counts per outcome, the run id and selection, written when it ends
  ``pytest.log``      pytest's own output, each pass's appended (the console shows progress)
  ``multi_device.json`` multi-device tests deselected by the pinned pass (run next)
  ``.update.lock``    flock held around every shared write (:func:`locked`)

Reading them back: :func:`discover` finds cell folders under any paths (a cell's folder,
``results/`` or a CI artifacts download), :func:`read_cell` reads one for reports.

Passes of a run may write the folder at the same time (the all-devices pass runs beside
the pinned one): records are appended, and env.json, collected.json and the lists left for
later passes read, changed and written, under the folder's lock (:func:`locked`).

Every record carries the run's id (``run_id``, also in env.json and summary.json); a
reader ignores records of another run. Every string written is made encodable first
(:func:`safe`): a lone surrogate (a non-UTF-8 file name or env value, as Python decodes
them) becomes a backslash escape instead of ending the run.

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import outcomes
from .environment import redact, redact_text, redact_value
from .errors import InvalidInput

TESTS = "tests.jsonl"
COLLECTED = "collected.json"
RUNNING = "running"
ENV = "env.json"
JUNIT = "junit.xml"
SUMMARY = "summary.json"
PYTEST_LOG = "pytest.log"            # pytest's whole output, every pass (-rA: captured output)
MULTI_DEVICE = "multi_device.json"   # tests the pinned pass left for the all-devices pass
HOST_ACCELERATORS = "host_accelerators.json"  # tests a cpu cell left for the host-accelerators pass
DEVICE_ALONE = "device_alone.json"   # tests the shared pass left for the device-alone pass
RUNS = "runs"                        # results/<cell>/runs/<run-id>/: runs with a selection
LAST_RUN = "last-run.json"           # results/<cell>/last-run.json: the latest run's folder
LOCK = ".lock"                       # results/<cell>/.lock: flock of the run in progress
UPDATE_LOCK = ".update.lock"         # a run's folder: flock around shared writes (locked)
# Any of these makes a folder a cell's results folder.
CELL_FILES = (TESTS, ENV, COLLECTED, SUMMARY)
# Folders never searched for cells: tool state, and a cell's own per-worker folder.
SKIP_DIRS = {".git", ".nox", ".venv", "venv", "node_modules", "__pycache__", RUNNING}
MAX_DEPTH = 6
# Where `accelgrid repro` writes (<results>/repro/<issue>/<cell>/): a grid of the cells'
# results leaves it out (else each reproduced cell would be a second column, cpu-2.13#2);
# naming <results>/repro/<issue> shows those runs.
REPRO_DIR = "repro"


RESULTS_DIR = "results"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # writes never follow a symlink (none on Windows)


def results_root(project_root: Path) -> Path:
    """Where cells write results: ``results/`` in the project, or $ACCELGRID_RESULTS_DIR."""
    return Path(os.environ.get("ACCELGRID_RESULTS_DIR") or project_root / RESULTS_DIR)


def suite_of(nodeid: str) -> str:
    """``suites/offload/test_x.py::t`` -> ``offload`` (the folder under suites/)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]


def json_safe(value: Any, _depth: int = 0) -> Any:
    """``value`` with every NaN or infinite float replaced by None: JSON (RFC 8259) has no
    such numbers, and Python's ``NaN``/``Infinity`` make a file other readers reject."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _depth > 200:
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, _depth + 1) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that only ever writes RFC 8259 JSON (non-finite floats become null);
    every JSON accelgrid writes goes through here. Objects JSON does not know become
    their ``str``."""
    kwargs.setdefault("default", str)
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # a NaN or infinity somewhere: the slow path only then
        return json.dumps(json_safe(value), allow_nan=False, **kwargs)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF is how surrogateescape carries an undecodable byte: show the byte.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text``, encodable as UTF-8: each lone surrogate becomes a backslash escape
    (``b"\\xff"`` decoded with surrogateescape, as ``os.listdir`` and ``os.environ`` give
    it, becomes the four characters ``\\xff``). Unchanged when already encodable."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def safe(data: Any) -> Any:
    """``data`` with every string in it (keys too, in dicts, lists and tuples) made
    encodable by :func:`safe_text`; other values are returned as they are."""
    if isinstance(data, str):
        return safe_text(data)
    if isinstance(data, dict):
        return {safe(k): safe(v) for k, v in data.items()}
    if isinstance(data, list):
        return [safe(v) for v in data]
    if isinstance(data, tuple):
        items = [safe(v) for v in data]
        return tuple(items) if type(data) is tuple else type(data)(*items)  # a namedtuple
    return data


def _dumps(data: Any, **kwargs: Any) -> str:
    # default=str: a value json does not know is written as its text, made safe too.
    return dumps(safe(data), default=lambda o: safe_text(str(o)), **kwargs)


_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.EACCES,
                   errno.EPERM, errno.EIO}


def storage_problem(exc: BaseException) -> str | None:
    """One line for an OSError the results' storage caused (full disk, read-only or
    unwritable folder, quota, file size limit): the path and the cause; None for any
    other error (a bug: its traceback is wanted)."""
    if not isinstance(exc, OSError) or exc.errno not in _STORAGE_ERRNOS:
        return None
    where = exc.filename if exc.filename is not None else "the results folder"
    return (f"cannot write {where}: {exc.strerror or exc} (the records written before "
            "it are kept)")


def storage_failure(folder: Path, size: int = 65536) -> OSError | None:
    """Whether ``folder`` can take a write of ``size`` bytes now: the storage error (as
    :func:`storage_problem` words it, naming ``folder``) when its disk is full or
    read-only, else None. Asked when pytest stopped early: a disk that filled under it
    is why, not a failure of pytest's."""
    probe = Path(folder) / f".space-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno not in _STORAGE_ERRNOS:
            return None
        return OSError(exc.errno, exc.strerror, str(folder))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


class UnsafePath(InvalidInput):
    """A write or delete would go through a symlink (out of the results tree)."""


def refuse_symlink(path: Path, root: Path | None = None) -> None:
    """Raise :class:`UnsafePath` (one line) when ``path`` is a symlink, or a folder below
    ``root`` (not ``root`` itself: results/ may be a link to a bigger disk) on the way to
    it is: writing or deleting through it would touch files outside the tree."""
    here = Path(os.path.abspath(path))
    stop = Path(os.path.abspath(root)) if root is not None else None
    if stop is not None and stop != here and stop not in here.parents:
        stop = None
    while True:
        if here.is_symlink():
            try:
                target = os.readlink(here)
            except OSError:
                target = "?"
            raise UnsafePath(f"{here} is a symlink (to {target}): accelgrid never writes or "
                             "deletes through one; remove it")
        if stop is None or here.parent == here or here.parent == stop:
            return
        here = here.parent


def _open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink at ``path`` with :class:`UnsafePath`."""
    try:
        return os.open(path, flags | _NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and Path(path).is_symlink():
            refuse_symlink(path)
        raise


def write_text(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8), refusing a symlink there (a
    planted one would have the write land outside the tree)."""
    refuse_symlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _named(exc, path) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` when it names no file (a write(2) that failed)."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def write_json(path: Path, data: Any) -> None:
    """Atomically replace ``path`` (a crash leaves the old or the new file, never half);
    a symlink there is refused (:func:`write_text`)."""
    write_text(path, _dumps(data, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s update lock (flock on ``.update.lock``, blocking) for one shared
    write: processes of passes running at once then never interleave a record nor lose
    each other's change to a JSON file. Not the cell's run lock (``.lock``), which the
    run holds throughout. No-op where there is no flock (Windows)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = _open_nofollow(folder / UPDATE_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def update_json(path: Path, change: Callable[[Any], Any]) -> Any:
    """Read ``path`` (None when missing or unreadable), write ``change(value)`` back,
    atomically and under the folder's lock; returns what was written."""
    with locked(path.parent):
        value, _ = read_json(path)
        new = change(value)
        write_json(path, new)
    return new


FULL_TEXT = "full-text"     # a run's folder: whole texts of record fields cut short
MAX_FIELD_CHARS = 64 * 1024  # a record field longer than this is cut (whole in FULL_TEXT/)
MAX_FULL_TEXT_BYTES = 256 * 1024 * 1024  # what one FULL_TEXT file keeps of a field
# Tracebacks with captured output: the record keeps their ends (what grids show).
FIELD_LIMITS = {"longrepr": 8000, "output": 8000}
_KEEP_WHOLE = ("nodeid", "outcome", "run_id")


def _field_file(folder: Path, nodeid: str, name: str, text: str) -> str:
    """Write ``text`` (one record field) whole into ``folder/full-text/``; its name
    relative to ``folder``."""
    import hashlib  # only for the rare record that needs it

    digest = hashlib.sha256(safe_text(nodeid).encode("utf-8")).hexdigest()[:16]
    rel = f"{FULL_TEXT}/{digest}-{time.time_ns()}-{name}.txt"
    data = text.encode("utf-8", errors="backslashreplace")[:MAX_FULL_TEXT_BYTES]
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return rel


def bounded_record(record: dict[str, Any], folder: Path | None) -> dict[str, Any]:
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
            encoded = _dumps(value, sort_keys=False)
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
        out[name] = cut if isinstance(value, str) else {"truncated": cut}
    if full:
        out["full_text"] = full
    return out


def _encoded_record(record: dict[str, Any], folder: Path | None = None) -> bytes:
    # Every field a test can fill (message, traceback, output, properties) may hold a
    # token; the test's identity stays as collected (collected.json has it so).
    record = {k: v if k in _KEEP_WHOLE else redact_value(v) for k, v in record.items()}
    return (_dumps(bounded_record(record, folder), sort_keys=False) + "\n").encode("utf-8")


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
        raise _named(exc, path) from exc


def _append(path: Path, line: bytes, durable: bool) -> None:
    fd = _open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _write_line(fd, line, durable, path)
    finally:
        os.close(fd)


def append_record(path: Path, record: dict[str, Any], durable: bool = False) -> None:
    """Append one test record, whole, under the folder's lock (passes running at once
    append to one tests.jsonl): once this returns, killing the process (or the whole
    session) cannot lose it. ``durable`` also fsyncs, against a host crash."""
    line = _encoded_record(record, path.parent)
    with locked(path.parent):
        _append(path, line, durable)


def append_record_once(path: Path, record: dict[str, Any]) -> bool:
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
        self.fd = _open_nofollow(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)

    def _whole(self, fd: int) -> bytes:
        chunks, offset = [], 0
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
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW)
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

    def append(self, record: dict[str, Any], durable: bool = False, once: bool = False
               ) -> bool:
        """Append ``record`` whole (:func:`append_record`; ``once``:
        :func:`append_record_once`); whether it was appended."""
        line = _encoded_record(record, self.path.parent)
        with locked(self.path.parent):
            self.restore()
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
        with locked(self.path.parent):
            self.restore()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1


def sync(path: Path) -> None:
    """fsync ``path`` if it exists (once per session, not per record)."""
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# Bounds on what reading a results file may cost: results come from CI artifacts of
# other jobs and may be damaged or hostile.
MAX_JSON_BYTES = 64 * 1024 * 1024     # env.json, summary.json, collected.json, baselines
MAX_LINE_BYTES = 4 * 1024 * 1024      # one tests.jsonl / ops-raw record
MAX_JSONL_BYTES = 1024 * 1024 * 1024  # a whole tests.jsonl
MAX_NOTES = 20                        # notes per file; the rest are counted


def _open_regular(path: Path) -> tuple[Any, str | None]:
    """A binary file object for ``path`` if it is a regular file, else (None, why).
    Never blocks on a FIFO, never follows a symlink loop forever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, "missing"
    except IsADirectoryError:
        return None, "is a folder, not a file"
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    except ValueError as exc:  # a NUL in the path
        return None, f"unreadable: {exc}"
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        return None, f"unreadable: {exc.strerror or exc}"
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        return None, "is a folder, not a file"
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None, "not a regular file"
    return os.fdopen(fd, "rb"), None


def _loads(text: str | bytes) -> tuple[Any, str | None]:
    """JSON value of ``text``, or (None, why): syntax, nesting (json recurses), numbers
    Python refuses (5,000 digits)."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "nested too deeply"
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {str(exc)[:200]}"
    except ValueError as exc:  # int() refusing a 5,000-digit number
        return None, f"not JSON this reader accepts: {str(exc).split(chr(10))[0][:120]}"


def _decode_line(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), False


_SCAN = json.JSONDecoder().scan_once  # json.loads' own C scanner, without its wrappers


def _loads_line(line: str) -> tuple[Any, str | None]:
    """:func:`_loads` of one line of a JSON-lines file. A line that is one JSON value and
    its newline (nearly all) is scanned directly: json.loads' Python wrappers cost more
    than the parse at a grid's 100,000 lines. Anything else (whitespace around the value,
    extra data, errors) goes through :func:`_loads`, so the result is always its."""
    try:
        value, end = _SCAN(line, 0)
    except (StopIteration, ValueError, RecursionError):
        return _loads(line)
    if end == len(line) or (end == len(line) - 1 and line[end] == "\n"):
        return value, None
    return _loads(line)


_HEAD_BYTES = 64 * 1024
_HEAD = re.compile(r'\{"nodeid": ("(?:[^"\\]|\\.)*"), "outcome": ("(?:[^"\\]|\\.)*")')


_TAIL = re.compile(r'"(cell|pass|run_id)": ("(?:[^"\\]|\\.)*")')


def _record_head(head: bytes, tail: bytes) -> dict[str, Any] | None:
    """The nodeid and outcome a record line starts with (as this module writes them),
    from the line's first bytes, with the cell, pass and run id its last bytes name;
    None when it does not start so."""
    match = _HEAD.match(head.decode("utf-8", errors="replace"))
    if not match:
        return None
    try:
        rec = {"nodeid": json.loads(match.group(1)), "outcome": json.loads(match.group(2))}
        for name, value in _TAIL.findall(tail.decode("utf-8", errors="replace")):
            rec[name] = json.loads(value)  # the last occurrence wins: the record's own
    except ValueError:
        return None
    rec["message"] = f"record over {MAX_LINE_BYTES} bytes: its text was not read"
    return rec


def read_jsonl(path: Path, required: tuple[str, ...] = ("nodeid",)
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects of a JSON-lines file that have ``required`` keys, and a note per unusable
    line (a kill mid-write leaves a truncated last line). A file that cannot be read at
    all gives one note starting with ``<name> unreadable`` / ``<name> is ...``."""
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    if not os.path.lexists(path):
        return records, problems
    fh, why = _open_regular(path)
    if fh is None:
        return records, [f"{path.name} {why}"]
    skipped = 0
    keys = frozenset(required)

    def note(text: str) -> None:
        nonlocal skipped
        if len(problems) < MAX_NOTES:
            problems.append(text)
        else:
            skipped += 1

    total = 0
    with fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            n += 1
            total += len(raw)
            if total > MAX_JSONL_BYTES:
                note(f"{path.name}: over {MAX_JSONL_BYTES} bytes; the rest is not read")
                break
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                head, tail = raw[:_HEAD_BYTES], raw[-_HEAD_BYTES:]
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                    raw = fh.readline(MAX_LINE_BYTES + 1)
                    total += len(raw)
                    tail = (tail + raw)[-_HEAD_BYTES:]
                # A writer that did not bound its fields (an older accelgrid): the test's
                # identity is at the line's start (its run's at the end), so its outcome
                # is not lost with it.
                kept = _record_head(head, tail) if "outcome" in keys else None
                if kept is not None:
                    records.append(kept)
                    note(f"{path.name}:{n}: record longer than {MAX_LINE_BYTES} bytes; "
                         "its outcome kept, its text not read")
                else:
                    note(f"{path.name}:{n}: line longer than {MAX_LINE_BYTES} bytes; skipped")
                continue
            if not raw.strip():
                continue
            line, utf8 = _decode_line(raw)
            rec, err = _loads_line(line)
            if err:
                note(f"{path.name}:{n}: unreadable line ({err})")
                continue
            if not isinstance(rec, dict) or not rec.keys() >= keys:
                note(f"{path.name}:{n}: not a record with {', '.join(required)}")
                continue
            if not utf8:
                note(f"{path.name}:{n}: invalid UTF-8 replaced")
            records.append(rec)
    if skipped:
        problems.append(f"{path.name}: {skipped} more problems")
    return records, problems


# A record's fields as the reports use them: name -> accepted types (None always is).
_TEXT_FIELDS = ("message", "longrepr", "output", "worker", "device", "cell", "when", "pass")
_FIELD_CHECKS = frozenset((*_TEXT_FIELDS, "duration", "issue"))
_PLAIN_TEXT = frozenset(_TEXT_FIELDS) - {"message", "longrepr", "output"}  # kept as they are
MAX_NODEID = 64 * 1024  # a parametrized id may run to thousands of characters


def clean_record(rec: dict[str, Any], where: str, redacted: dict[str, str] | None = None
                 ) -> tuple[dict[str, Any] | None, list[str]]:
    """A test record with the types reports rely on, and what was wrong with it; None
    when it cannot stand for a test (its nodeid or outcome is not text). Messages and
    tracebacks lose credentials (:func:`accelgrid.environment.redact_text`; ``redacted``,
    when given, remembers its results across records). ``rec`` is changed in place
    (read_jsonl's records are fresh)."""
    nodeid, outcome = rec.get("nodeid"), rec.get("outcome")
    if not isinstance(nodeid, str) or not nodeid.strip() or len(nodeid) > MAX_NODEID:
        what = ("empty" if isinstance(nodeid, str) and not nodeid.strip() else
                "too long" if isinstance(nodeid, str) else f"a {_kind(nodeid)}")
        return None, [f"{where}: nodeid is {what}, not a test id; record skipped"]
    if not isinstance(outcome, str):
        return None, [f"{where}: outcome of {nodeid[:200]} is a {_kind(outcome)}, not a "
                      "word; record skipped"]
    notes: list[str] = []
    for name, value in list(rec.items()):  # a record has a handful of fields
        if value is None or name not in _FIELD_CHECKS or (
                type(value) is str and name in _PLAIN_TEXT):  # most fields: nothing to do
            continue
        if name == "duration":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value >= 0):
                del rec[name]
                notes.append(f"{where}: duration {str(value)[:40]!r} of {nodeid[:200]} is not "
                             "a number of seconds; dropped")
        elif name == "issue":
            if not isinstance(value, (str, dict)):
                del rec[name]
                notes.append(f"{where}: issue of {nodeid[:200]} is a {_kind(value)}; dropped")
        elif isinstance(value, str):
            if name in ("message", "longrepr", "output"):  # test output may print a token
                if redacted is None:
                    rec[name] = redact_text(value)
                else:  # the same skip reason or traceback recurs across a file's records
                    done = redacted.get(value)
                    rec[name] = done if done is not None else redacted.setdefault(
                        value, redact_text(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            rec[name] = str(value)
        else:
            del rec[name]
            notes.append(f"{where}: {name} of {nodeid[:200]} is a {_kind(value)}; dropped")
    return rec, notes


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number" if isinstance(value, (int, float))
                                    else type(value).__name__)


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Test records of a tests.jsonl, and a note per unusable line or field."""
    raw, problems = read_jsonl(path, ("nodeid", "outcome"))
    records = []
    redacted: dict[str, str] = {}
    name = path.name
    for i, rec in enumerate(raw, 1):
        clean, notes = clean_record(rec, f"{name} record {i}", redacted)
        if len(problems) < MAX_NOTES:
            problems += notes[:MAX_NOTES - len(problems)]
        if clean is not None:
            records.append(clean)
    return records, problems


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> tuple[Any, str | None]:
    """The JSON value of ``path``, or (None, why) for a file that is missing, not a
    regular file, over ``max_bytes``, not UTF-8, nested too deeply or not JSON."""
    if not os.path.lexists(path):
        return None, f"{path.name} missing"
    fh, why = _open_regular(path)
    if fh is None:
        return None, f"{path.name} {why}"
    with fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            return None, f"{path.name} unreadable: {exc.strerror or exc}"
    if len(data) > max_bytes:
        return None, f"{path.name} unreadable: over {max_bytes} bytes"
    value, err = _loads(data)
    if err:
        return None, f"{path.name} unreadable: {err}"
    return value, None


def mark_running(results: Path, worker: str, nodeid: str, timeout: float | None,
                 slot: str | None = None) -> None:
    """Note that ``worker`` is in ``nodeid`` now, in ``running/<slot>.json`` (``slot``:
    the worker's id, qualified by its pass where passes run at once: both have a gw0)."""
    # Once per test: one small write in place, no temp file. A reader that finds it
    # half-written ignores it (read_json error), which only costs crash attribution.
    path = results / RUNNING / f"{slot or worker}.json"
    data = _dumps({"nodeid": nodeid, "start": time.time(), "timeout": timeout,
                   "worker": worker})
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = _open_nofollow(path, flags)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_nofollow(path, flags)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)


def clear_running(results: Path, worker: str) -> None:
    """Clear ``running/<worker>.json`` (``worker``: the slot :func:`mark_running` used)."""
    path = results / RUNNING / f"{worker}.json"
    if path.exists():
        path.write_text("", encoding="utf-8")


def running(results: Path) -> dict[str, dict[str, Any]]:
    """nodeid -> {start, timeout, worker} for tests a worker was in when it stopped."""
    out = {}
    folder = results / RUNNING
    if folder.is_dir():
        for f in folder.glob("*.json"):
            data, err = read_json(f)
            if not err and isinstance(data, dict) and "nodeid" in data:
                out[data["nodeid"]] = {**data, "worker": data.get("worker") or f.stem}
    return out


def crash_outcome(started: float | None, timeout: float | None, now: float | None = None) -> str:
    """A test whose worker died: ``timeout`` if it had run for (nearly) its limit."""
    if started is not None and timeout:
        elapsed = (now or time.time()) - started
        # pytest-timeout fires at the limit; allow for clock and dump time.
        if elapsed >= 0.95 * float(timeout):
            return outcomes.TIMEOUT
    return outcomes.CRASHED


def merged_torch(results: Path) -> dict[str, Any]:
    """env.json's ``torch`` section from the test processes' reports (``torch-*.json``)."""
    from .provenance import TORCH_REPORT_GLOB, merge_torch_reports

    reports = []
    for f in sorted(results.glob(TORCH_REPORT_GLOB)):
        data, err = read_json(f)
        if not err and isinstance(data, dict):
            reports.append(data)
    return merge_torch_reports(reports)


RUN_FIELDS = ("run_id", "pytest_args", "selection")  # a run's identity, in env/summary


def run_records(results: Path, run_id: str | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The test records of ``results/tests.jsonl`` that belong to run ``run_id`` (default:
    env.json's), and a note per unusable line or record of another run. Records without
    a run id (written before runs had one) belong to any run."""
    records, problems = read_records(results / TESTS)
    if run_id is None:
        env, _ = read_json(results / ENV)
        run_id = env.get("run_id") if isinstance(env, dict) else None
    if run_id:
        other = [r for r in records if r.get("run_id") not in (None, run_id)]
        if other:
            problems.append(f"{TESTS}: {len(other)} record(s) of another run ignored")
            records = [r for r in records if r.get("run_id") in (None, run_id)]
    return records, problems


def pass_times(records: list[dict[str, Any]], passes: list[dict[str, Any]],
               run_start: float) -> dict[str, Any]:
    """summary.json's timing of a run: ``wall_s`` from the run's start to the end of its
    last pass, and per pass (``passes``: name, beside, workers, start and end in epoch
    seconds, rc, as the runner measured them) its wall time and how long each of its
    workers took from the pass's start to its first test (``first_test_s``: start-up,
    read from the records' ``start`` and ``pass``)."""
    out = []
    for p in passes:
        first: dict[str, float] = {}
        count = 0
        for rec in records:
            start = rec.get("start")
            if rec.get("pass") != p["name"]:
                continue
            count += 1
            if isinstance(start, (int, float)) and not isinstance(start, bool) \
                    and math.isfinite(start):
                worker = str(rec.get("worker") or "main")
                first[worker] = min(first.get(worker, start), start)
        # A gated pass (started beside, its tests once the others ended): start-up counts
        # from its gate, and how long it waited is its own figure.
        gate = p.get("gate")
        since = max(p["start"], gate) if isinstance(gate, int | float) else p["start"]
        out.append({
            "name": p["name"], "beside": p.get("beside"), "workers": p.get("workers"),
            "start": _dt_text(p["start"]), "wall_s": round(p["end"] - p["start"], 2),
            "rc": p.get("rc"), "tests": count,
            "first_test_s": round(min(first.values()) - since, 2) if first else None,
            "workers_first_test_s": {w: round(t - since, 2)
                                     for w, t in sorted(first.items())},
            **({"waited_s": round(since - p["start"], 2)} if "gate" in p else {}),
        })
    end = max((p["end"] for p in passes), default=run_start)
    return {"wall_s": round(end - run_start, 2), "passes": out}


def _dt_text(epoch: float) -> str:
    from .provenance import iso  # local: provenance is the only user of datetime here

    return iso(epoch)


MAX_REDACTED_FILE = 512 * 1024 * 1024  # a bigger JUnit file or log is redacted by lines


def redact_file(path: Path) -> bool:
    """Rewrite ``path`` (pytest's JUnit XML, its log) through :func:`redact_text`, the
    redaction records get, when that changes it; whether it did. pytest writes these
    itself, so they carry what tests printed, raw. A symlink is left alone (never
    followed, :func:`refuse_symlink`)."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.stat().st_size <= MAX_REDACTED_FILE:
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
        clean = redact_text(text)
        if clean == text:
            return False
        data = clean.encode("utf-8", errors="surrogateescape")
    else:
        with path.open("rb") as fh:
            lines = [redact_text(ln.decode("utf-8", errors="surrogateescape"))
                     for ln in fh]
        data = "".join(lines).encode("utf-8", errors="surrogateescape")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def redact_files(folder: Path) -> list[Path]:
    """:func:`redact_file` of every JUnit file and pytest log of a run's folder."""
    return [p for p in sorted((*folder.glob("junit*.xml"), *folder.glob("pytest*.log")))
            if redact_file(p)]


def finalize(results: Path, reason: str, run: dict[str, Any] | None = None,
             timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """Close a run's results after its pytest process ended, however it ended.

    Tests a dead worker was in become crashed/timeout; collected tests with no record
    become not-run with ``reason``; ``env.json`` gets its end (and so does each pass it
    lists that never reached its own); ``summary.json`` is written with ``run``
    (:data:`RUN_FIELDS`: the run id, the user's pytest args, the selection) and
    ``timing`` (``passes``: what :func:`pass_times` needs, and ``run_start``).
    """
    run = {k: v for k, v in (run or {}).items() if k in RUN_FIELDS}
    redact_files(results)
    env, _ = read_json(results / ENV)
    env = env if isinstance(env, dict) else None
    run_id = run.get("run_id") or (env or {}).get("run_id")
    cell = (env or {}).get("cell")
    extra = {k: v for k, v in (("run_id", run_id), ("cell", cell)) if v}
    records, _ = run_records(results, run_id)
    seen = {r["nodeid"] for r in records}
    for nodeid, info in running(results).items():
        if nodeid in seen:
            continue
        outcome = crash_outcome(info.get("start"), info.get("timeout"))
        rec = {"nodeid": nodeid, "outcome": outcome, "worker": info.get("worker"),
               "message": f"the test process died while running this test ({reason})",
               "duration": time.time() - info["start"] if info.get("start") else None,
               **extra}
        append_record(results / TESTS, rec)
        seen.add(nodeid)
    collected, _ = read_json(results / COLLECTED)
    for nodeid in collected or []:
        if nodeid not in seen:
            append_record(results / TESTS, {"nodeid": nodeid, "outcome": outcomes.NOT_RUN,
                                            "message": reason, **extra})
            seen.add(nodeid)
    if env is not None and (env.get("torch") or {}).get("pending"):
        env["torch"] = merged_torch(results)  # the run died before it merged them
        write_json(results / ENV, env)
    if env is not None and not env.get("end"):
        from .provenance import now  # local: provenance is the only user of datetime here
        env["end"] = now()
        env["status"] = "ended" if env.get("status") == "running" else env.get("status")
        env["end_reason"] = reason
        for entry in env.get("passes") or []:
            if isinstance(entry, dict) and not entry.get("end"):
                entry["end"] = env["end"]
        write_json(results / ENV, env)
    summary = summarize(results, run_id)
    if timing is not None:
        records, _ = run_records(results, run_id)
        summary.update(pass_times(records, timing["passes"], timing["run_start"]))
    for key in RUN_FIELDS:
        if key in run or key in (env or {}):
            summary[key] = run[key] if key in run else env[key]  # type: ignore[index]
    summary["partial"] = bool(summary.get("selection"))
    write_json(results / SUMMARY, summary)
    return summary


def last_outcomes(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One record per test id; a later record of the same test replaces an earlier one."""
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        out[rec["nodeid"]] = rec
    return out


def summarize(results: Path, run_id: str | None = None) -> dict[str, Any]:
    records, problems = run_records(results, run_id)
    tests = last_outcomes(records)
    counts = Counter(r["outcome"] for r in tests.values())
    env, _ = read_json(results / ENV)
    cell = env.get("cell") if isinstance(env, dict) else None
    return {"cell": cell or results.name, "total": len(tests),
            "counts": {o: counts.get(o, 0) for o in outcomes.ALL},
            "problems": problems}


# A cell name from a file (env.json, a record) must look like one before it names a
# column or a baseline file (baselines/<cell>.json).
CELL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
# env.json's fields as reports read them: name -> expected type.
_ENV_TYPES: dict[str, type | tuple[type, ...]] = {
    "cell": str, "device_type": str, "start": str, "end": str, "status": str,
    "end_reason": str, "host": dict, "python": dict, "project": dict, "torch": dict,
    "env": dict, "packages": dict,
}
# Sub-fields read from env.json's mappings: (section, key) -> accepted types.
_ENV_SUBFIELDS: dict[tuple[str, str], tuple[type, ...]] = {
    ("host", "name"): (str,), ("python", "version"): (str,), ("project", "commit"): (str,),
    ("torch", "version"): (str,), ("torch", "git_version"): (str,),
    ("torch", "cuda_runtime"): (str,), ("torch", "xpu_runtime"): (str,),
    ("torch", "driver"): (str,), ("torch", "error"): (str,), ("torch", "devices"): (list,),
    ("torch", "device_count"): (int,),
}


def clean_env(env: Any) -> tuple[dict[str, Any], list[str]]:
    """env.json's content with the types reports rely on, and a note per field that had
    another type (dropped). Flags and packages keep only text values; recorded flags are
    redacted again (an artifact may come from a version that redacted less)."""
    if not isinstance(env, dict):
        return {}, [f"env.json holds a {_kind(env)}, not a mapping; ignored"]
    notes: list[str] = []
    out = dict(env)
    for name, types in _ENV_TYPES.items():
        value = out.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            out.pop(name)
            notes.append(f"env.json: {name} is a {_kind(value)}; ignored")
    for (section, key), types in _ENV_SUBFIELDS.items():
        part = out.get(section)
        if isinstance(part, dict) and part.get(key) is not None and (
                not isinstance(part[key], types) or isinstance(part[key], bool)):
            out[section] = {k: v for k, v in part.items() if k != key}
            notes.append(f"env.json: {section}.{key} is a {_kind(part[key])}; ignored")
    if isinstance(out.get("torch"), dict) and "devices" in out["torch"]:
        out["torch"] = {**out["torch"], "devices": [
            d for d in out["torch"]["devices"] if isinstance(d, dict)]}
    for section in ("env", "packages"):
        if isinstance(out.get(section), dict):
            kept = {str(k): v for k, v in out[section].items() if isinstance(v, str)}
            if len(kept) != len(out[section]):
                notes.append(f"env.json: {section} has values that are not text; dropped")
            out[section] = redact(kept) if section == "env" else kept
    cell = out.get("cell")
    if isinstance(cell, str) and not CELL_NAME.match(cell):
        out.pop("cell")
        notes.append(f"env.json: cell {cell[:60]!r} is not a cell name; ignored")
    return out, notes


# --- a cell's folder: the full run, runs with a selection, the lock --------------------

def clear_for_run(cell_folder: Path) -> None:
    """Empty ``results/<cell>/`` for a new full run: everything but the runs with a
    selection (``runs/``) and the lock file, which the new run holds."""
    refuse_symlink(cell_folder)  # emptying a link would empty the folder it names
    cell_folder.mkdir(parents=True, exist_ok=True)
    for child in cell_folder.iterdir():  # a symlink child: the link goes, not its target
        if child.name in (RUNS, LOCK):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def run_folder(cell_folder: Path, run_id: str, partial: bool) -> Path:
    """Where a run writes: the cell's folder for a full run, ``runs/<run-id>/`` else."""
    return cell_folder / RUNS / run_id if partial else cell_folder


def write_last_run(cell_folder: Path, run_id: str, folder: Path,
                   selection: list[str]) -> None:
    """Name the run now starting as the cell's latest (:func:`last_run` reads it)."""
    rel = folder.relative_to(cell_folder).as_posix() if folder != cell_folder else "."
    write_json(cell_folder / LAST_RUN, {"run_id": run_id, "folder": rel,
                                        "selection": selection})


def last_run(cell_folder: Path) -> tuple[str | None, Path]:
    """(run id, folder) of the cell's latest run; (None, the cell's folder) when none is
    named, e.g. results written before runs had ids."""
    data, err = read_json(cell_folder / LAST_RUN)
    if err or not isinstance(data, dict) or not isinstance(data.get("folder"), str):
        return None, cell_folder
    folder = (cell_folder / data["folder"]).resolve()
    if cell_folder.resolve() not in (folder, *folder.parents):
        return None, cell_folder  # a hand-edited pointer out of the cell's folder
    return data.get("run_id"), folder


def prune_runs(cell_folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest of ``runs/*`` (by modification time)."""
    runs = cell_folder / RUNS
    refuse_symlink(runs)
    if not runs.is_dir():
        return
    folders = sorted((p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[keep:]:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class CellResults:
    """A cell's results as read back for grids; ``error`` says why they are unusable."""

    name: str
    path: Path
    env: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None


def load_cell(path: Path) -> CellResults:
    """Read ``results/<cell>/``; missing or corrupt parts are noted, never raised."""
    cell = CellResults(name=path.name, path=path)
    try:
        is_dir = path.is_dir()
    except OSError:
        is_dir = False
    if not is_dir:
        cell.error = f"{path} is not a results folder" + (
            " (a symlink loop)" if path.is_symlink() and not path.exists() else "")
        return cell
    outside = _links_out(path)  # never read records from outside the folder given
    if TESTS in outside:
        cell.error = outside[TESTS]
        return cell
    env, err = (None, outside[ENV]) if ENV in outside else read_json(path / ENV)
    if err:
        cell.problems.append(err)
    else:
        cell.env, notes = clean_env(env)
        cell.problems += notes
        cell.name = cell.env.get("cell") or cell.name
    run = run_of(path, cell.env, read_summary=SUMMARY not in outside)
    records, problems = run_records(path, run.get("run_id") or "")
    cell.problems += problems
    unreadable = [p for p in problems if p.startswith(tuple(
        f"{TESTS} {why}" for why in ("is a folder", "not a regular", "unreadable", "missing")))]
    if not os.path.lexists(path / TESTS):
        cell.error = "no tests.jsonl: the cell did not run or its results were lost"
    elif unreadable:
        cell.error = unreadable[0]
    elif not records:
        cell.error = "tests.jsonl holds no test records"
    cell.tests = last_outcomes(records)
    if cell.env and cell.env.get("status") == "running" and not cell.env.get("end"):
        cell.problems.append("the run never finished (killed?): results are partial")
    if run.get("selection"):
        cell.problems.append(f"a selected run (pytest {' '.join(run['selection'])}), "
                             "not the whole cell")
    return cell


def _links_out(path: Path) -> dict[str, str]:
    """name -> why, for each of ``path``'s files that is a symlink leading out of the
    folder given (it is not read)."""
    out: dict[str, str] = {}
    try:
        top = path.resolve()
    except (OSError, RuntimeError):
        return out
    for name in (TESTS, ENV, SUMMARY):
        item = path / name
        if not item.is_symlink():
            continue
        try:
            target = item.resolve()
        except (OSError, RuntimeError):
            continue  # a loop: the readers say so
        if top != target and top not in target.parents:
            out[name] = f"{name} is a symlink out of {path} (to {target}); not read"
    return out


def run_of(path: Path, env: dict[str, Any] | None = None, read_summary: bool = True
           ) -> dict[str, Any]:
    """A run's :data:`RUN_FIELDS` from its env.json, else its summary.json (pytest may
    have died before writing env.json); {} for results written before runs had ids."""
    for doc in (env if env is not None else read_json(path / ENV)[0],
                read_json(path / SUMMARY)[0] if read_summary else None):
        if isinstance(doc, dict) and doc.get("run_id"):
            return {k: doc[k] for k in RUN_FIELDS if k in doc}
    return {}


# --- finding and reading results folders ------------------------------------------------

def is_cell(folder: Path) -> bool:
    """Whether ``folder`` holds a cell's results (any of :data:`CELL_FILES`)."""
    return any((folder / name).is_file() for name in CELL_FILES)


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """Cell folders given or found under ``paths``, and a note per path that was ignored.

    A path holding tests.jsonl/env.json/collected.json/summary.json is a cell; another
    folder is searched (depth <= 6) for such folders, e.g. an artifacts download; a folder
    with none, or a path that does not exist, is kept so it shows as an errored cell.
    A file is ignored (``results/*`` also matches the grids themselves) unless it is one of
    a cell's files, which stands for its folder.
    """
    found: list[Path] = []
    notes: list[str] = []
    for path in map(Path, paths):
        if path.is_file():
            if path.name in CELL_FILES:
                found.append(path.parent)
            else:
                notes.append(f"{path}: a file, not a results folder; ignored")
        elif not path.is_dir() or is_cell(path):
            found.append(path)
        elif path.name == REPRO_DIR:
            notes.append(f"{path}: reproductions (accelgrid repro), left out of the cells' "
                         f"grid; name {path}/<issue> to show them")
        else:
            inner = _search(path)
            found += inner or [path]
    unique: dict[Path, Path] = {}
    for folder in found:
        try:
            key = folder.resolve()
        except (OSError, RuntimeError):  # a symlink loop: keep it, it shows as errored
            key = Path(os.path.abspath(folder))
        unique.setdefault(key, folder)
    return list(unique.values()), notes


def _search(top: Path) -> list[Path]:
    cells = []
    base = len(top.parts)
    for dirpath, dirnames, _ in os.walk(top):
        here = Path(dirpath)
        if here != top and is_cell(here):
            cells.append(here)
            dirnames[:] = []  # a cell's subfolders are its own (running/)
            continue
        if len(here.parts) - base >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and d != REPRO_DIR)
    return cells


def fill_cell_name(cell: CellResults) -> None:
    """Without env.json, take the cell's name from its records (an artifact's folder is
    often named after the artifact, not the cell)."""
    if cell.env.get("cell"):
        return
    for rec in cell.tests.values():
        if isinstance(rec.get("cell"), str) and CELL_NAME.match(rec["cell"]):
            cell.name = rec["cell"]
            return


def read_cell(folder: Path) -> CellResults:
    """A cell's results for a report: :func:`load_cell`, named by its records when
    env.json lacks the name, with outcomes this version does not know turned into errors
    (with the reason). A folder that does not exist is an errored cell; nothing raises."""
    if not os.path.lexists(folder):
        cell = CellResults(name=folder.name, path=folder)
        cell.error = f"results folder {folder} does not exist"
        return cell
    cell = load_cell(folder)
    fill_cell_name(cell)
    # Records written by another version (or by hand) may carry outcomes or ids this
    # version does not know; they become errors with the reason rather than crash a grid.
    for nodeid, rec in list(cell.tests.items()):
        if rec["outcome"] not in outcomes.ALL:
            cell.problems.append(f"{nodeid}: unknown outcome {rec['outcome']!r}")
            cell.tests[nodeid] = {**rec, "outcome": outcomes.ERROR,
                                  "message": f"unknown outcome {rec['outcome']!r} recorded; "
                                             f"{rec.get('message') or ''}".strip("; ")}
        if not isinstance(nodeid, str):
            cell.tests[str(nodeid)] = cell.tests.pop(nodeid)
    return cell
