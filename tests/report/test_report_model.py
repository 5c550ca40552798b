"""The grid model (accelgrid.report.model): rows, columns, counts, provenance, errored and
partial cells, issues, and the same cell twice."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.report_cases import artifacts, broken_cells, demo, pinned_cell, write_cell

from accelgrid import report
from accelgrid.base import contract
from accelgrid.report import model as grid_model
from tools.selfbench import grid as bench_grid


def test_grid_rows_columns_counts(tmp_path: Path) -> None:
    a = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed",
                                          "suites/smoke/t.py::b": "failed"})
    b = write_cell(tmp_path, "cpu-2.4", {"suites/smoke/t.py::a": "passed",
                                         "suites/offload/t.py::c": "skipped"}, torch="2.4.1")
    model = grid_model.from_folders([a, b])
    assert [c["name"] for c in model["columns"]] == ["cpu-2.4", "cpu-2.13"]  # version order
    assert [r["nodeid"] for r in model["rows"]] == [
        "suites/offload/t.py::c", "suites/smoke/t.py::a", "suites/smoke/t.py::b"]
    assert model["columns"][1]["counts"]["failed"] == 1
    assert model["schema"] == grid_model.SCHEMA_VERSION and model["baseline"] is None
    assert list(model) == ["schema", "generated", "outcomes", "columns", "rows", "baseline",
                           "notes"]


def test_rows_grouped_by_suite_and_workload() -> None:
    assert grid_model.split_nodeid("suites/hf/t.py::test_workload[text-classification]") == (
        "suites/hf/t.py", "test_workload", "text-classification")
    assert grid_model.split_nodeid("suites/s/t.py::TestX::test_y") == (
        "suites/s/t.py", "test_y", None)
    # An id may itself hold "::" or brackets; only the first "[" starts it.
    assert grid_model.split_nodeid("t.py::test_a[x::y[1]]") == ("t.py", "test_a", "x::y[1]")
    assert grid_model.new_row("suites/hf/t.py::test_workload[asr]") == {
        "nodeid": "suites/hf/t.py::test_workload[asr]", "suite": "hf", "workload": "asr",
        "test": "test_workload", "cells": {}}


def test_columns_grouped_by_device_torch_profile_with_provenance(tmp_path: Path) -> None:
    model = grid_model.from_folders(demo(tmp_path))
    assert [c["name"] for c in model["columns"]] == [
        "cpu-2.6", "cpu-2.13", "cuda-2.11", "xpu-2.5", "xpu-2.5-fp64-emulation", "xpu-2.13"]
    col = {c["name"]: c for c in model["columns"]}
    assert col["xpu-2.5-fp64-emulation"]["profile"] == "fp64-emulation"
    assert col["cuda-2.11"]["device_name"] == "NVIDIA H200"
    assert col["xpu-2.5"]["torch_series"] == "2.5" and col["xpu-2.5"]["torch_build"] == (
        "2.5.1+xpu")
    rows = {r["nodeid"]: r for r in model["rows"]}
    hf = rows["suites/hf_examples/test_workloads.py::test_workload[speech-recognition]"]
    assert (hf["suite"], hf["workload"], hf["test"]) == (
        "hf_examples", "speech-recognition", "test_workload")
    # Suites, then workloads within them.
    keys = [(r["suite"], r["workload"]) for r in model["rows"]]
    assert keys == sorted(keys) and keys[0][0] == "hf_examples"


def test_broken_cells_show_as_errored(tmp_path: Path) -> None:
    model = grid_model.from_folders(broken_cells(tmp_path))
    cols = {c["name"]: c for c in model["columns"]}
    untested, missing = cols["cpu-2.6"]["error"], cols["cpu-2.7"]["error"]
    assert untested is not None and missing is not None
    assert untested.startswith("no tests.jsonl")
    assert cols["cpu-2.6"]["status"] == "errored"
    assert "does not exist" in missing
    assert cols["cpu-2.8"]["error"] is None and cols["cpu-2.8"]["counts"]["passed"] == 1
    assert cols["cpu-2.8"]["status"] == "partial"
    assert any("unreadable line" in p for p in cols["cpu-2.8"]["problems"])
    killed = cols["cpu-2.9"]["reason"]
    assert killed is not None
    assert "never finished" in killed
    assert cols["cpu-2.9"]["counts"]["error"] == 1  # the unknown outcome, with its reason
    assert "unknown outcome 'sideways'" in killed
    assert cols["cpu-2.13"]["counts"]["passed"] == 1 and cols["cpu-2.13"]["status"] == "ok"


def test_the_same_cell_twice_gets_two_columns(tmp_path: Path) -> None:
    art, flat = artifacts(tmp_path)
    # a cell's file stands for its folder
    model = grid_model.from_folders([art, flat / contract.TESTS_FILE])
    names = [c["name"] for c in model["columns"]]
    assert names == ["cpu-2.13", "cuda-2.11", "cuda-2.11#2"]  # the same cell twice, told apart
    assert {c["cell"] for c in model["columns"]} == {"cpu-2.13", "cuda-2.11"}


def test_issues_become_links(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "xpu-2.5", {
        "suites/s/t.py::c": "xfailed", "suites/s/t.py::d": "xfailed"}, extra={
        "suites/s/t.py::c": {"issue": {"id": "x", "url": "javascript:alert(1)"}},
        "suites/s/t.py::d": {"issue": "intel/torch-xpu-ops#1234"}})
    model = grid_model.from_folders([cell])
    rows = {r["nodeid"]: r["cells"]["xpu-2.5"] for r in model["rows"]}
    assert rows["suites/s/t.py::d"]["issue"]["url"] == (
        "https://github.com/intel/torch-xpu-ops/issues/1234")
    assert rows["suites/s/t.py::c"]["issue"]["url"] == ""


def test_synthetic_grid_is_complete(tmp_path: Path) -> None:
    folders = bench_grid.synthesize(tmp_path / "a", cells=6, tests=300)
    model = grid_model.from_folders([tmp_path / "a"])
    assert len(model["columns"]) == 6 and len(model["rows"]) == 300
    errored = [c["name"] for c in model["columns"] if c["error"]]
    assert errored == [folders[-1].name]
    for col in model["columns"]:
        if col["error"]:
            continue
        recs = [json.loads(line) for line in (Path(col["path"]) / contract.TESTS_FILE).open()]
        assert col["total"] == 300
        assert col["counts"]["failed"] == sum(r["outcome"] == "failed" for r in recs)


def test_grid_keeps_the_device_a_pinned_worker_ran_on(tmp_path: Path) -> None:
    cell = pinned_cell(tmp_path)
    assert {r["cells"]["cuda-2.11"]["device"] for r in grid_model.from_folders([cell])["rows"]} == {
        "cuda:0", "cuda:1"}


def test_report_build_without_baselines_is_the_model(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    built = report.build_model([cell])
    assert built["baseline"] is None and built["rows"] == grid_model.from_folders([cell])["rows"]
