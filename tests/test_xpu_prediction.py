"""XPU op prediction on real data: the captured names of docs/cuda/ops-cuda-2.11.json (an
H200 run), verbatim upstream fallback-message op names, the packaged torch-xpu-ops
extraction and the seed's table. Facts checked independently of the extraction come from
REFERENCE.md §1 (fixed in 2.5; `_foreach_mul_.Tensor` and `linspace.out` in 2.6)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from accelgrid import xpu_prediction as xp

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "docs" / "cuda" / "ops-cuda-2.11.json"

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


def test_release_facts_on_captured_calls(capture: dict, upstream: dict) -> None:
    ops = capture["ops"]
    p24 = xp.predict(ops, "2.4", upstream)
    p25 = xp.predict(ops, "2.5", upstream)
    p26 = xp.predict(ops, "2.6", upstream)
    # 2.4: on the fallback list (named by kernels: linspace.out, topk.values, ...).
    for message, captured in MESSAGE_VS_CAPTURED:
        if captured in ops and not captured.startswith("aten::_foreach"):
            assert message.split("::")[1] in upstream["series"]["2.4"]["fallback"]
            assert p24[captured] == "fallback", captured
    assert p24["aten::_cdist_forward.default"] == "fallback"
    # 2.4: foreach and nll_loss2d neither implemented nor listed: missing.
    assert p24["aten::_foreach_mul_.Scalar"] == "missing"
    assert p24["aten::nll_loss2d_forward.default"] == "missing"
    # 2.5 fixed most (REFERENCE §1) but not linspace.out nor _foreach_mul_.Tensor.
    assert p25["aten::_cdist_forward.default"] == "native"
    assert p25["aten::topk.default"] == "native"
    assert p25["aten::nll_loss2d_forward.default"] == "native"
    assert p25["aten::_foreach_mul_.Scalar"] == "native"
    assert p25["aten::_foreach_norm.Scalar"] == "native"
    assert p25["aten::linspace.default"] == "fallback"
    assert p25["aten::_foreach_mul_.Tensor"] == "missing"
    assert p26["aten::linspace.default"] == "native"
    assert p26["aten::_foreach_mul_.Tensor"] == "native"


def test_other_statuses(capture: dict, upstream: dict) -> None:
    p = xp.predict(capture["ops"], "2.4", upstream)
    assert p["aten::mm.default"] == "native"  # oneDNN kernel in PyTorch (xpu_core_ops.json)
    assert p["aten::addmm.default"] == "native"
    assert p["aten::convolution_backward.default"] == "decomposed"
    assert p["aten::_unsafe_view.default"] == "decomposed"  # decomposed on CUDA too
    assert p["aten::cudnn_batch_norm.default"] == "cuda-only"
    assert p["aten::pixel_shuffle.default"] == "unknown"  # unknown on CUDA already
    # Without the capturing device's status, decomposed and missing cannot be told apart.
    bare = xp.predict(["aten::linspace.default", "aten::_foreach_mul_.Scalar"], "2.4", upstream)
    assert bare == {"aten::linspace.default": "fallback", "aten::_foreach_mul_.Scalar": "unknown"}


def test_mixed_base_op_decided_by_overload(upstream: dict) -> None:
    e24 = upstream["series"]["2.4"]
    assert "random_.to" in e24["fallback"] and {"random_", "random_.from"} <= set(e24["native"])
    p = xp.predict({"aten::random_.default": "native", "aten::random_.from": "native",
                    "aten::random_.to": "native"}, "2.4", upstream)
    assert p == {"aten::random_.default": "native", "aten::random_.from": "native",
                 "aten::random_.to": "fallback"}


def test_stale_kernel_list_says_unknown_not_missing(upstream: dict) -> None:
    assert upstream["series"]["2.14"]["native_commit"] != upstream["series"]["2.14"]["commit"]
    fake = {"series": {"2.13": {"commit": "a", "native": [], "fallback": []},
                       "2.14": {"commit": "b", "native_commit": "a", "native": [],
                                "fallback": []}}}
    core = {"native": [], "composite": []}
    captured = {"aten::some_op.default": {"status": "native"}}
    assert xp.predict(captured, "2.13", fake, core) == {"aten::some_op.default": "missing"}
    assert xp.predict(captured, "2.14", fake, core) == {"aten::some_op.default": "unknown"}


def test_predict_all_and_stopped_falling_back(capture: dict, upstream: dict) -> None:
    preds = xp.predict_all(capture, upstream)
    assert list(preds) == xp.series_names(upstream)
    assert list(preds)[:2] == ["2.4", "2.5"] and list(preds)[-1] == "2.14"
    assert set(preds["2.13"]) == set(capture["ops"])
    assert "fallback" not in preds["2.13"].values()
    fixed = xp.stopped_falling_back(preds)
    assert fixed["aten::_cdist_forward.default"] == "2.5"
    assert fixed["aten::linspace.default"] == "2.6"
    assert fixed["aten::_foreach_mul_.Tensor"] == "2.6"
    assert fixed["aten::_foreach_mul_.Scalar"] == "2.5"
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
    assert len(seed["rows"]) == 32
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
    assert by_op["aten::roll"]["agree"] is None
    assert xp.agreement_line(rows) == "Agreement with the seed's table: 26 of 26 rows (100 %)"
    # On a later release the same calls disagree with the seed, for stated reasons.
    later = {r["op"]: r for r in xp.compare_with_seed(capture["ops"], "2.6", upstream)}
    assert later["aten::topk.values"]["reason"] == "kernel-in-series"
    assert later["aten::nll_loss2d_forward"]["reason"] == "kernel-in-series"


def test_agreement_line_format() -> None:
    rows = [{"agree": True}, {"agree": False}, {"agree": True}, {"agree": None}]
    line = xp.agreement_line(rows)
    assert line == "Agreement with the seed's table: 2 of 3 rows (67 %)"
    assert re.fullmatch(r"Agreement with the seed's table: \d+ of \d+ rows \(\d+ %\)", line)


def test_seed_series_is_the_best_match(upstream: dict) -> None:
    by_series = xp.seed_series_agreement(upstream)
    best = max(by_series, key=lambda s: by_series[s][0])
    assert best == xp.SEED_SERIES == "2.4"
    assert by_series["2.4"] == (32, 32)


# --- planted faults: the checks above must catch them --------------------------------

def _key_checks(upstream: dict) -> None:
    p24 = xp.predict({"aten::linspace.default": "decomposed", "aten::topk.default": "native",
                      "aten::lerp_.Scalar": "native"}, "2.4", upstream)
    assert p24 == {"aten::linspace.default": "fallback", "aten::topk.default": "fallback",
                   "aten::lerp_.Scalar": "fallback"}
    p25 = xp.predict({"aten::_foreach_mul_.Tensor": "native",
                      "aten::_foreach_mul_.Scalar": "native"}, "2.5", upstream)
    assert p25 == {"aten::_foreach_mul_.Tensor": "missing", "aten::_foreach_mul_.Scalar": "native"}


def test_key_checks_pass(upstream: dict) -> None:
    _key_checks(upstream)


@pytest.mark.parametrize("fault", [
    "exact names",  # matching without stripping overloads
    "no in-place mapping",
    "native by base op only",
])
def test_planted_faults_are_caught(fault: str, upstream: dict, monkeypatch) -> None:
    real = xp.base_op
    if fault == "exact names":
        monkeypatch.setattr(xp, "base_op", lambda n: n.removeprefix("aten::"))
    elif fault == "no in-place mapping":
        monkeypatch.setattr(xp, "base_op",
                            lambda n: n.removeprefix("aten::").split(".", 1)[0])
    else:
        monkeypatch.setattr(xp, "overload_family", lambda n: "default")
    assert real("aten::lerp_.Scalar") == "lerp"
    with pytest.raises(AssertionError):
        _key_checks(upstream)


# --- packaging and regeneration ---------------------------------------------------------

def test_data_files_ship_with_the_package() -> None:
    data = resources.files("accelgrid").joinpath("data")
    for name in ("xpu_ops.json", "xpu_core_ops.json", "seed_000_ops.json"):
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
    text = (ROOT / "docs" / "xpu-prediction.md").read_text()
    assert "Agreement with the seed's table: 31 of 31 rows (100 %)" in text


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
    from accelgrid.matrix import load_matrix

    assert xp.series_of("2.5.1+xpu") == "2.5" and xp.series_of("2.13.0") == "2.13"
    assert xp.series_of(None) is None and xp.series_of("nightly") is None
    cells = load_matrix(ROOT / "matrix.yaml").cells
    # 2.4 is the local-wheel cell (xpu builds of 2.4 exist only from source).
    assert xp.matrix_series(cells) == ["2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14"]


def test_choose_series(upstream: dict) -> None:
    from accelgrid.errors import InvalidInput

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
    assert notes == ["the matrix's xpu series 3.0 has no torch-xpu-ops data; left out"]
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
    assert check["branch"] == "release/2.6"
    assert check["disagreements"] == [{"op": "aten::linspace.default", "observed": "fallback",
                                       "predicted": "native"}]
    assert check["counts"] == {"agree": 1, "disagree": 1, "not_compared": 1}
