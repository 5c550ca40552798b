"""The device table (accelgrid.devices): one module per device type, read by every module
that needs a device fact; and a device outside the four declared by a spec file."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from accelgrid import devices, results
from accelgrid.base import contract
from accelgrid.config.matrix import ValidationFailed, load_matrix
from accelgrid.devices import backends
from accelgrid.devices import spec as device_spec
from accelgrid.host import detect
from accelgrid.results import environment
from accelgrid.run import passes as pass_plan
from accelgrid.run.cell import run_cell
from accelgrid.testing import opcapture

ROOT = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).with_name("fake_device_spec.py")


@pytest.fixture
def registered():
    """Device types registered by a test are gone after it."""
    before = dict(devices.TYPES)
    yield
    devices.TYPES.clear()
    devices.TYPES.update(before)


def test_every_device_module_is_in_the_table() -> None:
    folder = Path(devices.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "base", "spec", "backends"}
    assert modules == {d.name for d in devices.BUILTIN}
    for kind in devices.BUILTIN:
        assert kind.source == f"accelgrid.devices.{kind.name}"


def test_old_readers_read_the_table() -> None:
    """The names callers used keep working and say what the device modules say."""
    assert detect.VISIBILITY_VAR == {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
    assert detect.HIDE_ACCELERATORS == {"CUDA_VISIBLE_DEVICES": "",
                                        "ONEAPI_DEVICE_SELECTOR": "!level_zero:gpu"}
    assert pass_plan.SHARED_BY_PROCESSES == {"cuda": True, "xpu": True, "mps": False}
    assert opcapture.DISPATCH_KEY == {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}
    assert opcapture.ENABLE_FALLBACK == {"xpu": "PYTORCH_ENABLE_XPU_FALLBACK",
                                         "mps": "PYTORCH_ENABLE_MPS_FALLBACK"}
    assert [environment.flag_device(v) for v in (
        "ZE_AFFINITY_MASK", "PYTORCH_ENABLE_MPS_FALLBACK", "CUBLAS_WORKSPACE_CONFIG",
        "OMP_NUM_THREADS")] == ["xpu", "mps", "cuda", None]
    assert backends.TABLES["memory_allocated"]["xpu"] == "torch.xpu.memory_allocated"
    assert backends.TABLES["manual_seed"]["default"] == "torch.manual_seed"


def test_offload_suite_agrees_with_the_table() -> None:
    """suites/offload/offload_helpers.py imports only torch, so it keeps its own list;
    this keeps it equal to the device modules' ``offload``."""
    sys.path.insert(0, str(ROOT / "suites" / "offload"))
    try:
        import offload_helpers
    finally:
        sys.path.remove(str(ROOT / "suites" / "offload"))
    assert set(offload_helpers.SUPPORTED_DEVICES) == {d.name for d in devices.BUILTIN
                                                      if d.offload}


def test_a_spec_device_dispatches_to_its_hooks(registered) -> None:
    kind = devices.load_spec(FAKE)
    assert (kind.name, kind.tensor_device, kind.dispatch_key) == ("fakeacc", "cpu", "PrivateUse1")
    assert backends.resolve("device_count", "fakeacc:0") is kind.apis["device_count"]
    assert backends.dispatch("is_bf16_supported", "fakeacc") is True
    assert backends.resolve("manual_seed", "fakeacc") is kind.apis["manual_seed"]
    with pytest.raises(backends.NotClaimed, match="fakeacc does not claim memory_allocated"):
        backends.resolve("memory_allocated", "fakeacc")
    assert devices.get("fakeacc") is kind


def test_a_transformers_device_spec_is_a_valid_spec(tmp_path, registered) -> None:
    """The three hooks transformers reads (testing_utils, v5.24.0), nothing else."""
    path = tmp_path / "npu_spec.py"
    path.write_text("import torch\nDEVICE_NAME = 'npu'\nMANUAL_SEED_FN = torch.manual_seed\n"
                    "EMPTY_CACHE_FN = None\nDEVICE_COUNT_FN = lambda: 2\n")
    kind = devices.load_spec(path)
    assert backends.dispatch("device_count", "npu") == 2
    assert sorted(kind.apis) == ["device_count", "manual_seed"]   # None: not claimed
    assert kind.tensor_device == "npu"


@pytest.mark.parametrize("text, message", [
    ("X = 1\n", "DEVICE_NAME must be a lower-case device type name"),
    ("DEVICE_NAME = 'Bad Name'\n", "DEVICE_NAME must be a lower-case"),
    ("DEVICE_NAME = 'npu'\nSYNCHRONIZE_FN = 3\n", "SYNCHRONIZE_FN must be callable"),
    ("DEVICE_NAME = 'npu'\nSHARED_BY_PROCESSES = 'yes'\n", "SHARED_BY_PROCESSES must be a bool"),
    ("DEVICE_NAME = 'npu'\nTORCH_DEVICE = True\n", "TORCH_DEVICE must be a str"),
    ("import torch_npu_is_not_installed\n", "running the device spec failed: "
                                            "ModuleNotFoundError"),
    ("DEVICE_NAME = 'cuda'\n", "'cuda' is a built-in device type"),
])
def test_a_bad_spec_says_what_is_wrong(tmp_path, registered, text, message) -> None:
    path = tmp_path / "spec.py"
    path.write_text(text)
    with pytest.raises(device_spec.SpecError, match=message) as info:
        devices.load_spec(path)
    assert str(path) in str(info.value)


def test_a_spec_must_be_a_python_file(tmp_path) -> None:
    with pytest.raises(device_spec.SpecError, match="a device spec is a Python file"):
        devices.load_spec(tmp_path / "missing.py")


def test_the_cells_spec_must_declare_the_cells_device(tmp_path, registered) -> None:
    env = {"ACCELGRID_DEVICE": "otheracc", "ACCELGRID_DEVICE_SPEC": str(FAKE)}
    with pytest.raises(device_spec.SpecError, match="declares DEVICE_NAME 'fakeacc'"):
        devices.from_env(env)
    with pytest.raises(devices.UnknownDevice, match="unknown device type 'otheracc'"):
        devices.from_env({"ACCELGRID_DEVICE": "otheracc"})


FAKE_DEVICE = """devices:
  fakeacc:
    description: a fake accelerator on the CPU's kernels (tests/fake_device_spec.py)
    spec: fake_device_spec.py
    index: default
    detect: {always: true}
    runner: {labels: [ubuntu-24.04], hosted: true}
"""


def _fake_project(mini_project, spec_text: str | None = None) -> Path:
    proj = mini_project()
    text = (proj / "matrix.yaml").read_text()
    text = text.replace("devices:\n", FAKE_DEVICE, 1)
    text = text.replace("  device: [cpu, xpu]", "  device: [cpu, xpu, fakeacc]")
    (proj / "matrix.yaml").write_text(text)
    target = proj / "fake_device_spec.py"
    if spec_text is None:
        shutil.copy(FAKE, target)
    else:
        target.write_text(spec_text)
    return proj


def test_a_matrix_device_names_its_spec(mini_project) -> None:
    proj = _fake_project(mini_project)
    cell = load_matrix(proj / "matrix.yaml").cell("fakeacc-2.13")
    assert cell.device == "fakeacc"
    assert cell.env["ACCELGRID_DEVICE_SPEC"] == "fake_device_spec.py"


@pytest.mark.parametrize("spec_text, message", [
    ("DEVICE_NAME = 'otheracc'\n", "fake_device_spec.py has DEVICE_NAME = 'otheracc'; it must "
                                   "declare DEVICE_NAME = 'fakeacc'"),
    ("import torch\n", "has no DEVICE_NAME = '...'"),
    ("DEVICE_NAME = (\n", "cannot read the device spec fake_device_spec.py"),
])
def test_a_matrix_spec_that_declares_another_device_fails(mini_project, spec_text,
                                                          message) -> None:
    proj = _fake_project(mini_project, spec_text)
    with pytest.raises(ValidationFailed, match=message):
        load_matrix(proj / "matrix.yaml")


def test_a_matrix_device_outside_the_four_needs_a_spec(mini_project) -> None:
    proj = _fake_project(mini_project)
    text = (proj / "matrix.yaml").read_text().replace("    spec: fake_device_spec.py\n", "")
    (proj / "matrix.yaml").write_text(text)
    with pytest.raises(ValidationFailed, match="devices.fakeacc: unknown name 'fakeacc'; "
                                               "expected one of: cpu, cuda, xpu, mps "
                                               r"\(another device type is declared by a spec"):
        load_matrix(proj / "matrix.yaml")


def test_the_fake_device_runs_the_smoke_suite(mini_project, python) -> None:
    """The smoke suite, run by the runner as a cell of the fake device: its tests put their
    tensors on the CPU, and every record and env.json carry the fake device's name."""
    proj = _fake_project(mini_project)
    shutil.copy(ROOT / "suites" / "smoke" / "test_device_api.py",
                proj / "suites" / "payload" / "test_device_api.py")
    cell = load_matrix(proj / "matrix.yaml").cell("fakeacc-2.13")
    rc = run_cell(cell, python, proj, proj / "results")
    folder = proj / "results" / "fakeacc-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    outcomes = {r["outcome"] for r in recs}
    assert rc == 0, [(r["nodeid"], r["message"]) for r in recs if r["outcome"] == "failed"]
    assert "passed" in outcomes and outcomes <= {"passed", "skipped"}
    assert {r["device"] for r in recs} == {"fakeacc"}
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["device_type"] == "fakeacc"
    assert env["env"]["ACCELGRID_DEVICE_SPEC"] == "fake_device_spec.py"


def test_the_transformers_spec_of_a_spec_device_calls_its_hooks(tmp_path, registered,
                                                                monkeypatch) -> None:
    """hf_tests' generated TRANSFORMERS_TEST_DEVICE_SPEC for a spec device loads the spec
    (from the cell's variables) and hands transformers the spec's own hooks."""
    import runpy

    from accelgrid.testing import hf_spec

    devices.load_spec(FAKE)
    path, record = hf_spec.write(tmp_path, "fakeacc")
    assert record["hooks"]["DEVICE_COUNT_FN"]["impl"] == "backends.resolve('device_count', " \
                                                        "'fakeacc')"
    assert record["hooks"]["EMPTY_CACHE_FN"]["impl"] is None
    devices.TYPES.pop("fakeacc")   # as in a fresh transformers process
    monkeypatch.setenv("ACCELGRID_DEVICE", "fakeacc")
    monkeypatch.setenv("ACCELGRID_DEVICE_SPEC", str(FAKE))
    ns = runpy.run_path(str(path))
    assert ns["DEVICE_NAME"] == "fakeacc"
    assert ns["DEVICE_COUNT_FN"] is devices.get("fakeacc").apis["device_count"]
