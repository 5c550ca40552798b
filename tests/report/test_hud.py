"""The CI run in env.json and the site's runs x cells page (#39 item 7): rows are runs,
newest first, squares coloured by verdict linking to the cell's page and the CI run; the
page's and the grid's filters live in the URL. Checked in a real headless Chromium, with
screenshots under ACCELGRID_ARTIFACTS (else the test's folder)."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

from helpers.history_cases import T, night
from helpers.mini_projects import run_request

from accelgrid.cli import main
from accelgrid.config.matrix import load_matrix
from accelgrid.report import hud
from accelgrid.results import history, provenance
from accelgrid.results.history import open_store

GH = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/grid",
      "GITHUB_RUN_ID": "101", "GITHUB_RUN_ATTEMPT": "1", "RUNNER_NAME": "gpu-7"}


# --- env.json: the CI run ---------------------------------------------------------------

def test_env_json_records_the_ci_run_outside_the_flaky_rules_inputs(monkeypatch) -> None:
    for name, value in {**GH, "GITHUB_TOKEN": "ghs_" + "a" * 36, "GITHUB_SHA": "abc"}.items():
        monkeypatch.setenv(name, value)
    env = provenance.collect("cpu-2.13", "cpu", with_torch=False)
    assert env["ci"] == GH   # the five, nothing else GitHub sets (its token least of all)
    assert not any(k.startswith(("GITHUB_", "RUNNER_")) for k in env["env"])
    # Another run id is not another input: the flaky rule compares runs by their inputs.
    other = {**env, "ci": {**GH, "GITHUB_RUN_ID": "102"}}
    assert history.inputs_digest(env) == history.inputs_digest(other)
    for name in GH:
        monkeypatch.delenv(name)
    assert provenance.collect("cpu-2.13", "cpu", with_torch=False)["ci"] == {}


def test_ci_run_url_and_what_it_refuses() -> None:
    url = provenance.ci_run_url
    assert url(GH) == "https://github.com/acme/grid/actions/runs/101/attempts/1"
    assert url({**GH, "GITHUB_SERVER_URL": "https://ghe.example.com/"}) == (
        "https://ghe.example.com/acme/grid/actions/runs/101/attempts/1")
    no_attempt = {k: v for k, v in GH.items() if k != "GITHUB_RUN_ATTEMPT"}
    assert url(no_attempt) == "https://github.com/acme/grid/actions/runs/101"
    # Each part just past what GitHub sets: no link (the value would become an href).
    for key, bad in [("GITHUB_SERVER_URL", "javascript:alert(1)"),
                     ("GITHUB_SERVER_URL", "https://u:p@github.com"),
                     ("GITHUB_SERVER_URL", "https://github.com/?x=1"),
                     ("GITHUB_SERVER_URL", "github.com"),
                     ("GITHUB_REPOSITORY", "acme/grid/../x"), ("GITHUB_REPOSITORY", "acme"),
                     ("GITHUB_REPOSITORY", "acme/../x"), ("GITHUB_REPOSITORY", 'a/b"x'),
                     ("GITHUB_RUN_ID", "101a"), ("GITHUB_RUN_ID", ""),
                     ("GITHUB_RUN_ATTEMPT", "1 ")]:
        assert url({**GH, key: bad}) is None, (key, bad)
    assert url(None) is None and url({}) is None


# --- the page -----------------------------------------------------------------------------

def _ci(run: int, attempt: int = 1) -> dict[str, str]:
    return {**GH, "GITHUB_RUN_ID": str(run), "GITHUB_RUN_ATTEMPT": str(attempt)}


def _site(tmp_path: Path) -> Path:
    """Three nightly CI runs of cpu-2.13 and xpu-2.5 (101 all passed; 102 cpu never
    finished; 103 xpu failed), then a local run of cpu-2.11 without CI, newest."""
    root = tmp_path / "r"
    ok = {T + "a": "passed", T + "b": "passed"}
    bad = {T + "a": "passed", T + "b": "failed"}
    folders = {}
    for i, run in enumerate((101, 102, 103)):
        for cell in ("cpu-2.13", "xpu-2.5"):
            outcomes = bad if (run, cell) == (103, "xpu-2.5") else ok
            folders[run, cell] = night(root / str(run), i, outcomes, cell=cell, ci=_ci(run),
                                       finished=(run, cell) != (102, "cpu-2.13"))
    local = night(root / "local", 3, ok, cell="cpu-2.11")
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add([f for (run, _), f in folders.items() if run != 103])
    out = tmp_path / "site"
    assert main(["publish", str(folders[103, "cpu-2.13"]), str(folders[103, "xpu-2.5"]),
                 str(local), "--history", str(db), "--out", str(out)]) == 0
    return out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))
        if a.get("id"):
            self.ids.add(str(a["id"]))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_rows_are_runs_newest_first_and_squares_link_cell_and_ci_run(tmp_path: Path) -> None:
    out = _site(tmp_path)
    text = (out / "hud.html").read_text()
    heads = re.findall(r'<th class="c" data-cell="([^"]+)"', text)
    grid = json.loads((out / "grid.json").read_text())
    assert heads == [c["cell"] for c in grid["columns"]]   # the grid's columns, in its order
    assert sorted(heads) == ["cpu-2.11", "cpu-2.13", "xpu-2.5"]
    rows = re.findall(r'<tr data-bad="(\d)"><th class="run">(.*?)</th>(.*?)</tr>', text)
    assert [re.sub(r"<[^>]+>", "", h).split(" ", 2)[2] for _, h, _ in rows] == [
        "run cpu-2.11-n3 c3", "CI run 103 #1 c2", "CI run 102 #1 c1", "CI run 101 #1 c0"]
    squares = [dict((c, v) for c, v in zip(heads, re.findall(r'data-v="(\w+)"|<td></td>', tds),
                                          strict=True) if v) for _, _, tds in rows]
    assert squares == [{"cpu-2.11": "passed"}, {"cpu-2.13": "passed", "xpu-2.5": "failed"},
                       {"cpu-2.13": "unfinished", "xpu-2.5": "passed"},
                       {"cpu-2.13": "passed", "xpu-2.5": "passed"}]
    assert [bad for bad, _, _ in rows] == ["0", "1", "1", "0"]
    # Every square of a CI run links its run, and its cell's page at that run's row.
    assert text.count('href="https://github.com/acme/grid/actions/runs/103/attempts/1"') == 3
    page = _parse(out / "hud.html")
    local = [h for h in page.links if urlparse(h).scheme not in ("http", "https")]
    assert "cells/xpu-2.5.html#run-xpu-2.5-n2" in local
    for href in local:
        target = urlparse(urljoin((out / "hud.html").as_uri(), href))
        assert Path(target.path).is_file(), href
        if target.fragment:
            assert target.fragment in _parse(Path(target.path)).ids, href
    # The cell page's run rows link their CI runs too.
    cell = (out / "cells" / "xpu-2.5.html").read_text()
    assert '<a href="https://github.com/acme/grid/actions/runs/101/attempts/1">run</a>' in cell
    # Every page of the site reaches the new one.
    assert 'href="hud.html"' in (out / "index.html").read_text()
    assert 'href="../hud.html"' in cell


def test_a_verdict_is_passed_only_when_tests_ran_and_none_failed() -> None:
    run = {"status": "finished", "total": 2, "counts": json.dumps({"passed": 2})}
    assert hud.verdict(run) == "passed"
    assert hud.verdict({**run, "counts": json.dumps({"passed": 1, "xpassed": 1})}) == "failed"
    assert hud.verdict({**run, "counts": json.dumps({"passed": 1, "crashed": 1})}) == "failed"
    assert hud.verdict({**run, "counts": json.dumps({"passed": 1, "xfailed": 1})}) == "passed"
    assert hud.verdict({**run, "total": 0, "counts": "{}"}) == "empty"
    assert hud.verdict({**run, "status": "ended"}) == "unfinished"
    assert hud.verdict({**run, "status": "ended",
                        "counts": json.dumps({"failed": 1})}) == "failed"


def test_without_a_history_the_folders_make_the_rows(tmp_path: Path) -> None:
    a = night(tmp_path / "a", 0, {T + "a": "passed"}, ci=_ci(7))
    b = night(tmp_path / "b", 1, {T + "a": "failed"}, cell="xpu-2.5", ci=_ci(7))
    assert main(["publish", str(a), str(b), "--out", str(tmp_path / "site")]) == 0
    text = (tmp_path / "site" / "hud.html").read_text()
    rows = re.findall(r"<tr data-bad=\"(\d)\">(.*?)</tr>", text)
    assert len(rows) == 1 and rows[0][0] == "1"     # one CI run: one row, both cells
    assert re.findall(r'data-v="(\w+)"', rows[0][1]) == ["passed", "failed"]


# --- in a real browser --------------------------------------------------------------------

def _shot(driver, tmp_path: Path, name: str) -> None:
    artifacts = os.environ.get("ACCELGRID_ARTIFACTS")
    shot = (Path(artifacts) if artifacts else tmp_path) / name
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 5_000


def test_hud_and_grid_filters_live_in_the_url_in_chromium(tmp_path: Path) -> None:
    from helpers.browser import browser

    driver = browser(tmp_path)
    from selenium.webdriver.common.by import By

    out = _site(tmp_path)
    find = driver.find_element
    try:
        driver.get((out / "hud.html").as_uri())
        assert find(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
        assert find(By.ID, "hshown").text == "4 of 4 runs shown"
        failed = find(By.CSS_SELECTOR, "a.sq.v-failed")
        passed = find(By.CSS_SELECTOR, "a.sq.v-passed")
        assert failed.is_displayed() and failed.size["width"] >= 12
        assert failed.value_of_css_property("background-color") == "rgba(204, 0, 0, 1)"
        assert passed.value_of_css_property("background-color") == "rgba(51, 170, 51, 1)"
        _shot(driver, tmp_path, "hud.png")
        # Filters: a part of a cell name hides the other columns, and bad-only the rows
        # whose shown results all passed; both go into the fragment.
        find(By.ID, "hq").send_keys("xpu")
        assert find(By.ID, "hshown").text == "3 of 4 runs shown"
        assert not find(By.CSS_SELECTOR, 'th.c[data-cell="cpu-2.13"]').is_displayed()
        find(By.ID, "hbad").click()
        assert find(By.ID, "hshown").text == "1 of 4 runs shown"
        url = driver.current_url
        assert urlparse(url).fragment == "cells=xpu&bad=1"
        # The link reproduces the view in a fresh load.
        driver.get("about:blank")
        driver.get(url)
        assert find(By.ID, "hq").get_attribute("value") == "xpu"
        assert find(By.ID, "hbad").is_selected()
        assert find(By.ID, "hshown").text == "1 of 4 runs shown"
        _shot(driver, tmp_path, "hud-filtered.png")
        # The square of the failed result opens its cell's page at that run.
        ci = find(By.CSS_SELECTOR, 'td[data-v="failed"] a.ci').get_attribute("href")
        assert ci == "https://github.com/acme/grid/actions/runs/103/attempts/1"
        find(By.CSS_SELECTOR, "a.sq.v-failed").click()
        assert urlparse(driver.current_url).path.endswith("/cells/xpu-2.5.html")
        assert find(By.ID, "run-xpu-2.5-n2").is_displayed()

        # The grid: its filters into the fragment, and back from it.
        driver.get((out / "index.html").as_uri())
        assert find(By.ID, "shown").text == "2 of 2 tests shown"
        find(By.CSS_SELECTOR, ".f-device[value='0']").click()   # hide the first device
        find(By.ID, "only-bad").click()
        hidden = find(By.CSS_SELECTOR, ".f-device[value='0']").find_element(
            By.XPATH, "..").text.strip()
        fragment = urlparse(driver.current_url).fragment
        assert fragment == f"device={'xpu' if hidden == 'cpu' else 'cpu'}&bad=1", fragment
        shown = find(By.ID, "shown").text
        url = driver.current_url
        driver.get("about:blank")
        driver.get(url)
        assert not find(By.CSS_SELECTOR, ".f-device[value='0']").is_selected()
        assert find(By.ID, "only-bad").is_selected() and find(By.ID, "shown").text == shown
        _shot(driver, tmp_path, "grid-filtered.png")
        # A hand-made link: outcomes by name, a name part.
        driver.get((out / "index.html").as_uri() + "#outcome=failed&q=b")
        assert [e.get_attribute("value") for e in driver.find_elements(
            By.CSS_SELECTOR, ".f-outcome") if e.is_selected()] == ["F"]
        assert find(By.ID, "q").get_attribute("value") == "b"
        assert find(By.ID, "shown").text == "1 of 2 tests shown"
    finally:
        driver.quit()


# --- a real cell run in CI's environment ---------------------------------------------------

def test_a_real_runs_env_json_names_its_ci_run_and_the_page_links_it(
        mini_project, python, tmp_path: Path, monkeypatch) -> None:
    from accelgrid.run.cell import run_cell

    for name, value in _ci(555, 2).items():
        monkeypatch.setenv(name, value)
    proj = mini_project()
    (proj / "suites" / "payload" / "test_payload.py").write_text(
        "def test_one():\n    assert 1 + 1 == 2\n")
    run_cell(run_request(load_matrix(proj / "matrix.yaml").cell("cpu-2.13"), python, proj,
                         proj / "results"))
    folder = proj / "results" / "cpu-2.13"
    assert json.loads((folder / "env.json").read_text())["ci"] == _ci(555, 2)
    out = tmp_path / "site"
    assert main(["publish", str(folder), "--history", str(tmp_path / "h.sqlite"),
                 "--out", str(out)]) == 0
    text = (out / "hud.html").read_text()
    assert 'href="https://github.com/acme/grid/actions/runs/555/attempts/2"' in text
    assert re.findall(r'data-v="(\w+)"', text) == ["passed"]
