"""The runner and the recording plugin, on real pytest runs of generated payload tests:
every outcome kind, crashes and hangs that lose nothing else, and killed runs."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.config.matrix import load_matrix
from accelgrid.results import cellresults
from accelgrid.results.records import TestRecord as TypedRecord
from accelgrid.run import passes as pass_plan
from accelgrid.run import selection, supervise
from accelgrid.run.cell import run_cell

PAYLOAD = '''
import os, time, pytest
from accelgrid.base.outcomes import not_run

def test_pass(device):
    assert device == "cpu"

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_error(broken):
    pass

def test_skip():
    pytest.skip("feature not claimed")

@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfail():
    raise ValueError

@pytest.mark.xfail(reason="known bug", strict=False)
def test_xpass():
    pass

def test_not_run():
    not_run("ModelX missing in this transformers")

def test_flags_set_before_start():
    assert os.environ["ACCELGRID_CELL"] == "cpu-2.13"

def test_z_after():
    pass
'''

CRASHY = '''
import os, time, pytest

def test_a_before():
    pass

def test_b_segfault():
    os.abort()

@pytest.mark.timeout(3)  # only the hang: a crash is told from a timeout by time run
def test_c_hang():
    time.sleep(600)

def test_d_after():
    pass
'''


def _records(folder: Path) -> dict[str, TypedRecord]:
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    return {r["nodeid"].split("::")[-1]: r for r in recs}


def _cell(proj: Path, name: str = "cpu-2.13"):
    return load_matrix(proj / "matrix.yaml").cell(name)


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def _pass_names(folder: Path) -> list[str]:
    return [p["name"] for p in json.loads((folder / contract.ENV_FILE).read_text())["passes"]]


def test_every_outcome_recorded(mini_project, python, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_s3cr3t_value")
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:pa55word@mirror.invalid/simple")
    proj = mini_project()
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    rc = run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert rc == 1  # failures present
    folder = proj / "results" / "cpu-2.13"
    recs = _records(folder)
    got = {name: r["outcome"] for name, r in recs.items()}
    assert got == {
        "test_pass": "passed", "test_fail": "failed", "test_error": "error",
        "test_skip": "skipped", "test_xfail": "xfailed", "test_xpass": "xpassed",
        "test_not_run": "not-run", "test_flags_set_before_start": "passed",
        "test_z_after": "passed",
    }
    assert recs["test_fail"]["message"].startswith("AssertionError: one is not two")
    assert recs["test_skip"]["message"] == "feature not claimed"
    assert recs["test_not_run"]["message"] == "ModelX missing in this transformers"
    assert recs["test_xfail"]["message"] == "known bug"
    assert recs["test_pass"]["worker"] == "gw0"
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["cell"] == "cpu-2.13" and env["status"] == "finished" and env["end"]
    assert env["env"]["ACCELGRID_DEVICE"] == "cpu"
    assert env["env"]["HF_TOKEN"] == "<redacted>"
    for f in folder.rglob("*"):  # no secret anywhere in what the run left
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "hf_s3cr3t_value" not in text and "pa55word" not in text, f
    assert (folder / contract.JUNIT_FILE).exists()
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    assert summary["total"] == 9 and summary["counts"]["passed"] == 3


def test_crash_and_hang_lose_nothing(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_crashy.py").write_text(CRASHY)
    t0 = time.monotonic()
    run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert time.monotonic() - t0 < 120
    got = {n: r["outcome"] for n, r in _records(proj / "results" / "cpu-2.13").items()}
    assert got == {"test_a_before": "passed", "test_b_segfault": "crashed",
                   "test_c_hang": "timeout", "test_d_after": "passed"}


def test_cell_time_limit_marks_rest_not_run(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_slow.py").write_text(textwrap.dedent('''
        import time
        def test_1(): pass
        def test_2(): time.sleep(600)
        def test_3(): pass
    '''))
    rc = run_cell(run_request(_cell(proj), python, proj, proj / "results", limit_s=15))
    assert rc == supervise.EXIT_CELL_TIMEOUT
    folder = proj / "results" / "cpu-2.13"
    got = {n: (r["outcome"], r.get("message", "")) for n, r in _records(folder).items()}
    assert got["test_1"][0] == "passed"
    assert got["test_2"][0] == "crashed" and "time limit" in got["test_2"][1]
    assert got["test_3"] == ("not-run", "cell time limit of 15 s reached")
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["end"] and env["end_reason"] == "cell time limit of 15 s reached"


def test_killed_runner_keeps_what_was_recorded(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_slow.py").write_text(textwrap.dedent('''
        import time
        def test_1(): pass
        def test_2(): pass
        def test_3(): time.sleep(600)
    '''))
    code = ("import sys; from pathlib import Path; from accelgrid.run.cell import run_cell; "
            "from accelgrid.run import preflight; from accelgrid.run.request import RunRequest; "
            "from accelgrid.config.matrix import load_matrix; p = Path(sys.argv[1]); "
            "c = load_matrix(p / 'matrix.yaml').cell('cpu-2.13'); "
            "run_cell(RunRequest(c, sys.executable, p, p / 'results', preflight.check(c, p)))")
    proc = subprocess.Popen([python, "-c", code, str(proj)], start_new_session=True)
    folder = proj / "results" / "cpu-2.13"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        recs, _ = results.read_records(folder / contract.TESTS_FILE)
        if len(recs) >= 2:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole session, runner and pytest alike
    proc.wait()
    cell = cellresults.load_cell(folder)
    assert {n.split("::")[-1]: r["outcome"] for n, r in cell.tests.items()} == {
        "test_1": "passed", "test_2": "passed"}
    assert any("never finished" in p for p in cell.problems)
    # Closing the results afterwards attributes the rest.
    results.finalize(folder, "session killed")
    after = cellresults.load_cell(folder)
    assert after.tests[[n for n in after.tests if n.endswith("test_3")][0]]["outcome"] in (
        "crashed", "not-run")


@pytest.mark.parametrize("args,expect_suites", [
    ([], True), (["-k", "memory"], True), (["suites/payload"], False),
])
def test_pytest_args_pass_through(mini_project, python, args, expect_suites) -> None:
    proj = mini_project()
    cmd = pass_plan.pytest_command(_cell(proj), python, proj / "r", args, root=proj)
    assert cmd[: 3] == [python, "-m", "pytest"]
    assert cmd[len(cmd) - len(args):] == args  # the user's args come last: they win
    assert (cmd[3] == "suites/payload") == expect_suites
    assert "--timeout-method=thread" in cmd and "-n" in cmd


MULTI = '''
import os, pytest

@pytest.mark.parametrize("i", range(8))
def test_pinned(i):
    mask = os.environ["ZE_AFFINITY_MASK"]
    assert mask in ("0", "1") and mask == os.environ["ACCELGRID_DEVICE_INDEX"]
    if i == 3 and mask == "1" and not os.environ.get("CRASHED_ONCE"):
        os.environ["CRASHED_ONCE"] = "1"
        os.abort()

@pytest.mark.multi_device
def test_sees_all_devices():
    assert os.environ["ZE_AFFINITY_MASK"] == "0,1"  # every device of the run, no other
'''


@pytest.mark.parametrize("serial", ["1", ""])
def test_one_pinned_worker_per_device(mini_project, python, monkeypatch, serial) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_multi.py").write_text(MULTI)
    monkeypatch.setenv("ACCELGRID_DEVICES", "0,1")
    monkeypatch.setenv("ACCELGRID_SERIAL_PASSES", serial)
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    run_cell(run_request(_cell(proj, "xpu-2.13"), python, proj, proj / "results"))
    recs, _ = results.read_records(proj / "results" / "xpu-2.13" / contract.TESTS_FILE)
    by_test = {r["nodeid"].split("::")[-1]: r for r in recs}
    pinned = [r for n, r in by_test.items() if n.startswith("test_pinned")]
    assert len(pinned) == 8
    # Every pinned test saw exactly its worker's device; both devices were used.
    assert {r["device"] for r in pinned if r["outcome"] == "passed"} == {"xpu:0", "xpu:1"}
    assert all(r["outcome"] in ("passed", "crashed") for r in pinned)
    assert by_test["test_sees_all_devices"]["outcome"] == "passed"
    assert by_test["test_sees_all_devices"]["device"] == "xpu:all"
    assert sorted(_pass_names(proj / "results" / "xpu-2.13")) == ["all-devices", "pinned"]
    left = json.loads((proj / "results" / "xpu-2.13"
                       / contract.HANDOFF[contract.PASS_ALL_DEVICES].file).read_text())
    assert left == ["suites/payload/test_multi.py::test_sees_all_devices"]
    pinned_pass, all_pass = json.loads(
        (proj / "results" / "xpu-2.13" / contract.SUMMARY_FILE).read_text())["passes"]
    assert (pinned_pass["name"], all_pass["name"]) == ("pinned", "all-devices")
    if serial:  # after the pinned pass, fed by the list it left
        assert all_pass["beside"] is None
        # (start to the millisecond, wall to the hundredth: 0.01 s either way)
        assert _epoch(all_pass["start"]) >= (_epoch(pinned_pass["start"])
                                             + pinned_pass["wall_s"] - 0.01)
    else:
        assert all_pass["beside"] == "pinned"


def test_single_device_host_runs_one_pass(mini_project, monkeypatch) -> None:
    proj = mini_project()
    cell = _cell(proj, "xpu-2.13")
    one = pass_plan.passes(cell, device_ids=["3"])
    assert [p.name for p in one] == ["single"]
    assert dict(one[0].env) == {"ZE_AFFINITY_MASK": "3", "ACCELGRID_DEVICE_INDEX": "3"}
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    two = pass_plan.passes(cell, device_ids=["0", "1"])
    assert [p.name for p in two] == ["pinned", "all-devices"]
    share = max(1, (os.cpu_count() or 1) // 2)
    # GPUs that processes can share: the all-devices pass runs beside the pinned one
    # (with a worker's share of the CPU)...
    assert [p.beside for p in two] == [False, True]
    assert dict(two[1].env)["OMP_NUM_THREADS"] == str(share)
    assert "no:cacheprovider" in pass_plan.pytest_command(cell, "py", proj, run_pass=two[1])
    # ... unless asked not to, or the device type cannot be shared.
    assert not pass_plan.passes(cell, device_ids=["0", "1"], serial=True)[1].beside
    alone = dataclasses.replace(cell, device_type=dataclasses.replace(
        cell.device_type, shared_by_processes=False))
    assert not pass_plan.passes(alone, device_ids=["0", "1"])[1].beside
    assert two[0].xdist == (
        "--dist", "worksteal",
        "--tx", f"popen//env:ZE_AFFINITY_MASK=0//env:ACCELGRID_DEVICE_INDEX=0"
                f"//env:OMP_NUM_THREADS={share}",
        "--tx", f"popen//env:ZE_AFFINITY_MASK=1//env:ACCELGRID_DEVICE_INDEX=1"
                f"//env:OMP_NUM_THREADS={share}")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    assert "OMP_NUM_THREADS" not in " ".join(pass_plan.passes(cell, device_ids=["0", "1"])[0].xdist)
    # cpu has no visibility variable: never pinned; its tests see no accelerator, those
    # that ask for the host's run in a pass of their own.
    cpu = pass_plan.passes(_cell(proj, "cpu-2.13"), device_ids=["0", "1"])
    assert [p.name for p in cpu] == ["single", "host-accelerators"]
    assert dict(cpu[0].env) == {"CUDA_VISIBLE_DEVICES": "", "ONEAPI_DEVICE_SELECTOR":
                                "!level_zero:gpu"}
    assert cpu[0].select == ("-m", "not sees_accelerators") and cpu[1].env == ()


def test_one_chosen_device_is_pinned(mini_project, python, monkeypatch) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_one.py").write_text(
        "import os\ndef test_sees_one():\n    assert os.environ['ZE_AFFINITY_MASK'] == '1'\n")
    monkeypatch.setenv("ACCELGRID_DEVICES", "1")
    assert run_cell(run_request(_cell(proj, "xpu-2.13"), python, proj, proj / "results")) == 0
    recs, _ = results.read_records(proj / "results" / "xpu-2.13" / contract.TESTS_FILE)
    assert [(r["outcome"], r["device"]) for r in recs] == [("passed", "xpu:1")]


def test_torch_provenance_merges_pinned_workers_views() -> None:
    from accelgrid.results import provenance

    base = {"version": "2.11.0+cu130", "cuda_runtime": "13.0", "driver": "580"}
    reports: list[dict[str, Any]] = [  # each pinned worker sees one GPU, as its own index 0
        {**base, "pinned_index": "1", "devices": [{"index": 0, "name": "H200"}]},
        {**base, "pinned_index": "0", "devices": [{"index": 0, "name": "H200"}]},
        {**base, "pinned_index": None, "devices": [{"index": 0, "name": "H200"},
                                                   {"index": 1, "name": "H200"}]},
    ]
    merged = provenance.merge_torch_reports(reports)
    assert merged["device_count"] == 2
    assert [str(d["index"]) for d in merged["devices"]] == ["0", "1"]
    assert merged["version"] == "2.11.0+cu130" and "pinned_index" not in merged
    assert provenance.merge_torch_reports([]) == {"pending": True}
    # A run on GPUs 1 and 3 of four: the all-devices pass sees them as its 0 and 1.
    subset = provenance.merge_torch_reports([
        {**base, "pinned_index": "3", "devices": [{"index": 0, "name": "H200"}]},
        {**base, "pinned_index": "1,3", "devices": [{"index": 0, "name": "H200"},
                                                     {"index": 1, "name": "H200"}]}])
    assert [str(d["index"]) for d in subset["devices"]] == ["1", "3"]
    assert subset["device_count"] == 2


@pytest.mark.parametrize("text, want", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 2025\n"
     "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n", "580.159.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
     "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 2025\n", "570.86.15"),
])
def test_nvidia_driver_from_the_kernels_file(tmp_path, monkeypatch, text, want) -> None:
    # Every test process reports its torch facts; nvidia-smi's NVML start-up in each of
    # them took up to seconds on a multi-GPU host: the kernel's own file answers at once.
    from accelgrid.devices import cuda

    (tmp_path / "version").write_text(text)
    monkeypatch.setattr("shutil.which", lambda name: pytest.fail("nvidia-smi run"))
    assert cuda.driver_version(str(tmp_path / "version")) == want
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert cuda.driver_version(str(tmp_path / "missing")) is None


def test_recorded_properties_land_in_the_test_record(mini_project, python) -> None:
    proj = mini_project(workers=2)
    (proj / "suites" / "payload" / "test_props.py").write_text(
        "import pytest\n"
        "def test_facts(request):\n"
        "    request.node.user_properties.append(('peak_gib', 1.5))\n"
        "    request.node.user_properties.append(('flags', {'A': '1'}))\n"
        "    request.node.user_properties.append(('odd', {3}))\n"
        "    request.node.user_properties.append(('diverged', float('nan')))\n"
        "def test_facts_then_skip(request):\n"
        "    request.node.user_properties.append(('has_fp64', False))\n"
        "    pytest.skip('no fp64')\n")
    run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results"))
    recs, _ = results.read_records(proj / "results" / "cpu-2.13" / contract.TESTS_FILE)
    by = {r["nodeid"].split("::")[-1]: r for r in recs}
    props = by["test_facts"]["properties"]
    assert props["peak_gib"] == 1.5 and props["flags"] == {"A": "1"}
    assert props["odd"] == "{3}"   # a set: not JSON, kept as its repr
    assert props["diverged"] == "nan"  # JSON has no NaN: its repr, not a null
    assert by["test_facts_then_skip"]["outcome"] == "skipped"
    assert by["test_facts_then_skip"]["properties"] == {"has_fp64": False}


def test_a_record_tells_cpu_work_from_waiting(mini_project, python) -> None:
    # cpu_s (the test process's CPU time over the test) beside the wall time: a test
    # starved of CPU and one waiting for its device look alike by duration alone.
    proj = mini_project()
    (proj / "suites" / "payload" / "test_cpu.py").write_text(
        "import time\n"
        "def test_computes():\n"
        "    t0 = time.process_time()\n"
        "    while time.process_time() - t0 < 0.5:\n"
        "        pass\n"
        "def test_waits():\n"
        "    time.sleep(0.5)\n")
    run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results"))
    recs = _records(proj / "results" / "cpu-2.13")
    assert recs["test_computes"]["cpu_s"] >= 0.5
    waited = recs["test_waits"]["duration"]
    assert waited is not None and recs["test_waits"]["cpu_s"] < 0.2 <= 0.5 <= waited
    assert all(r["pass"] == "single" and r["start"] is not None and r["start"] <= r["finished"]
               for r in recs.values())


@pytest.mark.parametrize("flags", [{}, {"OverrideDefaultFP64Settings": "1",
                                        "IGC_EnableDPEmulation": "1"}])
def test_smoke_float64_records_the_fp64_flags(tmp_path: Path, python, monkeypatch,
                                              flags: dict) -> None:
    """The real smoke test on the cpu cell: float64 math runs, and the flags in effect are
    in its record (on xpu, has_fp64 too: docs/devices/xpu.md)."""
    root = Path(__file__).resolve().parents[2]
    for name in ("OverrideDefaultFP64Settings", "IGC_EnableDPEmulation"):
        monkeypatch.delenv(name, raising=False)
    for name, value in flags.items():
        monkeypatch.setenv(name, value)
    cell = load_matrix(root / "matrix.yaml").cell("cpu-2.13")
    rc = run_cell(run_request(cell, python, root, tmp_path,
                              ["suites/smoke/test_device_api.py::test_float64_math"]))
    assert rc == 0
    _, folder = results.last_run(tmp_path / "cpu-2.13")   # a selected run: runs/<id>/
    [rec], _ = results.read_records(folder / contract.TESTS_FILE)
    assert rec["outcome"] == "passed"
    assert rec["properties"] == {"fp64_flags": flags}


HIDDEN_PAYLOAD = """
import os
import pytest

def test_cpu_cell_sees_no_accelerator():
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert os.environ["ONEAPI_DEVICE_SELECTOR"] == "!level_zero:gpu"

@pytest.mark.sees_accelerators
def test_asks_for_the_hosts():
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert "ONEAPI_DEVICE_SELECTOR" not in os.environ
"""


def test_cpu_cell_hides_a_visible_cuda_device(mini_project, python, monkeypatch) -> None:
    """A host that shows a CUDA device (CUDA_VISIBLE_DEVICES=0): the cpu cell's tests see
    none (torchao's CPUOffloadOptimizer would otherwise pick cuda: pytorch/ao#958); a test
    marked sees_accelerators runs afterwards and sees the host's."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("ONEAPI_DEVICE_SELECTOR", raising=False)
    proj = mini_project(workers=2)
    (proj / "suites" / "payload" / "test_hidden.py").write_text(HIDDEN_PAYLOAD)
    assert run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results")) == 0
    folder = proj / "results" / "cpu-2.13"
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert {r["nodeid"].split("::")[-1]: r["outcome"] for r in recs} == {
        "test_cpu_cell_sees_no_accelerator": "passed", "test_asks_for_the_hosts": "passed"}
    assert _pass_names(folder) == ["single", "host-accelerators"]
    handoff = contract.HANDOFF[contract.PASS_HOST_ACCELERATORS]
    assert json.loads((folder / handoff.file).read_text()) == [
        "suites/payload/test_hidden.py::test_asks_for_the_hosts"]
    assert (folder / "junit-host-accelerators.xml").exists()


def test_cpu_cell_without_marked_tests_runs_one_pass(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_plain.py").write_text("def test_x():\n    pass\n")
    assert run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results")) == 0
    assert _pass_names(proj / "results" / "cpu-2.13") == ["single"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_module_that_fails_to_import_is_an_error_record(mini_project, python,
                                                         workers) -> None:
    # A suite importing what the cell's env lacks used to vanish from the cell's results.
    proj = mini_project(workers=workers)
    payload = proj / "suites" / "payload"
    (payload / "test_ok.py").write_text("def test_a():\n    pass\n")
    (payload / "test_broken.py").write_text("import not_installed_anywhere\n"
                                            "def test_b():\n    pass\n")
    assert run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results")) != 0
    recs, _ = results.read_records(proj / "results" / "cpu-2.13" / contract.TESTS_FILE)
    by = {r["nodeid"]: r for r in recs}
    broken = by["suites/payload/test_broken.py"]
    assert broken["outcome"] == "error" and broken["phase"] == "collect"
    assert "not_installed_anywhere" in broken["message"]
    assert by["suites/payload/test_ok.py::test_a"]["outcome"] == "passed"
    assert sum(1 for r in recs if r["nodeid"] == "suites/payload/test_broken.py") == 1


# --- nothing lost: any number of crashes and hangs -------------------------------------

MANY_CRASHES = '''
import os, time, pytest

@pytest.mark.parametrize("i", range(3))
def test_a_ordinary(i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_b_crash(i):
    os.abort()

@pytest.mark.parametrize("i", range(3))
def test_c_ordinary(i):
    pass

@pytest.mark.timeout(3)
@pytest.mark.parametrize("i", range(2))
def test_d_hang(i):
    time.sleep(600)

@pytest.mark.parametrize("i", range(3))
def test_e_ordinary(i):
    pass
'''


def test_any_number_of_crashes_and_hangs_lose_only_themselves(mini_project, python) -> None:
    # 8 dead workers with one xdist worker: past xdist's default limit (4 restarts per
    # worker), which used to end the run and leave every later test not-run.
    proj = mini_project()
    (proj / "suites" / "payload" / "test_many.py").write_text(MANY_CRASHES)
    rc = run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert rc == 1  # the crashes and timeouts are failures
    got = {n: r["outcome"] for n, r in _records(proj / "results" / "cpu-2.13").items()}
    assert got == {**{f"test_b_crash[{i}]": "crashed" for i in range(6)},
                   **{f"test_d_hang[{i}]": "timeout" for i in range(2)},
                   **{f"test_{x}_ordinary[{i}]": "passed" for x in "ace" for i in range(3)}}
    summary = json.loads((proj / "results" / "cpu-2.13" / contract.SUMMARY_FILE).read_text())
    assert summary["total"] == 17 and summary["counts"]["not-run"] == 0


def test_workers_leave_once_their_session_is_over(mini_project, python, monkeypatch,
                                                  tmp_path) -> None:
    # xdist's controller waits for each worker's process to end; a worker's interpreter
    # teardown (here an atexit handler; torch's and CUDA's in a real cell) no longer runs.
    proj = mini_project(workers=2)
    (proj / "suites" / "payload" / "test_slow_exit.py").write_text(
        "import atexit, os, pathlib, time\n"
        "worker = os.environ.get('PYTEST_XDIST_WORKER')\n"
        "if worker:\n"
        "    def teardown():\n"
        "        time.sleep(1)\n"
        "        (pathlib.Path(os.environ['TEARDOWN_DIR']) / worker).touch()\n"
        "    atexit.register(teardown)\n"
        "def test_one(): pass\n"
        "def test_two(): pass\n")
    for teardown in ("1", ""):   # "1": the full teardown, as before
        monkeypatch.setenv("ACCELGRID_WORKER_TEARDOWN", teardown)
        monkeypatch.setenv("TEARDOWN_DIR", str(tmp_path / f"teardown{teardown}"))
        (tmp_path / f"teardown{teardown}").mkdir()
        assert run_cell(run_request(_cell(proj), python, proj, proj / "results")) == 0
        assert {r["outcome"] for r in _records(proj / "results" / "cpu-2.13").values()} == {
            "passed"}
    assert sorted(p.name for p in (tmp_path / "teardown1").iterdir()) == ["gw0", "gw1"]
    assert not any((tmp_path / "teardown").iterdir())


def test_workers_that_die_without_a_test_still_end_the_run(mini_project, python) -> None:
    # The limit stays for deaths no test explains: a worker that dies as it starts.
    proj = mini_project()
    (proj / "suites" / "payload" / "conftest.py").write_text(
        "import os\n"
        "def pytest_configure(config):\n"
        "    if hasattr(config, 'workerinput'):\n"
        "        os._exit(3)\n")
    (proj / "suites" / "payload" / "test_one.py").write_text("def test_one(): pass\n")
    t0 = time.monotonic()
    rc = run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert rc != 0 and time.monotonic() - t0 < 120  # ended, not restarting forever


# --- text that is not UTF-8 ------------------------------------------------------------

SURROGATES = r'''
import logging, os, warnings, pytest
BAD = b"\xff".decode("utf-8", "surrogateescape")  # how Python gives a non-UTF-8 name

def test_a_before():
    pass

def test_listdir_message(tmp_path):
    os.mkdir(bytes(tmp_path) + b"/report-\xff")
    names = os.listdir(tmp_path)
    assert not names, f"unexpected file: {names[0]}"  # the surrogate itself, not a repr

def test_skip_reason():
    pytest.skip("no " + BAD)

def test_captured_output_and_log():
    print("stdout " + BAD)
    logging.getLogger("payload").warning("log %s", BAD)
    assert 0, "see the log"

def test_warning():
    warnings.warn("warn " + BAD)

def test_property(record_property):
    record_property("path", BAD)

@pytest.mark.xfail(reason="xfail " + BAD, strict=True)
def test_xfail_reason():
    raise ValueError(BAD)

@pytest.mark.parametrize("name", [BAD], ids=["id" + BAD])
def test_param(name):
    pass

def test_z_after():
    pass
'''


def _no_surrogates(data) -> bool:
    return jsonio.safe(data) == data


def test_text_that_is_not_utf8_is_recorded_and_the_run_goes_on(mini_project, python,
                                                                 monkeypatch, tmp_path) -> None:
    bad = b"\xff".decode("utf-8", "surrogateescape")
    # An env value into env.json: a variable whose value a run records (the allowlist;
    # an unknown ACCELGRID_* name is recorded by name only: tests/results/test_secrets.py).
    monkeypatch.setenv("UV_INDEX_STRATEGY", "note " + bad)
    proj = mini_project()
    payload = proj / "suites" / "payload"
    (payload / "test_surrogates.py").write_text(SURROGATES)
    with open(bytes(payload) + b"/test_\xff.py", "w") as fh:  # a non-UTF-8 test file name
        fh.write("def test_x():\n    pass\n")
    rc = run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert rc == 1
    folder = proj / "results" / "cpu-2.13"
    recs = _records(folder)
    assert {n: r["outcome"] for n, r in recs.items()} == {
        "test_a_before": "passed", "test_listdir_message": "failed",
        "test_skip_reason": "skipped", "test_captured_output_and_log": "failed",
        "test_warning": "passed", "test_property": "passed", "test_xfail_reason": "xfailed",
        "test_param[id\\udcff]": "passed", "test_z_after": "passed", "test_x": "passed"}
    assert recs["test_listdir_message"]["message"].startswith(
        "AssertionError: unexpected file: report-\\xff")
    assert recs["test_skip_reason"]["message"] == "no \\xff"
    assert recs["test_xfail_reason"]["message"] == "xfail \\xff"
    assert "suites/payload/test_\\xff.py::test_x" in {r["nodeid"] for r in recs.values()}
    # Every file the run left is UTF-8, and no string read back holds a surrogate.
    for f in folder.rglob("*"):
        if f.is_file():
            f.read_text(encoding="utf-8")
    for name in (contract.ENV_FILE, contract.SUMMARY_FILE, contract.COLLECTED_FILE):
        assert _no_surrogates(json.loads((folder / name).read_text()))
    assert _no_surrogates(results.read_records(folder / contract.TESTS_FILE)[0])
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["env"]["UV_INDEX_STRATEGY"] == "note \\xff"
    junit = (folder / contract.JUNIT_FILE).read_text(encoding="utf-8")
    assert "log " in junit and "test_z_after" in junit
    # ... and the reports render.
    from accelgrid import report

    made = report.grid([folder], tmp_path / "grid")
    assert "test_z_after" in made.paths["md"].read_text(encoding="utf-8")


# --- the all-devices pass beside the pinned one: one results folder, two writers -------

BESIDE = """
import os, time, pytest
from pathlib import Path

MEET = Path(os.environ["MEET_DIR"])


def _meet(mine, theirs):
    # Each pass's first test waits for the other's: they only meet if the passes overlap.
    (MEET / mine).touch()
    deadline = time.monotonic() + 240   # the other pass's start-up, on a loaded host
    while not (MEET / theirs).exists():
        assert time.monotonic() < deadline, f"no {theirs}: the passes did not overlap"
        time.sleep(0.02)


@pytest.mark.parametrize("i", range(30))
def test_pinned(i, record_property):
    assert os.environ["ZE_AFFINITY_MASK"] in ("0", "1")
    record_property("note", "x" * 3000)   # long records: appends of both passes interleave
    if i == 0:
        _meet("pinned", "all-devices")
    if i == 7 and not (MEET / "crashed-pinned").exists():
        (MEET / "crashed-pinned").touch()
        os.abort()


@pytest.mark.multi_device
@pytest.mark.parametrize("i", range(15))
def test_all(i, record_property):
    assert os.environ["ZE_AFFINITY_MASK"] == "0,1"
    record_property("note", "y" * 3000)
    if i == 0:
        _meet("all-devices", "pinned")
    if i == 4:
        os.abort()   # the all-devices pass's worker dies in a test too


@pytest.mark.slow_payload
def test_deselected_by_the_user():
    pass
"""


def _run_beside(proj: Path, python: str, meet: Path, monkeypatch, args: Sequence[str] = ()):
    """A run on a fake two-XPU host (the suite only checks ZE_AFFINITY_MASK)."""
    meet.mkdir()
    monkeypatch.setenv("MEET_DIR", str(meet))
    monkeypatch.setenv("ACCELGRID_DEVICES", "0,1")
    monkeypatch.delenv("ACCELGRID_SERIAL_PASSES", raising=False)
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    rc = run_cell(run_request(_cell(proj, "xpu-2.13"), python, proj, proj / "results", list(args)))
    return rc, results.last_run(proj / "results" / "xpu-2.13")[1]


def _check_one_record_each(folder: Path, expected: set[str]) -> dict[str, TypedRecord]:
    """Every test the passes collected (and the broken module) has exactly one record;
    env.json lists both passes with their start and end; summary counts match."""
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    ids = [r["nodeid"] for r in recs]
    assert len(ids) == len(set(ids)), [i for i in set(ids) if ids.count(i) > 1]
    assert set(ids) == expected
    assert set(json.loads((folder / contract.COLLECTED_FILE).read_text())) == expected - {
        "suites/payload/test_broken.py"}
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert sorted(p["name"] for p in env["passes"]) == ["all-devices", "pinned"]
    assert all(p["start"] and p["end"] for p in env["passes"]) and env["status"] == "finished"
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    assert summary["total"] == len(ids) == sum(summary["counts"].values())
    pinned, beside = summary["passes"]
    assert (pinned["name"], beside["name"], beside["beside"]) == ("pinned", "all-devices",
                                                                  "pinned")
    # They overlapped, each pass's tests are its own, and each worker had a start-up.
    assert _epoch(beside["start"]) < _epoch(pinned["start"]) + pinned["wall_s"]
    assert _epoch(pinned["start"]) < _epoch(beside["start"]) + beside["wall_s"]
    by_id = {r["nodeid"]: r for r in recs}
    assert pinned["tests"] == sum(1 for r in recs if r.get("pass") == "pinned")
    assert beside["tests"] == sum(1 for r in recs if r.get("pass") == "all-devices")
    assert set(pinned["workers_first_test_s"]) >= {"gw0", "gw1"}
    assert all(r["cpu_s"] >= 0 for r in recs if r["outcome"] == "passed")
    assert 0 < pinned["first_test_s"] <= pinned["wall_s"]
    return by_id


def test_all_devices_pass_beside_the_pinned_one_records_every_test_once(
        mini_project, python, monkeypatch, tmp_path, capfd) -> None:
    proj = mini_project(test_seconds=300)
    payload = proj / "suites" / "payload"
    (payload / "test_beside.py").write_text(BESIDE)
    (payload / "test_broken.py").write_text("import not_installed_anywhere\n")  # both collect it
    mod = "suites/payload/test_beside.py"
    everything = ({f"{mod}::test_pinned[{i}]" for i in range(30)}
                  | {f"{mod}::test_all[{i}]" for i in range(15)}
                  | {f"{mod}::test_deselected_by_the_user", "suites/payload/test_broken.py"})
    for rep in range(3):   # no flakiness: the same, run after run
        rc, folder = _run_beside(proj, python, tmp_path / f"meet{rep}", monkeypatch)
        assert rc == 1   # two crashes and the broken module
        by_id = _check_one_record_each(folder, everything)
        assert by_id[f"{mod}::test_pinned[7]"]["outcome"] == "crashed"
        assert by_id[f"{mod}::test_all[4]"]["outcome"] == "crashed"
        assert by_id["suites/payload/test_broken.py"]["outcome"] == "error"
        others = [r for n, r in by_id.items() if n not in (
            f"{mod}::test_pinned[7]", f"{mod}::test_all[4]", "suites/payload/test_broken.py")]
        assert {r["outcome"] for r in others} == {"passed"}
        assert {r["device"] for r in others if "test_all" in r["nodeid"]} == {"xpu:all"}
        assert {r["device"] for r in others if "test_pinned" in r["nodeid"]} == {"xpu:0",
                                                                                "xpu:1"}
        out = capfd.readouterr().out.splitlines()
        # pytest's output goes to pytest.log, not the console: the all-devices pass's
        # whole, after the pinned pass's (it wrote its own log meanwhile, appended after).
        log = (folder / contract.PYTEST_LOG_FILE).read_text().splitlines()
        pinned_end = max(i for i, line in enumerate(log) if "test_pinned[" in line)
        beside_start = next(i for i, line in enumerate(log)
                            if line.startswith("accelgrid: pass all-devices"))
        assert beside_start > pinned_end
        assert any("PASSED suites/payload/test_beside.py::test_all[3]" in line
                   for line in log[beside_start:])
        assert not any("test_all[" in line for line in log[:beside_start])
        assert not (folder / "pytest-all-devices.log").exists()
        assert not any("PASSED" in line for line in out)
        assert any(line.startswith("accelgrid: xpu-2.13: wall ") and "beside pinned" in line
                   for line in out)


def test_a_selection_holds_in_both_passes_beside_each_other(mini_project, python,
                                                             monkeypatch, tmp_path) -> None:
    proj = mini_project(test_seconds=300)
    (proj / "suites" / "payload" / "test_beside.py").write_text(BESIDE)
    mod = "suites/payload/test_beside.py"
    # Node ids: the all-devices pass collects only the named multi-device ones.
    rc, folder = _run_beside(proj, python, tmp_path / "ids", monkeypatch, [
        f"{mod}::test_pinned[1]", f"{mod}::test_all[1]", f"{mod}::test_pinned[2]"])
    assert rc == 0, (folder / contract.TESTS_FILE).read_text()
    recs = _records(folder)
    assert {n: (r["outcome"], r["pass"]) for n, r in recs.items()} == {
        "test_pinned[1]": ("passed", "pinned"), "test_pinned[2]": ("passed", "pinned"),
        "test_all[1]": ("passed", "all-devices")}
    # Named pinned tests only: the all-devices pass finds none, which is fine.
    rc, folder = _run_beside(proj, python, tmp_path / "none", monkeypatch,
                             [f"{mod}::test_pinned[3]"])
    assert rc == 0 and list(_records(folder)) == ["test_pinned[3]"]
    # The user's -m joins each pass's own: no test runs in both passes, none is lost.
    crashing = [f"{mod}::test_pinned[7]", f"{mod}::test_all[4]"]
    rc, folder = _run_beside(proj, python, tmp_path / "m", monkeypatch, [
        "-m", "not slow_payload", *(a for c in crashing for a in ("--deselect", c))])
    assert rc == 0
    recs = _records(folder)
    assert {n: r["pass"] for n, r in recs.items()} == {
        **{f"test_pinned[{i}]": "pinned" for i in range(30) if i != 7},
        **{f"test_all[{i}]": "all-devices" for i in range(15) if i != 4}}
    assert {r["outcome"] for r in recs.values()} == {"passed"}


def test_serial_passes_when_asked_or_when_the_cache_is_used(monkeypatch) -> None:
    assert pass_plan.serial_reason({}, ["-k", "x"]) is None
    assert pass_plan.serial_reason({"ACCELGRID_SERIAL_PASSES": "0"}, []) is None
    assert pass_plan.serial_reason({"ACCELGRID_SERIAL_PASSES": "1"}, []) == (
        "ACCELGRID_SERIAL_PASSES=1")
    assert pass_plan.serial_reason({}, ["--lf", "-x"]) == "--lf uses pytest's cache"
    assert pass_plan.serial_reason({}, ["--last-failed-no-failures=none"]) == (
        "--last-failed-no-failures uses pytest's cache")


@pytest.mark.parametrize("select, args, want", [
    (("-m", "multi_device"), ["-k", "x"], (["-m", "multi_device"], ["-k", "x"])),
    (("-m", "not multi_device"), ["-m", "not slow", "-v"],
     (["-m", "(not multi_device) and (not slow)"], ["-v"])),
    (("-m", "multi_device"), ["-mfast", "-m=gpu"], (["-m", "(multi_device) and (gpu)"], [])),
    ((), ["-m", "a or b", "--maxfail", "2"], (["-m", "a or b"], ["--maxfail", "2"])),
])
def test_the_users_marker_expression_joins_the_passes(select, args, want) -> None:
    assert pass_plan._with_markers(select, args) == want


# --- a chosen subset of devices holds in every pass ------------------------------------

SUBSET = '''
import os, pytest

@pytest.mark.parametrize("i", range(4))
def test_pinned(i):
    assert os.environ["ZE_AFFINITY_MASK"] in ("1", "3")

@pytest.mark.multi_device
def test_all_devices_of_the_run():
    assert os.environ["ZE_AFFINITY_MASK"] == "1,3"
'''


def test_chosen_devices_hold_in_every_pass(mini_project, python, monkeypatch) -> None:
    from accelgrid.devices import xpu
    from accelgrid.host import detect

    monkeypatch.setattr(xpu, "sysfs_ids", lambda: ["0", "1", "2", "3"])  # 4 GPUs
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    proj = mini_project()
    cell = _cell(proj, "xpu-2.13")
    every = pass_plan.passes(cell, device_ids=detect.device_ids(cell.device_type))
    assert {k: v for k, v in every[1].env if k != "OMP_NUM_THREADS"} == {
        "ZE_AFFINITY_MASK": "0,1,2,3", "ACCELGRID_DEVICE_INDEX": "0,1,2,3"}
    monkeypatch.setenv("ACCELGRID_DEVICES", "1,3")
    (proj / "suites" / "payload" / "test_subset.py").write_text(SUBSET)
    assert run_cell(run_request(cell, python, proj, proj / "results")) == 0
    recs = _records(proj / "results" / "xpu-2.13")
    assert all(r["outcome"] == "passed" for r in recs.values()) and len(recs) == 5
    assert {r["device"] for n, r in recs.items() if n.startswith("test_pinned")} <= {
        "xpu:1", "xpu:3"}
    assert recs["test_all_devices_of_the_run"]["device"] == "xpu:all"


def _suite_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_distributed_world_is_the_visible_devices(root, monkeypatch) -> None:
    dist = _suite_module(root / "suites" / "distributed" / "test_collectives.py")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    monkeypatch.setattr(dist.backends, "dispatch", lambda name, device: 2)
    assert dist._world("cuda") == 2
    monkeypatch.setattr(dist.backends, "dispatch", lambda name, device: 4)  # not honoured
    with pytest.raises(AssertionError, match="CUDA_VISIBLE_DEVICES=1,3"):
        dist._world("cuda")
    assert dist._world("cpu") == dist.CPU_WORLD


# --- a run with a selection never replaces nor passes for the full run -----------------

@pytest.mark.parametrize("args, chosen", [
    ([], []),
    (["-v", "--tb=short", "-rA", "-n", "2", "-p", "no:cacheprovider", "-q", "-vs"], []),
    (["--timeout", "30", "-Werror", "--durations=5"], []),
    (["-k", "smoke"], ["-k", "smoke"]),
    (["-v", "-k", "smoke", "--tb", "line"], ["-k", "smoke"]),
    (["suites/smoke", "-x"], ["suites/smoke", "-x"]),
    (["-xvs"], ["-xvs"]),
    (["-m", "not slow", "--lf"], ["-m", "not slow", "--lf"]),
    (["--deselect", "a.py::t", "--maxfail=2"], ["--deselect", "a.py::t", "--maxfail=2"]),
    (["--some-new-option"], ["--some-new-option"]),  # unknown: counted as narrowing
])
def test_selection_of_pytest_args(args, chosen) -> None:
    assert selection.selection(args) == chosen


SELECTABLE = '''
def test_smoke_a(): pass
def test_smoke_b(): pass
def test_other_c(): pass
def test_other_d(): assert 0, "d fails"
def test_other_e(): pass
'''


def test_selected_runs_keep_the_full_run_and_show_as_partial(mini_project, python,
                                                             tmp_path) -> None:
    from accelgrid import cli, report
    from accelgrid.report import compare

    proj = mini_project()
    test_file = proj / "suites" / "payload" / "test_sel.py"
    test_file.write_text(SELECTABLE)
    out = proj / "results"
    cell_folder = out / "cpu-2.13"
    assert run_cell(run_request(_cell(proj), python, proj, out)) == 1  # the full run
    full = json.loads((cell_folder / contract.SUMMARY_FILE).read_text())
    assert full["total"] == 5 and full["selection"] == [] and full["partial"] is False
    compare.update([cell_folder], proj / "baselines")

    assert run_cell(run_request(_cell(proj), python, proj, out, ["-k", "smoke"])) == 0
    run_id, selected = results.last_run(cell_folder)
    assert selected.parent == cell_folder / contract.RUNS_DIR and selected.name == run_id
    summary = json.loads((selected / contract.SUMMARY_FILE).read_text())
    assert summary["total"] == 2 and summary["selection"] == ["-k", "smoke"]
    assert summary["partial"] is True and summary["run_id"] == run_id
    env = json.loads((selected / contract.ENV_FILE).read_text())
    assert env["run_id"] == run_id and env["pytest_args"] == ["-k", "smoke"]
    # The cell's full run is untouched, and is what a grid of results/* shows.
    assert json.loads((cell_folder / contract.SUMMARY_FILE).read_text()) == full
    whole = report.build_model([out])
    assert [(c["name"], c["status"], c["total"]) for c in whole["columns"]] == [
        ("cpu-2.13", "ok", 5)]
    # The selected run, graded on its own: partial, with its selection; against the
    # baseline the 3 unselected tests are not lost.
    made = report.grid([selected], tmp_path / "g1", baseline_dir=proj / "baselines")
    col = made.model["columns"][0]
    assert col["status"] == "partial" and col["selection"] == ["-k", "smoke"]
    assert col["reason"] is not None and col["baseline"] is not None
    assert "-k smoke" in col["reason"]
    assert col["baseline"]["counts"]["lost"] == 0
    assert (col["baseline"]["compared"], col["baseline"]["outside_selection"]) == (2, 3)
    made.check()
    assert any("3 outside its selection" in line for line in made.lines())
    assert "outside the selection" in made.paths["md"].read_text()
    # A baseline update from it is refused, and with --allow-partial keeps the rest.
    refused, _ = compare.update([selected], proj / "baselines")
    assert refused[0].refused and "a selected run" in refused[0].refused
    merged, _ = compare.update([selected], proj / "baselines", allow_partial=True)
    assert len(merged[0].tests) == 5 and merged[0].dropped == 0
    # -x stops early: a selection too.
    assert run_cell(run_request(_cell(proj), python, proj, out, ["-x", "-k", "other"])) != 0
    x_run = results.last_run(cell_folder)[1]
    assert json.loads((x_run / contract.SUMMARY_FILE).read_text())["selection"] == [
        "-x", "-k", "other"]
    # Everything selected is gone (renamed): the gate compared nothing and says so.
    test_file.write_text(SELECTABLE.replace("test_smoke_", "test_smoke_renamed_"))
    assert run_cell(run_request(_cell(proj), python, proj, out, ["-k", "smoke"])) == 0
    gone = results.last_run(cell_folder)[1]
    rc = cli.main(["grid", str(gone), "--out", str(tmp_path / "g2"),
                   "--baseline", str(proj / "baselines")])
    assert rc == 1
    assert len(list((cell_folder / contract.RUNS_DIR).iterdir())) == 3


STRAY_PLUGIN = '''
import os
from pathlib import Path

def pytest_configure(config):
    Path(os.environ["STRAY_MARK"]).write_text("loaded")
'''


def test_a_run_loads_only_its_own_pytest_plugins(mini_project, python, monkeypatch,
                                                 tmp_path) -> None:
    """A plugin the interpreter has (an installed distribution's pytest11 entry point, as
    on a --no-venv GPU host) is not loaded by a cell run; bare pytest in the same
    environment does load it (the plant works); PYTEST_PLUGINS naming it still loads it.
    The run's own plugins (xdist's workers, pytest-timeout's limit) work without
    autoloading."""
    proj = mini_project(test_seconds=2)
    (proj / "suites" / "payload" / "test_p.py").write_text(
        "import time\n\ndef test_ok():\n    pass\n\n"
        "def test_too_long():\n    time.sleep(30)\n")
    site = tmp_path / "site"
    (site / "strayplug-1.0.dist-info").mkdir(parents=True)
    (site / "strayplug-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: strayplug\nVersion: 1.0\n")
    (site / "strayplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[pytest11]\nstray = strayplug\n")
    (site / "strayplug.py").write_text(STRAY_PLUGIN)
    mark = tmp_path / "mark"
    monkeypatch.setenv("STRAY_MARK", str(mark))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    bare = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "suites/payload/test_p.py::test_ok"], cwd=proj,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0 and mark.read_text() == "loaded", bare.stdout[-2000:]
    mark.unlink()
    run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    assert not mark.exists()
    folder = results.last_run(proj / "results" / "cpu-2.13")[1]
    outcomes_by_test = {k: r["outcome"] for k, r in _records(folder).items()}
    assert outcomes_by_test == {"test_ok": "passed", "test_too_long": "timeout"}
    log = (folder / contract.PYTEST_LOG_FILE).read_text()
    assert "created: 1/1 worker" in log
    monkeypatch.setenv("PYTEST_PLUGINS", "strayplug")
    run_cell(run_request(_cell(proj), python, proj, proj / "results", ["-k", "test_ok"]))
    assert mark.read_text() == "loaded"


def test_a_run_whose_tests_do_not_import_torch_does_not_import_it(mini_project,
                                                                   python) -> None:
    """The torch report of a process whose tests never import torch is the installed
    version from metadata: importing torch for the report alone was most of a small
    cell run's CPU (docs/design/testing.md). A process whose tests import it reports in full."""
    proj = mini_project(workers=2)
    (proj / "suites" / "payload" / "test_no_torch.py").write_text(
        "import sys\n"
        "def test_nothing_imported_torch():\n"
        "    assert 'torch' not in sys.modules\n")
    folder = proj / "results" / "cpu-2.13"
    assert run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results")) == 0
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert {r["nodeid"].split("::")[-1]: r["outcome"] for r in recs
            if "test_no_torch" in r["nodeid"]} == {"test_nothing_imported_torch": "passed"}
    torch = json.loads((folder / contract.ENV_FILE).read_text())["torch"]
    installed = subprocess.run([python, "-c", "from importlib.metadata import version; "
                                "print(version('torch'))"], capture_output=True, text=True,
                               check=True).stdout.strip()
    assert torch["version"] == installed and torch["imported"] is False
    # The same run with a test that imports torch: the full report (its devices).
    (proj / "suites" / "payload" / "test_no_torch.py").write_text(
        "def test_uses_torch():\n"
        "    import torch\n"
        "    assert torch.ones(1).item() == 1\n")
    assert run_cell(run_request(_cell(proj, "cpu-2.13"), python, proj, proj / "results")) == 0
    torch = json.loads((folder / contract.ENV_FILE).read_text())["torch"]
    assert torch["version"] == installed and "imported" not in torch
    assert torch["device_count"] == len(torch["devices"]) >= 1
