"""What tests record (their records' ``properties``: compile and step times, the attention
kernel that ran, low-bit state sizes) in the grid: bounded and redacted when read
(accelgrid.results.clean_properties), per result in the model and grid.json (its schema),
in a result's detail in grid.html, and grid.md's few words (the kernel) beside a symbol.
The real cells' records are tests/e2e/test_new_suites_cells.py's (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers.report_cases import write_cell

from accelgrid import report, results
from accelgrid.report import render_html, render_json, render_markdown
from accelgrid.results import (
    MAX_PROPERTIES,
    MAX_PROPERTY_ITEMS,
    MAX_PROPERTY_NAME,
    MAX_PROPERTY_TEXT,
    clean_properties,
    records,
)

GH = "ghp_" + "A1b2C3d4E5" * 4   # a token's shape (tests/results/test_secrets.py)
SDPA = "suites/attention/test_sdpa.py::test_sdpa_runs_the_expected_kernel[none-fp32]"
MLP = "suites/compile/test_compile.py::test_mlp[fp32]"
PLAIN = "suites/smoke/test_device_api.py::test_device_available"
# As the suites record them (suites/attention/test_sdpa.py, suites/compile/test_compile.py).
RECORDED: dict[str, dict[str, Any]] = {
    SDPA: {"kernels": ["flash_cpu"], "expected": ["flash_cpu"]},
    MLP: {"graph_breaks": 0, "graphs": 2, "recompiles": 0, "compile_s": 4.512,
          "eager_step_ms": 0.61, "compiled_step_ms": 0.35},
}


# --- the bounds: just inside kept whole, just past cut, NaN as its text ----------------

@pytest.mark.parametrize(("size", "cut"), [(MAX_PROPERTY_TEXT, False),
                                           (MAX_PROPERTY_TEXT + 1, True)])
def test_a_text_value_is_cut_just_past_its_bound(size: int, cut: bool) -> None:
    got = clean_properties({"kernel": "k" * size})["kernel"]
    assert len(got) == MAX_PROPERTY_TEXT
    assert got.endswith("…") is cut


@pytest.mark.parametrize(("count", "kept"), [(MAX_PROPERTIES, MAX_PROPERTIES),
                                             (MAX_PROPERTIES + 1, MAX_PROPERTIES - 1)])
def test_past_the_count_the_last_entry_says_how_many_more(count: int, kept: int) -> None:
    got = clean_properties({f"p{i}": i for i in range(count)})
    assert len(got) == MAX_PROPERTIES
    assert [k for k in got if k != "…"] == [f"p{i}" for i in range(kept)]
    assert ("…" in got) is (count > MAX_PROPERTIES)
    if count > MAX_PROPERTIES:
        assert got["…"] == "2 more not kept"


@pytest.mark.parametrize(("count", "cut"), [(MAX_PROPERTY_ITEMS, False),
                                            (MAX_PROPERTY_ITEMS + 1, True)])
def test_a_list_or_mapping_value_is_cut_past_its_items(count: int, cut: bool) -> None:
    got = clean_properties({"kernels": [f"k{i}" for i in range(count)],
                            "flags": {f"F{i}": "1" for i in range(count)}})
    assert len(got["kernels"]) == len(got["flags"]) == MAX_PROPERTY_ITEMS
    assert (got["kernels"][-1] == "… 2 more not kept") is cut
    assert (got["flags"].get("…") == "2 more not kept") is cut


@pytest.mark.parametrize(("size", "cut"), [(MAX_PROPERTY_NAME, False),
                                           (MAX_PROPERTY_NAME + 1, True)])
def test_a_name_is_cut_just_past_its_bound(size: int, cut: bool) -> None:
    [name] = clean_properties({"n" * size: 1})
    assert len(name) == MAX_PROPERTY_NAME and name.endswith("…") is cut


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_number_stays_visible(value: float) -> None:
    # JSON has no NaN: null would read as "not recorded", its text says what happened.
    assert clean_properties({"worst_update_error": value}) == {
        "worst_update_error": str(value)}


def test_values_keep_their_types_and_nesting_is_flattened() -> None:
    got = clean_properties({"recompiles": 0, "ok": True, "none": None, "ratio": 0.2577,
                            "big": 2 ** 70, "nested": {"a": [1, {"b": 2}]}})
    assert got == {"recompiles": 0, "ok": True, "none": None, "ratio": 0.2577,
                   "big": str(2 ** 70), "nested": {"a": '[1,{"b":2}]'}}


def test_tokens_are_redacted_in_names_and_values() -> None:
    got = clean_properties({f"url {GH}": f"token {GH}", "l": [GH], "m": {GH: GH}})
    assert GH not in json.dumps(got) and "<redacted>" in json.dumps(got)


def test_a_record_whose_properties_are_not_a_mapping_loses_them_with_a_note() -> None:
    rec, notes = results.clean_record({"nodeid": "t::a", "outcome": "passed",
                                       "properties": ["kernels", "flash"]}, "tests.jsonl")
    assert rec is not None and "properties" not in rec
    assert notes == ["tests.jsonl: properties of t::a are a list; dropped"]


# --- in the grid ----------------------------------------------------------------------

def _cell(tmp_path: Path, props: dict[str, dict[str, Any]] | None = None) -> Path:
    props = RECORDED if props is None else props
    return write_cell(tmp_path, "cpu-2.13", {SDPA: "passed", MLP: "passed", PLAIN: "passed"},
                      extra={k: {"properties": v, "message": ""} for k, v in props.items()})


def test_each_result_carries_its_properties_into_grid_json(tmp_path: Path) -> None:
    model = report.build_model([_cell(tmp_path)])
    data = json.loads(render_json.render(model))
    jsonschema.Draft202012Validator(records.load_schema("grid")).validate(data)
    cells = {r["nodeid"]: r["cells"]["cpu-2.13"] for r in data["rows"]}
    assert cells[SDPA]["properties"] == RECORDED[SDPA]
    assert cells[MLP]["properties"] == RECORDED[MLP]
    assert "properties" not in cells[PLAIN]
    assert model["columns"][0]["status"] == "ok"


def test_a_hostile_record_stays_a_small_valid_grid(tmp_path: Path) -> None:
    # Under tests.jsonl's line limit (4 MiB): a record the reader takes.
    huge: dict[str, Any] = {
        f"name {i} {'x' * 500}": {"k" * 300: "v" * 5000, **{str(j): j for j in range(50)}}
        for i in range(300)}
    huge["nan"] = float("nan")
    model = report.build_model([_cell(tmp_path, {SDPA: huge})])
    assert model["columns"][0]["problems"] == []
    text = render_json.render(model)
    data = json.loads(text)
    jsonschema.Draft202012Validator(records.load_schema("grid")).validate(data)
    assert len(text) < 60_000   # 32 names x 16 items, each bounded
    assert data["columns"][0]["status"] == "ok"  # the test's result stands


@pytest.mark.parametrize("plant", ["one name too many", "a text too long", "a nested list"])
def test_the_schema_refuses_unbounded_properties(tmp_path: Path, plant: str) -> None:
    data = json.loads(render_json.render(report.build_model([_cell(tmp_path)])))
    props = next(r for r in data["rows"] if r["nodeid"] == SDPA)["cells"]["cpu-2.13"][
        "properties"]
    if plant == "one name too many":
        props.update({f"p{i}": i for i in range(MAX_PROPERTIES - len(props) + 1)})
    elif plant == "a text too long":
        props["kernels"] = ["k" * (MAX_PROPERTY_TEXT + 1)]
    else:
        props["kernels"] = [["flash_cpu"]]
    assert not jsonschema.Draft202012Validator(records.load_schema("grid")).is_valid(data)


def test_grid_html_shows_them_in_the_results_detail(tmp_path: Path) -> None:
    page = render_html.render(report.build_model([_cell(tmp_path)]))
    found = re.search(r'<script type="application/json" id="details">(.*?)</script>', page,
                      re.S)
    assert found is not None
    details = json.loads(found[1])
    shown = [d["properties"] for d in details.values() if "properties" in d]
    assert sorted(shown, key=len) == [RECORDED[SDPA], RECORDED[MLP]]
    assert 'title="kernels: flash_cpu; expected: flash_cpu"' in page  # the hover text
    assert "'recorded'" in page   # the panel's section (grid.html.j2)


def test_grid_md_shows_the_kernel_only(tmp_path: Path) -> None:
    md = render_markdown.render(report.build_model([_cell(tmp_path)]))
    row = next(ln for ln in md.splitlines() if ln.startswith("| none-fp32 |"))
    assert row.endswith("| ✅ `flash_cpu` |")
    mlp = next(ln for ln in md.splitlines() if ln.startswith("| fp32 | test_mlp |"))
    assert mlp.endswith("| ✅ |")   # numbers stay in grid.html and grid.json


def test_grid_html_panel_lists_them_in_a_browser(tmp_path: Path) -> None:
    from helpers.browser import browser

    driver = browser(tmp_path)
    from selenium.webdriver.common.by import By

    page = report.write(report.build_model([_cell(tmp_path)]), tmp_path / "out")["html"]
    try:
        driver.get(page.as_uri())
        driver.find_element(By.CSS_SELECTOR, f'td.test[title="{MLP}"] ~ td').click()
        panel = driver.find_element(By.ID, "panel")
        assert panel.is_displayed()
        pairs = [(dt.text, dd.text) for dt, dd in zip(
            panel.find_elements(By.CSS_SELECTOR, "dl.properties dt"),
            panel.find_elements(By.CSS_SELECTOR, "dl.properties dd"), strict=True)]
        assert pairs == [(k, str(v)) for k, v in RECORDED[MLP].items()]
        driver.find_element(By.ID, "close").click()
        driver.find_element(By.CSS_SELECTOR, f'td.test[title="{SDPA}"] ~ td').click()
        assert ("kernels", "flash_cpu") in [(dt.text, dd.text) for dt, dd in zip(
            panel.find_elements(By.CSS_SELECTOR, "dl.properties dt"),
            panel.find_elements(By.CSS_SELECTOR, "dl.properties dd"), strict=True)]
    finally:
        driver.quit()
