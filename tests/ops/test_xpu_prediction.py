"""XPU op prediction on real data: the captured names of docs/cuda/ops-cuda-2.11.json (an
H200 run), verbatim upstream fallback-message op names, the packaged torch-xpu-ops
extraction and the seed's table. Facts checked independently of the extraction come from
REFERENCE.md §1 (fixed in 2.5; `_foreach_mul_.Tensor` and `linspace.out` in 2.6)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from accelgrid.ops import xpu_prediction as xp
from accelgrid.ops import xpu_rules

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "docs" / "cuda" / "ops-cuda-2.11.json"
CUDA_OP_CAPTURE = (ROOT / "docs" / "measured" / "h200-2026-11-30"
                   / "ops-cuda-2.11-op-capture.json")
CPU_CAPTURE = ROOT / "docs" / "cpu" / "ops-cpu-2.13-op-capture.json"

# (op name in an upstream fallback message, name a dispatch mode captured for that call)
MESSAGE_VS_CAPTURED = [
    ("aten::linspace.out", "aten::linspace.default"),
    ("aten::topk.values", "aten::topk.default"),
    ("aten::sigmoid.out", "aten::sigmoid.default"),
    ("aten::all.all_out", "aten::all.default"),
    ("aten::lerp.Scalar_out", "aten::lerp_.Scalar"),
    ("aten::upsample_bilinear2d_backward.grad_input",
     "aten::upsample_bilinear2d_backward.default"),
    ("aten::sigmoid_backward.grad_input", "aten::sigmoid_backward.default"),
    ("aten::prod.int_out", "aten::prod.dim_int"),
    ("aten::_foreach_mul_.Scalar", "aten::_foreach_mul_.Scalar"),
]


@pytest.fixture(scope="module")
def capture() -> dict:
    return json.loads(CAPTURE.read_text())


@pytest.fixture(scope="module")
def upstream() -> dict:
    return xp.load_upstream()


def test_captured_names_are_verbatim(capture: dict) -> None:
    ops = capture["ops"]
    for name in ("aten::linspace.default", "aten::topk.default", "aten::all.default",
                 "aten::upsample_bilinear2d_backward.default", "aten::_foreach_mul_.Scalar",
                 "aten::_foreach_mul_.Tensor", "aten::_foreach_lerp_.Scalar",
                 "aten::prod.dim_int", "aten::nll_loss2d_forward.default"):
        assert name in ops
    assert ops["aten::linspace.default"]["status"] == "decomposed"
    assert ops["aten::nll_loss2d_forward.default"]["status"] == "native"


@pytest.mark.parametrize(("message", "captured"), MESSAGE_VS_CAPTURED)
def test_base_op_meets_message_and_capture(message: str, captured: str) -> None:
    assert xp.base_op(message) == xp.base_op(captured)


def test_base_op_forms() -> None:
    assert xp.base_op("aten::_foreach_mul_.Scalar") == "_foreach_mul"
    assert xp.base_op("_foreach_mul") == "_foreach_mul"  # leading "_": not in-place
    assert xp.base_op("aten::upsample_bilinear2d_backward.grad_input") == \
        "upsample_bilinear2d_backward"
    assert xp.base_op("aten::linspace.default") == "linspace"
    assert xp.base_op("__rshift__.Scalar") == "__rshift__"
    # In-place-only ops: both sides map the same way.
    assert xp.base_op("cauchy_") == xp.base_op("aten::cauchy_.default") == "cauchy"
    assert xp.base_op("aten::normal_.default") == xp.base_op("normal_") == "normal"


# --- the rule, one step at a time, on real names ---------------------------------------

def test_rule_1_fallback_list_by_base_op(capture: dict, upstream: dict) -> None:
    ops = capture["ops"]
    p24 = xp.predict(ops, "2.4", upstream)
    # 2.4: on the fallback list (named by kernels: linspace.out, topk.values, ...).
    for message, captured in MESSAGE_VS_CAPTURED:
        if captured in ops and not captured.startswith("aten::_foreach"):
            assert message.split("::")[1] in upstream["series"]["2.4"]["fallback"]
            assert p24[captured] == "fallback", captured
    assert p24["aten::_cdist_forward.default"] == "fallback"
    # linspace.default is a composite over the listed linspace.out: it still falls back.
    assert xp.predict_detail(["aten::linspace.default"], "2.5")["aten::linspace.default"] \
        == {"status": "fallback", "rule": "torch-xpu-ops fallback list"}


def test_rule_1_mixed_base_op_decided_by_overload(upstream: dict) -> None:
    e24 = upstream["series"]["2.4"]
    assert "random_.to" in e24["fallback"] and {"random_", "random_.from"} <= set(e24["native"])
    p = xp.predict(["aten::random_.default", "aten::random_.from", "aten::random_.to"],
                   "2.4", upstream)
    assert p == {"aten::random_.default": "native", "aten::random_.from": "native",
                 "aten::random_.to": "fallback"}


def test_rule_1_an_unlisted_kernel_of_a_listed_base_op_is_missing() -> None:
    # intel/torch-xpu-ops#495 (2024-06-27): norm.dtype_out raised while norm.out was listed.
    night = xp.load_nightlies()["nightlies"]["2024-06-27"]
    assert "norm.out" in night["fallback"] and "norm.dtype_out" not in night["fallback"]
    obs = {"op": "aten::norm.dtype_out", "build": "nightly", "date": "2024-06-27"}
    assert xp.predict_observation(obs)["status"] == "missing"
    assert xp.predict_observation(obs | {"op": "aten::norm.out"})["status"] == "fallback"


def test_rule_2_native_from_each_source(upstream: dict) -> None:
    d24 = xp.predict_detail(["aten::convolution_overrideable.default", "aten::mm.out"], "2.4")
    assert d24["aten::convolution_overrideable.default"]["status"] == "native"
    assert d24["aten::mm.out"]["status"] == "native"  # core oneDNN (xpu_core_ops.json)
    d25 = xp.predict_detail(["aten::_foreach_mul_.Scalar"], "2.5")
    assert d25["aten::_foreach_mul_.Scalar"] == {"status": "native",
                                                 "rule": "torch-xpu-ops kernel"}
    # PyTorch's own XPU keys: absent in 2.4/2.5, SDPA's overrideable op from 2.7, 31 in 2.13.
    torch_data = xp.load_torch()
    xpu_keys = {s: sorted(k for k, v in _torch_ops(torch_data, s).items()
                          if "X" in v.split(">")[0]) for s in ("2.4", "2.5", "2.7", "2.13")}
    assert xpu_keys["2.4"] == xpu_keys["2.5"] == []
    assert "_scaled_dot_product_fused_attention_overrideable" in xpu_keys["2.7"]
    # 31: the entries of torch 2.13's own native_functions.yaml with an XPU dispatch key;
    # where torch 2.13 is installed, counted afresh from the copy its wheel ships
    # (torchgen/packaged), not from this module's packaged data.
    assert len(xpu_keys["2.13"]) == (_xpu_keys_in_installed_torch() or 31)
    d13 = xp.predict_detail(["aten::_int_mm.default", "aten::_scaled_mm.default"], "2.13")
    assert {v["rule"] for v in d13.values()} == {"PyTorch XPU key"}
    assert xp.predict(["aten::_int_mm.default"], "2.6") == {"aten::_int_mm.default": "missing"}


def _torch_ops(torch_data: dict[str, Any], series: str) -> dict[str, str]:
    """xp.torch_ops of a series the packaged data has."""
    ops = xp.torch_ops(torch_data, series)
    assert ops is not None, series
    return ops


def _xpu_keys_in_installed_torch() -> int | None:
    """The native_functions.yaml entries with an XPU dispatch key in the installed torch's
    torchgen copy, when that torch is 2.13 (the dev venv pins it); else None."""
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    import torchgen

    if not torch.__version__.startswith("2.13."):
        return None
    path = Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    return sum(1 for e in entries if any("XPU" in (k.strip() for k in key.split(","))
                                         for key in (e.get("dispatch") or {})))


def test_rule_3_structured_delegate() -> None:
    d = xp.predict_detail(["aten::mm.default", "aten::silu_backward.default"], "2.4")
    assert d["aten::mm.default"] == {"status": "native", "rule": "structured_delegate mm.out"}
    # silu_backward's delegate has no XPU kernel in 2.4: its math composite runs.
    assert d["aten::silu_backward.default"]["status"] == "decomposed"


def test_rule_4_composites_decompose(capture: dict, upstream: dict) -> None:
    p24 = xp.predict(capture["ops"], "2.4", upstream)
    seed_bases = {xp.base_op(r["op"]) for r in xp.load_seed()["rows"]}
    foreach = [op for op in capture["ops"] if op.startswith("aten::_foreach_")
               and xp.base_op(op) in seed_bases]
    assert len(foreach) == 8
    # From 2.4.0 the foreach slow paths are CompositeExplicitAutograd (#127412).
    assert {p24[op] for op in foreach} == {"decomposed"}
    assert p24["aten::_foreach_add_.List"] == "native"  # release/2.4 had _foreach_add
    names = ("aten::native_group_norm.default", "aten::silu_backward.default",
             "aten::pixel_shuffle.default", "aten::pixel_unshuffle.default",
             "aten::zeros_like.default", "aten::convolution_backward.default")
    assert set(xp.predict(names, "2.4", upstream).values()) == {"decomposed"}
    # 2.5 had _foreach_mul.Scalar kernels, not .Tensor: that one runs the composite.
    p25 = xp.predict(capture["ops"], "2.5", upstream)
    assert p25["aten::_foreach_mul_.Tensor"] == "decomposed"
    assert p25["aten::_foreach_mul_.Scalar"] == "native"


def test_rule_5_missing_and_unknown(capture: dict, upstream: dict) -> None:
    p24 = xp.predict(capture["ops"], "2.4", upstream)
    missing = sorted(op for op, st in p24.items() if st == "missing")
    assert missing == ["aten::_fused_adamw_.default", "aten::_weight_norm_interface.default",
                       "aten::_weight_norm_interface_backward.default",
                       "aten::nll_loss2d_backward.default", "aten::nll_loss2d_forward.default",
                       "aten::record_stream.default"]
    # _safe_softmax came with torch 2.5: 2.4's yaml does not have it.
    assert xp.predict_detail(["aten::_safe_softmax.default"], "2.4")[
        "aten::_safe_softmax.default"]["status"] == "unknown"
    # The stale std.correction_out (only the old xpu_functions.yaml listed it in 2.6).
    assert "std.correction_out" not in upstream["series"]["2.6"]["native"]
    assert xp.predict(["aten::std.correction_out", "aten::std.correction"], "2.6") == {
        "aten::std.correction_out": "missing", "aten::std.correction": "native"}


def test_a_series_past_the_data_is_unknown_with_its_date(upstream: dict) -> None:
    last, branch, date = xp.data_horizon(upstream)
    assert (last, branch, date) == ("2.14", "release/2.14", upstream["series"]["2.14"]["date"])
    d = xp.predict_detail(["aten::mm.default"], "2.15", upstream)["aten::mm.default"]
    assert d == {"status": "unknown", "rule": f"no torch-xpu-ops data after {branch} ({date})"}
    check = xp.observed_vs_predicted({"device_type": "xpu", "torch": "2.15.0+xpu",
                                      "ops": {"aten::mm.default": {"status": "native"}}})
    assert check is not None
    assert check["error"] == (f"no torch-xpu-ops data for torch 2.15.0+xpu (the last is "
                              f"{branch}, {date}): predicted unknown")


def test_routed_ops_get_their_own_class(capture: dict) -> None:
    d24 = xp.predict_detail(capture["ops"], "2.4")
    bn = d24["aten::cudnn_batch_norm.default"]
    assert bn["status"] == "routed: cuda"
    assert (bn["xpu_op"], bn["xpu_status"]) == ("aten::native_batch_norm", "fallback")
    sdpa = d24["aten::_scaled_dot_product_efficient_attention.default"]
    assert (sdpa["status"], sdpa["xpu_op"], sdpa["xpu_status"]) == (
        "routed: cuda", "aten::_scaled_dot_product_attention_math", "decomposed")
    cpu = "aten::_scaled_dot_product_flash_attention_for_cpu.default"
    d27 = xp.predict_detail([cpu], "2.7")[cpu]
    assert (d27["status"], d27["xpu_op"], d27["xpu_status"]) == (
        "routed: cpu", "aten::_scaled_dot_product_fused_attention_overrideable", "native")
    for s in xp.series_names(xp.load_upstream()):
        assert "missing" not in {v["status"] for op, v in xp.predict_detail(
            capture["ops"], s).items() if v["status"].startswith("routed")}
    # Called directly on XPU (an upstream test), the op is judged as itself: listed, and
    # no CPU kernel in 2.5's yaml (intel/torch-xpu-ops#811: "fallbacked but CPU does not
    # support it").
    assert xp.predict_detail(["aten::_scaled_dot_product_efficient_attention.default"], "2.5",
                             routing=False)[
        "aten::_scaled_dot_product_efficient_attention.default"]["status"] == xp.FALLBACK_ERROR


def test_the_capturing_device_does_not_matter(capture: dict) -> None:
    as_native = {op: {"status": "native"} for op in capture["ops"]}
    for s in ("2.4", "2.13"):
        assert xp.predict(capture["ops"], s) == xp.predict(as_native, s) == \
            xp.predict(list(capture["ops"]), s)


def test_without_the_foreach_composites_models_the_seed_nightly(capture: dict) -> None:
    p = xp.predict(capture["ops"], "2.4", without_foreach_composites=True)
    seed_bases = {xp.base_op(r["op"]) for r in xp.load_seed()["rows"]}
    assert {p[op] for op in capture["ops"] if op.startswith("aten::_foreach_")
            and xp.base_op(op) in seed_bases} == {"missing"}


def test_predict_all_and_stopped_falling_back(capture: dict, upstream: dict) -> None:
    preds = xp.predict_all(capture, upstream)
    assert list(preds) == xp.series_names(upstream)
    assert list(preds)[:2] == ["2.4", "2.5"] and list(preds)[-1] == "2.14"
    assert set(preds["2.13"]) == set(capture["ops"])
    assert "fallback" not in preds["2.13"].values()
    fixed = xp.stopped_falling_back(preds)
    assert fixed["aten::_cdist_forward.default"] == "2.5"
    assert fixed["aten::linspace.default"] == "2.6"
    assert "aten::_foreach_mul_.Tensor" not in fixed  # never bad: the composite runs
    assert fixed["aten::nll_loss2d_forward.default"] == "2.5"
    assert "aten::mm.default" not in fixed  # never bad
    assert xp.stopped_falling_back({"2.4": {"x": "fallback"}, "2.10": {"x": "missing"},
                                    "2.9": {"x": "native"}}) == {"x": None}
    counts = xp.series_counts(preds)
    assert sum(counts["2.4"].values()) == len(capture["ops"])


def test_seed_data_and_provenance() -> None:
    seed = xp.load_seed()
    assert seed["source"]["file"] == "seeds/000_e09c196a69be0f3f.txt"
    assert seed["source"]["observed_on"] == "pytorch/pytorch@21144ce, ATS-M"
    rows = {r["op"]: r for r in seed["rows"]}
    # The seed's table of ops (seeds/000_e09c196a69be0f3f.txt: 32 lines, aten::_cdist_forward
    # through aten::upsample_nearest2d.out), 8 of them the foreach rows.
    assert len(seed["rows"]) == 32
    assert sum("foreach" in r["as_written"] for r in seed["rows"]) == 8
    assert rows["aten::_foreach_addcdiv.ScalarList"]["as_written"] == \
        "aten::foreach_addcdiv.ScalarList"
    assert rows["aten::linspace.out"] == {"op": "aten::linspace.out",
                                          "as_written": "aten::linspace.out",
                                          "status": "explicit",
                                          "examples": {"instance-segmentation": "SWIN"}}
    assert rows["aten::nll_loss2d_forward"]["status"] == "manual"


def test_compare_with_seed_on_the_capture(capture: dict, upstream: dict) -> None:
    rows = xp.compare_with_seed(capture["ops"], xp.SEED_SERIES, upstream)
    by_op = {r["op"]: r for r in rows}
    # Two seed rows share _foreach_mul: each pairs with its own overload only.
    assert by_op["aten::_foreach_mul.Tensor"]["captured"] == ["aten::_foreach_mul_.Tensor"]
    assert by_op["aten::_foreach_mul.Scalar"]["captured"] == ["aten::_foreach_mul_.Scalar"]
    assert by_op["aten::all.all_out"]["captured"] == ["aten::all.default", "aten::all.dim"]
    assert by_op["aten::topk.values"]["predicted"] == "fallback"
    assert by_op["aten::roll"]["reason"] == "not-exercised"
    # cudnn_batch_norm stands for native_batch_norm, the op XPU calls.
    assert by_op["aten::native_batch_norm"]["captured"] == ["aten::cudnn_batch_norm.default"]
    assert by_op["aten::native_batch_norm"]["predicted"] == "fallback"
    assert by_op["aten::_foreach_sqrt"]["reason"] == "composite-in-series"
    # Derived, not pasted: in 2.4 exactly the exercised foreach rows disagree (their
    # composite path, pytorch/pytorch#127412); every other exercised row agrees.
    exercised = [r for r in rows if r["agree"] is not None]
    foreach = {r["op"] for r in exercised if "_foreach_" in r["op"]}
    assert {r["op"] for r in exercised if not r["agree"]} == foreach
    agree = len(exercised) - len(foreach)
    assert xp.agreement_line(rows) == ("Agreement with the seed's table: "
                                       f"{agree} of {len(exercised)} rows "
                                       f"({round(100 * agree / len(exercised))} %)")
    nightly = xp.compare_with_seed(capture["ops"], xp.SEED_SERIES, upstream,
                                   without_foreach_composites=True)
    assert xp.agreement_line(nightly) == (f"Agreement with the seed's table: {len(exercised)} "
                                          f"of {len(exercised)} rows (100 %)")
    later = {r["op"]: r for r in xp.compare_with_seed(capture["ops"], "2.6", upstream)}
    assert later["aten::topk.values"]["reason"] == "kernel-in-series"
    assert later["aten::nll_loss2d_forward"]["reason"] == "kernel-in-series"


def test_seed_figures() -> None:
    f = xp.seed_figures()
    assert f["nightly_line"] == ("Seed against the nightly it ran (release 2.4 data before "
                                 "pytorch/pytorch#127412 (#127623, merged 2024-06-01)): "
                                 "32 of 32 rows (100 %)")
    # Derived, not pasted: from torch 2.4.0 the _foreach_ ops run PyTorch's own
    # CompositeExplicitAutograd slow path (pytorch/pytorch#127412), so exactly the seed's
    # foreach rows (written "manual": they failed on the nightly) differ; every other row
    # agrees.
    rows = xp.load_seed()["rows"]
    foreach = sum("foreach" in r["as_written"] for r in rows)
    agree = len(rows) - foreach
    assert f["release_line"] == (
        f"Seed's rows predicted for the 2.4.x release: {agree} of {len(rows)} rows agree "
        f"({round(100 * agree / len(rows))} %); {foreach} differ")
    differ = f["release_differs"]
    assert {r["op"].split(".")[0] for r in differ} == {
        "aten::_foreach_addcdiv", "aten::_foreach_addcmul", "aten::_foreach_div",
        "aten::_foreach_lerp", "aten::_foreach_mul", "aten::_foreach_norm",
        "aten::_foreach_sqrt"}
    assert {(r["predicted"], r["reason"]) for r in differ} == {
        ("decomposed", "composite-in-series")}


def test_agreement_line_format() -> None:
    rows: list[dict[str, bool | None]] = [
        {"agree": True}, {"agree": False}, {"agree": True}, {"agree": None}]
    line = xp.agreement_line(rows)
    assert line == "Agreement with the seed's table: 2 of 3 rows (67 %)"
    assert re.fullmatch(r"Agreement with the seed's table: \d+ of \d+ rows \(\d+ %\)", line)


def test_seed_series_is_the_best_match(upstream: dict) -> None:
    by_series = xp.seed_series_agreement(upstream)
    best = max(by_series, key=lambda s: by_series[s][0])
    assert best == xp.SEED_SERIES == "2.4"
    assert by_series["2.4"] == (32, 32)


# --- both committed captures, one verdict -----------------------------------------------

def test_cpu_and_cuda_captures_agree_on_every_seed_row() -> None:
    cpu = json.loads(CPU_CAPTURE.read_text())
    cuda = json.loads(CUDA_OP_CAPTURE.read_text())
    assert (cpu["device_type"], cuda["device_type"]) == ("cpu", "cuda")
    for series in xp.series_names(xp.load_upstream()):
        a = {r["op"]: r for r in xp.compare_with_seed(cpu["ops"], series)}
        b = {r["op"]: r for r in xp.compare_with_seed(cuda["ops"], series)}
        both = [op for op in a if a[op]["captured"] and b[op]["captured"]]
        assert len(both) >= 28, series
        for op in both:
            assert a[op]["predicted"] == b[op]["predicted"], (series, op)
    for data in (cpu, cuda):
        for series in ("2.4", "2.13"):
            routed = {op: st for op, st in xp.predict(data["ops"], series).items()
                      if xp.base_op(op) in xp.ROUTED}
            assert routed and set(routed.values()) == {f"routed: {data['device_type']}"}


# --- out-of-sample observations -----------------------------------------------------------

def test_observations_are_dated_linked_and_many() -> None:
    obs = xp.load_observations()["observations"]
    assert len(obs) >= 30
    for o in obs:
        assert o["observed"] in xp.COMPARED
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", o["date"])
        assert o["link"].startswith(("https://github.com/pytorch/pytorch/issues/",
                                     "https://github.com/intel/torch-xpu-ops/issues/"))
        assert o["build"] in ("nightly", "release")
    assert not any(o["link"].endswith(("127931", "127937", "127941")) for o in obs)  # the seed


@pytest.mark.parametrize("index", range(len(xp.load_observations()["observations"])))
def test_each_observation_is_predicted(index: int) -> None:
    obs = xp.load_observations()["observations"][index]
    pred = xp.predict_observation(obs)
    if "disagreement" in obs:  # explained where it is recorded
        assert pred["status"] != obs["observed"], obs
    else:
        assert pred["status"] == obs["observed"], (obs, pred)


def test_observation_agreement_line_and_doc() -> None:
    rows, line = xp.observation_agreement()
    assert re.fullmatch(r"Agreement with upstream observations: \d+ of \d+ \(\d+ %\)", line)
    n, m = (int(x) for x in re.findall(r"(\d+) of (\d+)", line)[0])
    assert m >= 30 and n / m >= 0.95
    assert all("disagreement" in r for r in rows if not r["agree"])
    text = (ROOT / "docs" / "devices" / "xpu-prediction.md").read_text()
    figures = xp.seed_figures()
    for figure in (figures["nightly_line"], figures["release_line"], line):
        assert sum(1 for ln in text.splitlines() if ln == figure) == 1, figure


# --- planted faults: the checks above must catch them --------------------------------

def _key_checks(upstream: dict) -> None:
    p24 = xp.predict(["aten::linspace.default", "aten::topk.default", "aten::lerp_.Scalar",
                      "aten::_foreach_mul_.Scalar"], "2.4", upstream)
    assert p24 == {"aten::linspace.default": "fallback", "aten::topk.default": "fallback",
                   "aten::lerp_.Scalar": "fallback", "aten::_foreach_mul_.Scalar": "decomposed"}
    p25 = xp.predict(["aten::_foreach_mul_.Tensor", "aten::_foreach_mul_.Scalar",
                      "aten::mm.default"], "2.5", upstream)
    assert p25 == {"aten::_foreach_mul_.Tensor": "decomposed",
                   "aten::_foreach_mul_.Scalar": "native", "aten::mm.default": "native"}


def test_key_checks_pass(upstream: dict) -> None:
    _key_checks(upstream)


@pytest.mark.parametrize("fault", [
    "exact names",  # matching without stripping overloads
    "fallback list ignored",
    "composites ignored",
    "delegates ignored",
])
def test_planted_faults_are_caught(fault: str, upstream: dict, monkeypatch) -> None:
    real = xp.base_op
    if fault == "exact names":
        monkeypatch.setattr(xpu_rules, "base_op", lambda n: n.removeprefix("aten::"))
    elif fault == "fallback list ignored":
        upstream = json.loads(json.dumps(upstream))
        for entry in upstream["series"].values():
            entry["fallback"] = []
    else:
        strip = "EFI" if fault == "composites ignored" else ">"
        torch_ops = xp.torch_ops

        def planted(data, series):
            ops = torch_ops(data, series)
            return {k: (v.split(">")[0] if strip == ">" else
                        "".join(c for c in v.split(">")[0] if c not in strip) or "B")
                    for k, v in ops.items()}
        monkeypatch.setattr(xpu_rules, "torch_ops", planted)
    assert real("aten::lerp_.Scalar") == "lerp"
    with pytest.raises(AssertionError):
        _key_checks(upstream)


# --- packaging and regeneration ---------------------------------------------------------

def test_data_files_ship_with_the_package() -> None:
    data = resources.files("accelgrid").joinpath("data")
    for name in ("xpu_ops.json", "xpu_core_ops.json", "seed_000_ops.json",
                 "torch_registrations.json", "xpu_ops_nightly.json", "xpu_observations.json"):
        assert json.loads(data.joinpath(name).read_text(encoding="utf-8"))
    series = xp.load_upstream()["series"]
    assert list(series) == [f"2.{n}" for n in range(4, 15)]
    for s, e in series.items():
        assert e["branch"] == f"release/{s}" and re.fullmatch(r"[0-9a-f]{40}", e["commit"])
        assert e["native"] == sorted(e["native"]) and e["fallback"] == sorted(e["fallback"])
        assert e["sources"]


def test_doc_is_generated_from_the_data() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "xpu_prediction_doc.py"),
                           "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "docs" / "devices" / "xpu-prediction.md").read_text()
    doc_capture = json.loads(CUDA_OP_CAPTURE.read_text())
    rows = xp.compare_with_seed(doc_capture["ops"], xp.SEED_SERIES)
    assert xp.agreement_line(rows) == "Agreement with the seed's table: 24 of 32 rows (75 %)"
    assert xp.agreement_line(rows) in text.splitlines()


@pytest.mark.skipif(not os.environ.get("TORCH_XPU_OPS_REPO"),
                    reason="set TORCH_XPU_OPS_REPO to a torch-xpu-ops clone to re-extract")
def test_packaged_data_matches_a_fresh_extraction(tmp_path: Path) -> None:
    out = tmp_path / "xpu_ops.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "extract_xpu_ops.py"),
                    os.environ["TORCH_XPU_OPS_REPO"], "--out", str(out)], check=True)
    packaged = resources.files("accelgrid").joinpath("data", "xpu_ops.json")
    assert out.read_text() == packaged.read_text(encoding="utf-8")


# --- choosing series, observed vs predicted --------------------------------------------

def test_series_of_and_the_matrix_series() -> None:
    from accelgrid.config.matrix import load_matrix

    assert xp.series_of("2.5.1+xpu") == "2.5" and xp.series_of("2.13.0") == "2.13"
    assert xp.series_of(None) is None and xp.series_of("nightly") is None
    cells = load_matrix(ROOT / "matrix.yaml").cells
    # 2.4 is the local-wheel cell (xpu builds of 2.4 exist only from source).
    assert xp.matrix_series(cells) == ["2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14",
                                       "2.15"]


def test_choose_series(upstream: dict) -> None:
    from accelgrid.base.errors import InvalidInput

    assert xp.choose_series(all_series=True, upstream=upstream) == (
        xp.series_names(upstream), [])
    assert xp.choose_series(["2.6", "2.5", "2.6"], upstream=upstream) == (["2.5", "2.6"], [])
    with pytest.raises(InvalidInput, match="no torch-xpu-ops data for series 3.0"):
        xp.choose_series(["3.0"], upstream=upstream)

    class Cell:
        def __init__(self, device: str, torch: str) -> None:
            self.device, self.torch = device, torch

    cells = [Cell("xpu", "2.13"), Cell("xpu", "3.0"), Cell("cuda", "2.4"), Cell("xpu", "2.5")]
    chosen, notes = xp.choose_series(cells=cells, upstream=upstream)
    assert chosen == ["2.5", "2.13"]
    last, branch, date = xp.data_horizon(upstream)
    assert notes == [f"the matrix's xpu series 3.0 is past the last torch-xpu-ops data "
                     f"({branch}, {date}): unknown; left out"]
    with pytest.raises(InvalidInput, match="no xpu cell"):
        xp.choose_series(cells=[Cell("cuda", "2.4")], upstream=upstream)


def test_predicted_view_is_predict_all_per_series(capture: dict, upstream: dict) -> None:
    doc = xp.predicted_view(capture, ["2.13", "2.5"], upstream)
    assert doc["series"] == ["2.5", "2.13"]
    full = xp.predict_all(capture, upstream)
    for op, e in doc["ops"].items():
        assert e["predicted"] == {"2.5": full["2.5"][op], "2.13": full["2.13"][op]}
        assert e["captured"] == capture["ops"][op]["status"]
    assert doc["counts"] == {s: xp.series_counts(full)[s] for s in ("2.5", "2.13")}
    assert doc["releases"]["2.5"]["branch"] == "release/2.5"
    assert doc["ops"]["aten::linspace.default"]["stopped_falling_back"] == "2.13"
    assert "stopped_falling_back" not in doc["ops"]["aten::mm.default"]


def test_observed_vs_predicted_only_for_xpu(capture: dict, upstream: dict) -> None:
    assert xp.observed_vs_predicted(capture, upstream) is None  # a cuda cell
    xpu = {"device_type": "xpu", "torch": "2.6.0+xpu",
           "ops": {"aten::linspace.default": {"status": "fallback"},
                   "aten::mm.default": {"status": "native"},
                   "aten::pixel_shuffle.default": {"status": "unknown"}}}
    check = xp.observed_vs_predicted(xpu, upstream)
    assert check is not None
    assert check["branch"] == "release/2.6"
    assert check["disagreements"] == [{"op": "aten::linspace.default", "observed": "fallback",
                                       "predicted": "decomposed"}]
    assert check["counts"] == {"agree": 1, "disagree": 1, "not_compared": 1}


# --- rules and notes no other test reaches (docs/design/mutation.md, xpu_prediction) ---------

def test_a_partly_listed_op_says_which_rule_made_it_native(upstream: dict) -> None:
    """release/2.4 lists random_.to and has kernels for random_ and random_.from: those
    two are native by rule 1's exception, not by the plain kernel rule."""
    d = xp.predict_detail(["aten::random_.default", "aten::random_.from"], "2.4", upstream)
    assert {v["rule"] for v in d.values()} == {"torch-xpu-ops kernel of a partly listed op"}


def test_an_overload_newer_than_the_release_takes_its_base_ops_kernel() -> None:
    """addmm.dtype is first in torch 2.8's native_functions.yaml; in 2.4 addmm has XPU
    kernels (a core oneDNN registration, xpu_core_ops.json): a capture from a newer torch
    calling it is predicted native for 2.4, while an op whose base has no kernel there
    (_safe_softmax, from torch 2.5) is unknown."""
    torch_data = xp.load_torch()
    assert "addmm.dtype" not in _torch_ops(torch_data, "2.4")
    assert "addmm.dtype" in _torch_ops(torch_data, "2.8")
    assert "addmm.out" in xp.load_core()["series"]["2.4"]["ops"]
    d = xp.predict_detail(["aten::addmm.dtype", "aten::_safe_softmax.default"], "2.4")
    assert d["aten::addmm.dtype"] == {
        "status": "native", "rule": "torch-xpu-ops kernel (op not in this release's yaml)"}
    assert d["aten::_safe_softmax.default"]["status"] == "unknown"


def test_without_the_releases_yaml_an_op_without_kernel_is_unknown(upstream: dict) -> None:
    """Rule 5: without PyTorch's yaml of the release nothing says whether a composite runs
    the op, so one with no torch-xpu-ops kernel is unknown, not missing (nll_loss2d_forward
    on 2.4: missing with the yaml, pytorch/pytorch#127937); a kernel still says native."""
    no_yaml: dict[str, Any] = {"series": {}}
    ops = ["aten::nll_loss2d_forward.default", "aten::mm.out"]
    d = xp.predict_detail(ops, "2.4", upstream, torch_data=no_yaml)
    assert d["aten::nll_loss2d_forward.default"] == {
        "status": "unknown", "rule": "kernel list incomplete for this release"}
    assert d["aten::mm.out"]["status"] == "native"
    assert xp.predict(ops[:1], "2.4", upstream) == {ops[0]: "missing"}
    # An overload the data cannot place takes its base op's kernel: addmm's is oneDNN's
    # core registration in 2.4 (xpu_core_ops.json).
    assert xp.predict(["aten::addmm.dtype"], "2.4", upstream, torch_data=no_yaml) == {
        "aten::addmm.dtype": "native"}


def test_a_series_before_the_data_is_an_error_not_unknown(upstream: dict) -> None:
    with pytest.raises(KeyError, match=r"no upstream data for series '2\.3'; have 2\.4, 2\.5"):
        xp.predict(["aten::mm.default"], "2.3", upstream)


def test_the_data_horizon_is_that_of_the_data_given(upstream: dict) -> None:
    older = {"series": {s: e for s, e in upstream["series"].items() if s != "2.14"}}
    assert xp.data_horizon(older) == ("2.13", "release/2.13", upstream["series"]["2.13"]["date"])


def test_core_registrations_stand_for_a_series_with_a_note() -> None:
    """xpu_core_ops.json has series 2.4 to 2.15, none from that release's own files: a
    series past it takes the last one's, one before it none, and each note says so."""
    core = xp.load_core()
    assert xp.core_for(core, "2.3") == ({}, "no core registration data for torch 2.3")
    ops, note = xp.core_for(core, "2.16")
    assert ops == core["series"]["2.15"]["ops"]
    assert note.startswith("no core registration data for torch 2.16: torch 2.15's (not this "
                           "release's own files: ")
    ops, note = xp.core_for(core, "2.4")
    assert "addmm.out" in ops and note.startswith("not this release's own files: ")
    rule = xp.predict_detail(["aten::addmm.out"], "2.4")["aten::addmm.out"]["rule"]
    assert rule == f"PyTorch core XPU registration ({note})"


def test_predicted_view_says_what_routed_ops_call_and_the_seeds_rows(capture: dict,
                                                                     upstream: dict) -> None:
    """The H200 capture's cudnn_batch_norm is routed: on XPU native_batch_norm runs
    instead, on release/2.4's fallback list and a torch-xpu-ops kernel from 2.5. The seed's
    rows come with 2.4 only."""
    assert "native_batch_norm" in upstream["series"]["2.4"]["fallback"]
    assert "native_batch_norm" in upstream["series"]["2.14"]["native"]
    doc = xp.predicted_view(capture, ["2.4", "2.14"], upstream)
    bn = doc["ops"]["aten::cudnn_batch_norm.default"]
    assert bn["predicted"] == {"2.4": "routed: cuda", "2.14": "routed: cuda"}
    assert bn["xpu_calls"] == {"2.4": "aten::native_batch_norm: fallback",
                               "2.14": "aten::native_batch_norm: native"}
    assert "xpu_calls" not in doc["ops"]["aten::mm.default"]
    assert doc["seed"]["series"] == "2.4"
    assert {r["op"] for r in doc["seed"]["rows"]} == {r["op"] for r in xp.load_seed()["rows"]}
    assert doc["seed"]["agreement"].startswith("Agreement with the seed's table: ")
    assert xp.predicted_view(capture, ["2.14"], upstream)["seed"] is None
    # 2.14's kernel list is older than its branch head (registrations moved into PyTorch):
    # the view names the commit the list is from; 2.4's is the branch head itself.
    e14, e4 = upstream["series"]["2.14"], upstream["series"]["2.4"]
    assert e14["native_commit"] != e14["commit"] and "native_commit" not in e4
    assert doc["releases"]["2.14"]["kernel_list_from"] == e14["native_commit"]
    assert doc["releases"]["2.4"]["kernel_list_from"] == e4["commit"]
    assert doc["releases"]["2.4"]["core_registrations"].startswith(
        "not this release's own files: ")


def test_predict_all_and_choose_series_use_the_data_they_are_given(upstream: dict) -> None:
    """Without the core registrations addmm.out has no XPU kernel in 2.4 (release/2.4 of
    torch-xpu-ops has none; oneDNN's is in PyTorch's core, xpu_core_ops.json); without
    PyTorch's yaml nll_loss2d_forward cannot be told missing; a series left out of the
    data is left out of the result."""
    assert "addmm.out" not in upstream["series"]["2.4"]["native"]
    captured: dict[str, Any] = {"ops": {"aten::addmm.out": {},
                                        "aten::nll_loss2d_forward.default": {}}}
    full = xp.predict_all(captured)
    assert (full["2.4"]["aten::addmm.out"], full["2.4"]["aten::nll_loss2d_forward.default"]) == (
        "native", "missing")
    no_core = xp.predict_all(captured, core={"series": {}})
    assert no_core["2.4"]["aten::addmm.out"] == "missing"
    no_yaml = xp.predict_all(captured, torch_data={"series": {}})
    assert no_yaml["2.4"]["aten::nll_loss2d_forward.default"] == "unknown"
    older = {"series": {s: e for s, e in upstream["series"].items() if s != "2.14"}}
    assert list(xp.predict_all(captured, older)) == xp.series_names(older)
    assert "2.14" not in xp.series_names(older)
    assert xp.choose_series(all_series=True, upstream=older) == (xp.series_names(older), [])


def test_a_series_without_data_says_whether_it_is_past_the_data(upstream: dict) -> None:
    last, branch, date = xp.data_horizon(upstream)
    for torch, why in (("2.3.1+xpu", "no torch-xpu-ops data for torch 2.3.1+xpu"),
                       ("nightly", "no torch-xpu-ops data for torch nightly"),
                       ("2.15.0", f"no torch-xpu-ops data for torch 2.15.0 (the last is "
                                  f"{branch}, {date}): predicted unknown")):
        check = xp.observed_vs_predicted({"device_type": "xpu", "torch": torch, "ops": {
            "aten::mm.default": {"status": "native"}}}, upstream)
        assert check is not None
        assert check["error"] == why
        assert check["counts"] == {"agree": 0, "disagree": 0, "not_compared": 1}


@pytest.mark.parametrize(("row", "call", "reason"), [
    # release/2.4 lists binary_cross_entropy (XPUFallback.template): the seed saw it missing.
    ({"op": "aten::binary_cross_entropy", "status": "manual"},
     "aten::binary_cross_entropy.default", "on-fallback-list-in-series"),
    # Its .out kernel is not listed and has CPU/CUDA kernels only in 2.4's yaml: missing.
    ({"op": "aten::binary_cross_entropy.out", "status": "explicit"},
     "aten::binary_cross_entropy.out", "not-on-fallback-list-in-series"),
    # _fused_adagrad_.tensor_lr is not in 2.4's yaml: nothing to predict from.
    ({"op": "aten::_fused_adagrad_", "status": "manual"}, "aten::_fused_adagrad_.tensor_lr",
     "not-predictable"),
])
def test_a_disagreement_with_the_seed_says_why(row: dict, call: str, reason: str) -> None:
    [got] = xp.compare_with_seed([call], "2.4", seed={"rows": [row | {"examples": {}}]})
    assert (got["agree"], got["reason"]) == (False, reason)


def test_seed_rows_default_to_the_release_with_its_foreach_composites(upstream: dict) -> None:
    """From torch 2.4.0 the _foreach_ slow paths are CompositeExplicitAutograd
    (pytorch/pytorch#127412): the 2.4.x release decomposes the seed's foreach rows; only the
    seed's nightly, before them, had them missing."""
    rows = [r for r in xp.seed_rows("2.4", upstream) if r["op"].startswith("aten::_foreach_")]
    assert rows and {r["predicted"] for r in rows} == {"decomposed"}
    nightly = [r for r in xp.seed_rows("2.4", upstream, without_foreach_composites=True)
               if r["op"].startswith("aten::_foreach_")]
    assert "missing" in {r["predicted"] for r in nightly}
    older = {"series": {s: e for s, e in upstream["series"].items() if s != "2.14"}}
    assert list(xp.seed_series_agreement(older)) == xp.series_names(older)


def test_a_release_observation_is_predicted_from_that_releases_data(upstream: dict) -> None:
    """A release build has the foreach composites (from 2.4.0, #127412) whatever its date;
    the release data given is the data used."""
    obs = {"op": "aten::_foreach_mul_.Tensor", "series": "2.4", "build": "release"}
    assert xp.predict_observation(obs, upstream)["status"] == "decomposed"
    older = {"series": {s: e for s, e in upstream["series"].items() if s != "2.14"}}
    late = {"op": "aten::mm.default", "series": "2.14", "build": "release"}
    assert xp.predict_observation(late, older)["status"] == "unknown"
    assert xp.predict_observation(late, upstream)["status"] == "native"


def test_a_nightly_leads_to_the_release_whose_branch_ends_on_or_after_its_date(
        upstream: dict) -> None:
    end_25 = upstream["series"]["2.5"]["date"]
    assert xp.nightly_series(end_25, upstream) == "2.5"  # cut that day: still 2.5's
    assert xp.nightly_series(upstream["series"]["2.4"]["date"], upstream) == "2.4"
    older = {"series": {s: e for s, e in upstream["series"].items() if s != "2.14"}}
    after = upstream["series"]["2.13"]["date"][:8] + "30"  # past 2.13's end, before 2.14's
    assert xp.nightly_series(after, upstream) == "2.14"
    assert xp.nightly_series(after, older) == "2.13"  # the last there is


def test_predicted_view_uses_the_data_given_and_names_the_workloads(capture: dict,
                                                                    upstream: dict) -> None:
    captured = {"ops": {"aten::addmm.out": {"status": "native", "workloads": {"mlp": 2}},
                        "aten::nll_loss2d_forward.default": {
                            "status": "native", "workloads": {"segmentation": 1}}}}
    full = xp.predicted_view(captured, ["2.4"], upstream)
    assert {op: e["predicted"]["2.4"] for op, e in full["ops"].items()} == {
        "aten::addmm.out": "native", "aten::nll_loss2d_forward.default": "missing"}
    assert full["workloads"] == ["mlp", "segmentation"]  # from the ops, none listed
    no_core = xp.predicted_view(captured, ["2.4"], upstream, core={"series": {}})
    assert no_core["ops"]["aten::addmm.out"]["predicted"]["2.4"] == "missing"
    no_yaml = xp.predicted_view(captured, ["2.4"], upstream, torch_data={"series": {}})
    assert no_yaml["ops"]["aten::nll_loss2d_forward.default"]["predicted"]["2.4"] == "unknown"
    assert xp.predicted_view(capture, ["2.13"], upstream)["workloads"] == capture["workloads"]
    # torch-xpu-ops' main of 2024-06-27 standing for 2.5 (as predict_observation does for a
    # nightly): the view's release facts are that snapshot's.
    night = xp.load_nightlies()["nightlies"]["2024-06-27"]
    view = xp.predicted_view(captured, ["2.5"], {"series": {"2.5": night}})
    assert (view["releases"]["2.5"]["branch"], view["releases"]["2.5"]["commit"]) == (
        "main", night["commit"])


# --- fallback -> error: a listed op the CPU cannot run --------------------------------------

def test_listed_ops_without_a_cpu_kernel_fail_on_the_cpu() -> None:
    """On the real release data: ops on torch-xpu-ops' fallback list whose torch yaml has no
    CPU kernel (intel/torch-xpu-ops#2270 _flash_attention_forward, #258
    _thnn_fused_gru_cell, #811 the efficient attention) are `fallback -> error` while
    listed; `_scaled_mm` stays listed through 2.9 and gets a CPU kernel in 2.8's yaml."""
    def status(op: str, series: str) -> str:
        return xp.predict_detail([op], series, routing=False)[op]["status"]

    flash = "aten::_flash_attention_forward.default"
    assert [status(flash, s) for s in ("2.4", "2.8", "2.12")] == [xp.FALLBACK_ERROR] * 3
    assert status(flash, "2.13") != xp.FALLBACK_ERROR  # off the list (torch-xpu-ops#3404)
    gru = "aten::_thnn_fused_gru_cell.default"
    assert [status(gru, s) for s in ("2.4", "2.5", "2.6")] == [
        xp.FALLBACK_ERROR, xp.FALLBACK_ERROR, "native"]  # XPU kernels in 2.6 (#1233)
    scaled = "aten::_scaled_mm.default"
    assert {s: status(scaled, s) for s in ("2.7", "2.8", "2.9", "2.10")} == {
        "2.7": xp.FALLBACK_ERROR, "2.8": "fallback", "2.9": "fallback", "2.10": "native"}
    # The rule's reason says which fact decided.
    assert "no CPU kernel" in xp.predict_detail([gru], "2.4", routing=False)[gru]["rule"]


def test_cpu_kernel_facts_come_from_the_yaml_codes() -> None:
    """has_cpu_kernel reads the C letter, the composites and a delegate's CPU kernel; it
    cannot tell for an op or a series the data lacks."""
    ops = {"a": "BC", "b": "B", "c": ">a", "d": ">b", "e": "EB", "f": "I>b"}
    assert [xp.has_cpu_kernel(n, ops) for n in "abcdef"] == [True, False, True, False,
                                                             True, True]
    assert xp.has_cpu_kernel("zzz", ops) is None and xp.has_cpu_kernel("a", None) is None
    # Real 2.13 yaml: mm has a CPU key; CUDA's flash attention none.
    ops_213 = xp.torch_ops(xp.load_torch(), "2.13")
    assert xp.has_cpu_kernel("aten::mm.default", ops_213) is True
    assert xp.has_cpu_kernel("aten::_flash_attention_forward", ops_213) is False


def test_a_planted_cpu_kernel_turns_fallback_error_into_fallback() -> None:
    """The class follows the yaml: the same listed op with a CPU key is a plain fallback."""
    torch_data = copy.deepcopy(xp.load_torch())
    torch_data["series"]["2.5"].setdefault("set", {})["_thnn_fused_gru_cell"] = "BC"
    op = "aten::_thnn_fused_gru_cell.default"
    assert xp.predict([op], "2.5", torch_data=torch_data)[op] == "fallback"
    assert xp.predict([op], "2.5")[op] == xp.FALLBACK_ERROR


def test_the_new_suites_gemms_per_series() -> None:
    """The FP8, grouped and int4 GEMMs of suites/lowbit, per XPU series, from the real data
    (the issue's observations: _grouped_mm / _scaled_grouped_mm(_v2) missing through 2.13,
    torch-xpu-ops#1574, #3060, #5077)."""
    ops = ["aten::_scaled_mm.default", "aten::_grouped_mm.default",
           "aten::_scaled_grouped_mm.default", "aten::_weight_int4pack_mm.default"]
    p = {s: xp.predict(ops, s) for s in ("2.6", "2.8", "2.11", "2.13")}
    assert [p[s]["aten::_scaled_grouped_mm.default"] for s in ("2.8", "2.11", "2.13")] == [
        "missing"] * 3
    assert p["2.8"]["aten::_grouped_mm.default"] == "missing"
    # From 2.9 PyTorch's yaml gives _grouped_mm a CompositeExplicitAutograd kernel.
    assert p["2.13"]["aten::_grouped_mm.default"] == "decomposed"
    assert p["2.13"]["aten::_scaled_mm.default"] == "native"
    # torch-xpu-ops' own int4 kernel (the one intel/torch-xpu-ops#4765 is about).
    assert p["2.8"]["aten::_weight_int4pack_mm.default"] == "native"
