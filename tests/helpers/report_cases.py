"""Results folders for the report tests (tests/test_report_*.py, test_results.py,
test_cli_report.py): cells written as a run would leave them, a small realistic matrix,
and baselines with one change of each kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.report import compare

ISSUE = {"id": "pytorch/pytorch#127929", "title": "fp64 unsupported on ATS-M",
         "url": "https://github.com/pytorch/pytorch/issues/127929"}


def write_cell(folder: Path, name: str, outcomes: dict[str, str], torch: str = "2.13.0+cpu",
               device_name: str = "Box", extra: dict[str, dict] | None = None,
               finished: bool = True, **env: object) -> Path:
    cell = folder / name
    cell.mkdir(parents=True)
    jsonio.write_json(cell / contract.ENV_FILE, {
        "cell": name, "device_type": name.split("-")[0], "start": "s",
        "end": "e" if finished else None, "status": "finished" if finished else "running",
        "torch": {"version": torch, "devices": [{"name": device_name}], "device_count": 1},
        "host": {"name": "h"}, **env})
    # One write, not append_record's fsync per test: some tests write thousands.
    lines = [json.dumps({"nodeid": nodeid, "outcome": outcome, "message": f"why {outcome}",
                         "cell": name, **(extra or {}).get(nodeid, {})}) + "\n"
             for nodeid, outcome in outcomes.items()]
    if lines:
        (cell / contract.TESTS_FILE).write_text("".join(lines))
    return cell


def demo(folder: Path) -> list[Path]:
    """A small realistic matrix: three devices, several torch versions and a profile, a
    known issue, a failure with a traceback, and an errored cell."""
    smoke = "suites/smoke/test_device_api.py::"
    hf = "suites/hf_examples/test_workloads.py::test_workload"
    off = "suites/offload/test_offload_correctness.py::test_matches"
    common = {smoke + "test_device_available": "passed", smoke + "test_memory_stats": "passed",
              f"{hf}[text-classification]": "passed", f"{hf}[image-classification]": "passed",
              f"{off}[fp32]": "passed", f"{off}[bf16]": "passed"}
    cells = [
        write_cell(folder, "cpu-2.13", {**common, smoke + "test_memory_stats": "skipped"},
                   device_name="x86_64"),
        write_cell(folder, "cpu-2.6", common, torch="2.6.0+cpu", device_name="x86_64"),
        write_cell(folder, "cuda-2.11", {**common, f"{off}[bf16]": "failed"},
                   torch="2.11.0+cu128", device_name="NVIDIA H200",
                   extra={f"{off}[bf16]": {"message": "AssertionError: bf16 mismatch 0.3",
                                           "longrepr": "Traceback ...\nAssertionError"}}),
        write_cell(folder, "xpu-2.5", {**common, f"{hf}[speech-recognition]": "xfailed"},
                   torch="2.5.1+xpu", device_name="Intel(R) Data Center GPU Max 1100",
                   extra={f"{hf}[speech-recognition]": {"issue": ISSUE}}),
        write_cell(folder, "xpu-2.5-fp64-emulation", {**common, f"{off}[fp32]": "crashed"},
                   torch="2.5.1+xpu", device_name="Intel(R) Arc(TM) A770"),
    ]
    broken = folder / "xpu-2.13"
    broken.mkdir()
    jsonio.write_json(broken / contract.ENV_FILE, {"cell": "xpu-2.13", "device_type": "xpu"})
    return [*cells, broken]


def baseline_case(tmp_path: Path) -> tuple[list[Path], Path]:
    """The demo matrix under ``tmp_path/r`` and baselines of it in ``tmp_path/baselines``
    where cuda-2.11 expects a regression, a new pass, a lost and a new test."""
    folders = demo(tmp_path / "r")
    base = tmp_path / "baselines"
    done, _ = compare.update([tmp_path / "r"], base)
    assert [u.cell for u in done if u.refused] == ["xpu-2.13"]  # errored: no baseline
    doc = json.loads((base / "cuda-2.11.json").read_text())
    off = "suites/offload/test_offload_correctness.py::test_matches"
    doc["tests"][f"{off}[fp32]"] = "failed"  # now passes: a new pass
    doc["tests"][f"{off}[bf16]"] = "passed"  # now fails: a regression
    doc["tests"]["suites/smoke/test_device_api.py::test_gone"] = "passed"  # lost
    del doc["tests"]["suites/smoke/test_device_api.py::test_memory_stats"]  # new
    (base / "cuda-2.11.json").write_text(json.dumps(doc))
    return folders, base


def broken_cells(tmp_path: Path) -> list[Path]:
    """A good cell, an empty folder, corrupt files, a killed run with an unknown outcome,
    and a folder that does not exist (cpu-2.7)."""
    good = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    empty = tmp_path / "cpu-2.6"
    empty.mkdir()
    corrupt = write_cell(tmp_path, "cpu-2.8", {"suites/smoke/t.py::a": "passed"})
    with open(corrupt / contract.TESTS_FILE, "a") as fh:
        fh.write('{"nodeid": "suites/smoke/t.py::b", "outc')  # killed mid-write
    (corrupt / contract.ENV_FILE).write_text("{not json")
    killed = write_cell(tmp_path, "cpu-2.9", {"suites/smoke/t.py::a": "passed",
                                              "suites/smoke/t.py::c": "sideways"},
                        finished=False)
    return [good, empty, corrupt, killed, tmp_path / "cpu-2.7"]


def artifacts(tmp_path: Path) -> tuple[Path, Path]:
    """A CI artifacts download (``tmp_path/artifacts``): cpu-2.13 nested in its artifact,
    cuda-2.11 uploaded from inside its folder (files at the root, no env.json), a hidden
    folder and a grid file beside. Returns (artifacts, cuda-2.11's own folder)."""
    art = tmp_path / "artifacts"
    write_cell(art / "results-cpu-2.13" / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    # An artifact uploaded from inside the cell folder: files at its root, no env.json;
    # the cell's name then comes from the records.
    flat = write_cell(tmp_path, "cuda-2.11", {"suites/s/t.py::a": "failed"})
    (flat / contract.ENV_FILE).unlink()
    shutil.copytree(flat, art / "results-cuda-2.11")
    (flat / contract.RUNNING_DIR).mkdir()
    jsonio.write_json(flat / contract.RUNNING_DIR / "gw0.json", {"nodeid": "x"})
    (art / ".hidden" / "cpu-2.4").mkdir(parents=True)
    (art / ".hidden" / "cpu-2.4" / contract.TESTS_FILE).write_text("")
    (tmp_path / "grid.html").write_text("<html>")
    return art, flat


def ops_cell(folder: Path, name: str, torch: str, statuses: dict[str, str],
             device_type: str = "xpu") -> Path:
    """A cell folder with captured ops (``ops-raw/``): each op hit once per workload."""
    cell = folder / name
    jsonio.write_json(cell / contract.ENV_FILE, {"cell": name, "device_type": device_type,
                                            "torch": {"version": torch}})
    lines = []
    for wl in ("mlp", "conv"):
        lines.append(json.dumps({
            "nodeid": f"suites/payload/test_wl.py::test_workload[{wl}]", "workload": wl,
            "device_type": device_type,
            "ops": {op: {"status": s, "count": 2, "phases": {"forward": 2}}
                    for op, s in statuses.items()}}))
    (cell / "ops-raw").mkdir(parents=True)
    (cell / "ops-raw" / "gw0.jsonl").write_text("\n".join(lines) + "\n")
    return cell


def _rec(wl: str, ops_: dict[str, str], fallback=(), missing=(), fell_back=(),
         notice=False) -> dict:
    """One ops-raw line as OpCaptureHook writes it (OpCapture.report() and its keys)."""
    return {"nodeid": f"suites/hf_examples/test_workloads.py::test_workload[{wl}]",
            "workload": wl, "device_type": "xpu",
            "ops": {op: {"count": 2, "phases": {"forward": 2}, "status": s}
                    for op, s in ops_.items()},
            "host_calls": 0, "fallback_seen": sorted(fallback), "missing": sorted(missing),
            "missing_fell_back": sorted(fell_back), "generic_fallback_notice": notice}


def xpu_survey_cell(folder: Path, name: str = "xpu-2.5-fallback-survey") -> Path:
    """A results folder as a fallback-survey cell on torch 2.5 would leave it: SYNTHETIC
    (no Intel GPU ran it), built from real names: captured calls of docs/cuda/ops-cuda-2.11.json,
    kernels of release/2.5's fallback list, a seed "manual" op that raised, one that fell
    back through PYTORCH_ENABLE_XPU_FALLBACK=1."""
    cell = folder / name
    (cell / "ops-raw").mkdir(parents=True)
    (cell / "env.json").write_text(json.dumps({"cell": name, "device_type": "xpu",
                                               "torch": {"version": "2.5.1+xpu"}}))
    records = [
        _rec("instance-segmentation",
             {"aten::linspace.default": "fallback", "aten::addmm.default": "native",
              "aten::_foreach_mul_.Tensor": "missing"},
             fallback={"aten::linspace.out", "aten::_foreach_mul_.Tensor"},
             fell_back={"aten::_foreach_mul_.Tensor"}),
        _rec("semantic-segmentation",
             {"aten::linspace.default": "fallback", "aten::nll_loss2d_forward.default": "missing"},
             fallback={"aten::linspace.out"}, missing={"aten::nll_loss2d_forward"}),
    ]
    (cell / "ops-raw" / "gw0.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    return cell


CUDA_CAPTURE = Path(__file__).resolve().parents[2] / "docs" / "cuda" / "ops-cuda-2.11.json"
# (op, what the synthetic xpu cell "observed", what release/2.5's lists predict)
PLANTED = [
    ("aten::linspace.default", "native", "fallback"),  # linspace.out is on 2.5's list
    ("aten::topk.default", "fallback", "native"),  # 2.5 has topk kernels
    ("aten::_foreach_mul_.Scalar", "missing", "native"),  # 2.5 has _foreach_mul.Scalar
]


def synthetic_xpu_ops(series: str = "2.5", torch: str = "2.5.1+xpu",
                      cell: str = "xpu-2.5-fallback-survey") -> dict:
    """SYNTHETIC, no Intel GPU ran it: an xpu cell's ops.json content built from the real
    captured names of docs/cuda/ops-cuda-2.11.json (an H200 run). Each op gets the status
    release/``series``'s lists predict, as a run agreeing with upstream would observe
    (routed ops left out: an XPU run calls others; unknown stays unknown), then the
    :data:`PLANTED` statuses replace three of them."""
    from accelgrid.ops import xpu_prediction as xp

    capture = json.loads(CUDA_CAPTURE.read_text())
    predicted = xp.predict(capture["ops"], series)
    ops = {op: {**rec, "status": predicted[op]} for op, rec in capture["ops"].items()
           if not predicted[op].startswith("routed")}
    for op, observed, _ in PLANTED:
        ops[op]["status"] = observed
    counts = {s: sum(1 for e in ops.values() if e["status"] == s)
              for s in ("missing", "fallback", "unknown", "decomposed", "native")}
    return {"schema": 1, "cell": cell, "device_type": "xpu", "torch": torch,
            "synthetic": "no Intel GPU ran this: tests/helpers/report_cases.py built it",
            "workloads": capture["workloads"], "counts": counts,
            "generic_fallback_notice": False, "fallback_seen": [], "missing": [], "ops": ops}


def pinned_cell(root: Path) -> Path:
    """A cuda-2.11 cell whose two tests ran on pinned workers, one per GPU."""
    cell = root / "cuda-2.11"
    cell.mkdir()
    jsonio.write_json(cell / contract.ENV_FILE, {"cell": "cuda-2.11", "device_type": "cuda",
                                            "torch": {"version": "2.11.0"}})
    for n, dev in enumerate(("cuda:0", "cuda:1")):
        results.append_record(cell / contract.TESTS_FILE, {"nodeid": f"suites/s/t.py::t{n}",
                                                     "outcome": "passed", "device": dev})
    return cell
