"""The grid with history (accelgrid.report.history.annotate) at its edges: a pass at the
window's first run, exactly the flaky rule's flips, two cells whose tests differ, several
runs of one cell given at once, and the builds a change is between."""

from __future__ import annotations

from pathlib import Path

from helpers.history_cases import T, night, series

from accelgrid import report
from accelgrid.results.history import open_store
from accelgrid.results.records import Grid


def _grid(tmp_path: Path, folders: list[Path], given: list[Path], window: int = 30
          ) -> Grid:
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders)
    return report.grid(given, tmp_path / "out", history_db=db, window=window).model


def test_a_pass_at_the_windows_first_run_is_the_last_pass(tmp_path: Path) -> None:
    folders = series(tmp_path, {"t": "PPFF"})
    model = _grid(tmp_path, folders, folders[-1:], window=3)
    entry = model["rows"][0]["cells"]["cpu-2.13"]
    assert entry["history"] == "PFF"
    last_passed = entry["last_passed"]
    assert last_passed is not None
    assert last_passed["run_id"] == "cpu-2.13-n1"      # in the window, not n0
    assert entry["failing_since"]["run_id"] == "cpu-2.13-n2"


def test_exactly_the_flaky_rules_flips_is_flaky(tmp_path: Path) -> None:
    folders = series(tmp_path, {"twice": "PPFPP", "once": "PPPPF"})
    flaky = _grid(tmp_path, folders, folders[-1:])["history"]["flaky"]
    assert [(f["nodeid"], f["flips"]) for f in flaky] == [(T + "twice", 2)]


def test_two_cells_with_different_tests_each_get_their_own_strips(tmp_path: Path) -> None:
    a = series(tmp_path / "a", {"both": "PPP", "only_a": "PFF"})
    b = series(tmp_path / "b", {"both": "PFP", "only_a": "PP."}, cell="cpu-2.12")
    model = _grid(tmp_path, a + b, [a[-1], b[-1]])
    rows = {r["nodeid"].split("::")[1]: r["cells"] for r in model["rows"]}
    assert rows["both"]["cpu-2.13"]["history"] == "PPP"
    assert rows["both"]["cpu-2.12"]["history"] == "PFP"
    assert set(rows["only_a"]) == {"cpu-2.13"}   # vanished from cpu-2.12: no entry made
    assert rows["only_a"]["cpu-2.13"]["failing_since"]["run_id"] == "cpu-2.13-n1"


def test_an_older_run_given_beside_the_latest_gets_no_strips(tmp_path: Path) -> None:
    folders = series(tmp_path, {"t": "PFF"})
    model = _grid(tmp_path, folders, folders)
    shown = [c for c in model["columns"] if c["history"]["in_history"]]
    assert len(shown) == 1 and len(model["columns"]) == 3
    for col in model["columns"]:
        entry = model["rows"][0]["cells"][col["name"]]
        assert ("history" in entry) == (col is shown[0])
        assert ("failing_since" in entry) == (col is shown[0])


def test_builds_are_named_only_when_they_differ(tmp_path: Path) -> None:
    same = series(tmp_path / "s", {"t": "PF"})
    col = _grid(tmp_path / "s", same, same[-1:])["columns"][0]
    assert col["history"]["previous"]["run_id"] == "cpu-2.13-n0"
    assert col["history"]["builds"] is None
    nightly = [night(tmp_path / "n", i, {T + "t": w}, torch=f"2.16.0.dev2026110{i}+cpu")
               for i, w in enumerate(("passed", "failed"))]
    col = _grid(tmp_path / "n", nightly, nightly[-1:])["columns"][0]
    assert col["history"]["builds"] == {"previous": "2.16.0.dev20261100+cpu",
                                        "this": "2.16.0.dev20261101+cpu"}
