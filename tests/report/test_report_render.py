"""The renderers (accelgrid.report.render_json, render_markdown, render_html) and
:func:`accelgrid.report.write`: grid.json's documented schema, grid.md's budget, grid.html
escaping and self-containment, and the HTML in a real headless browser (Debian's chromium;
skipped with the reason when it is absent)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
from pathlib import Path

from helpers.browser import CHROMIUM, browser, chromium_flags, needs_chromium
from helpers.report_cases import ISSUE, baseline_case, broken_cells, demo, pinned_cell, write_cell

from accelgrid import report
from accelgrid.base import jsonio
from accelgrid.report import render_html, render_json, render_markdown
from accelgrid.report.model import SCHEMA_VERSION
from accelgrid.results.records import Grid
from tools.selfbench import grid as bench_grid

ROOT = Path(__file__).resolve().parents[2]


def test_counts_and_results(tmp_path: Path) -> None:
    a = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed",
                                          "suites/smoke/t.py::b": "failed"})
    b = write_cell(tmp_path, "cpu-2.4", {"suites/smoke/t.py::a": "passed",
                                         "suites/offload/t.py::c": "skipped"}, torch="2.4.1")
    model = report.build_model([a, b])
    md = render_markdown.render(model)
    assert "| cpu-2.13 | 2.13.0+cpu | Box | 1 | 1 |" in md
    page = render_html.render(model)
    assert len(re.findall(r'<td class="d0 failed"', page)) == 1 and "why failed" in page


def test_html_groups_columns_and_shows_provenance(tmp_path: Path) -> None:
    page = render_html.render(report.build_model(demo(tmp_path)))
    for text in ("2.11.0+cu128", "NVIDIA H200", "Intel(R) Arc(TM) A770", "torch 2.5"):
        assert text in page
    assert 'colspan="2">torch 2.5</th>' in page  # xpu-2.5 and its fp64 profile


def test_broken_cells_are_rendered_with_the_reason(tmp_path: Path) -> None:
    model = report.build_model(broken_cells(tmp_path))
    md = render_markdown.render(model)
    assert "| cpu-2.6 | ? | cpu | errored: no tests.jsonl" in md
    assert "**cpu-2.9** partial" in md
    page = render_html.render(model)
    assert "errored: no tests.jsonl" in page and "st-partial" in page


def test_issue_links_and_messages_are_rendered_safely(tmp_path: Path) -> None:
    evil = "</script><script>alert(1)</script> & <b>"
    cell = write_cell(tmp_path, "xpu-2.5", {
        "suites/s/t.py::a": "xfailed", "suites/s/t.py::b": "failed", "suites/s/t.py::c": "xfailed",
        "suites/s/t.py::d": "xfailed"}, extra={
        "suites/s/t.py::a": {"issue": ISSUE},
        "suites/s/t.py::b": {"message": evil, "longrepr": evil * 3},
        "suites/s/t.py::c": {"issue": {"id": "x", "url": "javascript:alert(1)"}},
        "suites/s/t.py::d": {"issue": "intel/torch-xpu-ops#1234"}})
    model = report.build_model([cell])
    rows = {r["nodeid"]: r["cells"]["xpu-2.5"] for r in model["rows"]}
    assert rows["suites/s/t.py::d"]["issue"]["url"] == (
        "https://github.com/intel/torch-xpu-ops/issues/1234")
    assert rows["suites/s/t.py::c"]["issue"]["url"] == ""
    page = render_html.render(model)
    assert f'href="{ISSUE["url"]}"' in page and ">#127929</a>" in page
    assert 'href="javascript:' not in page
    assert "<script>alert(1)" not in page  # escaped in attributes and inside the JSON
    data = re.search(r'<script type="application/json" id="details">(.*?)</script>', page, re.S)
    assert data is not None
    details = json.loads(data[1])
    assert evil in [d.get("message") for d in details.values()]
    md = render_markdown.render(model)
    assert f"[pytorch/pytorch#127929]({ISSUE['url']})" in md
    assert "<script>" not in md


def test_html_is_self_contained(tmp_path: Path) -> None:
    page = render_html.render(report.build_model(demo(tmp_path)))
    assert "<link" not in page and not re.search(r"<(script|img|iframe)[^>]* src=", page)
    assert not re.search(r"url\(|@import", page)
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs == [ISSUE["url"]]  # the only link is the known issue's


def test_json_schema_is_documented(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    model = report.build_model(folders, baseline_dir=base)
    data = json.loads(render_json.render(model))
    assert data["schema"] == SCHEMA_VERSION == 2
    assert all("longrepr" not in c for r in data["rows"] for c in r["cells"].values())
    failed = [c for r in model["rows"] for c in r["cells"].values() if c.get("longrepr")]
    assert failed, "the model keeps tracebacks for the HTML"
    doc = (ROOT / "docs" / "reference" / "grid-schema.md").read_text()
    assert f"Current schema: **{SCHEMA_VERSION}**" in doc
    # Every key grid.json has is documented: top level, columns, rows, cells, baseline.
    keys = {*data, *data["baseline"], *data["baseline"]["changes"][0]}
    keys |= {k for c in data["columns"] for k in c} | {k for r in data["rows"] for k in r}
    keys |= {k for c in data["columns"] if c["baseline"] for k in c["baseline"]}
    keys |= {k for r in data["rows"] for c in r["cells"].values() for k in c}
    keys |= {k for r in data["rows"] for c in r["cells"].values() for k in c.get("issue", {})}
    assert "lost" in keys and "issue" in keys and "change" in keys
    missing = sorted(k for k in keys if f"`{k}`" not in doc)
    assert not missing


def test_json_without_baselines(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    text = render_json.render(report.build_model([cell]))
    data = json.loads(text)
    assert data["baseline"] is None and data["notes"] == []
    lines = text.splitlines()  # one key, column or row per line: it diffs well
    assert len(lines) == 13 and lines[4] == ' "columns": [' and lines[7] == ' "rows": ['
    assert lines[5].startswith('  {"name": "cpu-2.13"') and lines[8].startswith('  {"nodeid"')


def test_markdown_stays_under_summary_budget(tmp_path: Path) -> None:
    cells = [write_cell(tmp_path, f"cpu-2.{i}", {f"suites/s/t.py::test_{n}": "passed"
                                                 for n in range(400)}) for i in range(20)]
    failing = write_cell(tmp_path, "cuda-2.11", {f"suites/s/t.py::test_{n}": "failed"
                                                 for n in range(60)})
    model = report.build_model([*cells, failing])
    assert len(render_markdown.render(model).encode()) > 16 * 1024  # would not fit otherwise
    md = render_markdown.render(model, limit=16 * 1024)
    assert len(md.encode()) <= 16 * 1024
    # First it drops the rows where every cell is fine, keeping the failure.
    assert "rows with a bad result or a change only" in md and "| test_7 |" in md
    assert "| test_300 |" not in md
    tiny = render_markdown.render(model, limit=6 * 1024)
    assert len(tiny.encode()) <= 6 * 1024 and "truncated" in tiny
    assert tiny.count("<details") == tiny.count("</details>")
    assert report.GITHUB_SUMMARY_LIMIT == render_markdown.GITHUB_SUMMARY_LIMIT == 1024 * 1024


def test_markdown_renders_the_full_grid_whenever_it_fits(tmp_path: Path) -> None:
    # grid.md skips rendering a full grid that cannot fit by a lower bound of its size:
    # a budget of exactly the full grid's size must still get the full grid. Short names
    # and passes only: the bound is then within a few percent of the size.
    cells = [write_cell(tmp_path, f"cpu-2.{i}", {f"suites/s/t.py::t{n}": "passed"
                                                 for n in range(400)}) for i in range(20)]
    model = report.build_model(cells)
    full = render_markdown.render(model)
    assert "## Grid\n" in full
    size = len(full.encode())
    assert render_markdown.render(model, limit=size) == full
    assert "## Grid: rows with a bad result" in render_markdown.render(model, limit=size - 1)
    # The bound counts names, issue links and symbols: still never above the size with
    # issues on every result, names escaping lengthens, wide characters and "lost".
    issue = {"id": "acme/w#1", "url": "https://github.com/acme/w/issues/1"}
    odd = {f"suites/s/t.py::t{n}[a|b<é{n}]": ("xfailed" if n % 2 else "skipped")
           for n in range(300)}
    model = report.build_model([write_cell(tmp_path / "odd", f"cpu-2.{i}", odd,
                                     extra={k: {"issue": issue} for k in odd})
                          for i in range(10)])
    model["rows"][0]["lost"] = {"cpu-2.3": "passed"}
    full = render_markdown.render(model)
    assert "## Grid\n" in full and "lost" in full
    assert render_markdown.render(model, limit=len(full.encode())) == full


def test_synthetic_grid_renders_every_row(tmp_path: Path) -> None:
    bench_grid.synthesize(tmp_path / "a", cells=6, tests=300)
    page = render_html.render(report.build_model([tmp_path / "a"]))
    assert page.count('<tr class="t"') == 300


def test_changes_against_baselines_are_rendered(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    model = report.build_model(folders, baseline_dir=base)
    md = render_markdown.render(model)
    assert "### ❌ Regressions (1)" in md and "**REGRESSION**" in md
    assert "1 regression, 1 new pass" in md
    page = render_html.render(model)
    assert page.count('class="d1 failed ch-regression"') == 1 and 'class="d1 lost"' in page
    data = json.loads(render_json.render(model))
    assert data["baseline"]["changes"][0]["nodeid"].endswith("[bf16]")


def test_html_shows_the_device_a_pinned_worker_ran_on(tmp_path: Path) -> None:
    cell = pinned_cell(tmp_path)
    page = render_html.render(report.build_model([cell]))
    assert 'title="[cuda:0]"' in page and 'title="[cuda:1]"' in page


def test_write_writes_the_three_files(tmp_path: Path) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    model = report.build_model([cell])
    paths = report.write(model, tmp_path / "out" / "deeper")
    assert paths == {k: tmp_path / "out" / "deeper" / f"grid.{k}" for k in ("json", "md", "html")}
    assert paths["json"].read_text() == render_json.render(model)
    assert paths["md"].read_text() == render_markdown.render(model)
    assert paths["html"].read_text() == render_html.render(model)


# --- in a real browser -----------------------------------------------------------------


def _page(tmp_path: Path) -> tuple[Path, Grid]:
    folders, base = baseline_case(tmp_path)
    model = report.build_model(folders, baseline_dir=base)
    paths = report.write(model, tmp_path / "out")
    return paths["html"], model


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@needs_chromium
def test_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    page, model = _page(tmp_path)
    assert CHROMIUM is not None   # needs_chromium skips the test otherwise
    flags = chromium_flags(tmp_path / "profile")
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    n = len(model["rows"])
    assert 'data-ready="1"' in dom  # the script ran to the end
    assert f'<span id="shown">{n} of {n} tests shown</span>' in dom
    assert dom.count('<tr class="t"') == n and "NVIDIA H200" in dom
    artifacts = os.environ.get("ACCELGRID_ARTIFACTS")
    shot = (Path(artifacts) if artifacts else tmp_path) / "grid-screenshot.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1400,900",
                    "--hide-scrollbars", page.as_uri()], capture_output=True, timeout=120,
                   check=True)
    assert _png_size(shot) == (1400, 900) and shot.stat().st_size > 20_000


@needs_chromium
def test_html_filters_in_browser(tmp_path: Path) -> None:
    driver = browser(tmp_path)
    from selenium.webdriver.common.by import By

    page, model = _page(tmp_path)
    try:
        driver.get(page.as_uri())
        n = len(model["rows"])

        def shown() -> str:
            return driver.find_element(By.ID, "shown").text

        def row(nodeid: str):
            return driver.find_element(By.CSS_SELECTOR, f'td.test[title="{nodeid}"]')

        assert shown() == f"{n} of {n} tests shown"
        all_pass = "suites/smoke/test_device_api.py::test_device_available"
        failing = "suites/offload/test_offload_correctness.py::test_matches[bf16]"
        assert row(all_pass).is_displayed() and row(failing).is_displayed()

        # Unchecking "passed" hides the rows where every result passed.
        driver.find_element(By.CSS_SELECTOR, '.f-outcome[value="P"]').click()
        assert not row(all_pass).is_displayed() and row(failing).is_displayed()
        left = sum(1 for r in model["rows"] if r.get("lost") or any(
            c["outcome"] != "passed" for c in r["cells"].values()))
        assert shown() == f"{left} of {n} tests shown" and left < n
        driver.find_element(By.CSS_SELECTOR, '.f-outcome[value="P"]').click()
        assert row(all_pass).is_displayed()

        # Unchecking a device hides its columns (headers and results), others stay.
        cuda_head = driver.find_element(By.CSS_SELECTOR, 'th.col[data-j="2"]')
        cpu_head = driver.find_element(By.CSS_SELECTOR, 'th.col[data-j="0"]')
        assert "cuda-2.11" in cuda_head.text and cuda_head.is_displayed()
        cuda = next(e for e in driver.find_elements(By.CSS_SELECTOR, ".f-device")
                    if e.find_element(By.XPATH, "..").text.strip() == "cuda")
        cuda.click()
        assert not cuda_head.is_displayed() and cpu_head.is_displayed()
        failed_td = driver.find_element(By.CSS_SELECTOR, "td.failed")
        assert not failed_td.is_displayed()
        # ... and rows whose only change was on that device go with "changed vs baseline".
        driver.find_element(By.ID, "only-changes").click()
        assert shown() == f"0 of {n} tests shown"
        cuda.click()
        changed = sum(1 for r in model["rows"] if r.get("lost") or any(
            c.get("change") not in (None, "expected-failure") for c in r["cells"].values()))
        assert shown() == f"{changed} of {n} tests shown" and changed == 4
        driver.find_element(By.ID, "only-changes").click()

        # Suite filter hides that suite's header and rows.
        driver.find_element(By.CSS_SELECTOR, '.f-suite[value="offload"]').click()
        assert not row(failing).is_displayed() and row(all_pass).is_displayed()
        driver.find_element(By.CSS_SELECTOR, '.f-suite[value="offload"]').click()

        # A failure opens its message, traceback and the cell's provenance.
        driver.find_element(By.CSS_SELECTOR, "td.failed").click()
        panel = driver.find_element(By.ID, "panel")
        assert panel.is_displayed()
        assert "AssertionError: bf16 mismatch 0.3" in panel.text
        assert "2.11.0+cu128" in panel.text and "NVIDIA H200" in panel.text
        # The known issue is a link to the upstream issue.
        link = driver.find_element(By.CSS_SELECTOR, "td.xfailed a")
        assert link.get_attribute("href") == ISSUE["url"] and link.text == "#127929"
    finally:
        driver.quit()


def test_markdown_says_how_an_xpu_cell_compares_with_the_prediction(tmp_path: Path) -> None:
    from helpers.report_cases import PLANTED, synthetic_xpu_ops


    # SYNTHETIC xpu cell (no Intel GPU ran it): its ops.json from real op names.
    data = synthetic_xpu_ops()
    cell = write_cell(tmp_path, data["cell"], {"suites/smoke/t.py::a": "passed"},
                      torch=data["torch"])
    jsonio.write_json(cell / "ops.json", data)
    plain = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    model = report.build_model([cell, plain])
    check = {c["name"]: c["ops_vs_predicted"] for c in model["columns"]}
    assert check["cpu-2.13"] is None
    xpu = check[data["cell"]]
    assert xpu is not None
    assert xpu["series"] == "2.5" and xpu["branch"] == "release/2.5"
    assert xpu["disagree"] == len(PLANTED)
    md = render_markdown.render(model)
    assert (f"- 🔎 **{data['cell']}** ops observed vs predicted: {xpu['agree']} agree, "
            f"{len(PLANTED)} disagree with torch-xpu-ops release/2.5 "
            "(`accelgrid ops grid` lists them)") in md
    assert json.loads(render_json.render(model))["columns"][1]["ops_vs_predicted"] == xpu
