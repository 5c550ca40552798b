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
  ``env.json``        provenance (:mod:`accelgrid.results.provenance`), start and end
  ``junit.xml``       pytest's JUnit XML (absent if the run was killed)
  ``summary.json``    counts per outcome, the run id and selection, written when it ends
  ``pytest.log``      pytest's own output, each pass's appended (the console shows progress)
  ``multi_device.json`` multi-device tests deselected by the pinned pass (run next)
  ``.update.lock``    flock held around every shared write (:func:`locked`)

Reading them back is :mod:`accelgrid.results.cellresults`; JSON in and out
:mod:`accelgrid.base.jsonio`.

Passes of a run may write the folder at the same time (the all-devices pass runs beside
the pinned one): records are appended, and env.json, collected.json and the lists left for
later passes read, changed and written, under the folder's lock (:func:`locked`).

Every record carries the run's id (``run_id``, also in env.json and summary.json); a
reader ignores records of another run.

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""


from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..base import contract, outcomes
from ..base.jsonio import (
    MAX_NOTES,
    NOFOLLOW,
    json_kind,
    locked,
    naming_path,
    open_nofollow,
    read_json,
    read_jsonl,
    refuse_symlink,
    safe_dumps,
    safe_text,
    write_json,
)
from ..base.outcomes import Outcome
from .environment import redact_text, redact_value

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import PassTiming, Summary, TestRecord


def results_root(project_root: Path) -> Path:
    """Where cells write results: ``results/`` in the project, or $ACCELGRID_RESULTS_DIR."""
    return Path(os.environ.get(contract.RESULTS_DIR) or project_root / contract.RESULTS_FOLDER)


def suite_of(nodeid: str) -> str:
    """``suites/offload/test_x.py::t`` -> ``offload`` (the folder under suites/)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]


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


# A record's fields as the reports use them: name -> accepted types (None always is).
_TEXT_FIELDS = ("message", "longrepr", "output", "worker", "device", "cell", "when", "pass")
_FIELD_CHECKS = frozenset((*_TEXT_FIELDS, "duration", "issue", "properties"))
_PLAIN_TEXT = frozenset(_TEXT_FIELDS) - {"message", "longrepr", "output"}  # kept as they are


# What a test records (``properties``) as readers get it: every grid result carries it,
# so a test (untrusted input) cannot make a grid big or unreadable.
MAX_PROPERTIES = 32        # names per test, the last saying how many more were dropped
MAX_PROPERTY_NAME = 64     # characters of a name
MAX_PROPERTY_TEXT = 200    # characters of a text value (a kernel's name, a flag)
MAX_PROPERTY_ITEMS = 16    # items of a list or mapping value (the kernels seen), likewise
_CUT = "…"
_BIG_INT = 2 ** 63  # an int past this is text (JSON readers lose its digits)


def _property_name(name: Any, redact: Callable[[str], str]) -> str:
    key = redact(safe_text(str(name)))
    return key if len(key) <= MAX_PROPERTY_NAME else key[:MAX_PROPERTY_NAME - 1] + _CUT


def _property_scalar(value: Any, redact: Callable[[str], str]) -> Any:
    """A property's scalar as readers get it: text redacted and cut, a non-finite float
    as its text (JSON has no NaN: ``nan`` says more than null), anything else (a nested
    list or mapping) as its compact JSON text."""
    if value is None or isinstance(value, bool) or (
            isinstance(value, int) and -_BIG_INT < value < _BIG_INT):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = redact(value if isinstance(value, str) else
                  safe_dumps(value, separators=(",", ":"), sort_keys=True))
    return text if len(text) <= MAX_PROPERTY_TEXT else text[:MAX_PROPERTY_TEXT - 1] + _CUT


def clean_properties(value: dict[Any, Any], redact: Callable[[str], str] = redact_text
                     ) -> dict[str, Any]:
    """A record's ``properties`` bounded and redacted (names too): at most
    :data:`MAX_PROPERTIES` names of :data:`MAX_PROPERTY_NAME` characters; each value a
    number, a bool, null, a text of :data:`MAX_PROPERTY_TEXT` characters, or a list or
    mapping of :data:`MAX_PROPERTY_ITEMS` of those. Past a count, the last entry (``…``)
    says how many more were not kept; a cut text ends in ``…``. Nothing here makes a
    column partial: the test's result stands, only what it recorded is shortened."""
    out: dict[str, Any] = {}
    for name, item in _at_most(list(value.items()), MAX_PROPERTIES):
        key = _property_name(name, redact)
        if isinstance(item, (list, tuple)):
            out[key] = [_property_scalar(v, redact) for v in
                        _at_most(list(item), MAX_PROPERTY_ITEMS, _CUT)]
        elif isinstance(item, dict):
            out[key] = {_property_name(k, redact): _property_scalar(v, redact)
                        for k, v in _at_most(list(item.items()), MAX_PROPERTY_ITEMS)}
        else:
            out[key] = _property_scalar(item, redact)
    return out


def _at_most(items: list[Any], limit: int, mark: Any = None) -> list[Any]:
    """``items`` when there are ``limit`` or fewer; else the first ``limit - 1`` and one
    saying how many more were dropped (``mark``, default a ``(…, text)`` pair)."""
    if len(items) <= limit:
        return items
    more = f"{len(items) - limit + 1} more not kept"
    return [*items[:limit - 1], f"{mark} {more}" if mark else (_CUT, more)]


MAX_NODEID = 64 * 1024  # a parametrized id may run to thousands of characters


def _cached_redact(redacted: dict[str, str] | None) -> Callable[[str], str]:
    """:func:`redact_text` remembering its results in ``redacted`` (when given): the same
    texts recur across a file's records."""
    if redacted is None:
        return redact_text

    def redact(text: str) -> str:
        done = redacted.get(text)
        return done if done is not None else redacted.setdefault(text, redact_text(text))
    return redact


def clean_record(rec: dict[str, Any], where: str, redacted: dict[str, str] | None = None
                 ) -> tuple[TestRecord | None, list[str]]:
    """A test record with the types reports rely on, and what was wrong with it; None
    when it cannot stand for a test (its nodeid or outcome is not text). Messages and
    tracebacks lose credentials (:func:`accelgrid.results.environment.redact_text`; ``redacted``,
    when given, remembers its results across records). ``rec`` is changed in place
    (read_jsonl's records are fresh)."""
    nodeid, outcome = rec.get("nodeid"), rec.get("outcome")
    if not isinstance(nodeid, str) or not nodeid.strip() or len(nodeid) > MAX_NODEID:
        what = ("empty" if isinstance(nodeid, str) and not nodeid.strip() else
                "too long" if isinstance(nodeid, str) else f"a {json_kind(nodeid)}")
        return None, [f"{where}: nodeid is {what}, not a test id; record skipped"]
    if not isinstance(outcome, str):
        return None, [f"{where}: outcome of {nodeid[:200]} is a {json_kind(outcome)}, not a "
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
                notes.append(f"{where}: issue of {nodeid[:200]} is a {json_kind(value)}; dropped")
        elif name == "properties":
            if isinstance(value, dict):
                rec[name] = clean_properties(value, _cached_redact(redacted))
            else:
                del rec[name]
                notes.append(f"{where}: properties of {nodeid[:200]} are a "
                             f"{json_kind(value)}; dropped")
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
            notes.append(f"{where}: {name} of {nodeid[:200]} is a {json_kind(value)}; dropped")
    # The fields a report reads now have their types (an unknown outcome word stays, for
    # cellresults.read_cell to name); JSON's mapping is untyped, hence the cast.
    return cast("TestRecord", rec), notes



def read_records(path: Path) -> tuple[list[TestRecord], list[str]]:
    """Test records of a tests.jsonl, and a note per unusable line or field."""
    raw, problems = read_jsonl(path, ("nodeid", "outcome"))
    records: list[TestRecord] = []
    redacted: dict[str, str] = {}
    name = path.name
    for i, rec in enumerate(raw, 1):
        clean, notes = clean_record(rec, f"{name} record {i}", redacted)
        if len(problems) < MAX_NOTES:
            problems += notes[:MAX_NOTES - len(problems)]
        if clean is not None:
            records.append(clean)
    return records, problems


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


def _drop_cleared_markers(results: Path) -> None:
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
                ) -> tuple[list[TestRecord], list[str]]:
    """The test records of ``results/tests.jsonl`` that belong to run ``run_id`` (default:
    env.json's), and a note per unusable line or record of another run. Records without
    a run id (written before runs had one) belong to any run."""
    records, problems = read_records(results / contract.TESTS_FILE)
    if run_id is None:
        env, _ = read_json(results / contract.ENV_FILE)
        run_id = env.get("run_id") if isinstance(env, dict) else None
    if run_id:
        other = [r for r in records if r.get("run_id") not in (None, run_id)]
        if other:
            problems.append(f"{contract.TESTS_FILE}: {len(other)} record(s) of another run ignored")
            records = [r for r in records if r.get("run_id") in (None, run_id)]
    return records, problems


def pass_times(records: list[TestRecord], passes: list[dict[str, Any]],
               run_start: float) -> dict[str, Any]:
    """summary.json's timing of a run: ``wall_s`` from the run's start to the end of its
    last pass, and per pass (``passes``: name, beside, workers, start and end in epoch
    seconds, rc, as the runner measured them) its wall time and how long each of its
    workers took from the pass's start to its first test (``first_test_s``: start-up,
    read from the records' ``start`` and ``pass``)."""
    out: list[PassTiming] = []
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
        timing: PassTiming = {
            "name": p["name"], "beside": p.get("beside"), "workers": p.get("workers"),
            "start": _dt_text(p["start"]), "wall_s": round(p["end"] - p["start"], 2),
            "rc": p.get("rc"), "tests": count,
            "first_test_s": round(min(first.values()) - since, 2) if first else None,
            "workers_first_test_s": {w: round(t - since, 2)
                                     for w, t in sorted(first.items())},
        }
        if "gate" in p:
            timing["waited_s"] = round(since - p["start"], 2)
        ahead = p.get("ahead")
        if isinstance(ahead, int | float):  # started while nox checked (run.headstart.prestart)
            timing["ahead_s"] = round(ahead - p["start"], 2)
        if p.get("launched"):   # its pytest started with the command (run.headstart.relaunch)
            timing["launched"] = True
        out.append(timing)
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
             timing: dict[str, Any] | None = None) -> Summary:
    """Close a run's results after its pytest process ended, however it ended.

    Tests a dead worker was in become crashed/timeout; collected tests with no record
    become not-run with ``reason``; ``env.json`` gets its end (and so does each pass it
    lists that never reached its own); ``summary.json`` is written with ``run``
    (:data:`RUN_FIELDS`: the run id, the user's pytest args, the selection) and
    ``timing`` (``passes``: what :func:`pass_times` needs, and ``run_start``).
    """
    run = {k: v for k, v in (run or {}).items() if k in RUN_FIELDS}
    redact_files(results)
    env, _ = read_json(results / contract.ENV_FILE)
    env = env if isinstance(env, dict) else None
    run_id = run.get("run_id") or (env or {}).get("run_id")
    cell = (env or {}).get("cell")

    def stamped(rec: TestRecord) -> TestRecord:
        if run_id:
            rec["run_id"] = run_id
        if cell:
            rec["cell"] = cell
        return rec

    records, _ = run_records(results, run_id)
    seen = {r["nodeid"] for r in records}
    for nodeid, info in running(results).items():
        if nodeid in seen:
            continue
        outcome = crash_outcome(info.get("start"), info.get("timeout"))
        append_record(results / contract.TESTS_FILE, stamped({
            "nodeid": nodeid, "outcome": outcome, "worker": info.get("worker"),
            "message": f"the test process died while running this test ({reason})",
            "duration": time.time() - info["start"] if info.get("start") else None}))
        seen.add(nodeid)
    _drop_cleared_markers(results)
    collected, _ = read_json(results / contract.COLLECTED_FILE)
    incomplete = incompleteness(collected if isinstance(collected, list) else None, seen,
                                (env or {}).get("passes"))
    from .plan import count_mismatch, read  # local: plan reads this module's folder files
    counts = count_mismatch(read(results), records)
    if counts:
        incomplete = f"{incomplete}; {counts}" if incomplete else counts
    for nodeid in collected or []:
        if nodeid not in seen:
            append_record(results / contract.TESTS_FILE, stamped(
                {"nodeid": nodeid, "outcome": outcomes.NOT_RUN, "message": reason}))
            seen.add(nodeid)
    if env is not None and (env.get("torch") or {}).get("pending"):
        env["torch"] = merged_torch(results)  # the run died before it merged them
        write_json(results / contract.ENV_FILE, env)
    if env is not None and not env.get("end"):
        from .provenance import now  # local: provenance is the only user of datetime here
        env["end"] = now()
        env["status"] = "ended" if env.get("status") == "running" else env.get("status")
        env["end_reason"] = reason
        for entry in env.get("passes") or []:
            if isinstance(entry, dict) and not entry.get("end"):
                entry["end"] = env["end"]
        write_json(results / contract.ENV_FILE, env)
    summary = run_summary(results, run_id)
    if timing is not None:
        records, _ = run_records(results, run_id)
        times = pass_times(records, timing["passes"], timing["run_start"])
        summary["wall_s"], summary["passes"] = times["wall_s"], times["passes"]
    for key in RUN_FIELDS:
        if key in run or key in (env or {}):
            # RUN_FIELDS are Summary's keys, named through a tuple mypy cannot follow.
            summary[key] = run[key] if key in run else (env or {})[key]  # type: ignore[literal-required]
    summary["partial"] = bool(summary.get("selection"))
    if incomplete:
        summary["incomplete"] = incomplete
    write_json(results / contract.SUMMARY_FILE, summary)
    return summary


FIRST_UNRECORDED = 3  # unrecorded test ids an incomplete run names


def incompleteness(collected: list[Any] | None, recorded: set[str],
                   passes: Any) -> str | None:
    """Why a run is incomplete, or None when it is complete: every test its pytest
    collected has a record (a crashed test's counts). ``collected``: collected.json (None
    when absent: no pytest of the run got through collection with the recorder loaded,
    e.g. the plugin was not loaded or the test processes died importing a file);
    ``passes``: env.json's (absent too when the recorder never started)."""
    if collected is None:
        if not passes:
            return ("the recorder never ran (no env.json, no collected.json): pytest ran "
                    "without the accelgrid plugin")
        return ("no collection was recorded (no collected.json): the test processes died "
                "before they finished collecting (a test file that ends its process at "
                "import?); pytest's log says which")
    missing = [str(i) for i in collected if str(i) not in recorded]
    if not missing:
        return None
    return (f"{len(missing)} of the {len(collected)} collected tests have no record: "
            + ", ".join(missing[:FIRST_UNRECORDED])
            + (", ..." if len(missing) > FIRST_UNRECORDED else ""))


def last_outcomes(records: list[TestRecord]) -> dict[str, TestRecord]:
    """One record per test id; a later record of the same test replaces an earlier one."""
    out: dict[str, TestRecord] = {}
    for rec in records:
        out[rec["nodeid"]] = rec
    return out


def run_summary(results: Path, run_id: str | None = None) -> Summary:
    records, problems = run_records(results, run_id)
    tests = last_outcomes(records)
    counts = Counter(r["outcome"] for r in tests.values())
    env, _ = read_json(results / contract.ENV_FILE)
    cell = env.get("cell") if isinstance(env, dict) else None
    return {"cell": cell or results.name, "total": len(tests),
            "counts": {o: counts.get(o, 0) for o in outcomes.ALL},
            "problems": problems}


def clear_for_run(cell_folder: Path) -> None:
    """Empty ``results/<cell>/`` for a new full run: everything but the runs with a
    selection (``runs/``) and the lock file, which the new run holds."""
    refuse_symlink(cell_folder)  # emptying a link would empty the folder it names
    cell_folder.mkdir(parents=True, exist_ok=True)
    for child in cell_folder.iterdir():  # a symlink child: the link goes, not its target
        if child.name in (contract.RUNS_DIR, contract.LOCK_FILE):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def run_folder(cell_folder: Path, run_id: str, partial: bool) -> Path:
    """Where a run writes: the cell's folder for a full run, ``runs/<run-id>/`` else."""
    return cell_folder / contract.RUNS_DIR / run_id if partial else cell_folder


def write_last_run(cell_folder: Path, run_id: str, folder: Path,
                   selection: list[str]) -> None:
    """Name the run now starting as the cell's latest (:func:`last_run` reads it)."""
    rel = folder.relative_to(cell_folder).as_posix() if folder != cell_folder else "."
    write_json(cell_folder / contract.LAST_RUN_FILE, {"run_id": run_id, "folder": rel,
                                        "selection": selection})


def last_run(cell_folder: Path) -> tuple[str | None, Path]:
    """(run id, folder) of the cell's latest run; (None, the cell's folder) when none is
    named, e.g. results written before runs had ids."""
    data, err = read_json(cell_folder / contract.LAST_RUN_FILE)
    if err or not isinstance(data, dict) or not isinstance(data.get("folder"), str):
        return None, cell_folder
    folder = (cell_folder / data["folder"]).resolve()
    if cell_folder.resolve() not in (folder, *folder.parents):
        return None, cell_folder  # a hand-edited pointer out of the cell's folder
    return data.get("run_id"), folder


def selected_runs(cell_folder: Path) -> list[Path]:
    """The run folders under ``runs/`` (selected runs), newest first (by modification
    time); links are never followed."""
    runs = cell_folder / contract.RUNS_DIR
    refuse_symlink(runs)
    if not runs.is_dir():
        return []
    return sorted((p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()),
                  key=lambda p: p.stat().st_mtime, reverse=True)


def prune_runs(cell_folder: Path, keep: int, dry_run: bool = False) -> list[Path]:
    """Remove all but the ``keep`` newest of ``runs/*``, never the run last-run.json names
    (the latest, perhaps still running); returns what was (with ``dry_run``: would be)
    removed."""
    latest = last_run(cell_folder)[1]
    gone = [p for p in selected_runs(cell_folder)[keep:] if p.resolve() != latest]
    if not dry_run:
        for old in gone:
            shutil.rmtree(old, ignore_errors=True)
    return gone
