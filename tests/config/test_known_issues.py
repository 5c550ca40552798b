"""known_issues.yaml: the repo's registry and its schema file, the bad-registry corpus with
exact messages, PEP 440 ranges in the registry, scopes, and the in-cell plugin on real
pytest runs (xfail with the issue's link, loud failure when the issue looks fixed, other
failures left alone). The range functions themselves: test_versions.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract
from accelgrid.config import known_issues
from accelgrid.config.matrix import load_matrix
from accelgrid.config.model import PIN_NAMES
from accelgrid.config.validation import ValidationFailed, load_schema, schema_text
from accelgrid.results.records import TestRecord as TypedRecord
from accelgrid.run import cellenv, preflight
from accelgrid.run.cell import run_cell
from accelgrid.testing import known_issues_runtime as rt

pytest_plugins = ["pytester"]  # the in-cell plugin on real pytest runs, in process

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "bad_known_issues"
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())
REFERENCE_ISSUES = {"pytorch/pytorch#127929", "pytorch/pytorch#127931", "pytorch/pytorch#127937",
                    "pytorch/pytorch#127941", "pytorch/pytorch#128478", "pytorch/ao#958",
                    "pytorch/ao#584", "pytorch/ao#1720", "huggingface/transformers#41250",
                    "intel/torch-xpu-ops#1571", "intel/torch-xpu-ops#4765",
                    "intel/torch-xpu-ops#1574"}


# --- the repo's registry -----------------------------------------------------------------
@pytest.fixture(scope="module")
def repo() -> tuple:
    root = TESTS.parent
    matrix = load_matrix(root / "matrix.yaml")
    return matrix, known_issues.load_registry(root / "known_issues.yaml", matrix)


def test_repo_registry_covers_reference_issues(repo) -> None:
    matrix, registry = repo
    assert set(registry.issues) == REFERENCE_ISSUES
    for issue in registry.issues.values():
        repro = matrix.root / known_issues.repro_file(issue.id)
        # Each reproduction is marked with its own issue, and the registry names it.
        assert f'pytest.mark.upstream("{issue.id}")' in repro.read_text(), repro
        assert any(p.startswith(known_issues.repro_file(issue.id)) for p, _ in issue.tests)


def test_repo_registry_scopes(repo) -> None:
    matrix, registry = repo
    in_scope = {i: {c.name for c in matrix.cells if registry.get(i).in_scope(c)}
                for i in registry.issues}
    assert in_scope["pytorch/pytorch#127929"] == {"cpu-2.4", "cuda-2.4", "mps-2.4", "xpu-2.4"}
    # The torch 2.4 halves need xpu-2.4, a source build (run on request only).
    for issue_id in ("pytorch/pytorch#127931", "pytorch/pytorch#127937",
                     "pytorch/pytorch#128478"):
        assert in_scope[issue_id] == {"xpu-2.4"}, issue_id
    assert {c.name for c in matrix.cells if c.device in ("cpu", "mps")} == in_scope[
        "pytorch/ao#958"]
    ao = registry.get("pytorch/ao#958")
    assert ao.out_of_scope_reason(matrix.cell("cuda-2.13")) == "device cuda is not in cpu, mps"
    # Seen with transformers 5.17.0 (torch 2.11's pin), not with 5.24.0.
    assert {c.name for c in matrix.cells if c.torch == "2.11"} == in_scope[
        "huggingface/transformers#41250"]
    old = registry.get("pytorch/pytorch#127929")
    assert old.out_of_scope_reason(matrix.cell("cpu-2.5")) == "torch 2.5.1 is outside <2.5"
    # 2.4.x runs the foreach composites (#127412): only their decomposition's CPU fallback
    # is expected there; the correctness tests are expected to pass on every release.
    foreach = registry.get("pytorch/pytorch#127931")
    base = "suites/repro/test_pytorch_pytorch_127931.py::test_foreach_"
    assert foreach.covers(f"{base}without_cpu_fallback[lerp_scalar]", "2.4.1")
    assert not foreach.covers(f"{base}without_cpu_fallback[mul_tensor]", "2.4.1")
    assert not foreach.covers(f"{base}matches_per_tensor[norm]", "2.4.1")


def test_every_entry_names_its_devices(repo, tmp_path: Path) -> None:
    """pytorch/pytorch#127929 once had no device scope: on cuda-2.4 the torch.cuda memory test
    passed and the registry reported a strict XPASS, "looks fixed"."""
    matrix, registry = repo
    assert all(issue.devices for issue in registry.issues.values())
    issue = registry.get("pytorch/pytorch#127929")
    presence = "suites/repro/test_pytorch_pytorch_127929.py::test_xpu_memory_api_exists"
    behaviour = "suites/repro/test_pytorch_pytorch_127929.py::test_memory_stats_track_allocations"
    assert issue.covers(presence, "2.4.1", "cuda") and issue.covers(presence, "2.4.1", "cpu")
    assert not issue.covers(behaviour, "2.4.1", "cuda")     # torch.cuda has them: it passes
    assert issue.covers(behaviour, "2.4.1", "xpu")
    known_issues.cell_env(matrix.cell("cuda-2.4"), matrix.root, tmp_path)
    data = json.loads((tmp_path / contract.KNOWN_ISSUES_FILE).read_text())
    [entry] = [e for e in data["issues"] if e["id"] == issue.id]
    assert entry["tests"] == [{"test": presence, "torch": None}]


def test_unknown_issue_suggests(repo) -> None:
    _, registry = repo
    with pytest.raises(KeyError) as info:
        registry.get("pytorch/ao#959")
    assert "did you mean 'pytorch/ao#958'?" in info.value.args[0]


def test_repo_registry_validates_against_the_shipped_schema(root: Path) -> None:
    schema = load_schema("known-issues")
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert list(validator.iter_errors(yaml.safe_load((root / "known_issues.yaml").read_text()))
                ) == []


def test_registry_names_its_schema_for_editors(root: Path) -> None:
    first = (root / "known_issues.yaml").read_text().splitlines()[0]
    m = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert m, first
    assert (root / m[1]).read_text() == schema_text("known-issues")


def test_schema_agrees_with_the_code() -> None:
    issues = load_schema("known-issues")["properties"]["issues"]
    entry = issues["additionalProperties"]["properties"]
    assert entry["expect"]["enum"] == list(rt.EXPECTED_OUTCOMES)
    assert entry["scope"]["properties"]["packages"]["propertyNames"]["enum"] == [
        p for p in PIN_NAMES if p != "torch"]
    # The same pattern as ISSUE_ID, without Python's named groups (editors use ECMA 262).
    assert issues["propertyNames"]["pattern"] == re.sub(r"\?P<\w+>", "",
                                                         known_issues.ISSUE_ID.pattern)


# --- the corpus ----------------------------------------------------------------------------
def test_every_corpus_file_has_expectations() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml")
    assert files == sorted(EXPECTED), "add the expected messages of new bad registries"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_registry_exact_messages(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix(TESTS / "base_matrix.yaml")
    monkeypatch.chdir(CORPUS)
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(name, matrix)
    assert str(info.value).splitlines() == EXPECTED[name]


def test_cli_prints_registry_errors_without_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(TESTS / "base_matrix.yaml"), "repro", "--registry",
                           "unknown_key.yaml", "--list"], cwd=CORPUS, capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == EXPECTED["unknown_key.yaml"]


# --- PEP 440 ranges in the registry --------------------------------------------------------------
def _registry(tmp_path: Path, scope: str, tests: str = "[config/test_validation.py]") -> Path:
    """A one-entry registry; a scope without devices gets both of the base matrix's."""
    if "devices" not in scope:
        scope = "{devices: [cpu, xpu]" + (", " if scope != "{}" else "") + scope[1:]
    path = tmp_path / "reg.yaml"
    path.write_text(textwrap.dedent(f"""\
        schema: 1
        issues:
          "acme/widgets#1":
            title: widgets break
            scope: {scope}
            tests: {tests}
            expect: failed
        """))
    return path


@pytest.mark.parametrize("scope,cells", [
    ('{torch: "==2.13.*"}', ["cpu-2.13", "xpu-2.13", "xpu-2.13-fallback-debug"]),
    ('{torch: ">=2.4,<2.13"}', ["cpu-2.4", "xpu-2.4"]),
    ('{torch: "!=2.4.1", devices: [xpu]}', ["xpu-2.13", "xpu-2.13-fallback-debug"]),
    ('{torch: "<2.14.0.dev0", packages: {transformers: "==4.57.*"}}', ["cpu-2.4", "xpu-2.4"]),
])
def test_pep440_scopes(tmp_path: Path, scope: str, cells: list[str]) -> None:
    matrix = load_matrix(TESTS / "base_matrix.yaml")
    issue = known_issues.load_registry(_registry(tmp_path, scope), matrix).get("acme/widgets#1")
    assert [c.name for c in matrix.cells if issue.in_scope(c)] == cells


@pytest.mark.parametrize("scope,tests,where,message", [
    ('{torch: ">=2.4;<2.5"}', "[config/test_validation.py]", "scope.torch",
     "bad range '>=2.4;<2.5': '>=2.4;<2.5' is not a clause like '>=2.4' or '<2.5' "
     "(operators: ==, !=, >=, <=, >, <)"),
    ('{torch: "~=2.4"}', "[config/test_validation.py]", "scope.torch",
     "bad range '~=2.4': '~=2.4': '~=' is not taken here; spell the bounds out "
     "(e.g. '>=2.5,==2.*' for '~=2.5'; operators: ==, !=, >=, <=, >, <)"),
    ('{torch: "==2.4.1+xpu"}', "[config/test_validation.py]", "scope.torch",
     "bad range '==2.4.1+xpu': '==2.4.1+xpu': no local version label (+...) in a range; "
     "versions are compared without theirs (2.5.1+xpu is 2.5.1)"),
    ("{packages: {torchao: '>=0.7.*'}}", "[config/test_validation.py]", "scope.packages.torchao",
     "bad range '>=0.7.*': '>=0.7.*': '.*' only goes with == or !="),
    ("{}", '[{test: config/test_validation.py, torch: ">=2.13,"}]', "tests[0].torch",
     "bad range '>=2.13,': '' is not a clause like '>=2.4' or '<2.5' "
     "(operators: ==, !=, >=, <=, >, <)"),
    ('{torch: ">=2.14.0.dev0,<2.14"}', "[config/test_validation.py]", "scope.torch",
     "range '>=2.14.0.dev0,<2.14' matches no version"),
    ('{torch: "==2.13.0.dev1"}', "[config/test_validation.py]", "scope.torch",
     "range '==2.13.0.dev1' matches no torch release of base_matrix.yaml (2.4.1, 2.13.0)"),
])
def test_bad_pep440_range_is_one_line(tmp_path: Path, scope: str, tests: str, where: str,
                                      message: str) -> None:
    path = _registry(tmp_path, scope, tests)
    line = 5 if where.startswith("scope") else 6
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(path, load_matrix(TESTS / "base_matrix.yaml"))
    assert str(info.value).splitlines() == [
        f"{path}:{line}: issues.acme/widgets#1.{where}: {message}"]


# --- test patterns ---------------------------------------------------------------------------
def test_pattern_without_test_covers_its_file() -> None:
    node = "suites/repro/test_a.py::test_x[p1]"
    assert rt.test_matches(node, "suites/repro/test_a.py")
    assert rt.test_matches(node, "suites/repro/test_*.py::test_x*")
    assert not rt.test_matches(node, "suites/repro/test_a.py::test_y")
    assert not rt.test_matches("suites/repro/test_ab.py::test_x", "suites/repro/test_a.py")
    assert rt.test_matches(node, "suites/repro/test_a.py::test_x[p1]")  # brackets literal
    assert not rt.test_matches("suites/repro/test_a.py::test_x[p]", "suites/repro/test_a.py::"
                               "test_x[p1]")


# --- the plugin on real runs -----------------------------------------------------------------
PAYLOAD = '''
import pytest

def test_bug():
    raise AssertionError("widget is broken")

def test_fixed():
    pass

def test_other_failure():
    raise ValueError("something unrelated")

@pytest.fixture
def broken():
    raise RuntimeError("widget fixture broke")

def test_setup_error(broken):
    pass

def test_skips():
    pytest.skip("no widget API in this build")

def test_uncovered():
    pass

def test_old_torch_only():
    raise AssertionError("widget is broken")

def test_xpu_only():
    raise AssertionError("widget is broken")
'''

REGISTRY = '''
schema: 1
issues:
  "acme/widgets#1":
    title: widgets break
    scope: {devices: [cpu], torch: ">=2.13"}
    tests:
      - suites/payload/test_w.py::test_bug
      - suites/payload/test_w.py::test_fixed
      - suites/payload/test_w.py::test_other_failure
    expect: failed
    match: "widget is"
  "acme/widgets#2":
    title: widget fixtures break
    scope: {devices: [cpu, xpu]}
    tests: ["suites/payload/test_w.py::test_setup*"]
    expect: error
  "acme/widgets#3":
    title: widget API missing
    url: https://github.com/acme/widgets/issues/3
    scope: {devices: [cpu], packages: {torchvision: ">=0.1"}}
    tests: [suites/payload/test_w.py::test_skips]
    expect: skipped
  "acme/widgets#4":
    title: only old torch
    scope: {devices: [cpu], torch: "<2.5"}
    tests: [suites/payload/test_w.py::test_old_torch_only]
    expect: failed
  "acme/widgets#5":
    title: xpu only
    scope: {devices: [xpu]}
    tests: [suites/payload/test_w.py::test_xpu_only]
    expect: failed
'''


def _run(proj: Path, python: str) -> tuple[int, dict[str, TypedRecord], Path]:
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    rc = run_cell(run_request(cell, python, proj, proj / "results"))
    folder = proj / "results" / "cpu-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    return rc, {r["nodeid"].split("::")[-1]: r for r in recs}, folder


def test_registry_applied_in_a_real_cell_run(mini_project, python: str, monkeypatch) -> None:
    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    proj = mini_project()
    (proj / "suites" / "payload" / "test_w.py").write_text(PAYLOAD)
    (proj / "known_issues.yaml").write_text(REGISTRY)
    # The dev env has no torchvision: acme/widgets#3's package range is checked at runtime.
    have_tv = subprocess.run([python, "-c", "import importlib.metadata as m; "
                              "m.version('torchvision')"], capture_output=True).returncode == 0
    rc, recs, folder = _run(proj, python)
    got = {name: r["outcome"] for name, r in recs.items()}
    assert got == {
        "test_bug": "xfailed", "test_fixed": "xpassed", "test_other_failure": "failed",
        "test_setup_error": "xfailed", "test_skips": "xfailed" if have_tv else "skipped",
        "test_uncovered": "passed", "test_old_torch_only": "failed", "test_xpu_only": "failed",
    }
    assert rc == 1
    link = {"id": "acme/widgets#1", "url": "https://github.com/acme/widgets/issues/1",
            "title": "widgets break"}
    assert recs["test_bug"]["issue"] == link
    assert recs["test_bug"]["message"] == (
        "acme/widgets#1: widgets break (https://github.com/acme/widgets/issues/1)")
    issue = recs["test_setup_error"]["issue"]
    assert isinstance(issue, dict) and issue["id"] == "acme/widgets#2"  # a ref, not a str
    fixed = recs["test_fixed"]
    assert fixed["issue"] == link
    assert fixed["message"].startswith("[XPASS(strict)] acme/widgets#1 looks fixed in torch 2.13")
    assert "(cell cpu-2.13)" in fixed["message"]
    assert "narrow the scope of acme/widgets#1 in known_issues.yaml" in fixed["message"]
    # A failure the entry does not describe stays a failure, without the issue.
    assert "issue" not in recs["test_other_failure"]
    assert "known issue" in recs["test_other_failure"]["longrepr"]
    assert "issue" not in recs["test_uncovered"]
    # The cell's JSON has the device-matching entries only; the header names the active ones.
    data = json.loads((folder / contract.KNOWN_ISSUES_FILE).read_text())
    assert [e["id"] for e in data["issues"]] == [
        "acme/widgets#1", "acme/widgets#2", "acme/widgets#3", "acme/widgets#4"]


def test_registry_can_be_switched_off(mini_project, python: str, monkeypatch) -> None:
    monkeypatch.setenv(known_issues.ENV_DISABLE, "1")
    proj = mini_project()
    (proj / "suites" / "payload" / "test_w.py").write_text(PAYLOAD)
    (proj / "known_issues.yaml").write_text(REGISTRY)
    _, recs, folder = _run(proj, python)
    assert recs["test_bug"]["outcome"] == "failed" and recs["test_fixed"]["outcome"] == "passed"
    assert not (folder / contract.KNOWN_ISSUES_FILE).exists()


def test_invalid_registry_stops_the_run(mini_project, python: str, monkeypatch) -> None:
    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    proj = mini_project()
    (proj / "suites" / "payload" / "test_w.py").write_text(PAYLOAD)
    (proj / "known_issues.yaml").write_text(REGISTRY.replace("expect: error", "expect: eror"))
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    with pytest.raises(ValidationFailed, match=re.escape(
            "acme/widgets#2.expect: 'eror' is not one of: failed, error, skipped; "
            "did you mean 'error'?")):
        cellenv.cell_env(cell, proj, proj / "results" / "cpu-2.13",
                         checked=preflight.check(cell, proj))


def test_out_of_scope_reason_uses_installed_versions() -> None:
    entry = {"torch": ">=2.13", "packages": {"torchao": ">=0.7"}}
    assert rt.out_of_scope_reason(entry, {"torch": "2.13.0", "torchao": "0.18.0"}) is None
    assert rt.out_of_scope_reason(entry, {"torch": "2.13.0", "torchao": None}) == (
        "torchao is not installed")
    assert rt.out_of_scope_reason(entry, {"torch": "2.4.1", "torchao": "0.8.0"}) == (
        "torch 2.4.1 is outside >=2.13")


@pytest.mark.parametrize("torch,reason", [
    ("2.5.1+xpu", None),                      # the local label is ignored
    ("2.6.0.dev20241001+xpu", "torch 2.6.0.dev20241001+xpu is outside >=2.5,<2.6"),
    ("2.6.0", "torch 2.6.0 is outside >=2.5,<2.6"),
    ("unknown", "torch unknown is outside >=2.5,<2.6"),  # not PEP 440: never in scope
])
def test_installed_local_and_prerelease_versions(torch: str, reason: str | None) -> None:
    entry = {"torch": ">=2.5,<2.6", "tests": [{"test": "t.py", "torch": "==2.5.*"}]}
    assert rt.out_of_scope_reason(entry, {"torch": torch}) == reason
    assert rt.covers(entry, "t.py::test_a", torch) is (reason is None)


def test_upstream_marker_is_registered(tmp_path: Path, python: str) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["accelgrid.testing.pytest_plugin"]\n')
    (tmp_path / "test_m.py").write_text(textwrap.dedent('''
        import pytest
        @pytest.mark.upstream("acme/widgets#1")
        def test_a():
            pass
    '''))
    proc = subprocess.run([python, "-m", "pytest", "--strict-markers", "-q", "-p",
                           "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_test_narrowed_to_other_devices_is_left_alone(mini_project, python: str,
                                                     monkeypatch) -> None:
    """A test narrowed to xpu that passes in a cpu cell is a plain pass, not "looks fixed";
    an entry whose tests all concern other devices is not written for the cell at all."""
    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    proj = mini_project()
    (proj / "suites" / "payload" / "test_n.py").write_text(
        "def test_api_present():\n    raise AssertionError('api missing')\n"
        "def test_behaviour():\n    pass\n")
    (proj / "known_issues.yaml").write_text(
        "schema: 1\nissues:\n"
        '  "acme/api#1":\n    title: api missing\n    scope: {devices: [cpu, xpu]}\n'
        "    tests:\n      - suites/payload/test_n.py::test_api_present\n"
        "      - {test: suites/payload/test_n.py::test_behaviour, devices: [xpu]}\n"
        "    expect: failed\n"
        '  "acme/api#2":\n    title: xpu only test\n    scope: {devices: [cpu, xpu]}\n'
        "    tests:\n      - {test: suites/payload/test_n.py::test_behaviour, devices: [xpu]}\n"
        "    expect: failed\n")
    _, recs, folder = _run(proj, python)
    assert recs["test_api_present"]["outcome"] == "xfailed"
    assert recs["test_behaviour"]["outcome"] == "passed" and "issue" not in recs["test_behaviour"]
    data = json.loads((folder / contract.KNOWN_ISSUES_FILE).read_text())
    assert [e["id"] for e in data["issues"]] == ["acme/api#1"]


# --- entries scoped by the runner's hardware family -------------------------------------------
HW_PAYLOAD = '''
import os

def test_fp64_math():
    # stands in for a bug only ATS-M shows
    assert os.environ.get("ACCELGRID_HARDWARE") != "ats-m", "fp64 result off on this card"

def test_flags_follow_the_hardware():
    on_atsm = os.environ.get("ACCELGRID_HARDWARE") == "ats-m"
    assert os.environ.get("OverrideDefaultFP64Settings") == ("1" if on_atsm else None)
'''

HW_REGISTRY = '''
schema: 1
issues:
  "acme/cards#1":
    title: fp64 off on ATS-M
    scope: {devices: [xpu], hardware: [ats-m]}
    tests: [suites/payload/test_hw.py::test_fp64_math]
    expect: failed
    match: "fp64 result off"
'''


@pytest.mark.parametrize(("pci_id", "family", "fp64"), [(0x56C0, "ats-m", "xfailed"),
                                                         (0x0BD5, "pvc", "passed")])
def test_hardware_scoped_entry_applies_only_on_that_hardware(
        mini_project, python: str, monkeypatch, tmp_path: Path, pci_id: int, family: str,
        fp64: str) -> None:
    """On ATS-M the entry turns the failure into an xfail; on a PVC runner the test passes
    and the entry is not in scope, so nothing claims the bug "looks fixed"."""
    from helpers.fake_hosts import INTEL, fake_gpu

    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    for var in ("ACCELGRID_HARDWARE", "ACCELGRID_DRIVER", "ACCELGRID_DEVICES",
                "ZE_AFFINITY_MASK"):
        monkeypatch.delenv(var, raising=False)
    host = tmp_path / "host"
    fake_gpu(host, 128, INTEL, pci_id)
    monkeypatch.setenv("ACCELGRID_HOST_ROOT", str(host))
    proj = mini_project()
    (proj / "suites" / "payload" / "test_hw.py").write_text(HW_PAYLOAD)
    (proj / "known_issues.yaml").write_text(HW_REGISTRY)
    cell = load_matrix(proj / "matrix.yaml").cell("xpu-2.13")
    run_cell(run_request(cell, python, proj, proj / "results"))
    folder = proj / "results" / "xpu-2.13"
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    got = {r["nodeid"].split("::")[-1]: r["outcome"] for r in recs}
    assert got == {"test_fp64_math": fp64, "test_flags_follow_the_hardware": "passed"}
    hardware = json.loads((folder / contract.HARDWARE_FILE).read_text())
    assert (hardware["family"], hardware["how"]) == (family, "detected")
    assert hardware["gpus"][0]["family"] == family
    data = json.loads((folder / contract.KNOWN_ISSUES_FILE).read_text())
    assert [e["id"] for e in data["issues"]] == (["acme/cards#1"] if family == "ats-m" else [])



# --- scopes by profile, package pin, pinned hardware and driver --------------------------------
def _hw_matrix(tmp_path: Path):
    """The base matrix with a second driver stack and xpu-2.4 pinned to pvc on lts (an
    include rule with hardware/driver pins a cell to such runners; the others are unpinned:
    whichever runner runs them decides)."""
    text = (TESTS / "base_matrix.yaml").read_text().replace(
        "      lts: {label: intel-driver-lts}\n",
        "      lts: {label: intel-driver-lts}\n      rolling: {label: intel-driver-rolling}\n")
    text += '    - {device: xpu, torch: "2.4", hardware: pvc, driver: lts}\n'
    (tmp_path / "matrix.yaml").write_text(text)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "test_validation.py").write_text("def test_x():\n    pass\n")
    matrix = load_matrix(tmp_path / "matrix.yaml")
    assert (matrix.cell("xpu-2.4").hardware, matrix.cell("xpu-2.4").driver) == ("pvc", "lts")
    return matrix


@pytest.mark.parametrize("scope,cells,reason", [
    ("{profiles: [fallback-debug]}", ["xpu-2.13-fallback-debug"],
     ("xpu-2.13", "profile default is not in fallback-debug")),
    ("{profiles: [default]}", ["cpu-2.4", "cpu-2.13", "xpu-2.4", "xpu-2.13"],
     ("xpu-2.13-fallback-debug", "profile fallback-debug is not in default")),
    # The base matrix pins torch and transformers only.
    ("{packages: {torchao: '>=0.7'}}", [], ("cpu-2.13", "the cell pins no torchao")),
    ("{devices: [xpu], hardware: [ats-m]}", ["xpu-2.13", "xpu-2.13-fallback-debug"],
     ("xpu-2.4", "hardware pvc is not in ats-m")),
    ("{devices: [xpu], hardware: [pvc]}", ["xpu-2.4", "xpu-2.13", "xpu-2.13-fallback-debug"],
     None),
    ("{devices: [xpu], drivers: [rolling]}", ["xpu-2.13", "xpu-2.13-fallback-debug"],
     ("xpu-2.4", "driver lts is not in rolling")),
])
def test_scopes_by_profile_package_hardware_and_driver(tmp_path: Path, scope: str,
                                                       cells: list[str], reason) -> None:
    matrix = _hw_matrix(tmp_path)
    issue = known_issues.load_registry(_registry(tmp_path, scope), matrix).get("acme/widgets#1")
    assert [c.name for c in matrix.cells if issue.in_scope(c)] == cells
    if reason:
        assert issue.out_of_scope_reason(matrix.cell(reason[0])) == reason[1]


def test_an_entry_naming_hardware_or_drivers_is_on_a_runner_that_has_them(tmp_path) -> None:
    """The runner's family and driver (None: not known) against an entry's: an entry that
    names some is out of scope where they are not known (on_runner's docstring)."""
    matrix = _hw_matrix(tmp_path)
    both = known_issues.load_registry(_registry(
        tmp_path, "{devices: [xpu], hardware: [ats-m], drivers: [lts]}"), matrix).get(
        "acme/widgets#1")
    assert both.on_runner("ats-m", "lts")
    assert not both.on_runner("pvc", "lts") and not both.on_runner("ats-m", "rolling")
    assert not both.on_runner(None, "lts") and not both.on_runner("ats-m", None)
    family = known_issues.load_registry(_registry(
        tmp_path, "{devices: [xpu], hardware: [ats-m]}"), matrix).get("acme/widgets#1")
    assert family.on_runner("ats-m", None) and family.on_runner("ats-m", "rolling")
    assert not family.on_runner("pvc", "lts")
    stack = known_issues.load_registry(_registry(
        tmp_path, "{devices: [xpu], drivers: [lts]}"), matrix).get("acme/widgets#1")
    assert stack.on_runner(None, "lts") and not stack.on_runner("pvc", "rolling")


def test_registry_entries_cannot_be_changed_in_place(repo) -> None:
    """load_matrix keeps a matrix while its file is unchanged, and every caller shares
    the registry's entries: one caller narrowing a scope must not narrow it for all."""
    import dataclasses

    _, registry = repo
    with pytest.raises(dataclasses.FrozenInstanceError):
        registry.get("pytorch/ao#958").devices = ("cuda",)


def test_unknown_issue_lists_the_known_ones(repo) -> None:
    _, registry = repo
    with pytest.raises(KeyError) as info:
        registry.get("acme/widgets#1")
    message = info.value.args[0]
    assert message.startswith("acme/widgets#1 is not in ")
    assert set(message.rsplit("(known: ", 1)[1].rstrip(")").split(", ")) == REFERENCE_ISSUES


@pytest.mark.parametrize("bad", ["pytorch#127929", "pytorch/pytorch#0", "pytorch/pytorch/127929",
                                 "pytorch/pytorch#12a"])
def test_issue_links_and_repro_files_need_an_issue_id(bad: str) -> None:
    for what in (known_issues.issue_url, known_issues.repro_file):
        with pytest.raises(ValueError, match=re.escape(f"'{bad}' is not an issue id like "
                                                       "owner/repo#123")):
            what(bad)
    # The forms a good id gives (GitHub's issue link; suites/repro's file name).
    assert known_issues.issue_url("pytorch/ao#958") == "https://github.com/pytorch/ao/issues/958"
    assert known_issues.repro_file("huggingface/transformers#41250") == (
        "suites/repro/test_huggingface_transformers_41250.py")


def test_a_long_bad_range_or_link_stays_one_short_line(tmp_path: Path) -> None:
    """A message quotes at most a short cut of what the file holds (validation.short), so
    a pasted paragraph in a range or a link still gives one readable line."""
    long_range = ">=2.4;" + "<2.5;" * 80
    path = _registry(tmp_path, f'{{torch: "{long_range}"}}')
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(path, load_matrix(TESTS / "base_matrix.yaml"))
    [line] = str(info.value).splitlines()
    assert len(line) < len(str(path)) + 250, line
    text = path.read_text().replace(
        "    title: widgets break\n",
        "    title: widgets break\n    url: https://github.com/acme/widgets/issues/"
        + "1" * 400 + "\n")
    path.write_text(text.replace(long_range, ">=2.4"))
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(path, load_matrix(TESTS / "base_matrix.yaml"))
    [line] = str(info.value).splitlines()
    assert "is not the link of acme/widgets#1" in line
    assert len(line) < len(str(path)) + 250, line


def test_registry_for_run_needs_the_file_and_no_opt_out(tmp_path: Path, monkeypatch) -> None:
    matrix = _hw_matrix(tmp_path)
    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    assert known_issues.registry_for_run(tmp_path) is None  # no known_issues.yaml
    assert known_issues.cell_env(matrix.cell("cpu-2.13"), tmp_path, tmp_path / "r") == {}
    _registry(tmp_path, "{}").rename(tmp_path / "known_issues.yaml")
    registry = known_issues.registry_for_run(tmp_path)
    assert registry is not None and set(registry.issues) == {"acme/widgets#1"}
    monkeypatch.setenv(known_issues.ENV_DISABLE, "1")
    assert known_issues.registry_for_run(tmp_path) is None
    monkeypatch.setenv(known_issues.ENV_DISABLE, "0")  # only "1" opts out
    assert known_issues.registry_for_run(tmp_path) is not None


def test_a_cells_json_has_the_entries_of_its_device(repo, tmp_path: Path) -> None:
    """known_issues.yaml's scope.devices: #127929 and transformers#41250 name cpu, ao#958
    cpu and mps; the other entries are xpu's or cuda's. The folder is made, parents too."""
    matrix, _ = repo
    folder = tmp_path / "results" / "cpu-2.4"
    env = known_issues.cell_env(matrix.cell("cpu-2.4"), matrix.root, folder)
    assert env == {"ACCELGRID_KNOWN_ISSUES": str(folder / contract.KNOWN_ISSUES_FILE)}
    data = json.loads((folder / contract.KNOWN_ISSUES_FILE).read_text())
    assert sorted(e["id"] for e in data["issues"]) == [
        "huggingface/transformers#41250", "pytorch/ao#958", "pytorch/pytorch#127929"]
    assert data["cell"] == "cpu-2.4"
    known_issues.cell_env(matrix.cell("cpu-2.4"), matrix.root, folder)  # again: rewritten


# --- the in-cell plugin, in process (pytester): each way a covered test can end ---------------

PLUGIN_PAYLOAD = PAYLOAD + '''
def test_long_failure():
    raise AssertionError("widget is broken: " + "x" * 2000)

def test_skips_with_other_reason():
    pytest.skip("widget API present but disabled")
'''


def _entry(issue_id: str, tests: list[str], expect: str, match: str | None = None,
           torch: str | None = None, packages: dict | None = None) -> dict:
    """The cell's JSON entry as the runner writes it (KnownIssue.runtime_entry)."""
    return known_issues.KnownIssue(
        id=issue_id, url=known_issues.issue_url(issue_id), title=f"{issue_id} breaks",
        tests=tuple((t, None) for t in tests), expect=expect, match=match, devices=("cpu",),
        torch=torch, packages=packages or {}).runtime_entry("cpu")


PLUGIN_ENTRIES = [
    _entry("acme/widgets#1", ["test_w.py::test_bug", "test_w.py::test_fixed",
                              "test_w.py::test_other_failure", "test_w.py::test_long_failure"],
           "failed", match="widget is", torch=">=2.13"),
    _entry("acme/widgets#2", ["test_w.py::test_setup*"], "error"),
    # pytest reports a skip as "Skipped: <reason>"; the entry's match sees the reason.
    _entry("acme/widgets#3", ["test_w.py::test_skips*"], "skipped", match="^no widget API",
           packages={"torchvision": ">=0.1"}),
    _entry("acme/widgets#4", ["test_w.py::test_old_torch_only"], "failed", torch="<2.5"),
    _entry("acme/widgets#5", ["test_w.py::test_xpu_only"], "failed",
           packages={"torchvision": ">=0.30"}),
]


def _outcomes(pytester: pytest.Pytester, entries: list[dict], versions: dict,
              cell: str = "cpu-2.13") -> tuple[dict[str, tuple[str, Any]], str]:
    """{test name: (outcome, its report)} of a real pytest run of PLUGIN_PAYLOAD with the
    plugin registered as configure() registers it, and the header's line. (A report is Any:
    the plugin sets attributes of its own on it, wasxfail and accelgrid_issue.)"""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_w=PLUGIN_PAYLOAD)
    plugin = rt.KnownIssues(entries, cell, versions)
    rec = pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider", plugins=[plugin])
    out: dict[str, tuple[str, Any]] = {}
    for rep in rec.getreports("pytest_runtest_logreport"):
        name = rep.nodeid.split("::")[-1]
        if hasattr(rep, "wasxfail"):
            out[name] = ("xfailed", rep)
        elif rep.failed:
            out.setdefault(name, ("failed" if rep.when == "call" else "error", rep))
        elif rep.skipped:
            out.setdefault(name, ("skipped", rep))
        elif rep.when == "call":
            out.setdefault(name, ("passed", rep))
    config = rec._pluginmanager.get_plugin("pytestconfig")
    assert config is not None
    return out, plugin.pytest_report_header(config)


def test_the_plugin_turns_each_expected_ending_into_an_xfail(pytester) -> None:
    got, header = _outcomes(pytester, PLUGIN_ENTRIES, {"torch": "2.13.0",
                                                       "torchvision": "0.28.0"})
    assert {n: o for n, (o, _) in got.items()} == {
        "test_bug": "xfailed", "test_fixed": "failed", "test_other_failure": "failed",
        "test_setup_error": "xfailed", "test_skips": "xfailed", "test_uncovered": "passed",
        "test_old_torch_only": "failed", "test_xpu_only": "failed",
        "test_long_failure": "xfailed", "test_skips_with_other_reason": "skipped"}
    # Out of scope: #4 (torch 2.13.0 is outside <2.5), #5 (torchvision 0.28.0 < 0.30).
    assert header == "accelgrid known issues in scope: acme/widgets#1, acme/widgets#2, " \
                     "acme/widgets#3"
    bug = got["test_bug"][1]
    assert bug.wasxfail == (
        "acme/widgets#1: acme/widgets#1 breaks (https://github.com/acme/widgets/issues/1)")
    assert bug.accelgrid_issue == {"id": "acme/widgets#1", "title": "acme/widgets#1 breaks",
                                   "url": "https://github.com/acme/widgets/issues/1"}
    assert got["test_setup_error"][1].when == "setup"
    # A pass of a covered test: loud, one line, with the issue.
    fixed = got["test_fixed"][1]
    assert fixed.when == "call"
    assert str(fixed.longrepr) == (
        "[XPASS(strict)] acme/widgets#1 looks fixed in torch 2.13.0 (cell cpu-2.13): "
        "test_w.py::test_fixed passed but the registry expects it to be failed; narrow the "
        "scope of acme/widgets#1 in known_issues.yaml "
        "(https://github.com/acme/widgets/issues/1)")
    assert fixed.accelgrid_issue["id"] == "acme/widgets#1"


def test_an_ending_the_entry_does_not_describe_stays_and_says_what_was_expected(
        pytester) -> None:
    got, _ = _outcomes(pytester, PLUGIN_ENTRIES, {"torch": "2.13.0", "torchvision": "0.28.0"})
    other = got["test_other_failure"][1]
    assert not hasattr(other, "accelgrid_issue")
    [note] = [s[1] for s in other.longrepr.sections if s[0] == "known issue"]
    assert note == ("acme/widgets#1 expects this test to be failed matching 'widget is' here; "
                    "it was failed: ValueError: something unrelated")
    skipped = got["test_skips_with_other_reason"][1]
    [note] = [s[1] for s in skipped.sections if s[0] == "known issue"]
    assert note == ("acme/widgets#3 expects this test to be skipped matching '^no widget API' "
                    "here; it was skipped: widget API present but disabled")
    # The failure's text is quoted up to 500 characters: the note stays readable.
    assert got["test_long_failure"][0] == "xfailed"  # it matched: no note
    entries = [dict(PLUGIN_ENTRIES[0], match="widget is fine")]
    got, _ = _outcomes(pytester, entries, {"torch": "2.13.0"})
    [note] = [s[1] for s in got["test_long_failure"][1].longrepr.sections
              if s[0] == "known issue"]
    quoted = note.split("it was failed: ", 1)[1]
    assert quoted == ("AssertionError: widget is broken: " + "x" * 2000)[:500]


def test_a_test_the_entry_expects_to_error_is_left_alone_when_it_fails_in_the_call(
        pytester) -> None:
    entries = [_entry("acme/widgets#2", ["test_w.py::test_bug", "test_w.py::test_fixed"],
                      "error")]
    got, _ = _outcomes(pytester, entries, {"torch": "2.13.0"})
    assert got["test_bug"][0] == "failed" and not hasattr(got["test_bug"][1], "wasxfail")
    assert got["test_fixed"][0] == "failed"  # a pass is still "looks fixed"
    assert str(got["test_fixed"][1].longrepr).startswith("[XPASS(strict)] acme/widgets#2 "
                                                         "looks fixed in torch 2.13.0")


def test_without_a_cell_name_or_torch_the_message_says_so(pytester) -> None:
    entries = [_entry("acme/widgets#1", ["test_w.py::test_fixed"], "failed")]
    got, header = _outcomes(pytester, entries, {}, cell="")
    assert str(got["test_fixed"][1].longrepr).startswith(
        "[XPASS(strict)] acme/widgets#1 looks fixed in this version: test_w.py::test_fixed")
    # An entry without ranges applies whatever is (or is not) installed.
    assert header == "accelgrid known issues in scope: acme/widgets#1"
    assert rt.out_of_scope_reason({"torch": None, "packages": {}}, {}) is None


def test_an_xfail_the_test_declares_itself_is_left_to_pytest(pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_w='''
import pytest

@pytest.mark.xfail(reason="declared by the test", strict=True)
def test_bug():
    raise AssertionError("widget is broken")

@pytest.mark.xfail(reason="declared by the test", strict=True)
def test_fixed():
    pass
''')
    entry = _entry("acme/widgets#1", ["test_w.py::test_bug", "test_w.py::test_fixed"], "failed",
                   match="widget is")
    plugin = rt.KnownIssues([entry], "cpu-2.13", {"torch": "2.13.0"})
    rec = pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider", plugins=[plugin])
    calls = {r.nodeid.split("::")[-1]: r for r in rec.getreports("pytest_runtest_logreport")
             if r.when == "call"}
    assert calls["test_bug"].wasxfail == "declared by the test"
    assert not hasattr(calls["test_bug"], "accelgrid_issue")
    # pytest's own strict XPASS is a failure without an exception: it stays pytest's.
    fixed = calls["test_fixed"]
    assert fixed.failed and not hasattr(fixed, "accelgrid_issue")
    assert str(fixed.longrepr).startswith("[XPASS(strict)] declared by the test")
    assert ("known issue", "acme/widgets#1 expects this test to be failed matching "
            "'widget is' here; it was failed: ") in fixed.sections


def test_a_module_importing_test_matches_collects_no_test_from_it(pytester) -> None:
    """``test_matches`` is named like a test; a test file that imports it (as this one's
    neighbours do) must not collect it."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_m="from accelgrid.testing.known_issues_runtime import test_matches\n\n"
                               "def test_a():\n    assert test_matches('a.py::t', 'a.py')\n")
    rec = pytester.inline_run("-p", "no:randomly", "-p", "no:cacheprovider")
    assert [r.nodeid for r in rec.getreports("pytest_runtest_logreport")
            if r.when == "call"] == ["test_m.py::test_a"]
    rec.assertoutcome(passed=1)


@pytest.mark.parametrize("scope,key,what", [
    ("{devices: [cpu], hardware: [pvc]}", "hardware", "hardware family"),
    ("{devices: [cpu], drivers: [lts]}", "drivers", "driver stack"),
])
def test_hardware_or_drivers_for_a_device_without_them_is_one_line(
        tmp_path: Path, scope: str, key: str, what: str) -> None:
    """base_matrix.yaml gives hardware families and driver stacks to xpu only."""
    path = _registry(tmp_path, scope)
    with pytest.raises(ValidationFailed) as info:
        known_issues.load_registry(path, load_matrix(TESTS / "base_matrix.yaml"))
    assert str(info.value).splitlines() == [
        f"{path}:5: issues.acme/widgets#1.scope.{key}: scope.devices (cpu) has no {what} in "
        f"base_matrix.yaml (devices.<d>.{key})"]
