"""Op aggregation keeps the worst, on real op names: across workloads and files of one cell
(ops.aggregate) and across cells (ops.merge), whatever order they come in; "stopped falling
back" (ops.cross_cell) lists only ops that were bad and then were not; a seed row takes
its calls' worst prediction; a pair only one side can classify is not compared; the
capture's device detection keeps ops whose first argument is a list of tensors (every
``_foreach_*`` op), on a non-CPU device; a known issue scoped to profiles stays out of
the cells of other profiles."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from accelgrid import ops
from accelgrid.base import contract
from accelgrid.config import known_issues
from accelgrid.config.matrix import load_matrix
from accelgrid.ops import xpu_prediction
from accelgrid.testing import opcapture

ROOT = Path(__file__).resolve().parents[2]
# The order ops.py documents, best first: "When tests disagree about an op, the worst
# status wins" (missing: it raised; fallback: it ran on the CPU; unknown: cannot tell;
# decomposed: other ops ran it; native: the device's own kernel).
ORDER = ["native", "decomposed", "unknown", "fallback", "missing"]
PAIRS = list(itertools.permutations(ORDER, 2))


def worst(*statuses: str) -> str:
    return max(statuses, key=ORDER.index)


def record(workload: str, statuses: dict[str, str], device: str = "xpu") -> dict:
    return {"nodeid": f"suites/hf_examples/test_workloads.py::test_workload[{workload}]",
            "workload": workload, "device_type": device,
            "ops": {op: {"status": s, "count": 1, "phases": {"forward": 1}}
                    for op, s in statuses.items()}}


def cell_folder(tmp_path: Path, files: list[list[dict]]) -> Path:
    raw = tmp_path / "xpu-2.5" / "ops-raw"
    raw.mkdir(parents=True)
    for i, records in enumerate(files):
        (raw / f"{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return raw.parent


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_aggregate_keeps_the_worst_across_workloads(tmp_path: Path, first: str,
                                                    second: str) -> None:
    """One workload saw roll ``first``, a later one ``second`` (in one file, and in two):
    the cell's status is the worse of the two, its counts add up."""
    op = "aten::roll.default"
    one = cell_folder(tmp_path / "one", [[record("a", {op: first}), record("b", {op: second})]])
    two = cell_folder(tmp_path / "two", [[record("a", {op: first})], [record("b", {op: second})]])
    for folder in (one, two):
        data = ops.aggregate(folder)
        assert data is not None
        entry = data["ops"][op]
        assert entry["status"] == worst(first, second)
        assert entry["count"] == 2 and entry["workloads"] == {"a": 1, "b": 1}
        assert data["counts"][worst(first, second)] == 1
        assert sum(data["counts"].values()) == 1


def test_aggregate_lists_the_worst_first(tmp_path: Path) -> None:
    statuses = {"aten::addmm.default": "native", "aten::roll.default": "fallback",
                "aten::nll_loss2d_forward.default": "missing",
                "aten::linspace.default": "decomposed", "aten::cdist.default": "unknown"}
    data = ops.aggregate(cell_folder(tmp_path, [[record("a", statuses)]]))
    assert data is not None
    assert [data["ops"][op]["status"] for op in data["ops"]] == ORDER[::-1]


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_merge_keeps_the_worst_across_cells(first: str, second: str) -> None:
    op = "aten::_foreach_mul_.Tensor"
    cells = [{"cell": c, "device_type": "cuda", "torch": "2.11.0", "workloads": [w],
              "ops": {op: {"status": s, "count": n, "phases": {"optimizer": n},
                           "workloads": {w: n}}}}
             for c, w, s, n in (("cuda-2.11", "a", first, 1), ("cpu-2.13", "b", second, 2))]
    merged = ops.merge(cells)
    assert merged["ops"][op]["status"] == worst(first, second)
    assert merged["ops"][op]["count"] == 3
    assert merged["ops"][op]["phases"] == {"optimizer": 3}
    assert merged["ops"][op]["workloads"] == {"a": 1, "b": 2}
    assert ops.merge(cells[:1]) is cells[0]


def _cell(name: str, torch: str, statuses: dict[str, str], device: str = "cuda") -> dict:
    return {"cell": name, "device_type": device, "torch": torch,
            "ops": {op: {"status": s} for op, s in statuses.items()}}


@pytest.mark.parametrize(("before", "after"), [(b, a) for b, a in PAIRS] + [
    ("missing", "missing"), ("fallback", "fallback")])
def test_stopped_falling_back_needs_bad_then_good(before: str, after: str) -> None:
    op = "aten::roll.default"
    grid = ops.cross_cell([_cell("cuda-2.6", "2.6.0", {op: after}),
                           _cell("cuda-2.5", "2.5.1", {op: before})])
    fixed = before in ("missing", "fallback") and after not in ("missing", "fallback")
    assert grid["stopped_falling_back"] == ({op: {"cuda": "2.6.0"}} if fixed else {})


def test_stopped_falling_back_never_lists_an_op_absent_on_both_sides() -> None:
    """roll is missing in 2.5 and 2.6, absent (never called) from 2.8: not fixed; cdist
    fell back in 2.5, was not called in 2.6 and ran natively in 2.8: fixed in 2.8."""
    grid = ops.cross_cell([
        _cell("cuda-2.5", "2.5.1", {"aten::roll.default": "missing",
                                    "aten::cdist.default": "fallback"}),
        _cell("cuda-2.6", "2.6.0", {"aten::roll.default": "missing"}),
        _cell("cuda-2.8", "2.8.0", {"aten::cdist.default": "native",
                                    "aten::addmm.default": "native"}),
    ])
    assert grid["stopped_falling_back"] == {"aten::cdist.default": {"cuda": "2.8.0"}}
    assert grid["ops"]["aten::roll.default"] == {"cuda-2.5": "missing", "cuda-2.6": "missing",
                                                 "cuda-2.8": None}


def test_stopped_falling_back_is_per_device() -> None:
    grid = ops.cross_cell([_cell("cuda-2.5", "2.5.1", {"aten::roll.default": "fallback"}),
                           _cell("cpu-2.6", "2.6.0", {"aten::roll.default": "native"}, "cpu")])
    assert grid["stopped_falling_back"] == {}


def test_stopped_falling_back_over_series() -> None:
    """xpu_prediction's series view: an op missing in every series is still bad (None),
    one never bad is left out, one bad then good is fixed where it turned good."""
    out = xpu_prediction.stopped_falling_back({
        "2.5": {"aten::a.default": "missing", "aten::b.default": "fallback",
                "aten::c.default": "native"},
        "2.6": {"aten::a.default": "missing", "aten::b.default": "native",
                "aten::c.default": "native"},
    })
    assert out == {"aten::a.default": None, "aten::b.default": "2.6"}


# --- predictions against observations and the seed -----------------------------------------

def test_a_pair_only_one_side_can_classify_is_not_compared() -> None:
    """addmm has an XPU kernel in torch-xpu-ops' release/2.5 (yaml/xpu_functions.yaml), so
    it is predicted native; observed ``unknown`` it is not compared, and not counted as a
    disagreement. Observed native it agrees."""
    def check(status: str) -> dict:
        cell = {"device_type": "xpu", "torch": "2.5.1",
                "ops": {"aten::addmm.default": {"status": status}}}
        compared = xpu_prediction.observed_vs_predicted(cell)
        assert compared is not None
        return compared

    assert check("native")["predicted"]["aten::addmm.default"] == "native"
    assert check("native")["counts"] == {"agree": 1, "disagree": 0, "not_compared": 0}
    unknown = check("unknown")
    assert unknown["counts"] == {"agree": 0, "disagree": 0, "not_compared": 1}
    assert unknown["disagreements"] == []


def test_a_seed_row_takes_the_worst_prediction_of_its_calls() -> None:
    """A seed row hit by two captured calls: ``_foreach_mul_.Scalar`` has an XPU kernel in
    2.5, ``_foreach_mul_.Tensor`` only from 2.6 (torch-xpu-ops#981) and runs in 2.5 through
    PyTorch's CompositeExplicitAutograd slow path (from torch 2.4: pytorch/pytorch#127412):
    the row's prediction for 2.5 is the Tensor overload's decomposed, whichever order."""
    seed = {"rows": [{"op": "aten::_foreach_mul.Scalar", "status": "manual", "examples": {}}]}
    calls = ["aten::_foreach_mul_.Scalar", "aten::_foreach_mul_.Tensor"]
    for order in (calls, calls[::-1]):
        captured = {op: {"status": "native"} for op in order}
        [row] = xpu_prediction.compare_with_seed(captured, "2.5", seed=seed)
        assert row["captured"] == sorted(calls)
        assert row["predictions"] == {"aten::_foreach_mul_.Scalar": "native",
                                      "aten::_foreach_mul_.Tensor": "decomposed"}
        assert (row["predicted"], row["agree"], row["reason"]) == (
            "decomposed", False, "composite-in-series")
    [row] = xpu_prediction.compare_with_seed({calls[0]: {"status": "native"}}, "2.5", seed=seed)
    assert (row["predicted"], row["agree"], row["reason"]) == ("native", False,
                                                                "kernel-in-series")


@pytest.mark.parametrize(("calls", "predictions"), [
    # release/2.4's fallback list (torch-xpu-ops XPUFallback.template) names
    # binary_cross_entropy but not its .out kernel, which torch 2.4's native_functions.yaml
    # gives CPU/CUDA kernels only: that one raises "not currently implemented".
    (["aten::binary_cross_entropy.default", "aten::binary_cross_entropy.out"],
     ["fallback", "missing"]),
    # _fused_adagrad_: CPU/CUDA kernels only in 2.4 (missing on XPU); its tensor_lr overload
    # is not in 2.4's yaml at all (a later torch added it): unknown.
    (["aten::_fused_adagrad_.default", "aten::_fused_adagrad_.tensor_lr"],
     ["missing", "unknown"]),
])
def test_a_seed_row_ranks_missing_over_fallback_and_unknown(calls: list[str],
                                                            predictions: list[str]) -> None:
    seed = {"rows": [{"op": calls[0], "status": "explicit", "examples": {}}]}
    for order in (calls, calls[::-1]):
        [row] = xpu_prediction.compare_with_seed(order, "2.4", seed=seed)
        assert row["predictions"] == dict(zip(calls, predictions, strict=True))
        assert row["predicted"] == "missing"


# --- the capture's device detection -----------------------------------------------------------

def test_capture_keeps_foreach_ops_on_a_non_cpu_device() -> None:
    """On ``meta`` (a device that is not the CPU, available everywhere) the _foreach_ ops,
    whose first argument is a list of tensors, are the device's ops, not host calls."""
    torch = pytest.importorskip("torch")
    ts = [torch.ones(3, device="meta"), torch.ones(2, device="meta")]
    with opcapture.OpCapture("meta") as cap:
        torch._foreach_mul_(ts, 2.0)
        torch._foreach_norm(ts)
        torch.ones(2) * 3  # a host-side op of this cell
    report = cap.report()
    assert {"aten::_foreach_mul_.Scalar", "aten::_foreach_norm.Scalar"} <= set(report["ops"])
    assert report["ops"]["aten::_foreach_mul_.Scalar"]["count"] == 1
    assert "aten::mul.Tensor" not in report["ops"]
    assert report["host_calls"] >= 1


# --- known issues scoped to profiles --------------------------------------------------------

def test_an_issue_scoped_to_profiles_stays_out_of_other_profiles(tmp_path: Path) -> None:
    """An entry scoped to the profiles without PYTORCH_ENABLE_XPU_FALLBACK (there an op XPU
    lacks raises; in fallback-survey it falls back) is in xpu-2.5's and
    xpu-2.5-fallback-debug's runtime registry and not in xpu-2.5-fallback-survey's. The
    project's matrix, a registry of one such entry beside it."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(ROOT / "matrix.yaml", root / "matrix.yaml")
    for suite in load_matrix(ROOT / "matrix.yaml").suites.values():
        (root / suite.path).mkdir(parents=True, exist_ok=True)
    (root / "suites" / "repro" / "test_op.py").write_text("def test_op():\n    pass\n")
    (root / "known_issues.yaml").write_text(
        "schema: 1\nissues:\n  acme/xpu#1:\n    title: an op XPU lacks\n"
        "    scope: {devices: [xpu], profiles: [default, fallback-debug]}\n"
        "    tests: [suites/repro/test_op.py::test_op]\n    expect: failed\n")
    matrix = load_matrix(root / "matrix.yaml")
    seen = {}
    for name in ("xpu-2.5", "xpu-2.5-fallback-debug", "xpu-2.5-fallback-survey"):
        folder = tmp_path / name
        known_issues.cell_env(matrix.cell(name), root, folder)
        data = json.loads((folder / contract.KNOWN_ISSUES_FILE).read_text())
        seen[name] = "acme/xpu#1" in {e["id"] for e in data["issues"]}
    assert seen == {"xpu-2.5": True, "xpu-2.5-fallback-debug": True,
                    "xpu-2.5-fallback-survey": False}


def test_aggregate_of_a_folder_without_captured_ops_is_none(tmp_path: Path) -> None:
    assert ops.aggregate(tmp_path) is None
    (tmp_path / "ops-raw").mkdir()
    assert ops.aggregate(tmp_path) is None       # the folder, but no .jsonl in it


def test_aggregate_says_whether_the_generic_fallback_notice_was_seen(tmp_path: Path) -> None:
    """XPU's once-per-process notice (ops on the built-in fallback list, without
    PYTORCH_DEBUG_XPU_FALLBACK=1): in the cell's data only when a record saw it."""
    quiet = record("a", {"aten::roll.default": "native"})
    data = ops.aggregate(cell_folder(tmp_path / "quiet", [[quiet]]))
    assert data is not None
    assert data["generic_fallback_notice"] is False
    noticed = {**record("b", {"aten::roll.default": "native"}), "generic_fallback_notice": True}
    data = ops.aggregate(cell_folder(tmp_path / "noticed", [[quiet, noticed]]))
    assert data is not None
    assert data["generic_fallback_notice"] is True


def test_aggregate_names_the_cell_its_device_and_torch(tmp_path: Path) -> None:
    """The device from the records (the capture's own), else the env.json's; the cell and
    torch from the env.json, else the folder's name."""
    folder = cell_folder(tmp_path, [[record("a", {"aten::roll.default": "native"})]])
    data = ops.aggregate(folder)
    assert data is not None
    assert (data["cell"], data["device_type"], data["torch"]) == ("xpu-2.5", "xpu", None)
    (folder / "env.json").write_text(json.dumps({"cell": "xpu-2.5-fallback-survey",
                                                 "device_type": "cuda",
                                                 "torch": {"version": "2.5.1+xpu"}}))
    data = ops.aggregate(folder)
    assert data is not None
    assert (data["cell"], data["device_type"], data["torch"]) == (
        "xpu-2.5-fallback-survey", "xpu", "2.5.1+xpu")
    bare = {k: v for k, v in record("a", {"aten::roll.default": "native"}).items()
            if k != "device_type"}
    (folder / "ops-raw" / "0.jsonl").write_text(json.dumps(bare) + "\n")
    data = ops.aggregate(folder)
    assert data is not None and data["device_type"] == "cuda"


@pytest.mark.parametrize("other", ["missing", "fallback", "native"])
def test_a_status_aggregate_does_not_know_ranks_as_unknown(tmp_path: Path, other: str) -> None:
    """A record from a newer capture with a status this version does not know counts as
    ``unknown``: below missing and fallback, above native."""
    op = "aten::roll.default"
    want = "cuda-only" if other == "native" else other
    for i, order in enumerate((["cuda-only", other], [other, "cuda-only"])):
        folder = cell_folder(tmp_path / str(i), [[record(w, {op: s}) for w, s in
                                                  zip("ab", order, strict=True)]])
        data = ops.aggregate(folder)
        assert data is not None and data["ops"][op]["status"] == want
    for pair in (["cuda-only", other], [other, "cuda-only"]):
        merged = ops.merge([{"cell": c, "ops": {op: {"status": s}}}
                            for c, s in zip("ab", pair, strict=True)])
        assert merged["ops"][op]["status"] == want


def test_a_status_aggregate_does_not_know_is_listed_where_unknown_is(tmp_path: Path) -> None:
    """ops.json lists the worst first; a status from a newer capture sorts as ``unknown``
    does (between fallback and decomposed), not first nor last."""
    statuses = {"aten::addmm.default": "native", "aten::roll.default": "fallback",
                "aten::nll_loss2d_forward.default": "missing",
                "aten::linspace.default": "decomposed", "aten::cdist.default": "cuda-only"}
    data = ops.aggregate(cell_folder(tmp_path, [[record("a", statuses)]]))
    assert data is not None
    assert [data["ops"][op]["status"] for op in data["ops"]] == [
        "missing", "fallback", "cuda-only", "decomposed", "native"]


@pytest.mark.parametrize("status", ["native", "decomposed", "unknown", "fallback"])
def test_missing_how_is_only_for_missing_ops(status: str) -> None:
    """A message can name a kernel of an op the capture classified otherwise (the
    not-implemented error of one overload, the fell-back notice of another): only an op
    whose status is ``missing`` says how it came to be missing."""
    named = {"missing_seen": {"aten::roll.out": ["a"]},
             "missing_fell_back": {"aten::roll.out": ["a"]}}
    assert ops.missing_how({"status": status, **named}) is None
    assert ops.missing_how({"status": "missing", **named}) == "not-implemented"
    assert ops.missing_how({"status": "missing",
                            "missing_fell_back": named["missing_fell_back"]}) == "fell-back"
    assert ops.missing_how({"status": "missing"}) is None
    grid = ops.cross_cell([_cell("cuda-2.5", "2.5.1", {"aten::roll.default": status})
                           | {"ops": {"aten::roll.default": {"status": status, **named}}}])
    assert grid["missing_how"] == {}


_GOOD_INFO = {"status": "native", "count": 2, "phases": {"forward": 2}}
# Record shapes aggregate cannot read (CI artifacts can arrive damaged: issue 16): each is
# skipped whole, the good record beside it counted as if alone.
DAMAGED: dict[str, dict[str, Any]] = {
    "workload-list": {"workload": ["w"]},
    "device-type-dict": {"device_type": {"x": 1}},
    "missing-string": {"missing": "aten::roll.out"},
    "missing-mixed": {"missing": ["aten::roll.out", {"op": "x"}]},
    "fallback-seen-string": {"fallback_seen": "aten::roll.out"},
    "fallback-seen-mixed": {"fallback_seen": ["aten::roll.out", 1]},
    "fell-back-string": {"missing_fell_back": "aten::roll.out"},
    "fell-back-mixed": {"missing_fell_back": ["aten::roll.out", None]},
    "ops-list": {"ops": ["aten::roll.default"]},
    "ops-one-info-string": {"ops": {"aten::addmm.default": _GOOD_INFO,
                                    "aten::roll.default": "native"}},
    "status-list": {"ops": {"aten::roll.default": {**_GOOD_INFO, "status": ["native"]}}},
    "count-string": {"ops": {"aten::roll.default": {**_GOOD_INFO, "count": "2"}}},
    "count-bool": {"ops": {"aten::roll.default": {**_GOOD_INFO, "count": True}}},
    "phases-list": {"ops": {"aten::roll.default": {**_GOOD_INFO, "phases": [2]}}},
    "phase-count-mixed": {"ops": {"aten::roll.default": {
        **_GOOD_INFO, "phases": {"forward": 2, "backward": "2"}}}},
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_aggregate_skips_a_damaged_record_whole(tmp_path: Path, case: str) -> None:
    good = record("good", {"aten::roll.default": "fallback"})
    good["fallback_seen"] = ["aten::roll.default"]
    bad = {**record("bad", {"aten::roll.default": "missing"}), **DAMAGED[case]}
    alone = ops.aggregate(cell_folder(tmp_path / "alone", [[good]]))
    assert ops.aggregate(cell_folder(tmp_path / "both", [[bad, good]])) == alone


def test_cross_cell_checks_xpu_cells_against_their_release() -> None:
    """An xpu cell is checked against the prediction for its torch series; a cuda cell
    beside it is not. addmm has an XPU kernel in torch-xpu-ops' release/2.5
    (yaml/xpu_functions.yaml): observed falling back on xpu-2.5 it is a disagreement,
    named with the cell; observed native it agrees."""
    op = "aten::addmm.default"
    cells = [_cell("xpu-2.5", "2.5.1", {op: "fallback"}, "xpu"),
             _cell("cuda-2.5", "2.5.1", {op: "fallback"})]
    grid = ops.cross_cell(cells)
    assert set(grid["predicted"]) == {"xpu-2.5"}
    assert grid["predicted"]["xpu-2.5"]["predicted"][op] == "native"
    assert [(d["cell"], d["op"]) for d in grid["disagreements"]] == [("xpu-2.5", op)]
    agree = ops.cross_cell([_cell("xpu-2.5", "2.5.1", {op: "native"}, "xpu")])
    assert agree["disagreements"] == []
    assert agree["predicted"]["xpu-2.5"]["counts"]["agree"] == 1
    assert ops.cross_cell(cells[1:])["predicted"] == {}


def test_cross_cell_orders_cells_by_device_then_torch_series() -> None:
    """Columns by device, then torch series as versions (2.10 after 2.9, not as text),
    then name; "stopped falling back" reads each device's cells in that order."""
    op = "aten::roll.default"
    grid = ops.cross_cell([_cell("cuda-2.10", "2.10.0", {op: "native"}),
                           _cell("cpu-2.13", "2.13.0", {op: "native"}, "cpu"),
                           _cell("cuda-2.9", "2.9.1", {op: "fallback"}),
                           _cell("cpu-2.6", "2.6.0", {op: "native"}, "cpu")])
    assert grid["cells"] == ["cpu-2.6", "cpu-2.13", "cuda-2.9", "cuda-2.10"]
    assert grid["stopped_falling_back"] == {op: {"cuda": "2.10.0"}}


def test_cross_cell_keeps_what_the_messages_named_per_cell() -> None:
    """linspace's captured default overload, named by a CPU-fallback message as
    ``aten::linspace.out`` on xpu-2.5 (the seed's own row); nll_loss2d_forward missing
    there (pytorch/pytorch#127937: not implemented for XPU), seen as raised."""
    cell = {"cell": "xpu-2.5", "device_type": "xpu", "torch": "2.5.1", "ops": {
        "aten::linspace.default": {"status": "fallback",
                                   "fallback_seen": {"aten::linspace.out": ["swin"]}},
        "aten::nll_loss2d_forward.default": {
            "status": "missing", "missing_seen": {"aten::nll_loss2d_forward": ["swin"]}},
        "aten::addmm.default": {"status": "native"}}}
    grid = ops.cross_cell([cell])
    assert grid["fallback_seen"] == {"aten::linspace.default": {"xpu-2.5": ["aten::linspace.out"]}}
    assert grid["missing_how"] == {"aten::nll_loss2d_forward.default": {
        "xpu-2.5": "not-implemented"}}


def test_cross_cell_uses_the_torch_xpu_ops_data_it_is_given() -> None:
    """``upstream`` given (the packaged data without release/2.5, say) is what the xpu
    cells are checked against, not the packaged data."""
    packaged = xpu_prediction.load_upstream()
    without = {**packaged, "series": {s: v for s, v in packaged["series"].items() if s != "2.5"}}
    cell = _cell("xpu-2.5", "2.5.1", {"aten::addmm.default": "native"}, "xpu")
    assert "error" not in ops.cross_cell([cell])["predicted"]["xpu-2.5"]
    assert "error" in ops.cross_cell([cell], upstream=without)["predicted"]["xpu-2.5"]
