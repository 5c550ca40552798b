"""accelgrid.results.shards' pure parts at their edges: the spec's bounds, durations read
from a file or records, the median a test without one counts as, the split a later pass
reuses, and the merge of whole cells, shards and their inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.report_cases import write_cell
from helpers.shard_cases import discover_cells, read, shard_folder

from accelgrid.base import contract
from accelgrid.results import shards


@pytest.mark.parametrize(("text", "parsed"), [("1/1", (1, 1)), ("64/64", (64, 64)),
                                              ("1/64", (1, 64)), ("2/3", (2, 3))])
def test_specs_at_the_bounds_parse(text: str, parsed: tuple[int, int]) -> None:
    assert shards.parse(text) == parsed


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/65", "65/65", "1/0", "1-2", ""])
def test_specs_past_the_bounds_are_refused(text: str) -> None:
    with pytest.raises(shards.ShardError):
        shards.parse(text)


@pytest.mark.parametrize("text", ["x" * 100, "1" + " " * 100 + "/65"])
def test_a_refused_spec_is_quoted_to_40_characters(text: str) -> None:
    with pytest.raises(shards.ShardError) as info:
        shards.parse(text)
    assert repr(text[:40]) in str(info.value) and len(str(info.value)) < 100


def test_a_durations_file_keeps_zero_and_drops_negative_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"a": 0, "b": 2.5, "c": -1, "d": NaN}')
    assert shards.durations(path) == {"a": 0.0, "b": 2.5}
    path.write_text(json.dumps({"a": 1, "b": "slow"}))
    with pytest.raises(shards.ShardError, match="expected a JSON object"):
        shards.durations(path)
    path.write_text(json.dumps({"a": True}))
    with pytest.raises(shards.ShardError):
        shards.durations(path)


def test_durations_from_records_keep_zero_and_drop_negative(tmp_path: Path) -> None:
    write_cell(tmp_path / "r", "cpu-2.13", {"t.py::a": "passed", "t.py::b": "passed",
                                            "t.py::c": "passed"},
               extra={"t.py::a": {"duration": 0.0}, "t.py::b": {"duration": -2.0},
                      "t.py::c": {"duration": 1.5}})
    assert shards.durations(tmp_path / "r") == {"t.py::a": 0.0, "t.py::c": 1.5}


def test_a_test_without_a_duration_counts_as_the_median() -> None:
    # a 3 s, b 2 s, c 1 s recorded; x none: the median (2 s), so x goes where b's 2 s is.
    where = shards.assign(["a", "b", "c", "x"], 2, {"a": 3.0, "b": 2.0, "c": 1.0})
    assert where == {"a": 1, "b": 2, "x": 2, "c": 1}


class _Item:
    """What shards.keep reads of a pytest item: its id and its multi-device mark."""

    def __init__(self, nodeid: str, multi: bool = False) -> None:
        self.nodeid, self.multi = nodeid, multi

    def get_closest_marker(self, name: str) -> object | None:
        return object() if self.multi and name == contract.MULTI_DEVICE_MARK else None


def _env(folder: Path, shard: str = "1/2", run: str = "r1") -> dict[str, str]:
    return {contract.SHARD: shard, contract.RESULTS: str(folder), contract.RUN_ID: run}


def test_keep_without_a_shard_keeps_everything(tmp_path: Path) -> None:
    items = [_Item("a"), _Item("b")]
    assert shards.keep(items, {}) == (items, [])


def test_a_later_pass_reuses_the_first_passs_split(tmp_path: Path) -> None:
    items = [_Item(i) for i in "abcd"]
    mine, others = shards.keep(items, _env(tmp_path))
    first = {i.nodeid for i in mine}
    assert len(first) == 2 and {i.nodeid for i in others} == set("abcd") - first
    written = json.loads((tmp_path / shards.ASSIGNMENT).read_text())
    assert written["run_id"] == "r1" and written["shard"] == "1/2"
    # A subset split afresh would put its first test in shard 1 whatever the first split.
    subset = [i for i in items if i.nodeid not in first]
    assert shards.keep(subset, _env(tmp_path))[0] == []
    # Another run's assignment is not this run's: split afresh.
    assert shards.keep(subset, _env(tmp_path, run="r2"))[0] != []
    # Shard 2/2 of the first run, written by its own pass, keeps the first split too.
    assert {i.nodeid for i in shards.keep(items, _env(tmp_path, "2/2"))[0]} \
        == set("abcd") - first


def test_a_split_without_a_results_folder_writes_nothing(tmp_path: Path) -> None:
    env = {contract.SHARD: "1/2", contract.RUN_ID: "r1"}
    mine, others = shards.keep([_Item("a"), _Item("b")], env)
    assert len(mine) == 1 and len(others) == 1 and not list(tmp_path.iterdir())


def test_multi_device_tests_stay_in_one_shard(tmp_path: Path) -> None:
    items = [_Item("m1", True), _Item("m2", True), _Item("m3", True), _Item("a"), _Item("b")]
    mine, _ = shards.keep(items, _env(tmp_path))
    names = {i.nodeid for i in mine}
    assert {"m1", "m2", "m3"} <= names or not ({"m1", "m2", "m3"} & names)


def test_whole_cells_pass_through_the_merge(tmp_path: Path) -> None:
    whole = write_cell(tmp_path / "w", "cuda-2.11", {"t.py::a": "passed"})
    shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "passed"})
    shard_folder(tmp_path / "parts", 2, 2, {"t.py::b": "failed"})
    cells = [read(whole), *(read(p) for p in discover_cells(tmp_path / "parts"))]
    merged = shards.merge(cells)
    assert [c.name for c in merged] == ["cuda-2.11", "cpu-2.13"]
    assert merged[0] is cells[0]
    assert merged[1].env["shards"]["present"] == [1, 2]


def test_two_missing_shards_are_named_in_the_plural(tmp_path: Path) -> None:
    shard_folder(tmp_path / "parts", 2, 3, {"t.py::b": "passed"})
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "parts")])
    assert any("missing shards 1/3, 3/3: their tests are not here" in p
               for p in cell.problems)
    shard_folder(tmp_path / "p1", 1, 2, {"t.py::a": "passed"})
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "p1")])
    assert any("missing shard 2/2: their" in p for p in cell.problems)


def test_a_shard_twice_uses_the_later_one(tmp_path: Path) -> None:
    early = shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "failed"})
    late = shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "passed"}, folder="again")
    shard_folder(tmp_path / "parts", 2, 2, {"t.py::b": "passed"})
    for path, start in ((early, "2026-12-01T01:00"), (late, "2026-12-01T02:00")):
        env = json.loads((path / contract.ENV_FILE).read_text())
        (path / contract.ENV_FILE).write_text(json.dumps({**env, "start": start}))
    for order in (1, -1):
        paths = discover_cells(tmp_path / "parts")[::order]
        (cell,) = shards.merge([read(p) for p in paths])
        assert cell.tests["t.py::a"]["outcome"] == "passed"
        assert any(f"shard 1/2 twice ({early} and {late})" in p for p in cell.problems)


def test_shards_without_tests_make_an_errored_column(tmp_path: Path) -> None:
    one = shard_folder(tmp_path / "parts", 1, 2, {})
    two = shard_folder(tmp_path / "parts", 2, 2, {})
    assert not (one / contract.TESTS_FILE).exists() and not (two / contract.TESTS_FILE).exists()
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "parts")])
    assert cell.error == "no shard of cpu-2.13 holds test records"


def test_a_package_only_one_shard_has_is_a_difference(tmp_path: Path) -> None:
    shard_folder(tmp_path / "parts", 1, 2, {"t.py::a": "passed"})
    shard_folder(tmp_path / "parts", 2, 2, {"t.py::b": "passed"},
           packages={"numpy": "2.3.0", "torchao": "0.18.0"})
    (cell,) = shards.merge([read(p) for p in discover_cells(tmp_path / "parts")])
    assert any("package torchao: 1/2 None, 2/2 0.18.0" in p for p in cell.problems)
    assert not any("package numpy" in p for p in cell.problems)


def test_differences_name_only_what_differs() -> None:
    keys = {1: {"commit": "c", "torch": "t", "packages": {"a": "1"}},
            2: {"commit": "c", "torch": "u", "packages": {"a": "1"}}}
    assert shards._differences(keys, 2) == ["torch: 1/2 t, 2/2 u"]
    keys[2]["packages"] = "not a mapping"
    assert "package a: 1/2 1, 2/2 None" in shards._differences(keys, 2)


def test_a_later_pass_with_a_test_the_first_split_lacks_splits_afresh(tmp_path: Path) -> None:
    items = [_Item(i) for i in "abcd"]
    first = {i.nodeid for i in shards.keep(items, _env(tmp_path))[0]}
    later = [i for i in items if i.nodeid not in first] + [_Item("e")]
    # Split afresh over three tests: two of them land in shard 1, whatever the first split.
    assert len(shards.keep(later, _env(tmp_path))[0]) == 2


def test_the_split_is_written_where_no_folder_was_yet(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b"
    shards.keep([_Item("a"), _Item("b")], _env(folder))
    assert json.loads((folder / shards.ASSIGNMENT).read_text())["run_id"] == "r1"


def test_an_earlier_runs_split_is_replaced_not_extended(tmp_path: Path) -> None:
    (tmp_path / shards.ASSIGNMENT).write_text(json.dumps(
        {"run_id": "old", "shard": "1/2", "assign": {"stale": 1}}))
    shards.keep([_Item("a"), _Item("b")], _env(tmp_path))
    assert set(json.loads((tmp_path / shards.ASSIGNMENT).read_text())["assign"]) == {"a", "b"}


def test_differences_compare_mappings_by_content() -> None:
    keys = {1: {"torch": {"v": 1, "w": 2}}, 2: {"torch": {"v": 2, "w": 2}}}
    assert shards._differences(keys, 2) == ["torch: 1/2 {'v': 1, 'w': 2}, 2/2 {'v': 2, 'w': 2}"]
    keys[2]["torch"] = {"w": 2, "v": 1}   # the same, in another order
    assert shards._differences(keys, 2) == []
