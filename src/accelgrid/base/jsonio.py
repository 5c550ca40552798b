"""JSON in and out, bounded and safe: every JSON file accelgrid writes and reads.

Writes are atomic and never follow a symlink (:func:`write_text`, :func:`write_json`);
every string written is made encodable first (:func:`safe`): a lone surrogate (a
non-UTF-8 file name or env value, as Python decodes them) becomes a backslash escape
instead of ending the run; a non-finite float becomes null (:func:`dumps`). Reads are
bounded (:data:`MAX_JSON_BYTES`, :data:`MAX_LINE_BYTES`): results come from CI artifacts
of other jobs and may be damaged or hostile; what cannot be read is a note, never a
traceback. :func:`locked` is a folder's update lock around shared writes.

Stdlib only: the cell's interpreter writes through these too.
"""


from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import contract
from .errors import InvalidInput

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # writes never follow a symlink (none on Windows)


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


def safe_dumps(data: Any, **kwargs: Any) -> str:
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


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink at ``path`` with :class:`UnsafePath`."""
    try:
        return os.open(path, flags | NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and Path(path).is_symlink():
            refuse_symlink(path)
        raise


def write_text(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8), refusing a symlink there (a
    planted one would have the write land outside the tree)."""
    refuse_symlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # (here: the run's early launch reads, it writes nothing)

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise naming_path(exc, path) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def naming_path(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` when it names no file (a write(2) that failed)."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def write_json(path: Path, data: Any) -> None:
    """Atomically replace ``path`` (a crash leaves the old or the new file, never half);
    a symlink there is refused (:func:`write_text`)."""
    write_text(path, safe_dumps(data, indent=2, sort_keys=False) + "\n")


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
    fd = open_nofollow(folder / contract.UPDATE_LOCK_FILE, os.O_RDWR | os.O_CREAT)
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


# scan_once is json's C scanner, which typeshed does not declare.
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.loads' own C scanner, without its wrappers


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


def _rest_of_line(fh: Any, raw: bytes) -> tuple[bytes, bytes, int]:
    """Read past the rest of an over-long line that starts with ``raw``: its first and last
    bytes (:func:`_record_head` reads them) and how many bytes were read past ``raw``."""
    head, tail = raw[:_HEAD_BYTES], raw[-_HEAD_BYTES:]
    more = 0
    while raw and not raw.endswith(b"\n"):  # skip the rest of the line
        raw = fh.readline(MAX_LINE_BYTES + 1)
        more += len(raw)
        tail = (tail + raw)[-_HEAD_BYTES:]
    return head, tail, more


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
                head, tail, more = _rest_of_line(fh, raw)
                total += more
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


def json_kind(value: Any) -> str:
    """The JSON kind of ``value`` as a note names it: mapping, list, string, ..."""
    return {dict: "mapping", list: "list", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number" if isinstance(value, (int, float))
                                    else type(value).__name__)


def mapping(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one: a section of a file read
    back (env.json's ``torch``, ``host``) that may be missing or of another type."""
    return value if isinstance(value, dict) else {}
