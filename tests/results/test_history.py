"""The history store (accelgrid.results.history), the grid with history (report/history.py), lost
cells (report/expect.py) and their commands: real SQLite files, real results folders as a
run writes them, the CLI in a subprocess where exit codes and the one-line errors matter."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.history_cases import T, night, series
from helpers.mini_projects import RERUN_PAYLOAD, run_request
from helpers.report_cases import write_cell

from accelgrid import report
from accelgrid.base.errors import AccelgridError, Regression
from accelgrid.cli import main
from accelgrid.report import compare
from accelgrid.results import history
from accelgrid.results.history import HistoryError, open_store


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelgrid", *args], capture_output=True,
                          text=True, timeout=120)


# --- the store ---------------------------------------------------------------------------

def test_add_is_idempotent_by_run_id_and_keeps_provenance(tmp_path: Path) -> None:
    folders = series(tmp_path, {"a": "PF", "b": "PP"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        first, _ = store.add(folders)
        again, _ = store.add(folders)
        runs = store.runs_of("cpu-2.13")
        n = store.conn.execute("SELECT count(*) FROM results").fetchone()[0]
    assert [a.status for a in first] == ["added", "added"]
    assert [a.status for a in again] == ["already", "already"]
    assert n == 4 and [r["run_id"] for r in runs] == ["cpu-2.13-n0", "cpu-2.13-n1"]
    assert runs[1]["commit_sha"] == "c1" and runs[1]["torch_build"] == "2.13.0+cpu"
    assert runs[1]["device_name"] == "Box" and runs[1]["runner"] == "h"
    assert json.loads(runs[1]["counts"]) == {"failed": 1, "passed": 1}
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == \
        history.SCHEMA_VERSION


def test_a_run_added_before_it_ended_is_replaced(tmp_path: Path) -> None:
    cell = write_cell(tmp_path / "r", "cpu-2.13", {T + "a": "passed"}, run_id="x",
                      start="2026-11-01T00:00:00+00:00", finished=False)
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        assert store.add([cell])[0][0].status == "added"
    env = json.loads((cell / "env.json").read_text())
    (cell / "env.json").write_text(json.dumps({**env, "end": "2026-11-01T01:00:00+00:00"}))
    (cell / "tests.jsonl").write_text(json.dumps({"nodeid": T + "a", "outcome": "passed"})
                                      + "\n" + json.dumps({"nodeid": T + "b", "outcome": "failed"})
                                      + "\n")
    with open_store(db) as store:
        assert store.add([cell])[0][0].status == "replaced"
        assert store.runs_of("cpu-2.13")[0]["total"] == 2


def test_errored_cells_are_skipped_with_the_reason(tmp_path: Path) -> None:
    empty = write_cell(tmp_path / "r", "xpu-2.5", {}, run_id="e")
    with open_store(tmp_path / "h.sqlite") as store:
        done, _ = store.add([empty])
    assert done[0].status == "skipped" and "no tests.jsonl" in done[0].why


def test_two_processes_adding_at_once_both_land(tmp_path: Path) -> None:
    tests = {T + f"t{i}": "passed" for i in range(3000)}
    a = night(tmp_path / "a", 0, tests)
    b = night(tmp_path / "b", 1, tests)
    db = tmp_path / "h.sqlite"
    procs = [subprocess.Popen([sys.executable, "-m", "accelgrid", "history", "add", str(f),
                               "--db", str(db)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for f in (a, b)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with open_store(db) as store:
        assert len(store.runs_of("cpu-2.13")) == 2
        assert store.conn.execute("SELECT count(*) FROM results").fetchone()[0] == 6000
        assert store.conn.execute("SELECT count(*) FROM tests").fetchone()[0] == 3000


def _results_snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_corrupt_locked_and_newer_databases_fail_in_one_line(tmp_path: Path) -> None:
    cell = night(tmp_path / "r", 0, {T + "a": "passed"})
    before = _results_snapshot(tmp_path / "r")
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 200)
    newer = tmp_path / "newer.sqlite"
    with open_store(newer):
        pass
    sqlite3.connect(newer).execute(f"PRAGMA user_version = {history.SCHEMA_VERSION + 1}")
    for db, words in ((corrupt, "not a database"), (newer, "is newer than")):
        r = run_cli("history", "add", str(cell), "--db", str(db))
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.count("\n") == 1 and words in r.stderr and str(db) in r.stderr
    locked = tmp_path / "locked.sqlite"
    with open_store(locked):
        pass
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    old = history.BUSY_TIMEOUT_S
    history.BUSY_TIMEOUT_S = 0.2
    try:
        with pytest.raises(HistoryError, match="locked"):
            with open_store(locked) as store:
                store.add([cell])
    finally:
        history.BUSY_TIMEOUT_S = old
        holder.execute("ROLLBACK")
        holder.close()
    assert _results_snapshot(tmp_path / "r") == before  # the run's own files untouched
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE x (y)")
    with pytest.raises(HistoryError, match="not an accelgrid history"):
        open_store(other)


def test_an_older_schema_is_migrated_forward(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add([night(tmp_path, 0, {T + "a": "passed"})])
    nxt = history.SCHEMA_VERSION + 1
    step = {nxt: "ALTER TABLE runs ADD COLUMN note TEXT"}
    monkeypatch.setattr(history, "MIGRATIONS", {**history.MIGRATIONS, **step})
    monkeypatch.setattr(history, "SCHEMA_VERSION", nxt)
    with open_store(db) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == nxt
        assert "note" in [r[1] for r in store.conn.execute("PRAGMA table_info(runs)")]
        assert len(store.runs_of("cpu-2.13")) == 1


def test_schema_1_history_gets_each_runs_letters_and_reads_the_same(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """Schema 2 keeps each run's outcome letters and test ids in its row (a window reads
    no result): a schema-1 database is filled in on opening, and reads as it did."""
    folders = series(tmp_path, {"steady": "PPPP", "breaks": "PPFF", "new": "..PP",
                                "gone": "PPP.", "gap": "P.PF"})
    fresh = tmp_path / "v2.sqlite"
    with open_store(fresh) as store:
        store.add(folders)
    # The same runs in a schema-1 database (its tables as step 1 made them).
    old = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(old, isolation_level=None)
    for statement in history.MIGRATIONS[1].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("ATTACH ? AS v2", (str(fresh),))
    v1_columns = tuple(c for c in history.RUN_COLUMNS if c != "ci_url")   # ci_url: step 3
    cols = ", ".join(v1_columns)
    conn.execute(f"INSERT INTO runs ({cols}) SELECT {cols} FROM v2.runs")
    conn.execute("INSERT INTO tests SELECT * FROM v2.tests")
    conn.execute("INSERT INTO results SELECT * FROM v2.results")
    conn.execute("DETACH v2")
    conn.close()
    with monkeypatch.context() as m:
        m.setattr(history, "SCHEMA_VERSION", 1)
        m.setattr(history, "RUN_COLUMNS", v1_columns)
        with open_store(old) as store:  # read as schema 1 reads: from the results
            assert "letters" not in [r[1] for r in store.conn.execute("PRAGMA table_info(runs)")]
            before = store.window(["cpu-2.13"], 10).strips
    assert set(before["cpu-2.13"].values()) >= {"PPPP", "PPFF", "..PP", "PPP.", "P.PF"}
    with open_store(old) as store:  # migrated to the newest on opening
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert store.conn.execute("SELECT count(*) FROM runs WHERE letters IS NULL "
                                  "OR testset IS NULL").fetchone()[0] == 0
        assert store.window(["cpu-2.13"], 10).strips == before
        # The window comes from the rows: results altered behind its back do not show.
        store.conn.execute("UPDATE results SET outcome = 'E'")
        assert store.window(["cpu-2.13"], 10).strips == before
    with open_store(fresh) as store:
        assert store.window(["cpu-2.13"], 10).strips == before
        # A run without its letters (written by hand, say) is read from its results.
        store.conn.execute("UPDATE runs SET letters = NULL WHERE id = 1")
        assert store.window(["cpu-2.13"], 10).strips == before


# --- the grid with history ---------------------------------------------------------------

def test_strips_since_previous_first_failure_and_last_pass(tmp_path: Path) -> None:
    folders = series(tmp_path, {"steady": "PPPPP", "breaks": "PPPFF", "fixed": "FFFFP",
                                "new": "....P", "gone": "PPPP.", "absent_gap": "PP.PF",
                                # a failing test that now skips is not fixed: it stopped
                                "skips_now": "PPPPS", "failed_skips_now": "FFFFS",
                                "skip_fails_now": "SSSSF"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders[:-1])
    made = report.grid([folders[-1]], tmp_path / "out", history_db=db)
    rows = {r["nodeid"].split("::")[1]: r["cells"]["cpu-2.13"] for r in made.model["rows"]}
    assert rows["steady"]["history"] == "PPPPP" and "failing_since" not in rows["steady"]
    assert rows["new"]["history"] == "....P" and rows["absent_gap"]["history"] == "PP.PF"
    assert rows["breaks"]["failing_since"]["run_id"] == "cpu-2.13-n3"
    assert rows["breaks"]["failing_since"]["commit_sha"] == "c3"
    last_passed = rows["breaks"]["last_passed"]
    assert last_passed is not None
    assert last_passed["run_id"] == "cpu-2.13-n2"
    assert rows["absent_gap"]["failing_since"]["run_id"] == "cpu-2.13-n4"
    since = made.model["columns"][0]["history"]["since"]
    assert since == {"new_failures": [T + "absent_gap", T + "skip_fails_now"],
                     "fixed": [T + "fixed"],
                     "stopped": [T + "failed_skips_now", T + "skips_now"],
                     "appeared": [T + "new"], "vanished": [T + "gone"]}
    md = made.paths["md"].read_text()
    assert "### History (last 30 runs per cell)" in md and "Failing tests: since when" in md
    assert any("2 new failures, 1 fixed, 2 stopped, 1 appeared, 1 vanished" in line
               for line in made.lines())


def test_failing_throughout_the_window_looks_further_back(tmp_path: Path) -> None:
    folders = series(tmp_path, {"old": "PPFFFF", "never": "FFFFFF"})
    db = tmp_path / "h.sqlite"
    made = report.grid(folders, tmp_path / "out", history_db=db, window=3)
    # The grid reads the six folders as six columns; the last is the latest run.
    latest = [c for c in made.model["columns"] if c["history"]["in_history"]]
    assert len(latest) == 1
    name = latest[0]["name"]
    rows = {r["nodeid"].split("::")[1]: r["cells"][name] for r in made.model["rows"]}
    assert rows["old"]["history"] == "FFF"
    last_passed = rows["old"]["last_passed"]
    assert last_passed is not None
    assert last_passed["run_id"] == "cpu-2.13-n1"
    assert rows["old"]["failing_since"]["run_id"] == "cpu-2.13-n2"
    assert rows["never"]["last_passed"] is None
    assert rows["never"]["failing_since"]["earliest"] is True


def test_last_passed_before_reads_each_runs_letters_and_a_run_without_them(
        tmp_path: Path) -> None:
    """The last pass before the window comes from the runs' stored letters, newest first,
    over runs whose tests differ (absent in some); a run without its letters is read from
    its results."""
    folders = series(tmp_path, {"old": "PPFFFF", "never": "FFFFFF", "gap": "P.FFFF",
                                "late": ".P.FFF", "x": "PPPPPP"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders)
        ids = [T + t for t in ("old", "never", "gap", "late", "missing")]
        start = store.runs_of("cpu-2.13")[3]["start"]  # the window: n3 to n5

        def last() -> dict[str, str]:
            return {n.split("::")[1]: r["run_id"]
                    for n, r in store.last_passed_before("cpu-2.13", ids, start).items()}

        assert last() == {"old": "cpu-2.13-n1", "gap": "cpu-2.13-n0", "late": "cpu-2.13-n1"}
        assert store.last_passed_before("cpu-2.13", ids, None)[T + "old"]["run_id"] \
            == "cpu-2.13-n1"
        run = store.run("cpu-2.13-n1")
        assert run is not None
        n1 = run["id"]
        store.conn.execute("UPDATE runs SET letters = NULL WHERE id = ?", (n1,))
        assert last() == {"old": "cpu-2.13-n1", "gap": "cpu-2.13-n0", "late": "cpu-2.13-n1"}
        # Read from n1's results now: a failure there moves "old"'s last pass back to n0.
        store.conn.execute("UPDATE results SET outcome = 'F' WHERE run = ? AND test = "
                           "(SELECT id FROM tests WHERE nodeid = ?)", (n1, T + "old"))
        assert last() == {"old": "cpu-2.13-n0", "gap": "cpu-2.13-n0", "late": "cpu-2.13-n1"}


def test_flaky_needs_flips_with_inputs_unchanged(tmp_path: Path) -> None:
    folders = series(tmp_path, {"flaky": "PFPFP", "one_change": "PPPFF", "ok": "PPPPP"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders[:-1])
    made = report.grid([folders[-1]], tmp_path / "out", history_db=db)
    flaky = made.model["history"]["flaky"]
    assert [f["nodeid"] for f in flaky] == [T + "flaky"]
    assert flaky[0]["flips"] == 4 and flaky[0]["pairs"] == 4 and flaky[0]["rate"] == 1.0
    html = made.paths["html"].read_text()
    assert html.count('<span class="flaky"') == 1


def test_a_new_torch_build_each_run_is_not_flaky(tmp_path: Path) -> None:
    word = {"P": "passed", "F": "failed"}
    folders = [night(tmp_path, i, {T + "t": word[s]}, torch=f"2.13.0.dev{i}")
               for i, s in enumerate("PFPFP")]
    with open_store(tmp_path / "h.sqlite") as store:
        store.add(folders)
    made = report.grid(folders[-1:], tmp_path / "out", history_db=tmp_path / "h.sqlite")
    assert made.model["rows"][0]["cells"]["cpu-2.13"]["history"] == "PFPFP"
    assert made.model["history"]["flaky"] == []


def test_pass_after_a_rerun_is_flaky_never_passed(tmp_path: Path) -> None:
    cell = night(tmp_path, 0, {T + "t": "passed", T + "u": "passed"},
                 extra={T + "t": {"reruns": 1}})
    made = report.grid([cell], tmp_path / "out", history_db=tmp_path / "h.sqlite")
    entry = made.model["rows"][0]["cells"]["cpu-2.13"]
    assert entry["history"] == "K" and entry["flaky"]["reruns"] is True
    with open_store(tmp_path / "h.sqlite") as store:
        codes = dict(store.conn.execute(
            "SELECT t.nodeid, r.outcome FROM results r JOIN tests t ON t.id = r.test"))
    assert codes == {T + "t": "K", T + "u": "P"}


def test_gate_policy_flaky_regressions_are_reported_not_gating(tmp_path: Path) -> None:
    folders = series(tmp_path, {"flaky": "PFPFPF", "broke": "PPPPPF", "ok": "PPPPPP"})
    base = tmp_path / "baselines"
    compare.update([folders[0]], base)
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders[:-1])
    made = report.grid([folders[-1]], tmp_path / "out", baseline_dir=base, history_db=db)
    assert [c["nodeid"] for c in made.regressions] == [T + "broke"]
    assert [c["nodeid"] for c in made.flaky_regressions] == [T + "flaky"]
    assert f"FLAKY (not gating) cpu-2.13: {T}flaky: passed -> failed" in made.lines()
    with pytest.raises(Regression, match="1 regression"):
        made.check()
    # Without history the same flaky test is a plain regression: the policy needs evidence.
    plain = report.grid([folders[-1]], tmp_path / "plain", baseline_dir=base)
    assert len(plain.regressions) == 2


# --- lost cells --------------------------------------------------------------------------

def test_expected_xpu_cells_absent_exit_3_and_the_column_says_lost(tmp_path: Path) -> None:
    cpu = night(tmp_path / "r", 0, {T + "a": "passed"})
    out = tmp_path / "grid"
    r = run_cli("grid", str(cpu), "--out", str(out), "--expect", "cpu-2.13,xpu-2.5",
                "--expect", "xpu-2.6")
    assert r.returncode == 3, r.stderr
    assert "2 expected cell(s) lost: xpu-2.5, xpu-2.6" in r.stderr
    assert "LOST xpu-2.5: no results uploaded" in r.stdout
    grid = json.loads((out / "grid.json").read_text())
    lost = {c["name"]: c for c in grid["columns"] if c["status"] == "lost"}
    assert set(lost) == {"xpu-2.5", "xpu-2.6"} and lost["xpu-2.5"]["device"] == "xpu"
    assert "no results uploaded" in lost["xpu-2.5"]["reason"]
    html = (out / "grid.html").read_text()
    assert html.count("st-lost") >= 2 and "lost: no results uploaded" in html
    assert "### ❌ Lost cells (2)" in (out / "grid.md").read_text()
    # All expected cells there: the same results pass.
    assert run_cli("grid", str(cpu), "--out", str(out), "--expect", "cpu-2.13").returncode == 0


def test_an_expected_cell_that_recorded_nothing_is_lost(tmp_path: Path) -> None:
    cpu = night(tmp_path / "r", 0, {T + "a": "passed"})
    died = write_cell(tmp_path / "r", "xpu-2.5", {}, run_id="d")
    made = report.grid([cpu, died], tmp_path / "out", expect=["cpu-2.13", "xpu-2.5"])
    assert [x["cell"] for x in made.lost] == ["xpu-2.5"]
    assert "ran but recorded no test" in made.lost[0]["why"]
    with pytest.raises(Regression):
        made.check()


def test_lost_says_when_the_cell_last_reported(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    old_xpu = night(tmp_path / "old", 0, {T + "a": "passed"}, cell="xpu-2.5")
    with open_store(db) as store:
        store.add([old_xpu])
    cpu = night(tmp_path / "r", 1, {T + "a": "passed"})
    made = report.grid([cpu], tmp_path / "out", history_db=db, expect=["cpu-2.13", "xpu-2.5"])
    assert "last results in the history: 2026-11-01T03:00:00+00:00 (run xpu-2.5-n0" \
        in made.lost[0]["why"]


def test_expect_from_a_file_the_matrix_and_baselines(tmp_path: Path) -> None:
    from accelgrid.report import expect

    listed = tmp_path / "plan.json"
    listed.write_text(json.dumps([{"cell": "xpu-2.5", "timeout": 60}, {"cell": "cpu-2.13"}]))
    assert expect.parse([f"@{listed}"]) == ["xpu-2.5", "cpu-2.13"]
    lines = tmp_path / "cells.txt"
    lines.write_text("xpu-2.6\ncuda-2.11\n")
    assert expect.parse([f"@{lines},xpu-2.6"]) == ["xpu-2.6", "cuda-2.11"]
    assert expect.parse(["matrix"], matrix_cells=["a-1", "b-2"]) == ["a-1", "b-2"]
    with pytest.raises(AccelgridError, match="not a cell name"):
        expect.parse(["../x"])
    with pytest.raises(AccelgridError, match="no such file"):
        expect.parse([f"@{tmp_path / 'nope.json'}"])


def test_history_cli_add_and_show(tmp_path: Path, capsys) -> None:
    folders = series(tmp_path, {"a": "PF"})
    db = tmp_path / "h.sqlite"
    assert main(["history", "add", *map(str, folders), "--db", str(db)]) == 0
    assert main(["history", "add", str(folders[0]), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "run cpu-2.13-n0: added (1 tests)" in out and "run cpu-2.13-n0: already" in out
    assert main(["history", "show", "cpu-2.13", "--db", str(db)]) == 0
    assert "cpu-2.13: 2 runs" in capsys.readouterr().out
    assert main(["history", "show", "--db", str(tmp_path / "none.sqlite")]) == 1
    assert not (tmp_path / "none.sqlite").exists()


def test_strip_flips_counts_only_same_input_neighbours() -> None:
    assert history.strip_flips("PFPF", ["a", "a", "a", "a"]) == (3, 3)
    assert history.strip_flips("PFPF", ["a", "b", "c", "d"]) == (0, 0)
    assert history.strip_flips("PSFP", ["a"] * 4) == (2, 2)  # a skip is not compared
    assert history.strip_flips("P.FP", ["a"] * 4) == (2, 2)


def test_the_workflow_grid_job_expects_the_plans_cells(tmp_path: Path) -> None:
    import os

    import yaml

    root = Path(__file__).resolve().parents[2]
    workflow = yaml.safe_load((root / ".github/workflows/accelgrid.yml").read_text())
    grid = workflow["jobs"]["grid"]
    # The history for scheduled runs only (tests/commands/test_relay.py evaluates it per event).
    assert grid["env"] == {"ACCELGRID_EXPECT": "@expected.json",
                           "ACCELGRID_HISTORY": "${{ github.event_name == 'schedule' && "
                                                "'history/history.sqlite' || '' }}"}
    step = next(s for s in grid["steps"] if s.get("name", "").startswith("The cells the plan"))
    plan = {"any": "true", "cells-cpu": json.dumps([{"cell": "cpu-2.13", "timeout": 60}]),
            "cells-xpu": json.dumps([{"cell": "xpu-2.5", "timeout": 90},
                                     {"cell": "xpu-2.6", "timeout": 90}]), "cells-mps": "[]"}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "PLAN": json.dumps(plan)})
    assert proc.returncode == 0, proc.stderr
    # The grid reads it through ACCELGRID_EXPECT: the xpu cells without results are lost.
    cpu = night(tmp_path / "r", 0, {T + "a": "passed"})
    r = subprocess.run([sys.executable, "-m", "accelgrid", "grid", str(cpu), "--out", "g"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ACCELGRID_EXPECT": "@expected.json"})
    assert r.returncode == 3 and "lost: xpu-2.5, xpu-2.6" in r.stderr
    names = [s.get("name", s.get("uses", "")) for s in grid["steps"]]
    assert names.index("Publish the site (history, per cell, per test)") > names.index(
        "Grid (job summary); fail on regressions against baselines/")
    assert "Upload the history" in names and "Upload the site" in names


def test_since_skips_a_selected_run_in_between(tmp_path: Path) -> None:
    whole = night(tmp_path, 0, {T + "a": "passed", T + "b": "passed"})
    picked = night(tmp_path, 1, {T + "a": "failed"}, selection=["-k", "a"])
    again = night(tmp_path, 2, {T + "a": "passed", T + "b": "failed"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add([whole, picked])
    made = report.grid([again], tmp_path / "out", history_db=db)
    col = made.model["columns"][0]["history"]
    assert col["previous"]["run_id"] == "cpu-2.13-n0"
    assert col["since"] == {"new_failures": [T + "b"], "fixed": [], "stopped": [],
                            "appeared": [], "vanished": []}
    assert made.model["rows"][1]["cells"]["cpu-2.13"]["history"] == "P.F"


def test_bench_history_small(tmp_path: Path) -> None:
    from tools.selfbench import history as history_bench

    rep = history_bench.run(nights=3, cells=2, tests=30, window=2, repeat=1, out=tmp_path)
    assert rep["db_runs"] == 6 and rep["db_bytes_per_cell_run"] > 0
    assert set(rep["median"]) == {"add", "grid", "site", "grid_plain"}
    md = (tmp_path / "bench-history.md").read_text()
    assert "history add of one 2-cell night" in md and "load average before" in md
    assert json.loads((tmp_path / "bench-history.json").read_text())["nights"] == 3
    with pytest.raises(AccelgridError, match="--nights"):
        history_bench.run(nights=1, out=None)


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_reruns_in_a_real_cell_run_are_flaky_in_history(mini_project, monkeypatch,
                                                        tmp_path: Path) -> None:
    from accelgrid.config.matrix import load_matrix
    from accelgrid.run.cell import run_cell

    pytest.importorskip("pytest_rerunfailures")
    proj = mini_project()
    (proj / "suites" / "payload" / "test_payload.py").write_text(RERUN_PAYLOAD)
    monkeypatch.setenv("PYTEST_PLUGINS", "pytest_rerunfailures")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    rc = run_cell(run_request(cell, sys.executable, proj, proj / "results",
                              pytest_args=["--reruns", "2"]))
    assert rc == 1
    made = report.grid([proj / "results"], tmp_path / "out", history_db=tmp_path / "h.sqlite")
    got = {r["test"]: r["cells"]["cpu-2.13"] for r in made.model["rows"]}
    assert got["test_flaky"]["outcome"] == "flaky" and got["test_flaky"]["history"] == "K"
    assert got["test_flaky"]["flaky"]["reruns"] is True
    assert got["test_always_fails"]["outcome"] == "failed"
    assert got["test_always_fails"]["history"] == "F"
    assert got["test_passes"]["history"] == "P"
    assert [f["nodeid"].split("::")[1] for f in made.model["history"]["flaky"]] == ["test_flaky"]


def _planned(folder: Path, packages: dict[str, str | None]) -> Path:
    """``folder``'s plan.json naming ``packages`` as installed (results.plan's inputs)."""
    from accelgrid.base import contract, jsonio

    jsonio.write_json(folder / contract.PLAN_FILE, {
        "run_id": None, "cell": "cpu-2.13", "shard": None, "passes": [{"name": "single"}],
        "inputs": {"torch": "2.13.0+cpu", "torch_local": "cpu", "packages": packages,
                   "commit": None, "dirty": False, "matrix_digest": "m", "flags": {}}})
    return folder


@pytest.mark.parametrize("where", ["plan", "env"])
def test_a_package_bump_between_nights_is_not_the_same_inputs(tmp_path: Path,
                                                               where: str) -> None:
    """PFPFP with a pinned package bumped every night is no flaky test (each flip comes
    with other inputs); the same strip on one version is."""
    word = {"P": "passed", "F": "failed"}

    def nights(root: Path, versions: list[str]) -> list[Path]:
        out = []
        for i, (s, v) in enumerate(zip("PFPFP", versions, strict=True)):
            extra: dict[str, Any] = {"packages": {"bitsandbytes": v}} if where == "env" else {}
            folder = night(root, i, {T + "t": word[s]}, **extra)
            out.append(_planned(folder, {"bitsandbytes": v} if where == "plan" else {}))
        return out

    for root, versions, flaky in (("bumped", [f"0.4{i}.0" for i in range(5)], []),
                                  ("same", ["0.45.0"] * 5, [T + "t"])):
        folders = nights(tmp_path / root, versions)
        db = tmp_path / f"{root}.sqlite"
        with open_store(db) as store:
            store.add(folders[:-1])
        made = report.grid(folders[-1:], tmp_path / f"out-{root}", history_db=db)
        assert [f["nodeid"] for f in made.model["history"]["flaky"]] == flaky, root
