"""The history store's parts one at a time (accelgrid.results.history): the database
checks and faults, the path from the environment, the inputs digest, the torch build, run
ids of results from before run ids, what a result row keeps, the window's end and its
known runs, chunks past SQLite's bound-parameter limit, WAL and the migration lock. Real
SQLite files and results folders as a run writes them (tests/helpers/report_cases.write_cell);
each test kills mutants of tools/mutate.py's history module (docs/design/mutation.md)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

import pytest
from helpers.history_cases import T, night
from helpers.report_cases import write_cell

from accelgrid.base import contract
from accelgrid.results import history
from accelgrid.results.history import HistoryError, open_store

CELL = "cpu-2.13"


def _nights(root: Path, n: int, tests: dict[str, str] | None = None) -> list[Path]:
    return [night(root, i, tests or {T + "a": "passed"}) for i in range(n)]


# --- the database file -------------------------------------------------------------------

def test_is_database_reads_the_sqlite_header(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    with open_store(db):
        pass
    text = tmp_path / "durations.json"
    text.write_text('{"a": 1.0}')
    assert history.is_database(db)
    assert not history.is_database(text)
    assert not history.is_database(tmp_path / "missing.sqlite")  # OSError: not one
    assert not history.is_database(tmp_path)  # a results folder


def test_the_history_path_comes_from_the_environment(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.HISTORY, raising=False)
    assert history.default_path() == Path("results/history.sqlite")
    monkeypatch.setenv(contract.HISTORY, "")  # set but empty: the default
    assert history.default_path() == Path("results/history.sqlite")
    named = tmp_path / "elsewhere" / "h.sqlite"
    monkeypatch.setenv(contract.HISTORY, str(named))
    assert history.default_path() == named
    with open_store() as store:
        assert store.path == named
    assert history.is_database(named)


def test_a_directory_in_the_databases_place_is_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "h.sqlite").mkdir()
    with pytest.raises(HistoryError, match=r"h\.sqlite: not a file$"):
        open_store(tmp_path / "h.sqlite")


def test_the_databases_folders_are_made(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "h.sqlite"
    with open_store(db) as store:
        store.add(_nights(tmp_path / "r", 1))
    assert history.is_database(db)


def test_the_busy_timeout_is_thirty_seconds(tmp_path: Path) -> None:
    """docs/reference/history.md: 'a 30 s busy timeout' (a second writer waits that long)."""
    with open_store(tmp_path / "h.sqlite") as store:
        assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_each_fault_says_what_it_likely_is(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Locked: another process held it; not a database: corrupt; another SQLite error
    (a read-only database here): its own text, neither guess."""
    cell = night(tmp_path / "r", 0, {T + "a": "passed"})
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 200)
    with pytest.raises(HistoryError) as err:
        open_store(corrupt)
    assert "file is not a database (corrupt? move it away" in str(err.value)
    assert "another process" not in str(err.value)

    locked = tmp_path / "locked.sqlite"
    with open_store(locked):
        pass
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(history, "BUSY_TIMEOUT_S", 0.2)
    try:
        with pytest.raises(HistoryError) as err, open_store(locked) as store:
            store.add([cell])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "database is locked (another process held it for over" in str(err.value)
    assert "corrupt" not in str(err.value)

    with open_store(tmp_path / "ro.sqlite") as store:
        store.conn.execute("PRAGMA query_only = ON")
        with pytest.raises(HistoryError) as err:
            store.add([cell])
    assert str(err.value).endswith("attempt to write a readonly database")


def test_readers_do_not_wait_for_a_writer(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """WAL: a grid reads the history while another process adds to it; and opening a
    current database takes no write lock (no migration to make)."""
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(_nights(tmp_path / "r", 2))
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # in WAL mode the same as IMMEDIATE: readers go on
    holder.execute("INSERT INTO tests (nodeid) VALUES ('being added')")
    monkeypatch.setattr(history, "BUSY_TIMEOUT_S", 0.3)  # a wait fails fast, not in 30 s
    try:
        with open_store(db) as store:
            assert store.window([CELL], 5).strips[CELL] == {T + "a": "PP"}
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# --- a run's row -------------------------------------------------------------------------

def _env(**torch: object) -> dict[str, object]:
    return {"torch": {"version": "2.13.0+cpu", "git_version": "abc", **torch},
            "packages": {"numpy": "2.1.0", "triton": "3.1.0"}, "env": {"X": "1"},
            "python": {"version": "3.11.7"}}


def test_the_inputs_digest_covers_env_flags_and_devices_in_any_order() -> None:
    base = _env(devices=[{"name": "A"}, {"name": "B"}])
    digest = history.inputs_digest(base)
    assert re.fullmatch("[0-9a-f]{16}", digest)  # the runs column's short digest
    assert history.inputs_digest({**base, "env": {"X": "2"}}) != digest
    assert history.inputs_digest(_env(devices=[{"name": "A"}, {"name": "C"}])) != digest
    # The same inputs listed in another order (env.json's, a plan's): the same digest.
    assert history.inputs_digest(_env(devices=[{"name": "B"}, {"name": "A"}])) == digest
    assert history.inputs_digest({**base, "packages": {"triton": "3.1.0", "numpy": "2.1.0"}}
                                 ) == digest


def test_torch_build_names_the_runtime_and_a_channel_other_than_release() -> None:
    channel = contract.TORCH_CHANNEL
    cuda = {"torch": {"version": "2.11.0+cu128", "cuda_runtime": "12.8"}}
    assert history.torch_build(cuda) == "2.11.0+cu128 (CUDA 12.8)"
    xpu = {"torch": {"version": "2.8.0+xpu", "xpu_runtime": "2025.1"}}
    assert history.torch_build(xpu) == "2.8.0+xpu (XPU 2025.1)"
    assert history.torch_build({**cuda, "env": {channel: "release"}}) == \
        "2.11.0+cu128 (CUDA 12.8)"
    nightly = {"torch": {"version": "2.16.0.dev20261201+cpu"}, "env": {channel: "nightly"}}
    assert history.torch_build(nightly) == "2.16.0.dev20261201+cpu (nightly)"
    assert history.torch_build({"torch": {"version": "2.13.0+cpu"},
                                "env": {channel: "release"}}) == "2.13.0+cpu"


def test_results_from_before_run_ids_get_a_stable_id_from_cell_and_start(
        tmp_path: Path) -> None:
    """docs/reference/history.md: legacy-<sha1(cell, start)>; the id must not change between
    versions, or adding the same folder again would store the run twice."""
    starts = ["2026-11-01T03:00:00+00:00", "2026-11-02T03:00:00+00:00"]
    folders = [write_cell(tmp_path / f"r{i}", CELL, {T + "a": "passed"}, start=s)
               for i, s in enumerate(starts)]
    with open_store(tmp_path / "h.sqlite") as store:
        first, _ = store.add(folders)
        again, _ = store.add(folders)
        runs = store.runs_of(CELL)
    want = ["legacy-" + hashlib.sha1(f"{CELL}|{s}".encode()).hexdigest()[:16] for s in starts]
    assert [a.run_id for a in first] == want and [r["run_id"] for r in runs] == want
    assert [a.status for a in first] == ["added", "added"]
    assert [a.status for a in again] == ["already", "already"]


def test_results_without_run_id_or_start_are_skipped(tmp_path: Path) -> None:
    folder = write_cell(tmp_path / "r", CELL, {T + "a": "passed"}, start=None)
    with open_store(tmp_path / "h.sqlite") as store:
        done, _ = store.add([folder])
        assert store.runs_of(CELL) == []
    assert done[0].status == "skipped"
    assert done[0].why == "no run id and no start time: cannot be told from other runs"


def test_counts_are_stored_the_same_whatever_the_records_order(tmp_path: Path) -> None:
    a = night(tmp_path / "a", 0, {T + "x": "failed", T + "y": "passed"})
    b = night(tmp_path / "b", 1, {T + "y": "passed", T + "x": "failed"})
    with open_store(tmp_path / "h.sqlite") as store:
        store.add([a, b])
        counts = [r["counts"] for r in store.runs_of(CELL)]
    assert counts == ['{"failed": 1, "passed": 1}'] * 2


def test_a_result_row_keeps_bad_messages_cut_and_durations_rounded(tmp_path: Path) -> None:
    long = "E" * 499 + "xy" + "z" * 99  # 600 characters: the first 500 are kept
    extra = {T + "bad": {"message": long, "duration": 1.23456789},
             T + "ok": {"duration": 0.5},
             T + "rerun0": {"reruns": 0}, T + "rerun1": {"reruns": 1}}
    folder = night(tmp_path / "r", 0, {T + "bad": "failed", T + "ok": "passed",
                                       T + "rerun0": "passed", T + "rerun1": "passed"},
                   extra=extra)
    with open_store(tmp_path / "h.sqlite") as store:
        store.add([folder])
        rows = {n.split("::")[1]: (o, d, m) for n, o, d, m in store.conn.execute(
            "SELECT t.nodeid, r.outcome, r.duration, r.message FROM results r "
            "JOIN tests t ON t.id = r.test")}
    assert rows["bad"] == ("F", 1.2346, long[:500]) and len(long[:500]) == 500
    assert rows["ok"] == ("P", 0.5, None)  # a pass keeps no message ("why passed")
    # A pass after reruns is flaky; a pass with reruns 0 is a pass.
    assert rows["rerun0"][0] == "P" and rows["rerun1"][0] == "K"


def test_durations_are_the_median_of_the_last_ten_runs(tmp_path: Path) -> None:
    # Oldest first: one slow run, then five at 1 s and five at 2 s. Over the last ten the
    # median is 1.5 s; over all eleven it would be 2 s.
    seconds = [100.0] + [1.0] * 5 + [2.0] * 5
    folders = [night(tmp_path, i, {T + "t": "passed"}, extra={T + "t": {"duration": d}})
               for i, d in enumerate(seconds)]
    with open_store(tmp_path / "h.sqlite") as store:
        store.add(folders)
        assert store.durations(CELL) == {T + "t": 1.5}
        assert store.durations(CELL, runs=11) == {T + "t": 2.0}


# --- reading -----------------------------------------------------------------------------

def test_the_window_ends_at_the_run_upto_names(tmp_path: Path) -> None:
    word = {"P": "passed", "F": "failed"}
    folders = [night(tmp_path, i, {T + "a": word[s]}) for i, s in enumerate("PPFPF")]
    with open_store(tmp_path / "h.sqlite") as store:
        store.add(folders)

        def ids(win: history.Window) -> list[str]:
            return [r["run_id"][-2:] for r in win.runs[CELL]]

        win = store.window([CELL], 2, upto={CELL: f"{CELL}-n2"})
        assert ids(win) == ["n1", "n2"] and win.strips[CELL] == {T + "a": "PF"}
        # A run the store does not have, or no end for this cell: its last runs.
        assert ids(store.window([CELL], 2, upto={CELL: "elsewhere"})) == ["n3", "n4"]
        assert ids(store.window([CELL], 2, upto={"cuda-2.11": f"{CELL}-n2"})) == ["n3", "n4"]
        # A cell without runs is left out, not an empty strip set.
        win = store.window(["xpu-2.5", CELL], 2)
        assert list(win.runs) == [CELL] and list(win.strips) == [CELL]


def test_the_window_uses_the_runs_the_caller_read(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.sqlite") as store:
        store.add(_nights(tmp_path, 4))
        runs = store.runs_of(CELL)
        win = store.window([CELL], 10, known_runs={CELL: runs[:2]})
        assert win.runs[CELL] == runs[:2] and win.strips[CELL] == {T + "a": "PP"}
        # Known runs of other cells only: this cell's are read from the store.
        assert store.window([CELL], 10, known_runs={"cuda-2.11": []}).runs[CELL] == runs


def test_last_passed_before_asks_for_ids_in_chunks_under_sqlites_old_limit(
        tmp_path: Path) -> None:
    """SQLite before 3.32 bound at most 999 parameters per statement
    (https://www.sqlite.org/limits.html, SQLITE_MAX_VARIABLE_NUMBER): 1,200 tests are
    looked up in chunks."""
    tests = {T + f"t{i:04d}": "passed" for i in range(1200)}
    with open_store(tmp_path / "h.sqlite") as store:
        store.add([night(tmp_path, 0, tests), night(tmp_path, 1, dict.fromkeys(tests,
                                                                             "failed"))])
        start = store.runs_of(CELL)[1]["start"]
        store.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        found = store.last_passed_before(CELL, list(tests), start)
    assert len(found) == 1200 and {r["run_id"] for r in found.values()} == {f"{CELL}-n0"}


def test_last_passed_before_reads_the_runs_stored_letters(tmp_path: Path) -> None:
    """Since schema 2 a run's letters in its row are what it recorded; its result rows are
    read only for a run without them."""
    with open_store(tmp_path / "h.sqlite") as store:
        store.add(_nights(tmp_path, 3))
        start = store.runs_of(CELL)[2]["start"]
        run = store.run(f"{CELL}-n1")
        assert run is not None
        n1 = run["id"]
        store.conn.execute("UPDATE results SET outcome = 'F' WHERE run = ?", (n1,))
        found = store.last_passed_before(CELL, [T + "a"], start)
    assert found[T + "a"]["run_id"] == f"{CELL}-n1"


def test_strip_flips_needs_one_input_per_run() -> None:
    with pytest.raises(ValueError):
        history.strip_flips("PFP", ["a", "a"])
    assert history.strip_flips("PFP", ["a", "a", "a"]) == (2, 2)



# --- WAL switched by two creators at once ---------------------------------------------------

class _Locked:
    """A real connection whose journal-mode switch answers "locked" ``times`` times, as
    SQLite does at once while another process creating the same history holds the file."""

    def __init__(self, conn: sqlite3.Connection, times: int, error: str = "database is locked"):
        self.conn, self.times, self.error, self.switches = conn, times, error, 0

    def execute(self, sql: str) -> sqlite3.Cursor:
        if sql == "PRAGMA journal_mode = WAL":
            self.switches += 1
            if self.switches <= self.times:
                raise sqlite3.OperationalError(self.error)
        return self.conn.execute(sql)


def test_a_locked_wal_switch_is_asked_again_until_it_holds(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "h.sqlite", isolation_level=None)
    locked = _Locked(conn, times=3)
    history.use_wal(cast(Any, locked), wait_s=5)
    assert locked.switches == 4
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_wal_switch_locked_past_the_wait_or_failing_otherwise_raises(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "h.sqlite", isolation_level=None)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        history.use_wal(cast(Any, _Locked(conn, times=10**6)), wait_s=0.2)
    assert 0.2 <= time.monotonic() - started < 1.5
    other = _Locked(conn, times=1, error="disk I/O error")   # not a lock: at once
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        history.use_wal(cast(Any, other), wait_s=5)
    assert other.switches == 1
