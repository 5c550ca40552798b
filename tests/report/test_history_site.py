"""``accelgrid publish``: the static site from results and their history, its links, and
the history strip, flaky badge and lost column in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
from helpers.history_cases import T, series

from accelgrid.cli import main
from accelgrid.results.history import open_store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _site(tmp_path: Path) -> tuple[Path, Path]:
    folders = series(tmp_path / "r", {"flaky": "PFPFPF", "steady": "PPPPPP", "broke": "PPPPFF"})
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(folders[:-1])
    out = tmp_path / "site"
    assert main(["publish", str(folders[-1]), "--history", str(db), "--out", str(out),
                 "--expect", "cpu-2.13,xpu-2.5"]) == 0
    return out, db


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


def test_publish_writes_linked_pages(tmp_path: Path, capsys) -> None:
    out, _ = _site(tmp_path)
    printed = capsys.readouterr().out
    assert "LOST xpu-2.5: no results uploaded" in printed and "history: 1 run(s) added" in printed
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
    assert pages == ["cells/cpu-2.13.html", "cells/xpu-2.5.html", "hud.html", "index.html",
                     "tests/index.html", "tests/smoke.html"]
    # Every local link of every page resolves to a file of the site.
    for page in out.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text())
        for href in parser.links:
            if urlparse(href).scheme in ("http", "https"):
                continue
            target = Path(urlparse(urljoin(page.as_uri(), href)).path)
            assert target.is_file(), f"{page}: broken link {href}"
    cell = (out / "cells" / "cpu-2.13.html").read_text()
    assert "Since the previous run" in cell and "Flaky (1)" in cell
    assert re.search(r"broke</code></td><td><span class=\"strip\"", cell)
    assert "cpu-2.13-n4" in cell  # broke: failing since the run of night 4
    suite = (out / "tests" / "smoke.html").read_text()
    assert "passed every run in 1 cell(s)" in suite and 'class="flaky"' in suite
    assert (out / ".nojekyll").exists()


def test_publish_refuses_a_folder_that_is_not_a_site(tmp_path: Path) -> None:
    folders = series(tmp_path / "r", {"a": "P"})
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("keep me")
    assert main(["publish", str(folders[0]), "--out", str(other)]) == 2
    assert (other / "thesis.tex").read_text() == "keep me"


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="chromium/chromedriver not installed (apt-get install -y chromium "
                           "chromium-driver)")
def test_site_in_headless_chromium(tmp_path: Path) -> None:
    from helpers.browser import browser

    driver = browser(tmp_path)
    from selenium.webdriver.common.by import By

    out, _ = _site(tmp_path)
    try:
        driver.get((out / "index.html").as_uri())
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
        # The lost column: its header, hatched, says why; the lost list is above the grid.
        lost = driver.find_element(By.CSS_SELECTOR, "th.col.st-lost")
        assert lost.is_displayed() and "xpu-2.5" in lost.text and "lost: no results" in lost.text
        assert "Lost cells (1)" in driver.find_element(By.ID, "lost").text
        # The flaky badge and the strip: drawn, visible, one bar per run.
        flaky_row = driver.find_element(By.CSS_SELECTOR, f'td.test[title="{T}flaky"]')
        tr = flaky_row.find_element(By.XPATH, "..")
        badge = tr.find_element(By.CSS_SELECTOR, "span.flaky")
        assert badge.is_displayed() and badge.text == "flaky"
        bars = tr.find_elements(By.CSS_SELECTOR, "span.strip i")
        assert [b.get_attribute("class") for b in bars] == ["passed", "failed"] * 3
        assert all(b.size["width"] > 0 and b.size["height"] > 0 for b in bars)
        red = bars[1].value_of_css_property("background-color")
        green = bars[0].value_of_css_property("background-color")
        assert red != green
        # A steady test draws no strip; its panel still tells the history.
        steady = driver.find_element(By.CSS_SELECTOR, f'td.test[title="{T}steady"]')
        steady_tr = steady.find_element(By.XPATH, "..")
        assert steady_tr.find_elements(By.CSS_SELECTOR, "span.strip") == []
        tr.find_elements(By.TAG_NAME, "td")[1].click()
        panel = driver.find_element(By.ID, "panel")
        assert panel.is_displayed() and "flaky: 5 flips in 5" in panel.text
        assert "failing since: 2026-11-06" in panel.text
        # The column header's "since previous run", and the link to the cell's page.
        assert "since previous run: 1 new failures" in driver.find_element(
            By.CSS_SELECTOR, "th.col.st-partial, th.col.st-ok").text
        driver.find_element(By.CSS_SELECTOR, '#nav a[href="cells/cpu-2.13.html"]').click()
        assert "Flaky (1)" in driver.find_element(By.TAG_NAME, "body").text
        strip = driver.find_element(By.CSS_SELECTOR, "span.strip")
        assert strip.is_displayed() and strip.size["width"] > 10
    finally:
        driver.quit()



def test_publish_links_the_op_coverage_and_predicted_pages(tmp_path: Path) -> None:
    from helpers.report_cases import ops_cell

    cell = ops_cell(tmp_path / "r", "xpu-2.5", "2.5.1+xpu",
                    {"aten::roll.default": "fallback", "aten::addmm.default": "native"})
    out = tmp_path / "site"
    assert main(["publish", str(cell), "--history", str(tmp_path / "h.sqlite"),
                 "--out", str(out)]) == 0
    ops_pages = sorted(p.name for p in (out / "ops").iterdir())
    assert {"ops-grid.html", "ops-predicted.html", "xpu-2.5.html"} <= set(ops_pages)
    index = (out / "index.html").read_text()
    assert 'href="ops/ops-grid.html"' in index and 'href="ops/ops-predicted.html"' in index
    assert "aten::roll" in (out / "ops" / "ops-predicted.html").read_text()
    cell_page = (out / "cells" / "xpu-2.5.html").read_text()
    assert 'href="../ops/ops-grid.html"' in cell_page and 'href="../ops/xpu-2.5.html"' in cell_page
