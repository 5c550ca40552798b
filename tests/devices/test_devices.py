"""The device table (accelgrid.devices): one module per device type, read by every module
that needs a device fact; and a device outside the four declared by a spec file."""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
import sys
import types
from pathlib import Path

import pytest
from helpers.device_cases import FAKE_DEVICE
from helpers.mini_projects import run_request

from accelgrid import devices, results
from accelgrid.base import contract
from accelgrid.config import flags
from accelgrid.config.matrix import load_matrix
from accelgrid.config.validation import ValidationFailed
from accelgrid.devices import backends
from accelgrid.devices import spec as device_spec
from accelgrid.devices import xpu as xpu_device
from accelgrid.host import detect
from accelgrid.run import passes as pass_plan
from accelgrid.run.cell import run_cell
from accelgrid.testing import opcapture

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).parents[1] / "helpers" / "fake_device_spec.py"


@pytest.fixture
def registered():
    """Device types registered by a test are gone after it."""
    before = dict(devices.TYPES)
    yield
    devices.TYPES.clear()
    devices.TYPES.update(before)


def test_every_device_module_is_in_the_table() -> None:
    folder = Path(devices.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "base", "spec", "backends",
                                                       "pci", "registry"}
    assert modules == {d.name for d in devices.BUILTIN}
    for kind in devices.BUILTIN:
        assert kind.source == f"accelgrid.devices.{kind.name}"


def test_callers_read_the_device_types() -> None:
    """The alias tables copied from the device modules are gone; what they held is read
    from the types, by the readers that used them."""
    for module, name in ((detect, "VISIBILITY_VAR"), (detect, "HIDE_ACCELERATORS"),
                         (detect, "DEVICE_IDS"), (detect, "DEVICE_MEMORY"),
                         (detect, "FAMILIES"), (detect, "xpu_inventory"),
                         (pass_plan, "SHARED_BY_PROCESSES"), (opcapture, "DISPATCH_KEY"),
                         (opcapture, "ENABLE_FALLBACK"), (opcapture, "XPU_FALLBACK_ONCE")):
        assert not hasattr(module, name), f"{module.__name__}.{name}"
    by_name = {d.name: d for d in devices.BUILTIN}
    assert {n: d.visibility_var for n, d in by_name.items() if d.visibility_var} == {
        "cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
    assert devices.hidden_accelerators() == {"CUDA_VISIBLE_DEVICES": "",
                                             "ONEAPI_DEVICE_SELECTOR": "!level_zero:gpu"}
    assert {n: d.shared_by_processes for n, d in by_name.items() if d.accelerator} == {
        "cuda": True, "xpu": True, "mps": False}
    assert {n: d.dispatch_key for n, d in by_name.items()} == {
        "cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}
    assert {n: d.fallback_flag for n, d in by_name.items() if d.fallback_flag} == {
        "xpu": "PYTORCH_ENABLE_XPU_FALLBACK", "mps": "PYTORCH_ENABLE_MPS_FALLBACK"}
    assert [flags.flag_device(v) for v in (
        "ZE_AFFINITY_MASK", "PYTORCH_ENABLE_MPS_FALLBACK", "CUBLAS_WORKSPACE_CONFIG",
        "OMP_NUM_THREADS")] == ["xpu", "mps", "cuda", None]
    assert backends.TABLES["memory_allocated"]["xpu"] == "torch.xpu.memory_allocated"
    assert backends.TABLES["manual_seed"]["default"] == "torch.manual_seed"
    # The fallback texts are the device modules' (exact upstream strings: test_ops.py).
    notice = by_name["xpu"].fallback_notice
    assert notice is not None
    assert opcapture.parse_messages(notice)["generic_fallback"] == {"xpu"}
    assert by_name["xpu"].host_ids is xpu_device.host_ids


def test_the_offload_devices_are_one_fact(monkeypatch) -> None:
    """Which devices torchao's CPU offload runs on is the device types' ``offload``: the
    bench's choices and pick, and the suite's gate (suites/offload/conftest.py) read it;
    the suite's helpers keep no list."""
    from accelgrid.bench import offload

    sys.path.insert(0, str(ROOT / "suites" / "offload"))
    try:
        import offload_helpers  # type: ignore[import-not-found]  # a suite folder, put on the path
    finally:
        sys.path.remove(str(ROOT / "suites" / "offload"))
    assert not hasattr(offload_helpers, "SUPPORTED_DEVICES")
    assert "devices.get(kind).offload" in (ROOT / "suites/offload/conftest.py").read_text()
    assert offload.DEVICES == ("auto", "cuda", "xpu")
    both = types.SimpleNamespace(__version__="9.9",
                                 cuda=types.SimpleNamespace(is_available=lambda: True),
                                 xpu=types.SimpleNamespace(is_available=lambda: True))
    assert offload.pick_device(both, "auto", offload_helpers) == ("cuda", "")
    # Planted: cuda no longer declared offload-capable, auto falls to xpu.
    monkeypatch.setitem(devices.TYPES, "cuda", dataclasses.replace(devices.get("cuda"),
                                                                   offload=False))
    assert offload.pick_device(both, "auto", offload_helpers) == ("xpu", "")


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
    rc = run_cell(run_request(cell, python, proj, proj / "results"))
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


FULL_SPEC = r'''
"""A spec device declaring every fact a built-in device type has."""
DEVICE_NAME = "fullacc"
TORCH_DEVICE = "cpu"
DISPATCH_KEY = "CPU"
ACCELERATOR = False
VISIBILITY_VAR = "FULLACC_VISIBLE_DEVICES"
HIDE = {"FULLACC_VISIBLE_DEVICES": "-1"}
SHARED_BY_PROCESSES = True
FLAGS = r"^FULLACC_\w+$"
FALLBACK_FLAG = "FULLACC_FALLBACK"
FALLBACK_NOTICE = "fullacc: some ops ran on the CPU."
FALLBACK_MESSAGES = [r"fullacc ran '(aten::\w+)' on the CPU"]
MISSING_MESSAGES = [r"fullacc lacks '(aten::\w+)'"]
RUNTIME_ATTR = "git_version"
COLLECTIVE_BACKEND = "gloo"
COLLECTIVE_CHECK = "is_gloo_available"
OFFLOAD = True
FLOAT64 = False
CONTAINER_ARGS = {"default": ["--device", "/dev/fullacc"], "docker": ["--fullacc", "all"]}
SYNCHRONIZE_FN = lambda: "synchronized"  # noqa: E731


def TORCH_DEVICES_FN(torch):
    return [{"index": 0, "name": "Full Accelerator"}], "7.1"


def AVAILABLE_FN(torch):
    return True


def HOST_IDS_FN(env, python, torch_version):
    return ["0", "1"], "fullacc-smi"


def HOST_MEMORY_GIB_FN():
    return [48.0, 48.0]


def HOST_HARDWARE_FN(root):
    return [("pvc", True)]


def HOST_INVENTORY_FN():
    return {"fullacc-smi": ["card 0", "card 1"]}
'''

FULL_DEVICE = """devices:
  fullacc:
    spec: full_spec.py
    index: default
    detect: {always: true}
    hardware:
      pvc: {label: fullacc-pvc, env: {FULLACC_MODE: "pvc"}}
    runner: {labels: [ubuntu-24.04], hosted: true}
"""


def test_a_spec_device_declares_every_fact_and_the_run_reads_each(mini_project, registered,
                                                                  monkeypatch) -> None:
    """Every DeviceType field has a spec name (devices/spec.py: FACTS, the <API>_FN hooks);
    a spec declaring each, named by a matrix, is the cell's device type, and each fact is
    read back by the code that reads it for a built-in type."""
    from accelgrid.bench import offload
    from accelgrid.commands import containers
    from accelgrid.results import provenance
    from accelgrid.testing import _dtype_problem

    declarable = {field for field, _ in device_spec.FACTS.values()} | {"apis"}
    fields = {f.name for f in dataclasses.fields(devices.DeviceType)} - {"name", "source"}
    assert declarable == fields
    proj = mini_project()
    (proj / "full_spec.py").write_text(FULL_SPEC)
    text = (proj / "matrix.yaml").read_text().replace("devices:\n", FULL_DEVICE, 1)
    (proj / "matrix.yaml").write_text(text.replace("  device: [cpu, xpu]",
                                                   "  device: [cpu, xpu, fullacc]"))
    cell = load_matrix(proj / "matrix.yaml").cell("fullacc-2.13")
    kind = cell.device_type
    assert devices.get("fullacc") is kind
    defaults = devices.DeviceType(name="x", dispatch_key="PrivateUse1")
    assert [f for f in fields if getattr(kind, f) == getattr(defaults, f)] == []

    reads: dict[str, object] = {}
    reads["torch_device"] = kind.tensor_device == "cpu"
    reads["apis"] = backends.dispatch("synchronize", "fullacc") == "synchronized"
    reads["dispatch_key"] = opcapture.classify_op("aten::add.Tensor", "fullacc", set(), set()) == \
        "native"
    reads["fallback_flag"] = (
        opcapture.unimplemented_fallbacks({"aten::_cudnn_rnn"}, "fullacc",
                                          {"FULLACC_FALLBACK": "1"}) == {"aten::_cudnn_rnn"}
        and not opcapture.unimplemented_fallbacks({"aten::_cudnn_rnn"}, "fullacc", {}))
    found = opcapture.parse_messages("fullacc: some ops ran on the CPU.\n"
                                     "fullacc ran 'aten::topk' on the CPU\n"
                                     "fullacc lacks 'aten::cdist'\n")
    reads["fallback_notice"] = found["generic_fallback"] == {"fullacc"}
    reads["fallback_messages"] = found["fallback"] == {"aten::topk"}
    reads["missing_messages"] = found["missing"] == {"aten::cdist"}
    reads["flags"] = flags.flag_device("FULLACC_ANYTHING") == "fullacc"
    facts = provenance.torch_facts("fullacc")
    reads["runtime_attr"] = "git_version_runtime" in facts
    reads["torch_devices"] = (facts["devices"], facts["driver"]) == (
        [{"index": 0, "name": "Full Accelerator"}], "7.1")
    no_gpu = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    reads["available"] = reads["offload"] = offload.pick_device(no_gpu, "auto", None) == (  # type: ignore[arg-type]
        "fullacc", "")
    reads["float64"] = _dtype_problem("float64", kind, "cpu") == \
        "fullacc cannot hold torch.float64 tensors"
    dist = _suite_module(ROOT / "suites" / "distributed" / "test_collectives.py")
    reads["collective_backend"] = reads["collective_check"] = dist._backend("fullacc") == "gloo"
    engine = containers.Engine("docker", "docker")
    reads["container_args"] = (engine.device_args(cell) == ["--fullacc", "all"] and
                               containers.Engine("podman", "podman").device_args(cell)
                               [:2] == ["--device", "/dev/fullacc"])
    monkeypatch.delenv("ACCELGRID_DEVICES", raising=False)
    monkeypatch.delenv("FULLACC_VISIBLE_DEVICES", raising=False)
    reads["host_ids"] = detect.device_ids_how(kind, {}) == (["0", "1"], "fullacc-smi")
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    reads["host_memory_gib"] = pass_plan.workers_per_device(cell, 1, env={}) == 4  # 48 // 12
    plan = pass_plan.passes(cell, device_ids=["0", "1"])
    reads["visibility_var"] = "popen//env:FULLACC_VISIBLE_DEVICES=0" in " ".join(plan[0].xdist)
    reads["shared_by_processes"] = plan[1].beside
    unpinned = pass_plan.passes(cell, device_ids=[])   # no device to pin: a host-CPU type
    reads["accelerator"] = [p.name for p in unpinned] == ["single", "host-accelerators"]
    reads["hide"] = dict(unpinned[0].env)["FULLACC_VISIBLE_DEVICES"] == "-1"
    choice = detect.resolve_hardware(cell, env={})
    reads["host_hardware"] = (choice.family, choice.how) == ("pvc", "detected")
    folder = proj / "results" / cell.name
    folder.mkdir(parents=True)
    from accelgrid.run import preflight
    from accelgrid.run.cellenv import cell_env

    base = {"PATH": "/usr/bin:/bin"}
    env = cell_env(cell, proj, folder, base=base, checked=preflight.check(cell, proj, base))
    written = json.loads((folder / contract.HARDWARE_FILE).read_text())
    reads["host_inventory"] = (written["fullacc-smi"] == ["card 0", "card 1"]
                               and env["FULLACC_MODE"] == "pvc")
    assert set(reads) == fields
    assert [f for f, ok in reads.items() if not ok] == []


def test_a_spec_that_cannot_run_here_gives_its_literal_facts(mini_project, registered) -> None:
    """A spec importing a backend accelgrid's environment lacks: outside the cell its
    literal facts are the type (the run pins with its visibility variable), said so."""
    proj = _fake_project(mini_project, "import torch_fullacc_is_not_installed\n"
                         "DEVICE_NAME = 'fakeacc'\nVISIBILITY_VAR = 'FAKEACC_VISIBLE'\n"
                         "SHARED_BY_PROCESSES = True\nDEVICE_COUNT_FN = torch_fullacc_is_not_"
                         "installed.device_count\n")
    kind = load_matrix(proj / "matrix.yaml").cell("fakeacc-2.13").device_type
    assert (kind.visibility_var, kind.shared_by_processes, kind.apis) == (
        "FAKEACC_VISIBLE", True, {})
    assert "its literal facts: ModuleNotFoundError" in kind.source


@pytest.mark.parametrize("text, message", [
    ("FALLBACK_MESSAGES = ['no group here']\n", "needs a group for the op's name"),
    ("MISSING_MESSAGES = ['(unclosed']\n", "is not a regular expression"),
    ("CONTAINER_ARGS = {'docker': '--gpus all'}\n", "CONTAINER_ARGS maps an engine"),
    ("HIDE = {'X': 1}\n", "HIDE's values must be str"),
    ("HOST_IDS_FN = ['0']\n", "HOST_IDS_FN must be a function"),
    ("ACCELERATOR = 'no'\n", "ACCELERATOR must be a bool"),
])
def test_a_spec_fact_of_the_wrong_shape_says_so(tmp_path, registered, text, message) -> None:
    path = tmp_path / "spec.py"
    path.write_text("DEVICE_NAME = 'npu'\n" + text)
    with pytest.raises(device_spec.SpecError, match=message):
        devices.load_spec(path)


def test_a_matrix_spec_with_a_wrong_fact_fails_the_load(mini_project, registered) -> None:
    proj = _fake_project(mini_project, "DEVICE_NAME = 'fakeacc'\nSHARED_BY_PROCESSES = 'yes'\n")
    with pytest.raises(ValidationFailed, match="devices.fakeacc.spec: .*SHARED_BY_PROCESSES "
                                               "must be a bool"):
        load_matrix(proj / "matrix.yaml")


def _suite_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- device literals stay in devices/ -------------------------------------------------------
DEVICE_LITERALS = {"xpu", "cuda", "mps"}   # 'cpu' may stay: it is also torch's cpu device
MAX_MODULES_NAMING_DEVICES = 4


def modules_naming_devices(root: Path) -> dict[str, list[int]]:
    """Modules of the package outside devices/ holding a string constant that is a device
    type's name, with the lines."""
    found: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "devices":
            continue
        lines = [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Constant) and node.value in DEVICE_LITERALS]
        if lines:
            found[str(rel)] = lines
    return found


def test_device_literals_live_in_devices(tmp_path) -> None:
    package = Path(devices.__file__).parents[1]
    found = modules_naming_devices(package)
    assert len(found) <= MAX_MODULES_NAMING_DEVICES, found
    # Planted: one more module naming a device type is caught (and devices/ never counts).
    copy = tmp_path / "accelgrid"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (copy / "devices" / "extra.py").write_text('WHERE = "xpu"\n')
    assert modules_naming_devices(copy) == found
    for n in range(MAX_MODULES_NAMING_DEVICES - len(found) + 1):
        (copy / "run" / f"planted_{n}.py").write_text(f'DEVICE = "cuda"  # {n}\n')
    assert len(modules_naming_devices(copy)) == MAX_MODULES_NAMING_DEVICES + 1
