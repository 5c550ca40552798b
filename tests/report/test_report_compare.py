"""Baselines (accelgrid.report.compare): classifying changes, marking a grid model,
writing, reading and listing baseline files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.report_cases import baseline_case, write_cell

from accelgrid import report
from accelgrid.base.errors import InvalidInput, UnknownName
from accelgrid.report import compare
from accelgrid.report import model as grid_model


@pytest.mark.parametrize(("expected", "actual", "change"), [
    ("passed", "failed", compare.REGRESSION), ("xfailed", "xpassed", compare.REGRESSION),
    ("skipped", "crashed", compare.REGRESSION), ("passed", "timeout", compare.REGRESSION),
    ("failed", "passed", compare.NEW_PASS), ("xfailed", "passed", compare.NEW_PASS),
    ("failed", "error", compare.EXPECTED_FAILURE), ("passed", "passed", compare.UNCHANGED),
    ("passed", "skipped", compare.REGRESSION), ("passed", None, compare.LOST),
    (None, "failed", compare.NEW), (None, None, None),
])
def test_classify(expected: str | None, actual: str | None, change: str | None) -> None:
    assert compare.classify_change(expected, actual) == change


def test_grid_against_baselines(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    model = report.build_model(folders, baseline_dir=base)
    b = model["baseline"]
    assert b is not None
    assert b["regressions"] == 1
    assert {k: v for k, v in b["counts"].items() if v and k != "unchanged"} == {
        "regression": 1, "new-pass": 1, "lost": 1, "new": 1, "expected-failure": 1}
    assert [(c["cell"], c["change"]) for c in b["changes"][:2]] == [
        ("cuda-2.11", "regression"), ("cuda-2.11", "new-pass")]
    assert "xpu-2.13" not in b["cells"]  # no baseline was written for the errored cell
    rows = {r["nodeid"]: r for r in model["rows"]}
    assert rows["suites/smoke/test_device_api.py::test_gone"]["lost"] == {"cuda-2.11": "passed"}
    reg = rows["suites/offload/test_offload_correctness.py::test_matches[bf16]"]["cells"]
    assert reg["cuda-2.11"]["change"] == "regression" and reg["cuda-2.11"]["expected"] == "passed"
    assert "change" not in reg["cpu-2.13"]
    # The lost test's row sits in order among the others.
    assert model["rows"] == sorted(model["rows"], key=grid_model.row_key)
    assert compare.regressions(model) == b["changes"][:1]
    col = {c["name"]: c for c in model["columns"]}
    cuda_baseline = col["cuda-2.11"]["baseline"]
    assert cuda_baseline is not None
    assert cuda_baseline["file"] == str(base / "cuda-2.11.json")
    assert col["xpu-2.13"]["baseline"] is None


def test_mark_fills_the_model_in_place(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    model = grid_model.from_folders(folders)
    summary = compare.mark(model, base)
    assert model["baseline"] is summary and summary["dir"] == str(base)
    assert list(model)[-2:] == ["baseline", "notes"]  # grid.json keeps its key order


def test_missing_baseline_folder_is_invalid_input(tmp_path: Path) -> None:
    cell = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::a": "failed"})
    with pytest.raises(InvalidInput, match="does not exist: nothing could be compared"):
        report.build_model([cell], baseline_dir=tmp_path / "nowhere")


def test_malformed_baseline_is_invalid_input_not_a_note(tmp_path: Path) -> None:
    cell = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::a": "failed"})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cpu-2.13.json").write_text('{"suites/s/t.py::a": 3}')
    with pytest.raises(InvalidInput, match="cpu-2.13.json: expected"):
        report.build_model([cell], baseline_dir=tmp_path / "b")


def test_update_writes_and_merges(tmp_path: Path) -> None:
    cell = write_cell(tmp_path / "r", "xpu-2.5", {"suites/s/t.py::a": "passed",
                                                  "suites/s/t.py::b": "xfailed"})
    base = tmp_path / "b"
    done, notes = compare.update([cell], base)
    assert [(u.cell, u.refused, u.old) for u in done] == [("xpu-2.5", None, {})] and not notes
    doc = json.loads((base / "xpu-2.5.json").read_text())
    assert doc["tests"] == {"suites/s/t.py::a": "passed", "suites/s/t.py::b": "xfailed"}
    assert doc["cell"] == "xpu-2.5" and doc["source"]["torch"] == "2.13.0+cpu"
    assert doc["schema"] == compare.SCHEMA_VERSION
    # A partial run (-k) may keep what it did not run.
    (base / "xpu-2.5.json").write_text(json.dumps({"suites/s/t.py::old": "failed"}))
    assert compare.read(base / "xpu-2.5.json") == {"suites/s/t.py::old": "failed"}
    (u,), _ = compare.update([cell], base, keep_missing=True)
    assert set(compare.read(base / "xpu-2.5.json")) == {
        "suites/s/t.py::a", "suites/s/t.py::b", "suites/s/t.py::old"}
    assert (u.changed, u.dropped) == (2, 0)
    (u,), _ = compare.update([cell], base)  # without: the results replace it
    assert set(compare.read(base / "xpu-2.5.json")) == {"suites/s/t.py::a", "suites/s/t.py::b"}
    assert (u.changed, u.dropped) == (0, 1)
    (base / "xpu-2.5.json").write_text("{broken")
    (u,), _ = compare.update([cell], base)
    assert u.unreadable is not None
    assert "not JSON" in u.unreadable and u.old == {}


def test_update_refuses_unfinished_results_unless_asked(tmp_path: Path) -> None:
    base = tmp_path / "b"
    killed = write_cell(tmp_path / "k", "xpu-2.6", {"suites/s/t.py::a": "passed"},
                        finished=False)
    (u,), _ = compare.update([killed], base)
    assert u.refused is not None
    assert "never finished" in u.refused and "--allow-partial" in u.refused
    assert not (base / "xpu-2.6.json").exists()
    (u,), _ = compare.update([killed], base, allow_partial=True)
    assert u.refused is None and (base / "xpu-2.6.json").exists()
    (u,), _ = compare.update([tmp_path / "nowhere"], base)
    assert u.refused and "--allow-partial" not in u.refused  # errored: no way round it


def test_update_only_the_cells_asked_for(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    done, _ = compare.update([tmp_path / "r"], tmp_path / "only", cells=["cpu-2.6", "tpu-1"])
    assert [u.cell for u in done] == ["cpu-2.6"]
    assert sorted(p.name for p in (tmp_path / "only").iterdir()) == ["cpu-2.6.json"]


def test_load_and_entries(tmp_path: Path) -> None:
    cell = write_cell(tmp_path / "r", "xpu-2.5", {"suites/s/t.py::a": "passed"})
    base = tmp_path / "b"
    compare.update([cell], base)
    loaded = compare.load(base, "xpu-2.5")
    assert loaded.tests == {"suites/s/t.py::a": "passed"} and loaded.updated
    assert loaded.source["devices"] == ["Box"]
    with pytest.raises(UnknownName, match="did you mean 'xpu-2.5'"):
        compare.load(base, "xpu-2.55")
    with pytest.raises(UnknownName, match="baselines exist for: xpu-2.5"):
        compare.load(base, "cpu-9")
    (base / "hand.json").write_text(json.dumps({"t.py::a": "failed"}))  # the short form
    assert compare.load(base, "hand").updated is None
    (base / "bad.json").write_text("[1]")
    with pytest.raises(InvalidInput, match="expected"):
        compare.load(base, "bad")
    listed = {p.stem: (tests, why) for p, tests, why in compare.entries(base)}
    assert listed["xpu-2.5"] == ({"suites/s/t.py::a": "passed"}, None)
    bad_tests, why = listed["bad"]
    assert bad_tests is None and why is not None and "expected" in why
    assert compare.entries(tmp_path / "nowhere") == []


def test_default_dir_is_beside_the_matrix() -> None:
    assert compare.default_dir("m/matrix.yaml") == Path("m/baselines")
    assert compare.default_dir("matrix.yaml") == Path("baselines")
    assert compare.default_dir(None) == Path("baselines")
