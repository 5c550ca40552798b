"""Several xdist workers sharing a device: how many (pass_plan.workers_per_device), the plan
that pins k workers to each device, and the device_alone tests that run after them, one
worker per device, on real pytest runs of generated payload tests (a faked xpu host)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers.mini_projects import run_request

from accelgrid import results
from accelgrid.base import contract
from accelgrid.base.errors import InvalidInput
from accelgrid.config.matrix import load_matrix
from accelgrid.run import passes as pass_plan
from accelgrid.run.cell import run_cell


def _cell(proj: Path, name: str = "xpu-2.13"):
    return load_matrix(proj / "matrix.yaml").cell(name)


def _not_shared(cell):
    """The cell on a device type processes cannot share (the passes read the cell's type)."""
    return dataclasses.replace(cell, device_type=dataclasses.replace(
        cell.device_type, shared_by_processes=False))


@pytest.fixture
def host(monkeypatch):
    """A host of ``cores`` cores, no user choice of workers or threads."""
    monkeypatch.delenv(contract.WORKERS_PER_DEVICE, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def make(cores: int) -> None:
        monkeypatch.setattr(pass_plan.os, "cpu_count", lambda: cores)

    return make


def test_workers_per_device_come_from_the_host(mini_project, host, monkeypatch) -> None:
    cell = _cell(mini_project())
    host(16)
    # 16 cores, one 141 GiB device: 2 cores and 12 GiB a worker, at most 8.
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[141.0]) == 8
    assert pass_plan.workers_per_device(cell, 2, memory_gib=[141.0, 141.0]) == 4  # the cores
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[16.0, 141.0]) == 1   # the smallest
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[48.0]) == 4          # the memory
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[]) == 2     # unknown: cautious
    host(64)
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[1000.0]) == pass_plan.MAX_PER_DEVICE
    host(2)  # this kind of box: one worker
    assert pass_plan.workers_per_device(cell, 1, memory_gib=[141.0]) == 1
    host(16)
    # The run's own settings: serial passes, a device type processes cannot share...
    assert pass_plan.workers_per_device(cell, 1, serial=True, memory_gib=[141.0]) == 1
    assert pass_plan.workers_per_device(_not_shared(cell), 1, memory_gib=[141.0]) == 1
    # ... the cell's own workers when the matrix sets more than one, the user's variable.
    assert pass_plan.workers_per_device(dataclasses.replace(cell, workers=3), 1,
                                     memory_gib=[141.0]) == 3
    env = {contract.WORKERS_PER_DEVICE: "5"}
    assert pass_plan.workers_per_device(cell, 1, env=env, memory_gib=[16.0]) == 5
    for bad in ("0", "x", "65", "-1"):
        with pytest.raises(InvalidInput, match=f"{contract.WORKERS_PER_DEVICE}="):
            pass_plan.workers_per_device(cell, 1, env={contract.WORKERS_PER_DEVICE: bad})


def test_one_shared_device_runs_its_device_alone_tests_afterwards(mini_project, host,
                                                                   monkeypatch) -> None:
    cell = _cell(mini_project())
    host(16)
    monkeypatch.setenv(contract.WORKERS_PER_DEVICE, "4")
    shared, alone = pass_plan.passes(cell, device_ids=["3"])
    assert (shared.name, alone.name) == ("single", "device-alone")
    assert shared.xdist == ("-n", "4", "--dist", "worksteal") and shared.workers == 4
    assert shared.select == ("-m", "not device_alone")
    assert dict(shared.env) == {"ZE_AFFINITY_MASK": "3", "ACCELGRID_DEVICE_INDEX": "3",
                                "OMP_NUM_THREADS": "4"}   # each worker's share of 16 cores
    assert alone.xdist == ("-n", "1") and alone.select == ("-m", "device_alone")
    assert dict(alone.env) == {"ZE_AFFINITY_MASK": "3", "ACCELGRID_DEVICE_INDEX": "3"}
    # Its pytest starts with the shared workers (start-up overlapped), its tests wait for
    # them (gated). (A serial run has no shared workers: workers_per_device is 1.)
    assert alone.beside and alone.gated and alone.empty_ok
    # One worker per device: the plan as before, no pass of its own for device_alone.
    monkeypatch.setenv(contract.WORKERS_PER_DEVICE, "1")
    assert [p.name for p in pass_plan.passes(cell, device_ids=["3"])] == ["single"]
    # ACCELGRID_WORKERS (the user's worker count) keeps its meaning: -n N, nothing pinned.
    assert [(p.name, p.xdist) for p in pass_plan.passes(cell, 6, ["3"])] == [("single",
                                                                           ("-n", "6"))]


def test_k_workers_are_pinned_to_each_of_several_devices(mini_project, host,
                                                         monkeypatch) -> None:
    cell = _cell(mini_project())
    host(16)
    monkeypatch.setenv(contract.WORKERS_PER_DEVICE, "2")
    pinned, every, alone = pass_plan.passes(cell, device_ids=["0", "1"])
    assert (pinned.name, every.name, alone.name) == ("pinned", "all-devices", "device-alone")
    spec = "popen//env:ZE_AFFINITY_MASK={0}//env:ACCELGRID_DEVICE_INDEX={0}//env:OMP_NUM_THREADS=4"
    assert pinned.xdist == ("--dist", "worksteal", "--tx", spec.format(0), "--tx",
                            spec.format(0), "--tx", spec.format(1), "--tx", spec.format(1))
    assert pinned.workers == 4
    assert pinned.select == ("-m", "not multi_device and not device_alone")
    assert every.beside and not every.gated
    assert alone.beside and alone.gated   # device-alone's tests wait for both
    one = "popen//env:ZE_AFFINITY_MASK={0}//env:ACCELGRID_DEVICE_INDEX={0}//env:OMP_NUM_THREADS=8"
    assert alone.xdist == ("--dist", "worksteal", "--tx", one.format(0), "--tx", one.format(1))


SHARED = '''
import os, time, pytest

@pytest.mark.parametrize("i", range(6))
def test_shared(i):
    time.sleep(1.0)  # the shared pass outlasts the device-alone pass's start-up
    assert os.environ["ACCELGRID_PASS"] in ("single", "pinned")
    assert os.environ["ZE_AFFINITY_MASK"] == os.environ["ACCELGRID_DEVICE_INDEX"]

@pytest.mark.device_alone
def test_needs_the_device_alone():
    assert os.environ["ACCELGRID_PASS"] == "device-alone"
    assert os.environ["ZE_AFFINITY_MASK"] in ("1", "2")

@pytest.mark.multi_device
def test_sees_every_device():
    assert os.environ["ZE_AFFINITY_MASK"] in ("1", "1,2")
'''


@pytest.mark.parametrize("devices", ["1", "1,2"])
def test_a_shared_run_records_every_test_once(mini_project, python, monkeypatch,
                                              devices) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_shared.py").write_text(SHARED)
    monkeypatch.setenv("ACCELGRID_DEVICES", devices)
    monkeypatch.setenv(contract.WORKERS_PER_DEVICE, "2")
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    assert run_cell(run_request(_cell(proj), python, proj, proj / "results")) == 0
    folder = proj / "results" / "xpu-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    by_test = {r["nodeid"].split("::")[-1]: r for r in recs}
    assert len(recs) == len(by_test) == 8
    assert all(r["outcome"] == "passed" for r in recs)
    assert json.loads((folder / contract.HANDOFF[contract.PASS_DEVICE_ALONE].file).read_text()) == [
        "suites/payload/test_shared.py::test_needs_the_device_alone"]
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    timed = {p["name"]: p for p in summary["passes"]}
    first = "single" if devices == "1" else "pinned"
    assert timed[first]["workers"] == 2 * len(devices.split(","))
    assert timed["device-alone"]["workers"] == len(devices.split(","))
    # The device-alone pass started with the others, and its test only when every other
    # pass had ended (its gate).
    ends = [_epoch(p["start"]) + p["wall_s"] for n, p in timed.items() if n != "device-alone"]
    alone = timed["device-alone"]
    assert _epoch(alone["start"]) < min(_epoch(p["start"]) for p in timed.values()) + 2
    assert by_test["test_needs_the_device_alone"]["start"] >= max(ends) - 0.01
    assert 0 < alone["waited_s"] < alone["wall_s"] and alone["first_test_s"] < 5
    assert not (folder / ".gate-device-alone").exists()


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()

