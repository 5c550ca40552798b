"""Issue 16, known_issues.yaml values: each variant of a small valid registry gives one
``FILE:LINE: key: message`` line (tests/bad_known_issues/ holds the older corpus), and a
bad registry found while a cell starts stops it before its previous results are touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.mini_projects import run_request

from accelgrid import cli
from accelgrid.base import contract, errors
from accelgrid.config import known_issues
from accelgrid.config.matrix import load_matrix
from accelgrid.config.validation import ValidationFailed
from accelgrid.run.cell import run_cell

TESTS = Path(__file__).resolve().parents[1]
BASE = (TESTS / "base_matrix.yaml").read_text().replace("path: .", "path: suites/smoke")
REGISTRY = """schema: 1
issues:
  "pytorch/pytorch#1":
    title: a bug
    url: https://github.com/pytorch/pytorch/issues/1
    scope:
      devices: [xpu]
      torch: "<2.13"
      packages: {transformers: ">=4"}
    tests:
      - suites/smoke/test_a.py
      - {test: "suites/smoke/test_a.py::test_x", torch: "<2.5"}
    expect: failed
    match: "boom"
"""
ISSUE = "issues.pytorch/pytorch#1"

CASES: list[tuple[str, str, str, str]] = [
    # (id, old, new, "key: message" the one line ends with)
    ("test-absolute", "- suites/smoke/test_a.py\n", "- /etc/passwd\n",
     f"{ISSUE}.tests[0]: '/etc/passwd' is not relative to the project (node ids are)"),
    ("test-dotdot", "- suites/smoke/test_a.py\n", "- ../../etc/passwd\n",
     f"{ISSUE}.tests[0]: '../../etc/passwd' leads outside the project ('..')"),
    ("test-inner-dotdot", "- suites/smoke/test_a.py\n", "- suites/../../x.py\n",
     "leads outside the project"),
    ("test-home", "- suites/smoke/test_a.py\n", "- ~/t.py\n", "is not relative to the project"),
    ("test-nul", "- suites/smoke/test_a.py\n", '- "suites/\\0.py"\n', "cannot hold a NUL"),
    ("test-narrowed-absolute", '{test: "suites/smoke/test_a.py::test_x"',
     '{test: "/etc/passwd::x"', f"{ISSUE}.tests[1].test: '/etc/passwd::x' is not relative"),
    ("test-5000-chars", "- suites/smoke/test_a.py\n", "- " + "t" * 5000 + "\n",
     "matches no test file"),
    ("test-empty", "- suites/smoke/test_a.py\n", "- ''\n", "tests[0]"),
    ("match-overflow", 'match: "boom"', 'match: "a{99999999999}"',
     f"{ISSUE}.match: not a valid regular expression: the repetition number is too large"),
    ("match-bad", 'match: "boom"', 'match: "(?P<"', "not a valid regular expression"),
    ("match-number", 'match: "boom"', "match: 5", f"{ISSUE}.match: expected string, got a number"),
    ("url-javascript", "url: https://github.com/pytorch/pytorch/issues/1",
     "url: 'javascript:alert(1)'", "'javascript:alert(1)' is not the link of pytorch/pytorch#1"),
    ("url-credentials", "url: https://github.com/pytorch/pytorch/issues/1",
     "url: https://user:hunter2@github.com/pytorch/pytorch/issues/1",
     "'https://<redacted>@github.com/pytorch/pytorch/issues/1' is not the link"),
    ("url-5000", "url: https://github.com/pytorch/pytorch/issues/1",
     "url: https://github.com/" + "x" * 5000, "is not the link of pytorch/pytorch#1"),
    ("url-list", "url: https://github.com/pytorch/pytorch/issues/1", "url: [a]",
     f"{ISSUE}.url: expected string, got a list"),
    ("torch-range-garbage", 'torch: "<2.13"', 'torch: "banana"', "scope.torch: bad range"),
    ("torch-range-empty", 'torch: "<2.13"', 'torch: ">=2.5,<2.4"', "matches no version"),
    ("torch-range-outside", 'torch: "<2.13"', 'torch: ">=9"', "matches no torch release"),
    ("torch-range-5000-digits", 'torch: "<2.13"', 'torch: "<' + "9" * 5000 + '"',
     "scope.torch"),
    ("torch-range-number", 'torch: "<2.13"', "torch: 2.13", "expected string, got a number"),
    ("narrowed-range-garbage", 'torch: "<2.5"}', 'torch: "soon"}', "tests[1].torch: bad range"),
    ("package-range-garbage", 'transformers: ">=4"', 'transformers: "~~4"', "bad range"),
    ("package-unknown", 'transformers: ">=4"', 'numpy: ">=1"', "unknown name 'numpy'"),
    ("device-unknown", "devices: [xpu]", "devices: [tpu]", "unknown device 'tpu'"),
    ("devices-empty", "devices: [xpu]", "devices: []", "must not be empty"),
    ("devices-string", "devices: [xpu]", "devices: xpu", "expected array, got a string"),
    ("profile-unknown", "devices: [xpu]\n", "devices: [xpu]\n      profiles: [fast]\n",
     "unknown profile 'fast'"),
    ("expect-passed", "expect: failed", "expect: passed", "'passed' is not one of"),
    ("expect-list", "expect: failed", "expect: [failed]", "is not one of"),
    ("tests-empty", "    tests:\n      - suites/smoke/test_a.py\n"
                    '      - {test: "suites/smoke/test_a.py::test_x", torch: "<2.5"}\n',
     "    tests: []\n", f"{ISSUE}.tests: must not be empty"),
    ("tests-item-number", "- suites/smoke/test_a.py\n", "- 5\n", "expected string or object"),
    ("tests-extra-key", 'torch: "<2.5"}', 'torch: "<2.5", when: later}', "unknown key 'when'"),
    ("title-empty", "title: a bug", "title: ''", "must not be empty"),
    ("title-missing", "    title: a bug\n", "", "'title' is required"),
    ("status-closed", "    expect: failed\n", "    expect: failed\n    status: closed\n",
     "'closed' is not one of: open, fixed"),
    ("fixed-in-garbage", "    expect: failed\n", "    expect: failed\n    fixed_in: soon\n",
     "'soon' is not valid"),
    ("issue-id-garbage", '"pytorch/pytorch#1":', '"not an id":', "invalid name 'not an id'"),
    ("issue-id-zero", '"pytorch/pytorch#1":', '"pytorch/pytorch#0":', "invalid name"),
    ("issues-null", REGISTRY, "schema: 1\nissues: ~\n", "issues: expected object, got nothing"),
    ("schema-2", "schema: 1", "schema: 2", "'2' is not one of: 1"),
    ("schema-huge", "schema: 1", "schema: " + "9" * 5000, "cannot read '9999"),
]
IDS = [c[0] for c in CASES]


def _project(tmp_path: Path, registry: str = REGISTRY) -> Path:
    proj = tmp_path / "proj"
    (proj / "suites" / "smoke").mkdir(parents=True)
    (proj / "suites" / "smoke" / "test_a.py").write_text("def test_x():\n    pass\n")
    (proj / "matrix.yaml").write_text(BASE)
    (proj / "known_issues.yaml").write_text(registry)
    return proj


def test_the_base_registry_is_valid(tmp_path) -> None:
    proj = _project(tmp_path)
    registry = known_issues.load_registry(proj / "known_issues.yaml",
                                          load_matrix(proj / "matrix.yaml"))
    assert list(registry.issues) == ["pytorch/pytorch#1"]


@pytest.mark.parametrize("case", IDS)
def test_bad_registry_value_is_one_line(tmp_path, capsys, case: str) -> None:
    _, old, new, says = CASES[IDS.index(case)]
    assert old in REGISTRY, case
    proj = _project(tmp_path, REGISTRY.replace(old, new, 1))
    path = proj / "known_issues.yaml"
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(path, load_matrix(proj / "matrix.yaml"))
    (problem,) = info.value.problems
    assert str(problem).startswith(f"{path}:{problem.line}: ") and problem.line, str(problem)
    assert says in str(problem), str(problem)
    assert len(str(problem)) - len(str(path)) < 300
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "repro", "--list"]) == \
        errors.EXIT_INVALID
    assert capsys.readouterr().err.strip() == str(problem)


def test_a_bad_registry_stops_a_cell_before_its_results_are_touched(tmp_path, python) -> None:
    # It used to delete the cell's previous results, then die with a 20-line traceback.
    proj = _project(tmp_path, REGISTRY.replace("expect: failed", "expect: passed"))
    matrix = load_matrix(proj / "matrix.yaml")
    out = tmp_path / "results"
    previous = out / "cpu-2.13"
    previous.mkdir(parents=True)
    (previous / contract.TESTS_FILE).write_text('{"nodeid": "t.py::a", "outcome": "passed"}\n')
    before = (previous / contract.TESTS_FILE).read_bytes()
    with pytest.raises(ValidationFailed) as info:
        run_cell(run_request(matrix.cell("cpu-2.13"), python, proj, out))
    assert "expect: 'passed' is not one of" in str(info.value)
    assert (previous / contract.TESTS_FILE).read_bytes() == before
    assert sorted(p.name for p in previous.iterdir()) == [contract.TESTS_FILE]


def test_a_bad_registry_fails_the_nox_session_in_one_line_and_keeps_results(tmp_path) -> None:
    import subprocess
    import sys

    root = TESTS.parent
    proj = _project(tmp_path, REGISTRY.replace("expect: failed", "expect: passed"))
    (proj / "noxfile.py").write_text((root / "noxfile.py").read_text())
    out = tmp_path / "results"
    (out / "cpu-2.13").mkdir(parents=True)
    (out / "cpu-2.13" / contract.TESTS_FILE).write_text(json.dumps(
        {"nodeid": "t.py::a", "outcome": "passed"}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"),
                           "--no-venv", "-s", "cpu-2.13"], cwd=proj, capture_output=True,
                          text=True, timeout=300,
                          env={**__import__("os").environ, "ACCELGRID_RESULTS_DIR": str(out)})
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    failed = [line for line in proc.stderr.splitlines() if "aborted" in line or "failed" in line]
    assert any("expect: 'passed' is not one of: failed, error, skipped" in line
               for line in failed), proc.stderr
    assert (out / "cpu-2.13" / contract.TESTS_FILE).read_text().count("t.py::a") == 1
