"""The matrix model: the repo's matrix and the base matrix are valid (also against the
shipped schema file), each bad matrix gives its exact errors, cell expansion
(include/exclude, names, suites, pins), select(), and the Matrix is frozen."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from accelgrid.config.cells import select
from accelgrid.config.matrix import load_matrix
from accelgrid.config.model import PIN_NAMES, Matrix
from accelgrid.config.validation import ValidationFailed, load_schema, schema_text

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "bad_matrices"
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(TESTS.parent / "matrix.yaml")


# --- validation: the real matrices, the bad-matrix corpus -----------------------------------
def test_repo_matrix_is_valid(matrix: Matrix) -> None:
    assert len(matrix.cells) >= 20


def test_base_matrix_is_valid() -> None:
    matrix = load_matrix(TESTS / "base_matrix.yaml")
    assert [c.name for c in matrix.cells] == [
        "cpu-2.4", "cpu-2.13", "xpu-2.4", "xpu-2.13", "xpu-2.13-fallback-debug"]


def test_every_corpus_file_has_expectations() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml")
    assert files == sorted(EXPECTED), "add the expected messages of new bad matrices"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_matrix_exact_messages(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    with pytest.raises(ValidationFailed) as info:
        load_matrix(name)
    assert str(info.value).splitlines() == EXPECTED[name]


@pytest.mark.parametrize("name", ["unknown_key.yaml", "yaml_syntax.yaml"])
def test_cli_prints_errors_without_traceback(name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate", name], cwd=CORPUS,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == EXPECTED[name]


def test_pins_must_be_pep440_versions(tmp_path: Path) -> None:
    text = (TESTS / "base_matrix.yaml").read_text()
    (tmp_path / "m.yaml").write_text(text.replace('torch: "2.4.1"', 'torch: "2.4.1-x"'))
    with pytest.raises(ValidationFailed) as info:
        load_matrix(tmp_path / "m.yaml")
    line = text.splitlines().index(next(x for x in text.splitlines() if '"2.4.1"' in x)) + 1
    assert str(info.value).splitlines() == [
        f"{tmp_path / 'm.yaml'}:{line}: torch.2.4.torch: '2.4.1-x' is not a PEP 440 version"]


# --- the schema file -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["matrix.yaml", "tests/base_matrix.yaml"])
def test_matrices_validate_against_the_shipped_schema(name: str) -> None:
    schema = load_schema("matrix")
    validator = jsonschema.validators.validator_for(schema)(schema)
    data = yaml.safe_load((TESTS.parent / name).read_text())
    assert [e.message for e in validator.iter_errors(data)] == []


def test_matrix_names_its_schema_for_editors() -> None:
    first = (TESTS.parent / "matrix.yaml").read_text().splitlines()[0]
    m = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert m, first
    assert (TESTS.parent / m[1]).read_text() == schema_text("matrix")


def test_schema_agrees_with_the_code() -> None:
    pins = load_schema("matrix")["properties"]["torch"]["additionalProperties"]["properties"]
    assert [k for k in pins if k not in ("python", "channel")] == list(PIN_NAMES)


# --- the model ---------------------------------------------------------------------------------
def test_matrix_is_frozen(matrix: Matrix) -> None:
    assert isinstance(matrix.cells, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        matrix.cells = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        matrix.default_torch = "2.4"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        matrix.cells[0].name = "renamed"  # type: ignore[misc]


def test_unknown_cell_suggests(matrix: Matrix) -> None:
    with pytest.raises(KeyError, match="did you mean 'cpu-2.13'"):
        matrix.cell("cpu-2.133")


def test_required_torch_series_and_devices(matrix) -> None:
    assert {"2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14"} <= set(matrix.torch)
    assert set(matrix.devices) == {"cpu", "cuda", "xpu", "mps"}
    assert matrix.default_torch == "2.13"


def test_cell_names(matrix) -> None:
    names = {c.name for c in matrix.cells}
    assert {"xpu-2.5", "cpu-2.13", "cuda-2.11", "mps-2.13"} <= names
    assert "xpu-2.5-fp64-emulation" in names and "xpu-2.13-fallback-debug" in names
    # Excluded (no prebuilt XPU wheels) and included back with a local source-build wheel.
    assert matrix.cell("xpu-2.4").torch_wheel is not None
    assert len(names) == len(matrix.cells)


def test_old_torch_pins_keep_transformers_4(matrix) -> None:
    for series in ("2.4", "2.5"):
        pins = matrix.torch[series].pins
        assert pins["transformers"].startswith("4.")
        major_minor = tuple(int(x) for x in pins["accelerate"].split(".")[:2])
        assert major_minor < (1, 13)


def test_xpu_cell_installs_from_xpu_index_with_profile_env(matrix) -> None:
    cell = matrix.cell("xpu-2.5-fp64-emulation")
    assert cell.index == "https://download.pytorch.org/whl/xpu"
    assert cell.torch_requirement == "torch==2.5.1+xpu"
    assert cell.env["OverrideDefaultFP64Settings"] == "1"
    assert cell.env["IGC_EnableDPEmulation"] == "1"
    assert "transformers==4.57.5" in cell.packages
    assert cell.tags == ("xpu", "torch-2.5", "fp64-emulation")


def test_profiles_only_cross_their_devices(matrix) -> None:
    for cell in matrix.cells:
        profile = matrix.profiles[cell.profile]
        assert profile.applies_to(cell.device), cell.name


def test_select_filters(matrix) -> None:
    picked = select(matrix.cells, device=["xpu"], torch=["2.13"])
    assert {c.name for c in picked} == {"xpu-2.13", "xpu-2.13-fallback-debug",
                                        "xpu-2.13-cpu-fallback", "xpu-2.13-fallback-survey",
                                        "xpu-2.13-fp64-no-emulation", "xpu-2.13-compile"}
    assert select(matrix.cells, profile=["mps-fallback"])[0].name == "mps-2.13-mps-fallback"
    assert select(matrix.cells) == list(matrix.cells)


def test_fallback_survey_cells(matrix) -> None:
    survey = select(matrix.cells, profile=["fallback-survey"])
    assert [c.name for c in survey] == ["xpu-2.5-fallback-survey", "xpu-2.6-fallback-survey",
                                        "xpu-2.13-fallback-survey"]
    for cell in survey:
        assert cell.env["PYTORCH_ENABLE_XPU_FALLBACK"] == "1"
        assert cell.env["PYTORCH_DEBUG_XPU_FALLBACK"] == "1"
        assert cell.env["ACCELGRID_CAPTURE_OPS"] == "1"
    # fallback-debug keeps its meaning: named fallbacks, unimplemented ops still raise.
    debug = matrix.cell("xpu-2.13-fallback-debug").env
    assert "PYTORCH_ENABLE_XPU_FALLBACK" not in debug
    assert debug["PYTORCH_DEBUG_XPU_FALLBACK"] == debug["ACCELGRID_CAPTURE_OPS"] == "1"


def test_include_extras_apply_to_matching_cells(tmp_path: Path) -> None:
    text = (TESTS / "base_matrix.yaml").read_text()
    text = text.replace('    - {device: xpu, torch: "2.13", profile: fallback-debug}',
                        '    - {device: xpu, torch: "2.13", profile: fallback-debug}\n'
                        '    - {device: cpu, workers: 3, timeout: {test_seconds: 5}}')
    (tmp_path / "m.yaml").write_text(text)
    matrix = load_matrix(tmp_path / "m.yaml")
    cpu = [c for c in matrix.cells if c.device == "cpu"]
    assert cpu and all(c.workers == 3 and c.test_seconds == 5 for c in cpu)
    assert all(c.workers == 1 for c in matrix.cells if c.device == "xpu")
    # hf is an xpu-only suite; cpu cells do not get it.
    assert all(c.suites == ("smoke",) for c in cpu)


# --- runtime per torch series -------------------------------------------------------------
def test_xpu_runtime_per_torch_series(matrix) -> None:
    """torch 2.5 +xpu wheels need Intel's bundle sourced; from 2.6 the wheels bring it."""
    old = matrix.cell("xpu-2.5").runtime
    assert old is not None and not old.from_wheels
    assert old.version == "0.5.3"
    assert old.env_scripts[0] == "/opt/intel/oneapi/pytorch-gpu-dev-0.5/oneapi-vars.sh"
    assert (old.check_env, old.check_library) == ("ONEAPI_ROOT", "libsycl.so.7")
    assert all("=" in p for p in old.apt_packages)   # pinned for container images
    assert matrix.cell("xpu-2.5-fp64-emulation").runtime == old
    for name in ("xpu-2.6", "xpu-2.8", "xpu-2.11", "xpu-2.13", "xpu-2.14"):
        assert matrix.cell(name).runtime.from_wheels, name
    assert all(c.runtime is None for c in matrix.cells if c.device != "xpu")
    assert matrix.cell("xpu-2.5").as_dict()["runtime"]["check"] == {
        "env": "ONEAPI_ROOT", "library": "libsycl.so.7"}


def test_hardware_families_are_detects(matrix) -> None:
    from accelgrid.devices import pci

    schema = load_schema("matrix")["properties"]["devices"]["additionalProperties"]
    assert schema["properties"]["hardware"]["propertyNames"]["enum"] == list(pci.FAMILIES)
    xpu = matrix.devices["xpu"]
    assert set(xpu.hardware) == set(pci.FAMILIES)
    for family in ("ats-m", "arc"):     # no native fp64 (intel/torch-xpu-ops#2664)
        assert xpu.hardware[family].env == {"OverrideDefaultFP64Settings": "1",
                                            "IGC_EnableDPEmulation": "1"}
    assert not any(xpu.hardware[f].env for f in ("pvc", "bmg", "lnl", "mtl", "arl", "ptl"))
    assert set(xpu.drivers) == {"lts", "rolling"}
    # Cells carry the tables; none of the repo's cells is pinned to a family.
    cell = matrix.cell("xpu-2.5")
    assert cell.hardware_env["ats-m"]["IGC_EnableDPEmulation"] == "1"
    assert all(c.hardware is None and c.driver is None for c in matrix.cells)


def test_local_wheel_cell_runs_on_request_only(matrix) -> None:
    cell = matrix.cell("xpu-2.4")
    assert cell.manual and cell.runtime is not None and not cell.runtime.from_wheels
    assert [c.name for c in matrix.cells if c.manual] == ["xpu-2.4"]
    assert cell.as_dict()["manual"] is True
    assert "xpu" not in cell.tags                   # `nox -t xpu` leaves it out


def test_excluded_cell_says_which_rule(tmp_path: Path) -> None:
    from accelgrid.base.errors import UnknownName

    text = (TESTS / "base_matrix.yaml").read_text().replace(
        '  torch: ["2.4", "2.13"]\n', '  torch: ["2.4", "2.13"]\n  exclude:\n'
        '    - {device: cpu, torch: "2.4"}\n')
    (tmp_path / "m.yaml").write_text(text)
    matrix = load_matrix(tmp_path / "m.yaml")
    with pytest.raises(UnknownName) as info:
        matrix.cell("cpu-2.4")
    assert str(info.value) == ("cell 'cpu-2.4' is excluded by m.yaml:36 matrix.exclude[0] "
                               "({device: cpu, torch: 2.4}); add an include rule for it to run it")
    with pytest.raises(KeyError, match="did you mean 'cpu-2.13'"):
        matrix.cell("cpu-2.31")


# --- loading the same file again ------------------------------------------------------
def test_unchanged_matrix_is_validated_once_and_changes_are_seen(tmp_path: Path) -> None:
    """`accelgrid run` loads the matrix in the CLI, the noxfile and the known-issue checks:
    the same file gives the same Matrix; a changed file, or a suite folder gone, is read and
    checked again."""
    path = tmp_path / "matrix.yaml"
    text = (TESTS / "base_matrix.yaml").read_text().replace(
        "smoke: {path: .}", "smoke: {path: suites/smoke}").replace(
        "hf: {path: .,", "hf: {path: suites/hf,")
    path.write_text(text)
    (tmp_path / "suites" / "smoke").mkdir(parents=True)
    (tmp_path / "suites" / "hf").mkdir()
    first = load_matrix(path)
    assert load_matrix(path) is first
    path.write_text(text + "\n# changed\n")
    assert load_matrix(path) is not first
    changed = load_matrix(path)
    folder = tmp_path / next(iter(changed.suites.values())).path
    folder.rmdir()
    with pytest.raises(ValidationFailed, match="does not exist"):
        load_matrix(path)
    folder.mkdir()
    assert load_matrix(path).cells == changed.cells


def test_suite_env_reaches_its_cells_and_an_include_rule_env_overrides_it(tmp_path: Path
                                                                          ) -> None:
    """suites.<s>.env (hf_tests' default selection) is in the env of the cells that run the
    suite only; an include rule's env wins over it for the cells it matches."""
    text = (TESTS / "base_matrix.yaml").read_text()
    text = text.replace("  hf: {path: ., needs: [transformers], devices: [xpu]}",
                        "  hf: {path: ., needs: [transformers], devices: [xpu], "
                        "env: {ACCELGRID_HF_TRANSFORMERS_TESTS: 'bert,vit'}}")
    text = text.replace("  suites: [smoke]", "  suites: [smoke, hf]")
    text = text.replace('    - {device: xpu, torch: "2.13", profile: fallback-debug}',
                        '    - {device: xpu, torch: "2.13", profile: fallback-debug, '
                        "env: {ACCELGRID_HF_TRANSFORMERS_TESTS: t5}}")
    (tmp_path / "m.yaml").write_text(text)
    cells = {c.name: c for c in load_matrix(tmp_path / "m.yaml").cells}
    assert cells["xpu-2.13"].env["ACCELGRID_HF_TRANSFORMERS_TESTS"] == "bert,vit"
    assert cells["xpu-2.13-fallback-debug"].env["ACCELGRID_HF_TRANSFORMERS_TESTS"] == "t5"
    assert "ACCELGRID_HF_TRANSFORMERS_TESTS" not in cells["cpu-2.13"].env   # no hf suite
    matrix = load_matrix(TESTS.parent / "matrix.yaml")
    real = matrix.cell("cuda-2.11")
    assert "bert" in real.env["ACCELGRID_HF_TRANSFORMERS_TESTS"].split(",")
    assert "hf_tests" in real.suites and "parameterized==0.9.0" in real.packages
    # The cpu cells' include rule: ViT alone, sized for CI's hosted runners (docs/guides/ci.md).
    assert matrix.cell("cpu-2.13").env["ACCELGRID_HF_TRANSFORMERS_TESTS"] == "vit"
