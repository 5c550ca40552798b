"""JUnit XML for other tools (accelgrid.results.junit): testsuite properties in every pass's file,
accelgrid's outcomes mapped onto JUnit's elements, one merged file per run; read back
with junitparser, as dashboards read it; every file valid against JUnit's junit-10.xsd."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import pytest
import xmlschema
from helpers.mini_projects import run_request

from accelgrid import report, results
from accelgrid.base import contract, jsonio, outcomes
from accelgrid.config.matrix import load_matrix
from accelgrid.results import cellresults, junit
from accelgrid.run.cell import run_cell

ISSUE = {"id": "acme/widgets#1", "url": "https://github.com/acme/widgets/issues/1",
         "title": "widgets drop frames"}


def _cell_folder(folder: Path, records: list[dict], env: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    env = env or {
        "cell": "cpu-2.13", "device_type": "cpu", "run_id": "r1", "start": "2026-12-01T10:00:00",
        "end": "2026-12-01T10:01:00", "status": "finished",
        "torch": {"version": "2.13.0+cpu"},
        "env": {"ACCELGRID_CELL": "cpu-2.13", "ACCELGRID_DEVICE": "cpu",
                "ACCELGRID_TORCH": "2.13", "ACCELGRID_PROFILE": "default",
                "ACCELGRID_HARDWARE": "ats-m", "ACCELGRID_DRIVER": "lts"},
        "project": {"commit": "abc123", "dirty": False},
    }
    jsonio.write_json(folder / contract.ENV_FILE, env)
    for rec in records:
        results.append_record(folder / contract.TESTS_FILE, {"run_id": "r1", "cell": "cpu-2.13",
                                                       "duration": 0.5, **rec})
    return folder


# pytest's copy of the JUnit schema (Jenkins' xUnit plugin and others check files against
# it): testing/example_scripts/junit-10.xsd in the pytest 9.2.0 sdist, MIT (the licence is
# in the file). Vendored: the tests run offline.
JUNIT_XSD = xmlschema.XMLSchema(Path(__file__).parents[1] / "data" / "junit-10.xsd")


def _schema_errors(path: Path) -> list[str]:
    return [str(e.reason) for e in JUNIT_XSD.iter_errors(str(path))]


def _props(suite: junitparser.TestSuite) -> dict[str, str]:
    return {p.name: p.value for p in suite.properties()}


def test_outcomes_map_onto_junit_with_their_detail(tmp_path: Path) -> None:
    t = "suites/smoke/test_a.py::"
    _cell_folder(tmp_path / "results" / "cpu-2.13", [
        {"nodeid": t + "test_ok", "outcome": outcomes.PASSED},
        {"nodeid": t + "test_bad", "outcome": outcomes.FAILED, "message": "assert 1 == 2",
         "longrepr": "E   assert 1 == 2\nsuites/smoke/test_a.py:7: AssertionError"},
        {"nodeid": t + "test_err", "outcome": outcomes.ERROR, "message": "fixture boom"},
        {"nodeid": t + "test_hang", "outcome": outcomes.TIMEOUT, "message": "timed out"},
        {"nodeid": t + "test_segv", "outcome": outcomes.CRASHED,
         "message": "the test process died while running this test (signal 11)"},
        {"nodeid": t + "test_skip", "outcome": outcomes.SKIPPED, "message": "needs a GPU"},
        {"nodeid": t + "test_nr", "outcome": outcomes.NOT_RUN,
         "message": "transformers checkout missing"},
        {"nodeid": t + "test_known", "outcome": outcomes.XFAILED, "issue": ISSUE,
         "message": "strict xfail"},
        {"nodeid": t + "TestK::test_fixed", "outcome": outcomes.XPASSED, "issue": ISSUE,
         "message": "XPASS(strict)", "pass": "host-accelerators"},
    ])
    out, _ = junit.write_merged([tmp_path / "results"], tmp_path / "merged.xml")
    assert _schema_errors(out) == []
    xml = junitparser.JUnitXml.fromfile(str(out))
    suites = list(xml)
    assert [s.name for s in suites] == ["cpu-2.13", "cpu-2.13 [host-accelerators]"]
    props = _props(suites[0])
    assert props == {"cell": "cpu-2.13", "device": "cpu", "torch": "2.13.0+cpu",
                     "torch_series": "2.13", "profile": "default", "hardware": "ats-m",
                     "driver": "lts", "commit": "abc123", "run_id": "r1", "pass": "single",
                     "shard": "unknown", "torch_channel": "unknown"}
    assert _props(suites[1])["pass"] == "host-accelerators"
    cases = {c.name: c for s in suites for c in s}
    kinds = {name: [(type(r).__name__, r.type) for r in c.result] for name, c in cases.items()}
    assert kinds == {
        "test_ok": [], "test_bad": [("Failure", "failed")], "test_err": [("Error", "error")],
        "test_hang": [("Error", "timeout")], "test_segv": [("Error", "crashed")],
        "test_skip": [("Skipped", "skipped")], "test_nr": [("Skipped", "not-run")],
        "test_known": [("Skipped", "known-issue")], "test_fixed": [("Failure", "xpassed")],
    }
    bad = cases["test_bad"].result[0]
    assert bad.message == "assert 1 == 2" and "test_a.py:7: AssertionError" in bad.text
    assert cases["test_nr"].result[0].message == "not-run: transformers checkout missing"
    known = cases["test_known"].result[0].message
    assert known.startswith("acme/widgets#1: widgets drop frames "
                            "(https://github.com/acme/widgets/issues/1)")
    assert cases["test_fixed"].classname == "suites.smoke.test_a.TestK"
    assert cases["test_ok"].classname == "suites.smoke.test_a"
    assert cases["test_ok"].time == pytest.approx(0.5)
    assert (suites[0].tests, suites[0].failures, suites[0].errors, suites[0].skipped) \
        == (8, 1, 3, 3)
    # junit-10.xsd has no skipped count on <testsuites>: junitparser adds the suites'.
    assert 'skipped="' not in out.read_text().split("<testsuite ")[0]
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (9, 2, 3, 3)


def test_every_cell_of_a_run_in_one_file_and_an_unreadable_one_says_why(tmp_path: Path
                                                                         ) -> None:
    _cell_folder(tmp_path / "a" / "cpu-2.13", [
        {"nodeid": "suites/smoke/test_a.py::test_ok", "outcome": outcomes.PASSED}])
    broken = tmp_path / "b" / "cuda-2.11"
    broken.mkdir(parents=True)
    (broken / contract.ENV_FILE).write_text(json.dumps({"cell": "cuda-2.11"}))
    out, _ = junit.write_merged([tmp_path / "a", tmp_path / "b"], tmp_path / "m.xml")
    xml = junitparser.JUnitXml.fromfile(str(out))
    assert sorted(s.name for s in xml) == ["cpu-2.13", "cuda-2.11"]
    (bad,) = [s for s in xml if s.name == "cuda-2.11"]
    (case,) = list(bad)
    assert case.result[0].type == "error" and "no tests.jsonl" in case.result[0].message
    # Text XML cannot hold never breaks the file.
    _cell_folder(tmp_path / "c" / "cpu-2.13", [
        {"nodeid": "suites/smoke/test_a.py::test_x", "outcome": outcomes.FAILED,
         "message": "bad \x00\x1b[31m byte \udcff"}])
    out, _ = junit.write_merged([tmp_path / "c"], tmp_path / "c.xml")
    (case,) = list(next(iter(junitparser.JUnitXml.fromfile(str(out)))))
    assert case.result[0].message == "bad [31m byte \\xff"


def test_a_real_cpu_run_junit_files_and_the_grids_merged_junit(mini_project, python: str,
                                                               tmp_path: Path) -> None:
    """A real cell run (pytest on this interpreter): pytest's own JUnit file of the pass
    carries the properties, and the grid writes the merged file beside grid.md."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_p.py").write_text(
        "import pytest\n"
        "from accelgrid.base import outcomes\n"
        "def test_ok(request):\n    request.node.user_properties.append(('peak_mb', 12))\n"
        "def test_bad():\n    assert 1 == 2\n"
        "def test_nr():\n    outcomes.not_run('no checkout')\n")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    run_cell(run_request(cell, python, proj, proj / "results"))
    folder = proj / "results" / "cpu-2.13"
    # pytest puts user_properties inside the testcase, which the schema refuses: the
    # plugin leaves them out of the file; the record keeps them.
    assert _schema_errors(folder / contract.JUNIT_FILE) == []
    assert "peak_mb" not in (folder / contract.JUNIT_FILE).read_text()
    (rec,) = [r for r in results.read_records(folder / contract.TESTS_FILE)[0]
              if r["nodeid"].endswith("test_ok")]
    assert rec["properties"] == {"peak_mb": 12}
    own = junitparser.JUnitXml.fromfile(str(folder / contract.JUNIT_FILE))
    suite = next(iter(own)) if isinstance(own, junitparser.JUnitXml) else own
    props = _props(suite)
    assert props["cell"] == "cpu-2.13" and props["device"] == "cpu"
    assert props["pass"] == "single" and len(props["run_id"]) == 32
    assert props["torch"].startswith("2.13.0") and props["profile"] == "default"
    made = report.grid([folder], tmp_path / "grid")
    assert made.paths["junit"] == tmp_path / "grid" / junit.MERGED
    assert _schema_errors(made.paths["junit"]) == []
    merged = junitparser.JUnitXml.fromfile(str(made.paths["junit"]))
    first = next(iter(merged))
    assert _props(first)["run_id"] == props["run_id"]
    assert _props(first)["torch"] == props["torch"]
    kinds = {c.name: [r.type for r in c.result] for s in merged for c in s}
    assert kinds == {"test_ok": [], "test_bad": ["failed"], "test_nr": ["not-run"]}


def test_merged_from_cells_already_read_is_the_same_file_and_control_chars_go(
        tmp_path: Path) -> None:
    # The grid hands junit the cells it read (no second read); the file is the same.
    a = _cell_folder(tmp_path / "r" / "cpu-2.13", [
        {"nodeid": "t.py::test_ok", "outcome": outcomes.PASSED},
        {"nodeid": "t.py::test_bad", "outcome": outcomes.FAILED,
         "message": "bell\x07 and\x1b[31m escape, tab\tkept", "longrepr": "x\x00y\nz"},
        {"nodeid": "t.py::test_flaky", "outcome": outcomes.FLAKY, "reruns": 1}])
    folders, _ = cellresults.discover([tmp_path / "r"])
    read = [(f, cellresults.read_cell(f)) for f in folders]
    fresh, _ = junit.write_merged([tmp_path / "r"], tmp_path / "fresh.xml")
    reused, _ = junit.write_merged([tmp_path / "r"], tmp_path / "reused.xml", read)
    assert fresh.read_bytes() == reused.read_bytes()
    assert a.is_dir()
    xml = junitparser.JUnitXml.fromfile(str(reused))
    cases = {c.name: c for s in xml for c in s}
    failure = cases["test_bad"].result[0]
    assert failure.message == "bell and[31m escape, tab\tkept"
    assert failure.text == "xy\nz"
    # flaky is a pass to JUnit readers, with Surefire's flakyFailure saying so.
    assert cases["test_flaky"].result == []
    assert '<flakyFailure type="flaky" message="passed after 1 failed run(s)" />' \
        in reused.read_text()
    assert _schema_errors(reused) == []


def _as_elementtree_writes(path: Path) -> bytes:
    """The file as ElementTree parses, indents and writes it again: a writer whose
    escaping or layout is off (a raw newline or quote in an attribute, a bare ``<`` or
    ``&``) fails to parse or comes back different."""
    root = ET.parse(path).getroot()
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


ODD = ['a & b < c > d "q" \'s\' ]]> <![CDATA[ &amp;', "cr\rlf\n tab\t end",
       "control \x00\x01\x08\x0b\x0c\x1b[31m\x1f kept: \x7f", "wide \U0001f600 é \u2028",
       "byte \udcff", "   ", "long " + "x<&" * 1000]


def test_the_merged_file_is_xml_as_elementtree_writes_it_for_any_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merged file is written as text, not through ElementTree: its escaping holds for
    markup characters, newlines and tabs in attributes, control characters, non-BMP text,
    undecodable bytes and long texts, and credentials in messages stay redacted."""
    token = "ghp_" + "Q1w2E3r4T5" * 4
    recs = [{"nodeid": f"suites/s/test_odd.py::TestK::test_{i}_{outcome}[{text[:30]}]",
             "outcome": outcome, "message": text, "longrepr": text.replace("\r", "")}
            for i, text in enumerate(ODD)
            for outcome in (outcomes.FAILED, outcomes.SKIPPED, outcomes.PASSED)]
    recs += [{"nodeid": "t.py::test_token", "outcome": outcomes.ERROR,
              "message": f"push with {token} failed"},
             {"nodeid": "t.py::test_empty", "outcome": outcomes.SKIPPED, "message": ""}]
    _cell_folder(tmp_path / "r" / "cpu-2.13", recs)
    out, _ = junit.write_merged([tmp_path / "r"], tmp_path / "m.xml")
    assert out.read_bytes() == _as_elementtree_writes(out)
    assert _schema_errors(out) == []
    cases = {c.name.split("[")[0]: c for s in junitparser.JUnitXml.fromfile(str(out))
             for c in s}
    gone = dict.fromkeys(map(chr, [*range(0x09), 0x0b, 0x0c, *range(0x0e, 0x20)]))
    for i, text in enumerate(ODD):
        want = text.translate(str.maketrans(gone)).replace("\udcff", "\\xff")
        assert cases[f"test_{i}_failed"].name == f"test_{i}_failed[{want[:30]}]"
        failure, = cases[f"test_{i}_failed"].result
        assert failure.message == want[:2000]
        assert failure.text == want.replace("\r", "")
        skipped, = cases[f"test_{i}_skipped"].result
        assert (skipped.type, skipped.message) == ("skipped", want[:2000])
        assert cases[f"test_{i}_passed"].result == []
    assert cases["test_token"].result[0].message == "push with <redacted> failed"
    assert token not in out.read_text()
    assert '<skipped type="skipped" message="" />' in out.read_text()
    # The check above catches a writer that leaves a newline raw in an attribute (a
    # reader turns it into a space): planted here.
    monkeypatch.setattr(junit, "_attr", lambda t: t.replace("&", "&amp;").replace(
        "<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))
    bad, _ = junit.write_merged([tmp_path / "r"], tmp_path / "bad.xml")
    assert bad.read_bytes() != _as_elementtree_writes(bad)


@pytest.mark.parametrize(("plant", "reason"), [
    (lambda t: t.replace('time="0.500" />', 'time="0.500">\n      <properties>\n'
                         '        <property name="worker" value="gw0" />\n'
                         '      </properties>\n    </testcase>', 1), "properties"),
    (lambda t: t.replace('<testsuites name="accelgrid"', '<testsuites skipped="0"', 1),
     "skipped"),
    (lambda t: t.replace('time="1.000" timestamp', 'time="nan" timestamp', 1), "time"),
    (lambda t: t.replace('<testsuite name="cpu-2.13"', '<testsuite', 1), "name"),
])
def test_the_schema_check_rejects_what_junit_10_does_not_allow(
        tmp_path: Path, plant, reason: str) -> None:
    """Planted faults: a testcase's properties and <testsuites skipped=...> (what the
    merged file had before), a suite time that is not a number, a suite without its name."""
    _cell_folder(tmp_path / "r" / "cpu-2.13", [
        {"nodeid": "t.py::test_ok", "outcome": outcomes.PASSED},
        {"nodeid": "t.py::test_skip", "outcome": outcomes.SKIPPED, "message": "no GPU"}])
    out, _ = junit.write_merged([tmp_path / "r"], tmp_path / "m.xml")
    assert _schema_errors(out) == []
    text = out.read_text()
    bad = tmp_path / "bad.xml"
    bad.write_text(plant(text))
    assert bad.read_text() != text
    errors = _schema_errors(bad)
    assert errors and any(reason in e for e in errors), errors
