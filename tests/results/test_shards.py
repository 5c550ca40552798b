"""Shards (accelgrid.results.shards): the split, and a cell run as shards merging back into the
column of one run."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from helpers.mini_projects import run_request
from helpers.shard_cases import discover_cells, read, shard_folder

from accelgrid import results
from accelgrid.base import contract
from accelgrid.config.matrix import load_matrix
from accelgrid.report import model
from accelgrid.results import shards
from accelgrid.results.records import Column, Grid
from accelgrid.run.cell import run_cell


def test_shard_specs() -> None:
    assert shards.parse("2/4") == (2, 4) and shards.parse(" 1 / 1 ") == (1, 1)
    for bad in ("0/2", "3/2", "1/0", "1/65", "a/b", "1", "", "1/2/3"):
        with pytest.raises(shards.ShardError, match="K/N"):
            shards.parse(bad)
    assert shards.folder_name(1, 2) == "shard-1-of-2"


def test_the_split_balances_recorded_durations_and_keeps_multi_device_tests_together(
        ) -> None:
    ids = [f"t{i}" for i in range(10)]
    # No durations: equal counts.
    where = shards.assign(ids, 3)
    assert sorted(list(where.values()).count(s) for s in (1, 2, 3)) == [3, 3, 4]
    # One slow test gets a shard of its own; the rest share the other.
    slow = {"t0": 100.0, **{i: 1.0 for i in ids[1:]}}
    where = shards.assign(ids, 2, slow)
    assert [i for i in ids if where[i] == where["t0"]] == ["t0"]
    # Balanced by time: no shard over the longest test plus the ideal share.
    times = {i: float(n % 4 + 1) for n, i in enumerate(ids)}
    where = shards.assign(ids, 3, times)
    loads = [sum(t for i, t in times.items() if where[i] == s) for s in (1, 2, 3)]
    assert max(loads) - min(loads) <= max(times.values())
    # Multi-device tests in one shard, whatever the durations.
    where = shards.assign(ids, 4, times, together=["t1", "t5", "t9"])
    assert len({where["t1"], where["t5"], where["t9"]}) == 1
    # The same inputs give the same split in any order (every runner computes it).
    assert shards.assign(list(reversed(ids)), 3, times) == shards.assign(ids, 3, times)
    assert set(shards.assign(ids, 3, times)) == set(ids)


def test_durations_from_a_results_folder_or_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "cpu-2.13"
    folder.mkdir()
    results.append_record(folder / contract.TESTS_FILE, {"nodeid": "a", "outcome": "passed",
                                                   "duration": 2.5})
    results.append_record(folder / contract.TESTS_FILE, {"nodeid": "b", "outcome": "passed",
                                                   "duration": None})
    assert shards.durations(folder) == {"a": 2.5}
    assert shards.durations(tmp_path) == {"a": 2.5}          # a folder of cells
    f = tmp_path / "d.json"
    shards.write_durations(f, {"x": 1.0})
    assert shards.durations(f) == {"x": 1.0}
    f.write_text('{"x": "slow"}')
    with pytest.raises(shards.ShardError, match="test ids to seconds"):
        shards.durations(f)
    assert shards.durations(None) == {}


PAYLOAD = textwrap.dedent('''
    import pytest
    @pytest.mark.parametrize("n", range(7))
    def test_many(n):
        assert n != 5
    def test_skip():
        pytest.skip("not here")
    @pytest.mark.sees_accelerators
    def test_sees():
        pass
    @pytest.mark.multi_device
    def test_md_1():
        pass
    @pytest.mark.multi_device
    def test_md_2():
        pass
''')


def _outcomes(column: Column, grid: Grid) -> dict[str, str]:
    return {row["nodeid"]: row["cells"][column["name"]]["outcome"] for row in grid["rows"]
            if column["name"] in row["cells"]}


def test_a_cell_run_as_two_shards_merges_into_the_column_of_one_run(
        mini_project, python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real cell runs (pytest on this interpreter): whole, then shard 1/2 and 2/2."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_s.py").write_text(PAYLOAD)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    whole = proj / "whole"
    run_cell(run_request(cell, python, proj, whole))
    parts = proj / "sharded"
    for k in (1, 2):
        monkeypatch.setenv(contract.SHARD, f"{k}/2")
        monkeypatch.setenv(contract.SHARD_DURATIONS, str(whole / cell.name))
        run_cell(run_request(cell, python, proj, parts / shards.folder_name(k, 2)))
    monkeypatch.delenv(contract.SHARD)
    one = model.from_folders([whole / cell.name])
    merged = model.from_folders([parts])
    (col1,), (col2,) = one["columns"], merged["columns"]
    assert col2["cell"] == "cpu-2.13" and col2["status"] == col1["status"] == "ok"
    assert col2["counts"] == col1["counts"] and col1["total"] == 11
    assert _outcomes(col2, merged) == _outcomes(col1, one)
    # Each shard ran only its own tests, the multi-device ones together.
    ran: list[str] = []
    for k in (1, 2):
        folder = parts / shards.folder_name(k, 2) / cell.name
        ids = {r["nodeid"] for r in results.read_records(folder / contract.TESTS_FILE)[0]}
        assert ids and not (set(ran) & ids)
        ran += ids
        md = {i for i in ids if "test_md_" in i}
        assert md in (set(), {f"suites/payload/test_s.py::test_md_{n}" for n in (1, 2)})
    assert len(ran) == 11
    # A baseline from the shards is the baseline of one run; one shard alone is refused.
    from accelgrid.report import compare

    (whole_base,), _ = compare.update([whole], proj / "b1")
    (shard_base,), _ = compare.update([parts], proj / "b2")
    assert shard_base.tests == whole_base.tests and not shard_base.refused
    (alone,), _ = compare.update([parts / shards.folder_name(1, 2)], proj / "b3")
    assert alone.refused and "missing shard 2/2" in alone.refused
    # A missing shard: the column is partial and names it.
    import shutil

    shutil.rmtree(parts / shards.folder_name(2, 2))
    (col,) = model.from_folders([parts])["columns"]
    assert col["reason"] is not None
    assert col["status"] == "partial" and "missing shard 2/2" in col["reason"]
    assert col["total"] < 11


def test_a_shard_spec_that_cannot_be_used_is_one_line(mini_project, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from accelgrid import cli
    from accelgrid.base.errors import InvalidInput
    from accelgrid.commands import sessions

    proj = mini_project()
    code = cli.main(["--matrix", str(proj / "matrix.yaml"), "run", "cpu-2.13", "--shard",
                     "3/2"])
    assert code == 2
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    # The session checks ACCELGRID_SHARD before it installs anything.
    monkeypatch.setenv(contract.SHARD, "x")
    with pytest.raises(InvalidInput, match="ACCELGRID_SHARD: shard 'x': expected K/N"):
        sessions._shard_results(tmp_path, cell)
    # A good one: its own folder, balanced by the cell's last full run here.
    monkeypatch.setenv(contract.SHARD, "2/3")
    monkeypatch.delenv(contract.SHARD_DURATIONS, raising=False)
    (tmp_path / cell.name).mkdir()
    assert sessions._shard_results(tmp_path, cell) == tmp_path / "shard-2-of-3"
    import os

    assert os.environ[contract.SHARD_DURATIONS] == str(tmp_path / cell.name)
    monkeypatch.delenv(contract.SHARD)
    assert sessions._shard_results(tmp_path, cell) == tmp_path


# --- balanced by the history ------------------------------------------------------------

def _history_of(tmp_path: Path, durations: list[dict[str, float]]) -> Path:
    """A history database (the real store) of one run of cpu-2.13 per entry of
    ``durations`` ({test: seconds}), oldest first."""
    from helpers.report_cases import write_cell

    from accelgrid.results.history import open_store

    db = tmp_path / "results" / "history.sqlite"
    folders = [write_cell(tmp_path / f"run{i}", "cpu-2.13", dict.fromkeys(d, "passed"),
                          run_id=f"r{i}", start=f"2026-11-0{i + 1}T03:00:00+00:00",
                          extra={t: {"duration": s} for t, s in d.items()})
               for i, d in enumerate(durations)]
    with open_store(db) as store:
        assert [a.status for a in store.add(folders)[0]] == ["added"] * len(folders)
    return db


def test_a_history_balanced_split_is_better_balanced_than_equal_counts(tmp_path: Path) -> None:
    from accelgrid.results.history import open_store

    true = {"t0": 40.0, "t1": 5.0, "t2": 4.0, "t3": 3.0, "t4": 3.0, "t5": 2.0, "t6": 1.0,
            "t7": 1.0}
    # Three runs; t0's 400 s once (a slow night) moves the median of its runs not at all.
    db = _history_of(tmp_path, [true, {**true, "t0": 400.0}, true])
    with open_store(db, create=False) as store:
        recorded = store.durations("cpu-2.13")
        assert store.durations("cpu-2.4") == {}
    assert recorded == true
    ids = sorted(true)
    equal = shards.assign(ids, 2)
    balanced = shards.assign(ids, 2, recorded)

    def loads(where: dict[str, int]) -> list[float]:
        return [sum(true[i] for i in ids if where[i] == s) for s in (1, 2)]

    assert balanced != equal
    assert sorted(list(equal.values()).count(s) for s in (1, 2)) == [4, 4]
    assert max(loads(balanced)) < max(loads(equal))
    assert sorted(loads(balanced)) == [19.0, 40.0]   # t0 alone: the best a split can do


def test_a_shard_run_takes_its_durations_from_the_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelgrid.commands import sessions

    db = _history_of(tmp_path, [{"t0": 3.0, "t1": 1.0}])
    out = db.parent
    cell = load_matrix(Path(__file__).parents[1] / "base_matrix.yaml").cell("cpu-2.13")
    monkeypatch.setenv(contract.SHARD, "2/2")
    monkeypatch.delenv(contract.SHARD_DURATIONS, raising=False)
    monkeypatch.delenv("ACCELGRID_HISTORY", raising=False)
    (out / cell.name).mkdir()   # a last full run here too: the history comes first
    folder = sessions._shard_results(out, cell)
    assert folder == out / "shard-2-of-2"
    written = Path(os.environ[contract.SHARD_DURATIONS])
    assert written.parent == folder and shards.durations(written) == {"t0": 3.0, "t1": 1.0}
    # Named outright (as CI does with the restored history artifact): the same.
    monkeypatch.setenv(contract.SHARD_DURATIONS, str(db))
    sessions._shard_results(out, cell)
    assert shards.durations(os.environ[contract.SHARD_DURATIONS]) == {"t0": 3.0, "t1": 1.0}
    # Without a history: the last full run's folder, as before.
    db.unlink()
    monkeypatch.delenv(contract.SHARD_DURATIONS)
    sessions._shard_results(out, cell)
    assert os.environ[contract.SHARD_DURATIONS] == str(out / cell.name)


# --- what does not merge into one run's column (issue 36) -----------------------------


def _grid(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from accelgrid import cli

    capsys.readouterr()
    rc = cli.main(["grid", str(tmp_path / "parts"), "--out", str(tmp_path / "out"), *args])
    return rc, capsys.readouterr().err


def test_shards_of_equal_inputs_merge_into_an_ok_column(tmp_path, capsys) -> None:
    shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "passed"})
    shard_folder(tmp_path / "parts", 2, 2, {"t.py::b": "passed"})
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "parts")])
    assert cell.problems == [] and set(cell.tests) == {"t.py::a", "t.py::b"}
    assert cell.env["shards"]["status"] == {"1": "ok", "2": "ok"}
    assert _grid(tmp_path, capsys)[0] == 0


@pytest.mark.parametrize(("field", "value", "named"), [
    ("commit", "c2", "commit: 1/2 c1, 2/2 c2"),
    ("torch", "2.13.0+cu130", "torch: 1/2 2.13.0+cpu, 2/2 2.13.0+cu130"),
    ("packages", {"numpy": "2.3.1"}, "package numpy: 1/2 2.3.0, 2/2 2.3.1"),
    ("matrix_digest", "m2", "matrix_digest: 1/2 m1, 2/2 m2"),
])
def test_shards_of_other_inputs_are_named_and_gate(tmp_path, capsys, field, value,
                                                   named) -> None:
    shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "passed"})
    shard_folder(tmp_path / "parts", 2, 2, {"t.py::b": "passed"}, **{field: value})
    rc, err = _grid(tmp_path, capsys)
    assert rc == 1 and f"shards ran on different inputs ({named})" in err
    assert _grid(tmp_path, capsys, "--allow-incomplete")[0] == 0  # named, accepted
    # The flags are not the merge's business (a shard's hardware may set its own).
    shard_folder(tmp_path / "p2", 1, 2, {"t.py::a": "passed"})
    shard_folder(tmp_path / "p2", 2, 2, {"t.py::b": "passed"}, flags={"X": "1"})
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "p2")])
    assert cell.problems == []


@pytest.mark.parametrize("case", ["missing", "errored", "empty", "twice", "incomplete"])
def test_a_missing_errored_or_duplicated_shard_is_named_and_gates(tmp_path, capsys,
                                                                  case) -> None:
    from accelgrid.base import jsonio

    parts = tmp_path / "parts"
    one = shard_folder(parts, 1, 3, {"t.py::a": "passed"})
    shard_folder(parts, 2, 3, {"t.py::b": "passed"})
    three = shard_folder(parts, 3, 3, {"t.py::c": "passed"})
    expect = {
        "missing": "missing shard 3/3", "errored": "shard 3/3 errored: no tests.jsonl",
        "empty": "shard 3/3 errored: tests.jsonl holds no test records",
        "twice": "shard 1/3 twice", "incomplete": "shard 3/3: 1 of the 2 collected tests",
    }[case]
    if case == "missing":
        import shutil

        shutil.rmtree(three.parent)
    elif case == "errored":
        (three / contract.TESTS_FILE).unlink()
    elif case == "empty":
        (three / contract.TESTS_FILE).write_text("")
    elif case == "twice":
        shard_folder(parts, 1, 3, {"t.py::a": "failed"}, folder="shard-1-of-3-again")
    else:
        jsonio.write_json(three / contract.COLLECTED_FILE, ["t.py::c", "t.py::gone"])
    rc, err = _grid(tmp_path, capsys)
    assert rc == 1 and expect in err, err
    # Against a baseline of the whole cell: still not zero.
    base = tmp_path / "baselines"
    base.mkdir()
    jsonio.write_json(base / "cpu-2.13.json", {f"t.py::{t}": "passed" for t in "abc"})
    assert _grid(tmp_path, capsys, "--baseline", str(base))[0] != 0
    assert one.is_dir()


def test_real_shards_of_two_commits_gate(mini_project, python: str, tmp_path: Path,
                                         capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real cell runs: shard 1/2 at one commit of the project, 2/2 at the next."""
    import subprocess

    proj = mini_project()
    (proj / "suites" / "payload" / "test_s.py").write_text(PAYLOAD)
    git = ["git", "-C", str(proj), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    parts = tmp_path / "parts"
    heads = []
    for k in (1, 2):
        if k == 2:
            subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "two"], check=True)
        heads.append(subprocess.run([*git, "rev-parse", "HEAD"], check=True, text=True,
                                    capture_output=True).stdout.strip())
        monkeypatch.setenv(contract.SHARD, f"{k}/2")
        run_cell(run_request(cell, python, proj, parts / shards.folder_name(k, 2)))
    monkeypatch.delenv(contract.SHARD)
    plans = [read(parts / shards.folder_name(k, 2) / cell.name).plan for k in (1, 2)]
    assert [p["inputs"]["commit"] for p in plans] == heads
    assert plans[0]["inputs"]["torch"] == plans[1]["inputs"]["torch"]
    rc, err = _grid(tmp_path, capsys)
    assert rc == 1
    assert f"shards ran on different inputs (commit: 1/2 {heads[0]}, 2/2 {heads[1]})" in err
