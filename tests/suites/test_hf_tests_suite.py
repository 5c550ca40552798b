"""suites/hf_tests: HF's own tests through a device spec generated from accelgrid.devices.backends.

Fast tests: the spec's hooks per device (the device's own function, a hook the device lacks
left out), the checkout finder's version rules (accelerate's dev tree of the installed
release), the selection entries, the not-implemented / fallback table parsed from exact
upstream messages. The slow tests run the suite in the real cpu-2.13 cell env
(transformers 5.24.0, accelerate 1.15.0) through ``accelgrid shell`` on fake checkouts: a
file that fails to import is one error record and the rest runs, no checkout / another
version is one not-run naming what to set, and a spec whose manual-seed hook does nothing
turns the seeded test red (the generated spec passes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix
from accelgrid.devices import backends
from accelgrid.testing import hf_checkouts, hf_spec
from suites.hf_tests import conftest as suite
from suites.hf_tests import hf_ops

ROOT = Path(__file__).resolve().parents[2]
XPU_DEBUG = ("The operator 'aten::nll_loss2d_forward.output on the XPU backend is falling "
             "back to run on the CPU.")
XPU_MISSING = ("NotImplementedError: The operator 'aten::_foreach_norm.Scalar' is not "
               "currently implemented for the XPU device. Please open a feature on ...")


def test_spec_hooks_are_each_devices_own_and_lacking_ones_are_left_out() -> None:
    cpu = hf_spec.hooks("cpu")
    assert cpu["MANUAL_SEED_FN"]["impl"] == "torch.manual_seed"
    assert cpu["DEVICE_COUNT_FN"]["impl"] == "torch.cpu.device_count"
    assert cpu["EMPTY_CACHE_FN"] == {"api": "empty_cache", "impl": None,
                                     "why": "cpu claims no empty_cache "
                                            "(accelgrid.devices.backends)"}
    # cuda / xpu without the device: resolve() only needs the attribute to exist.
    ok = lambda api, dev: None   # noqa: E731
    for dev in ("cuda", "xpu"):
        found = hf_spec.hooks(dev, ok)
        assert {h: e["impl"] for h, e in found.items()} == {
            "MANUAL_SEED_FN": f"torch.{dev}.manual_seed",
            "EMPTY_CACHE_FN": f"torch.{dev}.empty_cache",
            "DEVICE_COUNT_FN": f"torch.{dev}.device_count"}
    mps = hf_spec.hooks("mps", ok)
    assert mps["DEVICE_COUNT_FN"]["impl"] == "backends.TABLES['device_count']['mps']"
    text = hf_spec.spec_text("mps", mps)
    assert "from accelgrid.devices import backends" in text and "DEVICE_NAME = 'mps'" in text
    # An API this torch lacks (torch 2.4's xpu memory stats, pytorch/pytorch#127929): left out.

    def lacks_empty_cache(api: str, dev: str) -> None:
        if api == "empty_cache":
            raise backends.MissingAPI("torch.xpu.empty_cache is missing in this torch build")
    found = hf_spec.hooks("xpu", lacks_empty_cache)
    assert found["EMPTY_CACHE_FN"]["impl"] is None
    assert "# EMPTY_CACHE_FN left out: torch.xpu.empty_cache is missing" in \
        hf_spec.spec_text("xpu", found)


def test_spec_file_is_written_once_and_recorded(tmp_path: Path) -> None:
    path, record = hf_spec.write(tmp_path, "cpu")
    assert path == tmp_path / hf_spec.SPEC_FILE
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    import torch
    assert namespace["DEVICE_NAME"] == "cpu" and namespace["MANUAL_SEED_FN"] is torch.manual_seed
    assert "EMPTY_CACHE_FN" not in namespace
    on_disk = json.loads((tmp_path / hf_spec.SPEC_RECORD).read_text())
    assert on_disk["sha256"] == record["sha256"] and on_disk["device"] == "cpu"
    before = path.stat().st_mtime_ns
    hf_spec.write(tmp_path, "cpu")
    assert path.stat().st_mtime_ns == before


def test_accelerate_env() -> None:
    assert hf_spec.accelerate_env("cpu") == {"ACCELERATE_TORCH_DEVICE": "cpu",
                                             "ACCELERATE_USE_CPU": "1"}
    assert hf_spec.accelerate_env("xpu") == {"ACCELERATE_TORCH_DEVICE": "xpu"}


def _tree(path: Path, package: str, version: str) -> Path:
    (path / "tests").mkdir(parents=True)
    (path / "src" / package).mkdir(parents=True)
    (path / "src" / package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    return path


def test_checkouts_by_version_and_accelerate_dev_tree(tmp_path: Path) -> None:
    tf, acc = suite.PROJECTS["transformers"], suite.PROJECTS["accelerate"]
    _tree(tmp_path / "t" / "v5.24.0", "transformers", "5.24.0")
    assert hf_checkouts.find(str(tmp_path / "t"), "5.24.0", tf)[0] == tmp_path / "t" / "v5.24.0"
    found, why = hf_checkouts.find(str(tmp_path / "t" / "v5.24.0"), "5.17.0", tf)
    assert found is None and "no transformers checkout at 5.17.0 (the installed version)" \
        in why and "(a checkout at 5.24.0)" in why
    _tree(tmp_path / "a", "accelerate", "1.15.0.dev0")
    found, how = hf_checkouts.find(str(tmp_path / "a"), "1.15.0", acc)
    assert found == tmp_path / "a" and "a development tree of 1.15.0" in how
    # ... but not of another release, and not for transformers.
    assert hf_checkouts.find(str(tmp_path / "a"), "1.14.0", acc)[0] is None
    _tree(tmp_path / "t2", "transformers", "5.24.0.dev0")
    assert hf_checkouts.find(str(tmp_path / "t2"), "5.24.0", tf)[0] is None


def test_hub_errors_are_told_from_other_failures() -> None:
    class LocalEntryNotFoundError(Exception):
        pass
    try:
        try:
            raise LocalEntryNotFoundError("no cached file")
        except LocalEntryNotFoundError as inner:
            raise OSError("could not load the config") from inner
    except OSError as exc:
        assert suite.needs_hub(exc) == "LocalEntryNotFoundError: no cached file"
    assert suite.needs_hub(AssertionError("tensors differ")) is None
    assert suite.needs_hub(None) is None


def test_an_offline_loader_miss_is_a_hub_need(tmp_path: Path, monkeypatch) -> None:
    # transformers 5.17.0's feature_extraction_utils, offline (as on the H200).
    miss = OSError("Can't load feature extractor for 'hf-internal-testing/tiny-random-"
                   "wav2vec2'. If you were trying to load it from 'https://huggingface.co/"
                   "models', make sure you don't have a local directory with the same name.")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = suite.needs_hub(miss)
    assert hub is not None and hub.startswith("OSError: Can't load feature extractor")
    # A local folder of that name that lacks the file is the test's own problem...
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hf-internal-testing" / "tiny-random-wav2vec2").mkdir(parents=True)
    assert suite.needs_hub(miss) is None
    # ... and online the Hub was reachable: a failure.
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert suite.needs_hub(miss) is None


def test_selection_entries_name_files() -> None:
    assert suite.test_file("transformers", "bert") == "tests/models/bert/test_modeling_bert.py"
    assert suite.test_file("transformers", "models/t5/test_modeling_t5.py") == \
        "tests/models/t5/test_modeling_t5.py"
    assert suite.test_file("accelerate", "test_cpu") == "tests/test_cpu.py"
    assert suite.test_file("accelerate", "hooks") == "tests/test_hooks.py"
    assert suite.test_file("accelerate", "tests/fsdp/test_fsdp") == "tests/fsdp/test_fsdp.py"


def test_not_implemented_and_fallback_table() -> None:
    table: dict = {}
    hf_ops.add(table, "suites/hf_tests/transformers/models/detr/t.py::A::test_loss", XPU_DEBUG)
    hf_ops.add(table, "suites/hf_tests/accelerate/test_optimizer.py::B::test_x", XPU_MISSING)
    hf_ops.add(table, "suites/hf_tests/accelerate/test_optimizer.py::B::test_x", XPU_MISSING)
    assert table == {
        "aten::nll_loss2d_forward.output": {
            "kind": "fallback",
            "tests": ["suites/hf_tests/transformers/models/detr/t.py::A::test_loss"]},
        "aten::_foreach_norm.Scalar": {
            "kind": "missing",
            "tests": ["suites/hf_tests/accelerate/test_optimizer.py::B::test_x"]},
    }
    md = hf_ops.markdown("xpu-2.13", table)
    assert md.index("_foreach_norm") < md.index("nll_loss2d")   # not implemented first
    assert "| `aten::_foreach_norm.Scalar` | not implemented |" in md
    assert hf_ops.merged({"ops": {"aten::x": {"kind": "fallback", "tests": ["a"]}}},
                         {"aten::x": {"kind": "missing", "tests": ["b"]}}) == \
        {"schema": 1, "ops": {"aten::x": {"kind": "missing", "tests": ["a", "b"]}}}
    assert "None: no NotImplementedError" in hf_ops.markdown("cpu-2.13", {})


# --- in the real cpu-2.13 cell env ----------------------------------------------------
FINE = '''import os
import unittest
from transformers.testing_utils import (backend_device_count, run_test_using_subprocess,
                                        torch_device)


class FineTest(unittest.TestCase):
    @run_test_using_subprocess   # re-runs itself as `python -m pytest <its id>`
    def test_in_a_subprocess(self):
        self.assertEqual(os.environ.get("_INSIDE_SUB_PROCESS"), "1")

    def test_device(self):
        self.assertEqual(torch_device, "cpu")

    def test_count(self):
        self.assertEqual(backend_device_count(torch_device), 1)

    def test_hub(self):   # as transformers raises it offline for a missing checkpoint
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, "
                      "and couldn't find them in the cached files.")
'''


def _fake_transformers(path: Path) -> Path:
    _tree(path, "transformers", "5.24.0")   # cpu-2.13's transformers
    for pkg in ("tests", "tests/models", "tests/models/fine", "tests/models/broken"):
        (path / pkg).mkdir(parents=True, exist_ok=True)
        (path / pkg / "__init__.py").write_text("")
    (path / "tests/models/fine/test_modeling_fine.py").write_text(FINE)
    (path / "tests/models/broken/test_modeling_broken.py").write_text(
        "import no_such_module_anywhere\n")
    # An import that fails with an OSError (a fixture file missing): its message, not its
    # errno, is the record's text.
    (path / "tests/models/gone").mkdir()
    (path / "tests/models/gone/__init__.py").write_text("")
    (path / "tests/models/gone/test_modeling_gone.py").write_text(
        "open('/nonexistent/accelgrid-fixture.txt')\n")
    return path


def _run(tmp_path: Path, args: list[str], **env: str) -> list[dict]:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "accelgrid", "shell", "cpu-2.13", "--", "python", "-m",
         "pytest", *args, "-p", "no:cacheprovider", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "ACCELGRID_RESULTS_DIR": str(out), **env})
    lines = (out / "cpu-2.13" / ".debug" / contract.TESTS_FILE).read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert recs, proc.stdout[-3000:] + proc.stderr[-3000:]
    return recs


@pytest.mark.slow
def test_suite_in_a_real_cell_bad_inputs_and_the_planted_seed_fault(
        tmp_path: Path, outside_envdir: Path) -> None:
    sessions.prepared_python(ROOT, load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13"))
    co = _fake_transformers(tmp_path / "co" / "v5.24.0")
    # One run: a broken file is one error record and the other file's tests run (through
    # the generated spec, whose own checks pass); no accelerate checkout: one not-run.
    recs = _run(tmp_path, ["suites/hf_tests", "--hf-transformers", "fine,broken,gone,nosuch"],
                ACCELGRID_TRANSFORMERS_SRC=str(tmp_path / "co"), ACCELGRID_ACCELERATE_SRC="")
    by_id = {r["nodeid"]: r for r in recs}
    assert by_id["suites/hf_tests/test_accelerate_own.py::checkout"]["message"] == (
        "no accelerate checkout: set ACCELGRID_ACCELERATE_SRC to one at v1.15.0 (or a "
        "folder of checkouts by version) to run its own tests")
    spec_test = "suites/hf_tests/test_device_spec.py"
    assert {r["outcome"] for n, r in by_id.items() if n.startswith(spec_test)} == {"passed"}
    base = "suites/hf_tests/transformers/models"
    assert by_id[f"{base}/fine/test_modeling_fine.py::FineTest::test_device"]["outcome"] \
        == "passed"
    assert by_id[f"{base}/fine/test_modeling_fine.py::FineTest::test_count"]["outcome"] \
        == "passed"
    sub = by_id[f"{base}/fine/test_modeling_fine.py::FineTest::test_in_a_subprocess"]
    assert sub["outcome"] == "passed", sub.get("longrepr", "")[-2000:]
    hub = by_id[f"{base}/fine/test_modeling_fine.py::FineTest::test_hub"]
    assert hub["outcome"] == "not-run", hub
    assert hub["message"].startswith("needs the Hugging Face Hub, and the cell runs offline: "
                                     "OSError: We couldn't connect")
    broken = by_id[f"{base}/broken/test_modeling_broken.py::import"]
    assert broken["outcome"] == "error" and "no_such_module_anywhere" in broken["longrepr"]
    gone = by_id[f"{base}/gone/test_modeling_gone.py::import"]
    assert gone["outcome"] == "error" and "FileNotFoundError" in gone["longrepr"] \
        and "accelgrid-fixture.txt" in gone["longrepr"], gone["longrepr"][-500:]
    nosuch = by_id["suites/hf_tests/test_transformers_own.py::tests/models/nosuch/"
                   "test_modeling_nosuch.py"]
    assert nosuch["outcome"] == "not-run" and "is not in the transformers checkout" \
        in nosuch["message"]
    # Another version: one not-run naming both.
    (co / "src/transformers/__init__.py").write_text('__version__ = "5.17.0"\n')
    recs = _run(tmp_path, ["suites/hf_tests/test_transformers_own.py"],
                ACCELGRID_TRANSFORMERS_SRC=str(co))
    (rec,) = recs
    assert rec["outcome"] == "not-run"
    assert "no transformers checkout at 5.24.0 (the installed version)" in rec["message"]
    assert "(a checkout at 5.17.0)" in rec["message"]
    # A spec whose seed hook does nothing turns the seeded test red.
    planted = tmp_path / "noop_seed_spec.py"
    planted.write_text("import torch\nDEVICE_NAME = 'cpu'\nMANUAL_SEED_FN = lambda seed: None\n"
                       "DEVICE_COUNT_FN = torch.cpu.device_count\n")
    outcome = {r["nodeid"].rsplit("::", 1)[1]: r["outcome"]
               for r in _run(tmp_path, [spec_test], TRANSFORMERS_TEST_DEVICE_SPEC=str(planted))}
    assert outcome == {"test_spec_hooks_are_the_devices_own": "failed",
                       "test_seeding_through_the_spec_repeats_a_draw": "failed"}


def _cell(root: Path, name: str, device: str, recs: dict[str, str]) -> Path:
    folder = root / name
    jsonio.write_json(folder / contract.ENV_FILE, {"cell": name, "device_type": device,
                                              "status": "finished"})
    for nodeid, outcome in recs.items():
        results.append_record(folder / contract.TESTS_FILE, {"nodeid": nodeid, "outcome": outcome,
                                                       "cell": name, "message": "boom"})
    return folder


def test_report_puts_the_reference_cells_outcome_beside_each_failure(tmp_path: Path) -> None:
    from accelgrid.report import hf_tests

    a = "suites/hf_tests/transformers/models/vit/test_modeling_vit.py::ViTModelTest::test_a"
    b = "suites/hf_tests/accelerate/test_optimizer.py::OptimizerTester::test_b"
    xpu = _cell(tmp_path, "xpu-2.13", "xpu", {a: "failed", b: "crashed"})
    _cell(tmp_path, "cpu-2.13", "cpu", {a: "failed", b: "passed"})

    jsonio.write_json(xpu / "hf_ops.json", hf_ops.merged(None, {
        "aten::_foreach_norm.Scalar": {"kind": "missing", "tests": [b]}}))
    model = hf_tests.summary([tmp_path])
    cells = {c["cell"]: c for c in model["cells"]}
    assert cells["xpu-2.13"]["reference"] == "cpu-2.13"     # no cuda cell: cpu
    assert [(f["nodeid"], f["outcome"], f["reference"]) for f in
            cells["xpu-2.13"]["failures"]] == [(b, "crashed", "passed"), (a, "failed", "failed")]
    assert cells["xpu-2.13"]["files"] == {
        "accelerate/test_optimizer.py": {"crashed": 1},
        "transformers/models/vit/test_modeling_vit.py": {"failed": 1}}
    _cell(tmp_path, "cuda-2.11", "cuda", {a: "passed"})
    cells = {c["cell"]: c for c in hf_tests.summary([tmp_path])["cells"]}
    assert cells["xpu-2.13"]["reference"] == "cuda-2.11"    # cuda first
    assert {f["nodeid"]: f["reference"] for f in cells["xpu-2.13"]["failures"]} == {
        a: "passed", b: "not in the reference cell"}
    assert cells["cuda-2.11"]["reference"] == "cpu-2.13"
    md = hf_tests.markdown(hf_tests.summary([tmp_path]))
    assert "| `accelerate/test_optimizer.py::OptimizerTester::test_b` | crashed | not in the " \
        "reference cell | boom |" in md
    assert "| `aten::_foreach_norm.Scalar` | missing | 1: " in md


def test_each_captured_hf_test_gets_the_xpu_releases_it_would_hit(tmp_path: Path) -> None:
    """From a cpu cell's op capture, per HF test the XPU releases on which it would hit a
    fallback, beside what an xpu cell of the run observed. Upstream facts (intel/
    torch-xpu-ops, src/ATen/native/xpu/XPUFallback.template; src/aten/ in release/2.4):
    release/2.4 and release/2.5 list ``linspace.out`` and ``linalg_qr.out``; release/2.6
    and release/2.13 list ``linalg_qr.out`` but not ``linspace.out``; ``mm`` is on none."""
    from accelgrid.report import hf_tests

    a = "suites/hf_tests/transformers/models/vit/test_modeling_vit.py::ViTModelTest::test_a"
    b = "suites/hf_tests/transformers/models/vit/test_modeling_vit.py::ViTModelTest::test_b"
    c = "suites/hf_tests/accelerate/test_hooks.py::HooksModelTester::test_c"
    cpu = _cell(tmp_path, "cpu-2.13", "cpu", {a: "passed", b: "passed", c: "passed"})
    raw = cpu / "ops-raw"
    raw.mkdir()
    rows = [{"nodeid": a, "workload": "w", "ops": {"aten::linspace.default": {
                 "status": "native", "count": 1}, "aten::mm.default": {"status": "native",
                                                                          "count": 2}}},
            {"nodeid": b, "workload": "w", "ops": {"aten::linalg_qr.default": {
                 "status": "native", "count": 1}}},
            {"nodeid": c, "workload": "w", "ops": {"aten::mm.default": {
                 "status": "native", "count": 1}}}]
    (raw / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _cell(tmp_path, "xpu-2.5", "xpu", {a: "failed"})
    pred = hf_tests.summary([tmp_path])["xpu_prediction"]
    assert pred["from"] == ["cpu-2.13"] and pred["captured_tests"] == 3
    tests = pred["tests"]
    assert c not in tests                      # mm: native on every release
    assert tests[a]["series"]["2.5"] == {"fallback": ["aten::linspace.default"]}
    assert "2.6" not in tests[a]["series"] and "2.13" not in tests[a]["series"]
    assert {"2.5", "2.6", "2.13"} <= set(tests[b]["series"])
    assert tests[a]["observed"] == {"xpu-2.5": "failed"}
    assert tests[b]["observed"] == {"xpu-2.5": "not in the cell"}
    md = hf_tests.markdown(hf_tests.summary([tmp_path]))
    assert "## Predicted on XPU, per test" in md
    assert "| `transformers/models/vit/test_modeling_vit.py::ViTModelTest::test_a` | - | " \
        "2.4 (`aten::linspace.default`), 2.5 (`aten::linspace.default`) | failed |" in md
    # No capture anywhere: said, not an empty table.
    empty = tmp_path / "none"
    _cell(empty, "cpu-2.13", "cpu", {a: "passed"})
    assert "captured its ops" in hf_tests.markdown(hf_tests.summary([empty]))
