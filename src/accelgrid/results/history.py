"""The history store: every cell run's results in one SQLite database (the standard
library's ``sqlite3``), so grids can say what changed since the previous run, since when a
test fails and which tests flip. Default ``results/history.sqlite``; docs/reference/history.md
describes the schema.

:func:`open_store` opens (creating or migrating forward) a database; :meth:`Store.add`
adds cell folders (:func:`accelgrid.results.cellresults.read_cell`), idempotent by run id;
:meth:`Store.window` reads the last N runs of cells back as outcome strips.

Faults end in one :class:`HistoryError` line (exit 1), never a traceback, and never
touch the results folders (they are only read): a file that is not a database, a
database locked past the busy timeout, a schema newer than this version knows. Writers
use WAL and one ``BEGIN IMMEDIATE`` transaction per add, so two processes adding at once
both land (the second waits for the first).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import contract, outcomes

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import TestRecord
from ..base.errors import AccelgridError
from ..base.jsonio import mapping
from . import provenance
from .cellresults import CellResults, discover, read_cell, run_of
from .provenance import now

DEFAULT_DB = "results/history.sqlite"
SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 30.0  # a second writer waits this long for the first before failing

# One letter per outcome in the results table (and in every strip). FLAKY: passed only
# after failing first within the run (pytest-rerunfailures' reruns).
FLAKY = outcomes.FLAKY
CODE = {
    outcomes.PASSED: "P", outcomes.FAILED: "F", outcomes.ERROR: "E", outcomes.SKIPPED: "S",
    outcomes.XFAILED: "x", outcomes.XPASSED: "X", outcomes.TIMEOUT: "T",
    outcomes.CRASHED: "C", outcomes.NOT_RUN: "N", outcomes.FLAKY: "K",
}
OUTCOME = {v: k for k, v in CODE.items()}
BAD_CODES = frozenset(CODE[o] for o in outcomes.BAD)
ABSENT = "."  # in a strip: the cell ran, this test was not in that run

# Forward migrations: MIGRATIONS[v] takes a database from schema v-1 to v. A released
# step is never edited; a change is a new step (PRAGMA user_version holds the version).
MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,     -- the cell run's id (env.json run_id)
        cell TEXT NOT NULL,
        start TEXT, end TEXT, status TEXT, end_reason TEXT,
        commit_sha TEXT,                 -- the project's commit the cell ran
        torch_version TEXT, torch_build TEXT, torch_git TEXT,
        runner TEXT,                     -- the host's name
        device_name TEXT, device_count INTEGER, driver TEXT, python TEXT,
        selection TEXT NOT NULL,         -- JSON list of pytest args, [] for the whole cell
        inputs TEXT NOT NULL,            -- digest of the cell's inputs (flaky detection)
        total INTEGER NOT NULL, counts TEXT NOT NULL,  -- JSON {outcome: n}
        source TEXT,                     -- the folder it was added from
        added TEXT NOT NULL
    );
    CREATE INDEX runs_by_cell ON runs (cell, start, id);
    CREATE TABLE tests (id INTEGER PRIMARY KEY, nodeid TEXT NOT NULL UNIQUE);
    CREATE TABLE results (
        run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        test INTEGER NOT NULL REFERENCES tests (id),
        outcome TEXT NOT NULL,           -- one letter, history.CODE
        duration REAL,
        reruns INTEGER NOT NULL DEFAULT 0,
        message TEXT,                    -- bad outcomes only, 500 characters at most
        PRIMARY KEY (run, test)
    ) WITHOUT ROWID;
    """,
    # Each run's outcomes as one string (its letters in test-id order) and its test ids
    # stored once per distinct list: a window reads one row per run, not one per result
    # (docs/measured/bench-history.md). Filled for the runs already there.
    2: """
    CREATE TABLE testsets (id INTEGER PRIMARY KEY, ids TEXT NOT NULL UNIQUE);
    ALTER TABLE runs ADD COLUMN testset INTEGER REFERENCES testsets (id);
    ALTER TABLE runs ADD COLUMN letters TEXT;
    INSERT OR IGNORE INTO testsets (ids) SELECT coalesce((SELECT group_concat(test) FROM
        (SELECT test FROM results WHERE run = runs.id ORDER BY test)), '') FROM runs;
    UPDATE runs SET
        letters = coalesce((SELECT group_concat(outcome, '') FROM
            (SELECT outcome FROM results WHERE run = runs.id ORDER BY test)), ''),
        testset = (SELECT id FROM testsets WHERE ids = coalesce((SELECT group_concat(test)
            FROM (SELECT test FROM results WHERE run = runs.id ORDER BY test)), ''))
    """,
    # The CI run a cell ran in (env.json "ci": provenance.ci_run_url): the site's runs x
    # cells page links each result to it and makes a row of the results of one CI run.
    3: """
    ALTER TABLE runs ADD COLUMN ci_url TEXT;
    CREATE INDEX runs_by_start ON runs (start, id)
    """,
}
MESSAGE_LIMIT = 500
DURATION_RUNS = 10   # the runs a test's duration is the median of (Store.durations)
RUN_COLUMNS = ("id", "run_id", "cell", "start", "end", "status", "end_reason", "commit_sha",
               "torch_version", "torch_build", "torch_git", "runner", "device_name",
               "device_count", "driver", "python", "selection", "inputs", "total", "counts",
               "source", "added", "ci_url")


class HistoryError(AccelgridError):
    """The history database cannot be used (corrupt, locked, newer, unwritable)."""


def is_database(path: Path) -> bool:
    """Whether ``path`` is an SQLite file (its header), e.g. a history named where a
    durations file or results folder could be too."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def default_path() -> Path:
    """``results/history.sqlite``, or $ACCELGRID_HISTORY when set."""
    return Path(os.environ.get(contract.HISTORY) or DEFAULT_DB)


def _why(path: Path, exc: BaseException) -> HistoryError:
    text = str(exc).split("\n")[0]
    if "locked" in text or "busy" in text:
        text += f" (another process held it for over {BUSY_TIMEOUT_S:.0f} s)"
    elif isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        text += " (corrupt? move it away to start a new history)"
    return HistoryError(f"history {path}: {text}")


@contextmanager
def _faults(path: Path) -> Iterator[None]:
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise _why(path, exc) from exc


def inputs_digest(env: Mapping[str, Any], plan: Mapping[str, Any] | None = None) -> str:
    """What a cell ran on, as a short digest: torch build and git version, the installed
    packages (env.json's and every pinned one as its plan found it installed: a package
    bump between nights is not the same inputs), the env flags, the devices and driver.
    Not the project's commit: a nightly run has a new one every night, and a test
    flipping under one commit per night is exactly what flaky detection has to see."""
    torch = mapping(env.get("torch"))
    devices = sorted(str(d.get("name")) for d in torch.get("devices") or [] if isinstance(d, dict))
    planned = mapping(mapping(plan).get("inputs"))
    key = {"torch": [torch.get("version"), torch.get("git_version"), torch.get("cuda_runtime"),
                     torch.get("xpu_runtime"), torch.get("driver")],
           "devices": devices, "packages": env.get("packages") or {},
           "env": env.get("env") or {}, "python": mapping(env.get("python")).get("version")}
    if planned:  # runs before plans keep their digest
        key["planned"] = [planned.get("torch"), planned.get("packages") or {}]
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def torch_build(env: Mapping[str, Any]) -> str:
    """A run's torch build as the grid and the history show it, from its env.json: the
    exact version with the runtime it is for, and the channel when not a release
    (``2.16.0.dev20261201+cpu (nightly)``: which nightly is known only from the run)."""
    torch = mapping(env.get("torch"))
    flags = mapping(env.get("env"))
    runtime = (torch.get("cuda_runtime") and f"CUDA {torch['cuda_runtime']}") or (
        torch.get("xpu_runtime") and f"XPU {torch['xpu_runtime']}")
    channel = flags.get(contract.TORCH_CHANNEL)
    extra = [x for x in (runtime, channel if channel and channel != "release" else None) if x]
    return (torch.get("version") or "?") + (f" ({', '.join(extra)})" if extra else "")


def run_row(cell: CellResults, source: Path) -> dict[str, Any] | None:
    """The runs row of a cell read back; None when it cannot be told apart from others
    (no run id and no start)."""
    env = cell.env or {}
    run = run_of(cell.path, env)
    torch = mapping(env.get("torch"))
    run_id = run.get("run_id")
    if not run_id:
        if not env.get("start"):
            return None
        # Results written before runs had ids: the cell and its start tell runs apart.
        run_id = "legacy-" + hashlib.sha1(f"{cell.name}|{env['start']}".encode()).hexdigest()[:16]
    version = torch.get("version")
    devices = [d for d in torch.get("devices") or [] if isinstance(d, dict)]
    names = list(dict.fromkeys(str(d.get("name")) for d in devices if d.get("name")))
    counts: dict[str, int] = {}
    for rec in cell.tests.values():
        counts[rec["outcome"]] = counts.get(rec["outcome"], 0) + 1
    return {
        "run_id": str(run_id), "cell": cell.name, "start": env.get("start"),
        "end": env.get("end"), "status": env.get("status"), "end_reason": env.get("end_reason"),
        "commit_sha": mapping(env.get("project")).get("commit"),
        "torch_version": version,
        "torch_build": torch_build(env),
        "torch_git": torch.get("git_version"), "runner": mapping(env.get("host")).get("name"),
        "device_name": ", ".join(names) or None, "device_count": torch.get("device_count"),
        "driver": torch.get("driver"), "python": mapping(env.get("python")).get("version"),
        "selection": json.dumps([str(a) for a in run.get("selection") or []]),
        "inputs": inputs_digest(env, cell.plan), "total": len(cell.tests),
        "counts": json.dumps(counts, sort_keys=True), "source": str(source), "added": now(),
        "ci_url": provenance.ci_run_url(mapping(env.get("ci"))),
    }


def _code(rec: TestRecord) -> str:
    outcome = rec["outcome"]
    reruns = rec.get("reruns")
    if outcome == outcomes.PASSED and isinstance(reruns, int) and reruns > 0:
        return CODE[FLAKY]  # records from before the recorder wrote "flaky" itself
    return CODE.get(outcome, CODE[outcomes.ERROR])


@dataclass
class Added:
    """What :meth:`Store.add` did with one cell folder."""

    path: Path
    cell: str
    run_id: str | None
    status: str  # "added", "replaced", "already", "skipped"
    why: str = ""
    tests: int = 0


@dataclass
class Window:
    """The last runs of some cells: per cell its runs (oldest first, dicts of
    :data:`RUN_COLUMNS`) and per (cell, nodeid) the strip, one letter per run."""

    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    strips: dict[str, dict[str, str]] = field(default_factory=dict)  # cell -> nodeid -> strip


class Store:
    """An open history database (:func:`open_store`)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------

    def add(self, folders: Iterable[Path]) -> tuple[list[Added], list[str]]:
        """Add the cell folders found in ``folders``
        (:func:`accelgrid.results.cellresults.discover`), all in one transaction. A run
        already stored (same run id, same end) is left as it is; one stored before it
        ended is replaced. Errored cells (nothing recorded) are skipped with the reason.
        Returns what happened per folder, and notes."""
        paths, notes = discover([Path(p) for p in folders])
        return self.add_cells([(p, read_cell(p)) for p in paths]), notes

    def add_cells(self, cells: list[tuple[Path, CellResults]]) -> list[Added]:
        """:meth:`add` of cells already read (``(folder, results)`` pairs)."""
        done: list[Added] = []
        with _faults(self.path):
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                test_ids = dict(conn.execute("SELECT nodeid, id FROM tests"))
                for path, cell in cells:
                    done.append(self._add_one(path, cell, test_ids))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return done

    def _add_one(self, path: Path, cell: CellResults, test_ids: dict[str, int]) -> Added:
        conn = self.conn
        if cell.error:
            return Added(path, cell.name, None, "skipped", cell.error)
        row = run_row(cell, path)
        if row is None:
            return Added(path, cell.name, None, "skipped",
                         "no run id and no start time: cannot be told from other runs")
        old = conn.execute("SELECT id, end FROM runs WHERE run_id = ?",
                           (row["run_id"],)).fetchone()
        status = "added"
        if old is not None:
            if old[1] == row["end"] or not row["end"]:
                return Added(path, cell.name, row["run_id"], "already", tests=len(cell.tests))
            conn.execute("DELETE FROM results WHERE run = ?", (old[0],))
            conn.execute("DELETE FROM runs WHERE id = ?", (old[0],))
            status = "replaced"
        names = [k for k in RUN_COLUMNS if k != "id"]
        run = conn.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES "
                           f"({', '.join('?' * len(names))})",
                           [row[k] for k in names]).lastrowid
        new = [n for n in cell.tests if n not in test_ids]
        if new:
            conn.executemany("INSERT OR IGNORE INTO tests (nodeid) VALUES (?)",
                             ((n,) for n in new))
            test_ids.update(conn.execute(
                "SELECT nodeid, id FROM tests WHERE id > ?",
                (max(test_ids.values(), default=0),)))
        bad = BAD_CODES
        rows = []
        for nodeid, rec in cell.tests.items():
            code = _code(rec)
            duration = rec.get("duration")
            msg = rec.get("message") if code in bad else None
            reruns = rec.get("reruns")
            rows.append((run, test_ids[nodeid], code,
                         round(duration, 4) if isinstance(duration, float) else None,
                         reruns if isinstance(reruns, int) else 0,
                         str(msg)[:MESSAGE_LIMIT] if msg else None))
        # In test-id order: the results' key order (each insert lands at the end of the
        # table) and the order of the run's letters.
        rows.sort(key=itemgetter(1))
        conn.executemany("INSERT INTO results (run, test, outcome, duration, reruns, message) "
                         "VALUES (?, ?, ?, ?, ?, ?)", rows)
        ids = ",".join([str(r[1]) for r in rows])
        conn.execute("INSERT OR IGNORE INTO testsets (ids) VALUES (?)", (ids,))
        conn.execute("UPDATE runs SET letters = ?, testset = (SELECT id FROM testsets WHERE "
                     "ids = ?) WHERE id = ?", ("".join([r[2] for r in rows]), ids, run))
        return Added(path, cell.name, row["run_id"], status, tests=len(cell.tests))

    # --- reading ---------------------------------------------------------------------

    def cells(self) -> list[str]:
        with _faults(self.path):
            return [r[0] for r in self.conn.execute("SELECT DISTINCT cell FROM runs ORDER BY cell")]

    def runs_of(self, cell: str, limit: int | None = None) -> list[dict[str, Any]]:
        """``cell``'s runs, oldest first (the last ``limit`` when given)."""
        with _faults(self.path):
            cur = self.conn.execute(
                f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE cell = ? "
                "ORDER BY start DESC, id DESC" + (" LIMIT ?" if limit else ""),
                (cell, limit) if limit else (cell,))
            return [dict(zip(RUN_COLUMNS, r, strict=True)) for r in cur][::-1]

    def recent_runs(self, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` runs of every cell, newest first."""
        with _faults(self.path):
            cur = self.conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs "
                                    "ORDER BY start DESC, id DESC LIMIT ?", (limit,))
            return [dict(zip(RUN_COLUMNS, r, strict=True)) for r in cur]

    def durations(self, cell: str, runs: int = DURATION_RUNS) -> dict[str, float]:
        """Each test's duration in ``cell``'s last ``runs`` runs that recorded one, as the
        median of those (a shard split balanced by them, :mod:`accelgrid.results.shards`: one slow
        run of a test moves it less than the last run alone would). {} without any."""
        with _faults(self.path):
            cur = self.conn.execute(
                "SELECT t.nodeid, r.duration FROM results r JOIN tests t ON t.id = r.test "
                "WHERE r.run IN (SELECT id FROM runs WHERE cell = ? ORDER BY start DESC, "
                "id DESC LIMIT ?) AND r.duration IS NOT NULL AND r.duration >= 0",
                (cell, runs))
            seen: dict[str, list[float]] = {}
            for nodeid, duration in cur:
                seen.setdefault(nodeid, []).append(float(duration))
        return {n: statistics.median(d) for n, d in sorted(seen.items())}

    def run(self, run_id: str) -> dict[str, Any] | None:
        with _faults(self.path):
            r = self.conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE run_id = ?",
                                  (run_id,)).fetchone()
        return dict(zip(RUN_COLUMNS, r, strict=True)) if r else None

    def window(self, cells: Iterable[str], size: int,
               upto: dict[str, str] | None = None,
               known_runs: dict[str, list[dict[str, Any]]] | None = None) -> Window:
        """The last ``size`` runs of each of ``cells`` (ending at the run ``upto[cell]``
        names, when given) and every test's strip over them: one letter per run (CODE,
        or ABSENT where that run did not have the test), oldest first. ``known_runs``: the
        cells' :meth:`runs_of` when the caller has read them already."""
        out = Window()
        with _faults(self.path):
            conn = self.conn
            names: dict[int, str] | None = None
            for cell in dict.fromkeys(cells):
                runs = (known_runs[cell] if known_runs and cell in known_runs
                        else self.runs_of(cell))
                end = len(runs)
                if upto and upto.get(cell):
                    ids = [r["run_id"] for r in runs]
                    if upto[cell] in ids:
                        end = ids.index(upto[cell]) + 1
                runs = runs[max(0, end - size):end]
                if not runs:
                    continue
                out.runs[cell] = runs
                if names is None:
                    names = dict(conn.execute("SELECT id, nodeid FROM tests"))
                out.strips[cell] = self._strips([r["id"] for r in runs], names)
        return out

    def _strips(self, runs: list[int], names: dict[int, str]) -> dict[str, str]:
        """nodeid -> strip over ``runs``. Each run is read as two strings made in SQLite
        in one pass (its outcome letters and its test ids, in the same order): no sort,
        no row per result in Python. When every run has the same tests (nearly always),
        the strips are the letters transposed."""
        stored = {} if self.conn.execute("PRAGMA user_version").fetchone()[0] < 2 else {
            r: (text, ids) for r, text, ids in self.conn.execute(
            "SELECT r.id, r.letters, t.ids FROM runs r JOIN testsets t ON t.id = r.testset "
            f"WHERE r.id IN ({', '.join('?' * len(runs))}) AND r.letters IS NOT NULL", runs)}
        letters, tests = [], []
        for run in runs:
            if run in stored:  # the run's own row (schema 2): no result read
                text, ids = stored[run]
            else:
                text, ids = self.conn.execute(
                    "SELECT group_concat(outcome, ''), group_concat(test) FROM "
                    "(SELECT test, outcome FROM results WHERE run = ? ORDER BY test)",
                    (run,)).fetchone()
            letters.append(text or "")
            tests.append(ids or "")
        if all(t == tests[-1] for t in tests):
            order = [names[int(t)] for t in tests[-1].split(",")] if tests[-1] else []
            return dict(zip(order, map("".join, zip(*letters, strict=True)), strict=True))
        per = [dict(zip(t.split(","), s, strict=True)) if t else {}
               for t, s in zip(tests, letters, strict=True)]
        every = dict.fromkeys(t for p in per for t in p)
        return {names[int(t)]: "".join(p.get(t, ABSENT) for p in per) for t in every}

    def last_passed_before(self, cell: str, nodeids: Iterable[str], before_start: str | None
                           ) -> dict[str, dict[str, Any]]:
        """For each of ``nodeids``, ``cell``'s latest run before ``before_start`` where it
        passed (runs columns), when there is one."""
        nodeids = list(dict.fromkeys(nodeids))
        if not nodeids:
            return {}
        with _faults(self.path):
            conn = self.conn
            ids: dict[int, str] = {}
            for chunk in range(0, len(nodeids), 500):  # SQLite's bound parameters
                part = nodeids[chunk:chunk + 500]
                ids.update(conn.execute(f"SELECT id, nodeid FROM tests WHERE nodeid IN "
                                        f"({', '.join('?' * len(part))})", part))
            if not ids:
                return {}
            # Newest first (as max(start || '|' || run_id) ranks them), each run's stored
            # letters (schema 2): the first that passed wins; no result row is read.
            cur = conn.execute(
                "SELECT r.id, r.run_id, r.testset, r.letters, t.ids FROM runs r LEFT JOIN "
                "testsets t ON t.id = r.testset WHERE r.cell = ? AND r.start IS NOT NULL "
                "AND (? IS NULL OR r.start < ?) ORDER BY r.start || '|' || r.run_id DESC",
                (cell, before_start, before_start))
            want = dict(ids)  # test id -> nodeid, until found
            found: dict[str, str] = {}
            at: dict[Any, dict[int, int]] = {}  # a test list -> wanted test id -> position
            passed = CODE[outcomes.PASSED]
            for run, run_id, testset, letters, tests in cur:
                if letters is None or tests is None:  # not since schema 2: its result rows
                    letters, tests = conn.execute(
                        "SELECT group_concat(outcome, ''), group_concat(test) FROM "
                        "(SELECT test, outcome FROM results WHERE run = ? ORDER BY test)",
                        (run,)).fetchone()
                    letters, tests, testset = letters or "", tests or "", ("run", run)
                pos = at.get(testset)
                if pos is None:
                    pos = at[testset] = {int(t): i for i, t in enumerate(tests.split(","))
                                         if int(t) in ids} if tests else {}
                for test, i in pos.items():
                    if test in want and letters[i] == passed:
                        found[want.pop(test)] = run_id
                if not want:
                    break
        runs = {r: run for r in set(found.values()) if (run := self.run(r))}
        return {n: runs[r] for n, r in found.items() if r in runs}

    def size_bytes(self) -> int:
        """The database's size on disk (with its WAL)."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal"))
                   if p.exists())


def open_store(path: Path | str | None = None, create: bool = True) -> Store:
    """Open the history at ``path`` (default :func:`default_path`), creating it when
    ``create`` and migrating an older schema forward. Raises HistoryError (one line) when
    it is not a database, is locked, or has a newer schema than this version's."""
    path = Path(path) if path else default_path()
    if not create and not path.exists():
        raise HistoryError(f"history {path}: no such database")
    with _faults(path):
        if path.exists() and not path.is_file():
            raise HistoryError(f"history {path}: not a file")
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # reads the header
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"history {path}: schema {version} is newer than this accelgrid's "
                    f"({SCHEMA_VERSION}); upgrade accelgrid to use it")
            use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints
            conn.execute("PRAGMA foreign_keys = ON")
            if version < SCHEMA_VERSION:
                _migrate(conn, path)
        except BaseException:
            conn.close()
            raise
    return Store(path, conn)


def use_wal(conn: sqlite3.Connection, wait_s: float = BUSY_TIMEOUT_S) -> None:
    """The database in WAL mode. Switching needs the file to itself, and SQLite answers
    "locked" at once, without its busy wait, while another connection holds it: two
    processes creating the history at once both find it in rollback mode and one of them
    failed (1 add in 4 under load). Asked again until ``wait_s``, by when the other has
    switched it (nothing left to do) or let it go."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while this one waited for the lock.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]:
            raise HistoryError(f"history {path}: holds tables but no accelgrid schema "
                               "version: not an accelgrid history")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {step}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def strip_flips(strip: str, inputs: list[str]) -> tuple[int, int]:
    """(flips, pairs): adjacent runs of a strip whose inputs are the same and whose
    outcomes are both pass-or-bad, and how many of them changed between good and bad."""
    flips = pairs = 0
    prev = prev_inputs = None
    for letter, key in zip(strip, inputs, strict=True):
        if letter == CODE[outcomes.PASSED] or letter in BAD_CODES:
            if prev is not None and key == prev_inputs:
                pairs += 1
                flips += (prev in BAD_CODES) != (letter in BAD_CODES)
            prev, prev_inputs = letter, key
    return flips, pairs
