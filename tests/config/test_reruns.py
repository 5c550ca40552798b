"""The matrix's ``reruns`` (pytest-rerunfailures): resolved per default/device/include
rule, the plugin installed and ``--reruns N`` passed only when > 0, and a test that
passes on a rerun recorded ``flaky``, never ``passed``, through a real cell run
(docs/reference/history.md, "Reruns" and the gate's flaky policy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from helpers.mini_projects import RERUN_PAYLOAD, run_request

from accelgrid import report
from accelgrid.base import contract, outcomes
from accelgrid.config.cells import RERUN_TOOL
from accelgrid.config.matrix import load_matrix
from accelgrid.config.validation import ValidationFailed
from accelgrid.host import install
from accelgrid.results.cellresults import read_cell
from accelgrid.results.history import open_store
from accelgrid.run import passes as pass_plan
from accelgrid.run import selection
from accelgrid.run.cell import run_cell

ROOT = Path(__file__).resolve().parents[2]
BASE = (Path(__file__).parents[1] / "base_matrix.yaml").read_text()



def _matrix(tmp_path: Path, defaults: str = "", device: str = "", include: str = ""):
    text = BASE.replace("  suites: [smoke]\n", f"  suites: [smoke]\n{defaults}", 1)
    text = text.replace("    runner: {labels: [ubuntu-24.04], hosted: true}\n",
                        f"    runner: {{labels: [ubuntu-24.04], hosted: true}}\n{device}", 1)
    text = text.replace("    - {device: xpu, torch: \"2.13\", profile: fallback-debug}\n",
                        "    - {device: xpu, torch: \"2.13\", profile: fallback-debug}\n"
                        + include, 1)
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return load_matrix(path)


def _rerun_pins(cell) -> list[str]:
    return [p for p in cell.packages if p.startswith("pytest-rerunfailures")]


def test_reruns_default_zero_adds_neither_plugin_nor_option(tmp_path: Path) -> None:
    m = _matrix(tmp_path)
    for cell in m.cells:
        assert cell.reruns == 0 and _rerun_pins(cell) == []
        cmd = pass_plan.pytest_command(cell, "python", tmp_path)
        assert not any(a.startswith("--rerun") or "rerunfailures" in a for a in cmd), cmd
    assert m.cell("cpu-2.13").as_dict()["reruns"] == 0


def test_reruns_per_default_device_and_include_rule(tmp_path: Path) -> None:
    m = _matrix(tmp_path, defaults="  reruns: 1\n", device="    reruns: 3\n",
                include="    - {device: xpu, torch: \"2.4\", reruns: 0}\n")
    got = {c.name: c.reruns for c in m.cells}
    assert got == {"cpu-2.4": 3, "cpu-2.13": 3, "xpu-2.4": 0, "xpu-2.13": 1,
                   "xpu-2.13-fallback-debug": 1}
    cpu = m.cell("cpu-2.13")
    assert _rerun_pins(cpu) == [RERUN_TOOL]
    assert _rerun_pins(m.cell("xpu-2.4")) == []
    cmd = pass_plan.pytest_command(cpu, "python", tmp_path)
    assert cmd[cmd.index("pytest_rerunfailures") - 1] == "-p" and "--reruns=3" in cmd
    assert "--reruns=3" not in pass_plan.pytest_command(m.cell("xpu-2.4"), "python", tmp_path)
    # The cell env gets the plugin in its tooling step, only where reruns > 0.
    steps = install.plan(cpu, uv_env={}).steps
    assert RERUN_TOOL in steps[-1].args
    assert not any("rerunfailures" in a for s in install.plan(m.cell("xpu-2.4"), uv_env={}).steps
                   for a in s.args)


def test_reruns_pin_is_the_dev_extras_and_tools_win(tmp_path: Path) -> None:
    # The version the dev extras are tested with (constraints.txt; the extras are ranges).
    pinned = (ROOT / "constraints.txt").read_text().splitlines()
    assert RERUN_TOOL in pinned
    text = BASE.replace("devices:", "tools: [pytest_rerunfailures==16.0]\ndevices:", 1)
    text = text.replace("  suites: [smoke]\n", "  suites: [smoke]\n  reruns: 2\n", 1)
    (tmp_path / "matrix.yaml").write_text(text)
    cell = load_matrix(tmp_path / "matrix.yaml").cell("cpu-2.13")
    assert [p for p in cell.packages if "rerun" in p] == ["pytest_rerunfailures==16.0"]


@pytest.mark.parametrize("value", ["-1", "11", "2.0", "true", "'2'"])
def test_reruns_must_be_a_count(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValidationFailed, match="reruns"):
        _matrix(tmp_path, defaults=f"  reruns: {value}\n")


def test_reruns_option_does_not_make_a_selected_run() -> None:
    assert selection.selection(["--reruns", "2", "--reruns-delay=1", "--only-rerun",
                             "AssertionError"]) == []
    assert selection.selection(["--reruns", "2", "-k", "x"]) == ["-k", "x"]


def test_matrix_reruns_real_cell_run_records_flaky_never_passed(mini_project,
                                                                tmp_path: Path) -> None:
    pytest.importorskip("pytest_rerunfailures")
    proj = mini_project()
    text = (proj / "matrix.yaml").read_text().replace("  workers: 1", "  workers: 1\n"
                                                      "  reruns: 2", 1)
    (proj / "matrix.yaml").write_text(text)
    (proj / "suites" / "payload" / "test_payload.py").write_text(RERUN_PAYLOAD)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert cell.reruns == 2
    # Nothing by hand: no PYTEST_PLUGINS, no --reruns; the matrix alone asks for them.
    rc = run_cell(run_request(cell, sys.executable, proj, proj / "results"))
    assert rc == 1  # test_always_fails failed all three attempts
    recs = {n.split("::")[1]: r for n, r in read_cell(proj / "results" / "cpu-2.13").tests.items()}
    assert recs["test_flaky"]["outcome"] == outcomes.FLAKY
    assert recs["test_flaky"]["reruns"] == 1
    assert recs["test_always_fails"]["outcome"] == outcomes.FAILED
    assert recs["test_always_fails"]["reruns"] == 2
    assert recs["test_passes"]["outcome"] == outcomes.PASSED and "reruns" not in recs["test_passes"]
    env = read_cell(proj / "results" / "cpu-2.13").env
    assert env["selection"] == []  # the reruns did not make it a partial run
    # The cell's pins as installed, in env.json (the history's inputs) and the plan.
    import importlib.metadata

    installed = importlib.metadata.version("pytest-rerunfailures")
    assert env["packages"] is not None
    assert env["packages"]["pytest-rerunfailures"] == installed

    # The cell's own junit.xml (pytest's writer): one testcase per test, no failed attempt
    # written as a pass (pytest alone wrote each attempt as a testcase, the failed ones as
    # passes): the flaky test is a pass with its flakyFailure, the failing one a failure
    # with its two earlier rerunFailures (Surefire's elements, in junit-10.xsd).
    junit_file = proj / "results" / "cpu-2.13" / "junit.xml"
    xsd = xmlschema.XMLSchema(Path(__file__).parents[1] / "data" / "junit-10.xsd")
    assert [str(e.reason) for e in xsd.iter_errors(str(junit_file))] == []
    cases = {c.get("name"): c for c in ET.parse(junit_file).iter("testcase")}
    assert len(list(ET.parse(junit_file).iter("testcase"))) == 3
    assert [e.tag for e in cases["test_flaky"]] == ["flakyFailure"]
    message = cases["test_flaky"][0].get("message")
    assert message is not None and "fails on its first attempt" in message
    assert [e.tag for e in cases["test_always_fails"]] == ["failure", "rerunFailure",
                                                           "rerunFailure"]
    assert list(cases["test_passes"]) == []
    # pytest's own counts agree with the records: one test each, not one per attempt.
    plan = json.loads((proj / "results" / "cpu-2.13" / contract.PLAN_FILE).read_text())
    assert plan["passes"][0]["collected"] == plan["passes"][0]["reported"] == 3
    assert plan["inputs"]["packages"]["pytest-rerunfailures"] == installed
    assert plan["inputs"]["torch"] == importlib.metadata.version("torch")
    assert "incomplete" not in json.loads(
        (proj / "results" / "cpu-2.13" / contract.SUMMARY_FILE).read_text())

    # The grid, without a history: the flaky result is its own outcome, counted apart.
    plain = report.grid([proj / "results"], tmp_path / "plain")
    col = plain.model["columns"][0]
    assert col["counts"][outcomes.FLAKY] == 1 and col["counts"][outcomes.PASSED] == 1
    html = (tmp_path / "plain" / "grid.html").read_text()
    assert 'class="d0 flaky"' in html
    assert "🔁" in (tmp_path / "plain" / "grid.md").read_text()

    # The gate against a baseline where all three passed: the always-failing test is a
    # regression (exit 3); the flaky one is shown as changed and does not gate.
    base = tmp_path / "baselines"
    base.mkdir()
    nodeids = {n.split("::")[1]: n for n in read_cell(proj / "results" / "cpu-2.13").tests}
    (base / "cpu-2.13.json").write_text(json.dumps(
        {n: outcomes.PASSED for n in nodeids.values()}))
    gated = report.grid([proj / "results"], tmp_path / "gated", baseline_dir=base,
                        history_db=tmp_path / "h.sqlite")
    assert gated.model["baseline"] is not None
    changes = {c["nodeid"].split("::")[1]: c for c in gated.model["baseline"]["changes"]}
    assert changes["test_always_fails"]["change"] == "regression"
    assert changes["test_flaky"]["change"] == "changed"
    assert [c["nodeid"] for c in gated.regressions] == [nodeids["test_always_fails"]]
    got = {r["test"]: r["cells"]["cpu-2.13"] for r in gated.model["rows"]}
    assert got["test_flaky"]["history"] == "K" and got["test_flaky"]["flaky"]["reruns"] is True
    with open_store(tmp_path / "h.sqlite") as store:
        stored = dict(store.conn.execute(
            "SELECT t.nodeid, r.outcome || r.reruns FROM results r JOIN tests t "
            "ON t.id = r.test"))
    assert stored == {nodeids["test_flaky"]: "K1", nodeids["test_always_fails"]: "F2",
                      nodeids["test_passes"]: "P0"}


@pytest.mark.slow  # installs a pytest from the package index
@pytest.mark.parametrize("version", ["8.3.0", "9.1.1"])  # pyproject's lower bound; an image's
def test_a_cell_on_an_older_pytest_writes_its_junit(tmp_path: Path, version: str) -> None:
    """A --no-venv cell runs on the host's pytest, which can be older than the matrix's pin:
    an H200 image's 9.1.1 keyed LogXML's reporters by report.nodeid (9.2: report.id), and
    the recorder's JUnit wrap stopped the cell with an INTERNALERROR on every test. The
    real-cell test above, run on an older pytest."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), f"pytest=={version}"], check=True, capture_output=True,
                   timeout=600)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(target), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "--basetemp", str(tmp_path / "t"),
                          f"{__file__}::test_matrix_reruns_real_cell_run_records_flaky_never_passed"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:]
    assert "INTERNALERROR" not in run.stdout + run.stderr
