"""``accelgrid bench devices``: the device counts it runs, the scaling it reports, and a
real run of it (real nox, real pytest) on a faked two-XPU host: a small project whose
payload checks each test's device pinning (``ACCELGRID_DEVICES`` names the devices,
``ACCELGRID_SKIP_DETECT`` lets an xpu cell run on this CPU box)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelgrid.base.errors import InvalidInput
from accelgrid.bench import devices
from accelgrid.results.records import TestRecord as TypedRecord

PAYLOAD = '''
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_pinned(i):
    assert os.environ["ZE_AFFINITY_MASK"] == os.environ["ACCELGRID_DEVICE_INDEX"]

@pytest.mark.multi_device
def test_sees_all_devices():
    assert os.environ["ZE_AFFINITY_MASK"] in ("0", "0,1")
'''


@pytest.mark.parametrize("available,asked,counts", [
    (1, None, [1]), (2, None, [1, 2]), (4, None, [1, 2, 4]), (6, None, [1, 2, 4, 6]),
    (8, None, [1, 2, 4, 8]), (4, [4, 1, 4], [1, 4])])
def test_counts(available: int, asked: list[int] | None, counts: list[int]) -> None:
    assert devices.counts_for(available, asked) == counts


@pytest.mark.parametrize("available,asked,message", [
    (0, None, "no device of the cell's kind here"),
    (2, [1, 3], r"device counts \[3\] are outside 1..2"),
    (2, [0], r"device counts \[0\] are outside 1..2")])
def test_bad_counts(available: int, asked: list[int] | None, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        devices.counts_for(available, asked)


def test_scaling_is_each_counts_median_over_one_devices() -> None:
    runs = [{"devices": 1, "wall_s": w} for w in (100.0, 90.0, 95.0)] + [
        {"devices": 2, "wall_s": w} for w in (60.0, 50.0)] + [{"devices": 4, "wall_s": 40.0}]
    assert devices.scaling(runs) == [
        {"devices": 1, "median_s": 95.0, "ratio": 1.0, "aim": None, "met": None},
        {"devices": 2, "median_s": 55.0, "ratio": 0.579, "aim": 0.6, "met": True},
        {"devices": 4, "median_s": 40.0, "ratio": 0.421, "aim": 0.4, "met": False}]


def test_tests_own_time_is_summed_per_suite() -> None:
    records: list[TypedRecord] = [
        {"nodeid": "suites/offload/test_a.py::t[1]", "outcome": "passed", "duration": 1.25},
        {"nodeid": "suites/offload/test_b.py::t", "outcome": "passed", "duration": 2.0},
        {"nodeid": "suites/smoke/test_c.py::t", "outcome": "passed", "duration": None},
        {"nodeid": "suites/smoke/test_c.py::u", "outcome": "passed", "duration": 0.5}]
    assert devices.own_time_per_suite(records) == {"offload": 3.2, "smoke": 0.5}


def _bench(proj: Path, *args: str, devices_env: str = "0,1") -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELGRID_DEVICES": devices_env, "ACCELGRID_SKIP_DETECT": "1"}
    env.pop("ZE_AFFINITY_MASK", None)
    return subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), "bench", "devices", *args], cwd=proj,
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_a_real_run_on_a_faked_two_device_host(mini_project, tmp_path: Path) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_multi.py").write_text(PAYLOAD)
    proc = _bench(proj, "--cell", "xpu-2.13", "--no-venv", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "xpu-2.13: 2 xpu device(s) here (0,1); runs with 1, 2 of them, 1 each"
    assert lines[1].startswith("[1/2] 1 device(s): ") and lines[2].startswith("[2/2] 2 device")
    report = json.loads((tmp_path / "out" / "bench-devices.json").read_text())
    one, two = report["runs"]
    assert (one["devices"], one["ids"], two["devices"], two["ids"]) == (1, ["0"], 2, ["0", "1"])
    # One device: one pass; two: the pinned pass with a worker per device, the
    # all-devices pass beside it. Every test passed (the payload checks the pinning).
    assert [(p["name"], p["workers"]) for p in one["passes"]] == [("single", 1)]
    assert [(p["name"], p["workers"], p["beside"]) for p in two["passes"]] == [
        ("pinned", 2, None), ("all-devices", 1, "pinned")]
    assert one["counts"]["passed"] == two["counts"]["passed"] == 7
    assert set(one["test_seconds"]) == set(two["test_seconds"]) == {"payload"}
    assert [r["devices"] for r in report["scaling"]] == [1, 2]
    assert report["scaling"][1]["ratio"] == round(
        report["scaling"][1]["median_s"] / report["scaling"][0]["median_s"], 3)
    md = (tmp_path / "out" / "bench-devices.md").read_text()
    assert "| devices | median wall | of one device | aim |" in md
    assert f"| 2 | {report['scaling'][1]['median_s']:.1f} s | " in md and "<= 0.6: " in md
    assert "all-devices (1 worker, beside pinned)" in md
    assert "| tests' own time per suite (s) |" in md and " payload " in md


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_a_sweep_of_workers_per_device_reports_each_against_one_worker(
        mini_project, tmp_path: Path) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_multi.py").write_text(PAYLOAD.replace(
        "@pytest.mark.multi_device", "def test_fails_when_shared():\n"
        "    assert os.environ['PYTEST_XDIST_WORKER_COUNT'] == '1'\n\n"
        "@pytest.mark.multi_device", 1))
    proc = _bench(proj, "--cell", "xpu-2.13", "--no-venv", "--counts", "1",
                  "--workers-per-device", "1,2,2", "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a failure
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(", 1 / 2 / 2 workers per device")
    assert lines[1].startswith("[1/3] 1 device(s), 1 worker(s) each: ")
    report = json.loads((tmp_path / "out" / "bench-devices.json").read_text())
    # Shared workers: the device-alone pass's pytest starts beside them (gated) and
    # finds no device_alone test here.
    assert [(r["per_device"], [p["workers"] for p in r["passes"]]) for r in report["runs"]] == [
        ("1", [1]), ("2", [2, 1]), ("2", [2, 1])]
    assert report["runs"][1]["passes"][1]["tests"] == 0
    wrong = "suites/payload/test_multi.py::test_fails_when_shared"
    assert [r["failed"] for r in report["runs"]] == [[], [wrong], [wrong]]
    one, two = report["sharing"]
    assert (one["per_device"], one["runs"], one["ratio"], one["aim"]) == ("1", 1, 1.0, None)
    assert (two["per_device"], two["runs"], two["aim"]) == ("2", 2, 0.33)
    assert two["runs_with_failures"] == 2 and one["runs_with_failures"] == 0
    md = (tmp_path / "out" / "bench-devices.md").read_text()
    assert "| devices | workers per device | runs | median wall | of one worker | aim " in md
    assert f"|  | went wrong: `{wrong}` |" in md


@pytest.mark.parametrize("value", ["0", "x", "", "1,65", "auto,-1"])
def test_bad_workers_per_device_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput, match="--workers-per-device"):
        devices.parse_per_device(value)
    assert devices.parse_per_device("1,auto,auto") == ["1", "auto", "auto"]


def test_a_cell_of_one_device_and_bad_counts_are_refused(mini_project) -> None:
    proj = mini_project(noxfile=True)
    proc = _bench(proj, "--cell", "cpu-2.13")
    assert proc.returncode == 2
    assert "a cpu cell runs on one device" in proc.stderr
    proc = _bench(proj, "--cell", "xpu-2.13", "--counts", "1,4")
    assert proc.returncode == 2 and "device counts [4] are outside 1..2" in proc.stderr
    proc = _bench(proj, "--cell", "xpu-2.13", "--counts", "two")
    assert proc.returncode == 2 and "--counts 'two': whole numbers" in proc.stderr


WAITS = '''
import os
import time
from pathlib import Path

def test_waits():
    Path(os.environ["BENCH_MARKER"]).write_text(str(os.getpid()))
    time.sleep(120)
'''


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_sigterm_removes_the_temporary_folder_and_the_cell_run(mini_project,
                                                               tmp_path: Path) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_waits.py").write_text(WAITS)
    marker, tmp = tmp_path / "pid", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "ACCELGRID_DEVICES": "0,1", "ACCELGRID_SKIP_DETECT": "1",
           "BENCH_MARKER": str(marker), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "accelgrid", "--matrix",
                             str(proj / "matrix.yaml"), "bench", "devices", "--cell",
                             "xpu-2.13", "--no-venv", "--out", str(tmp_path / "out")],
                            cwd=proj, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not marker.exists() or not marker.read_text():   # the cell run's test is running
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    test_pid = int(marker.read_text())
    assert list(tmp.glob("accelgrid-bench-devices-*"))
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout + stderr
    assert not list(tmp.glob("accelgrid-bench-devices-*"))
    assert not (tmp_path / "out").exists()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{test_pid}").exists() and "Z" not in _state(test_pid):
        assert time.monotonic() < deadline, f"the test's process {test_pid} outlived the bench"
        time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    return next((ln.split(":", 1)[1] for ln in status.splitlines()
                 if ln.startswith("State:")), "")


WAITS_SECOND = '''
import os
import time
from pathlib import Path

def test_waits_the_second_time():
    marker = Path(os.environ["BENCH_MARKER"])
    if not marker.exists():  # the first run ends at once
        marker.write_text("")
        return
    marker.write_text(str(os.getpid()))
    time.sleep(120)
'''


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_a_stopped_bench_keeps_the_runs_that_ended(mini_project, tmp_path: Path) -> None:
    """Each run is written as it ends: SIGTERM during the second leaves the first in
    bench-devices.json (a device call that runs out of time loses only the run in
    flight)."""
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_waits.py").write_text(WAITS_SECOND)
    marker = tmp_path / "pid"
    env = {**os.environ, "ACCELGRID_DEVICES": "0,1", "ACCELGRID_SKIP_DETECT": "1",
           "BENCH_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "accelgrid", "--matrix",
                             str(proj / "matrix.yaml"), "bench", "devices", "--cell",
                             "xpu-2.13", "--no-venv", "--counts", "1",
                             "--workers-per-device", "1,1", "--out", str(tmp_path / "out")],
                            cwd=proj, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not marker.exists() or not marker.read_text():   # the second run's test runs
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout + stderr
    report = json.loads((tmp_path / "out" / "bench-devices.json").read_text())
    assert [(r["per_device"], r["counts"]["passed"]) for r in report["runs"]] == [("1", 1)]
    assert report["sharing"][0]["runs"] == 1
    assert "| 1 | 1 | 1 |" in (tmp_path / "out" / "bench-devices.md").read_text()
