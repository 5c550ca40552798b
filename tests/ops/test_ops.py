"""Op coverage: parsers against the exact upstream messages (both forms), dispatcher
classification on this CPU torch, capture of a workload whose ops are known, and the
per-cell / cross-cell outputs from a real recorded run."""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from helpers.mini_projects import run_request  # noqa: E402
from helpers.report_cases import xpu_survey_cell  # noqa: E402

from accelgrid import ops  # noqa: E402
from accelgrid.commands import sessions  # noqa: E402
from accelgrid.config.matrix import load_matrix  # noqa: E402
from accelgrid.report import ops_pages  # noqa: E402
from accelgrid.run.cell import run_cell  # noqa: E402
from accelgrid.testing import opcapture  # noqa: E402

# Verbatim upstream texts (REFERENCE.md §2), in the forms they reach us.
XPU_DEBUG_WARNING = (
    "/opt/venv/lib/python3.11/site-packages/torch/nn/functional.py:2401: UserWarning: "
    "The operator 'aten::roll on the XPU backend is falling back to run on the CPU. "
    "(Triggered internally at /build/pytorch/third_party/torch-xpu-ops/src/ATen/native/xpu/"
    "XPUFallback.template:25.)")
XPU_DEBUG_LOGLINE = (
    "[W1130 09:00:00.123456789 XPUFallback.template:25] Warning: The operator "
    "'aten::sigmoid_backward.grad_input on the XPU backend is falling back to run on the CPU. "
    "(function operator())")
XPU_ONCE = (
    "UserWarning: Aten Op fallback from XPU to CPU happends. This may have performance "
    "implications. If need debug the fallback ops please set environment variable "
    "`PYTORCH_DEBUG_XPU_FALLBACK=1`  (Triggered internally at XPUFallback.template:221.)")
XPU_NOT_IMPLEMENTED = (
    "NotImplementedError: The operator 'aten::nll_loss2d_forward' is not currently implemented "
    "for the XPU device. Please open a feature on https://github.com/intel/torch-xpu-ops/issues."
    " You can set the environment variable `PYTORCH_ENABLE_XPU_FALLBACK=1` to use the CPU "
    "implementation as a fallback for XPU unimplemented operators. WARNING: this will bring "
    "unexpected performance compared with running natively.")
XPU_FORCED = "The operator 'aten::_cdist_forward' registered to be forced to fallback to CPU."
MPS_WARNING = (
    "UserWarning: The operator 'aten::_cdist_forward' is not currently supported on the MPS "
    "backend and will fall back to run on the CPU. This may have performance implications. "
    "(Triggered internally at /Users/runner/work/pytorch/aten/src/ATen/mps/MPSFallback.mm:14.)")
MPS_NOT_IMPLEMENTED = (
    "NotImplementedError: The operator 'aten::_linalg_eigvals' is not currently implemented "
    "for the MPS device. If you want this op to be added in priority during the prototype "
    "phase of this feature, please comment on https://github.com/pytorch/pytorch/issues/77764.")


def test_parse_xpu_forms() -> None:
    found = ops_parse(XPU_DEBUG_WARNING, XPU_DEBUG_LOGLINE, XPU_FORCED)
    assert found["fallback"] == {"aten::roll", "aten::sigmoid_backward.grad_input",
                                 "aten::_cdist_forward"}
    assert ops_parse(XPU_ONCE)["generic_fallback"] == {"xpu"}
    assert ops_parse(XPU_ONCE)["fallback"] == set()
    assert ops_parse(XPU_NOT_IMPLEMENTED)["missing"] == {"aten::nll_loss2d_forward"}


def test_parse_mps_forms() -> None:
    assert ops_parse(MPS_WARNING)["fallback"] == {"aten::_cdist_forward"}
    assert ops_parse(MPS_NOT_IMPLEMENTED)["missing"] == {"aten::_linalg_eigvals"}
    assert ops_parse("The operator 'aten::roll' is fine")["fallback"] == set()


def ops_parse(*texts: str) -> dict[str, set[str]]:
    return opcapture.parse_messages("\n".join(texts))


def test_dispatcher_classification_on_cpu() -> None:
    nothing: set[str] = set()
    assert opcapture.classify_op("aten::addmm.default", "cpu", nothing, nothing) == "native"
    assert opcapture.classify_op("aten::linear.default", "cpu", nothing, nothing) == "decomposed"
    # Only a composite wrapper, no backend kernel anywhere: decomposed on every device.
    assert opcapture.classify_op("aten::diagonal_copy.default", "xpu", nothing, nothing) == \
        "decomposed"
    assert opcapture.classify_op("aten::roll.default", "xpu", {"aten::roll"}, nothing) == "fallback"
    assert opcapture.classify_op("aten::nll_loss2d_forward.default", "xpu", nothing,
                              {"aten::nll_loss2d_forward"}) == "missing"
    if not torch.cuda.is_available():  # a CPU build registers no CUDA kernels
        assert opcapture.classify_op("aten::addmm.default", "cuda", nothing, nothing) == "unknown"


def _train_step(model, opt, x):
    loss = torch.relu(model(x)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def test_capture_known_workload_and_results_unchanged() -> None:
    def run(capture: bool):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        x = torch.randn(5, 4)
        if not capture:
            return _train_step(model, opt, x), model.weight.detach().clone(), None
        with opcapture.OpCapture("cpu") as cap:
            loss = _train_step(model, opt, x)
        return loss, model.weight.detach().clone(), cap.report()

    plain_loss, plain_w, _ = run(False)
    loss, w, report = run(True)
    assert torch.equal(loss, plain_loss) and torch.equal(w, plain_w)
    got = report["ops"]
    assert got["aten::addmm.default"]["phases"] == {"forward": 1}
    assert got["aten::relu.default"]["phases"] == {"forward": 1}
    assert got["aten::threshold_backward.default"]["phases"] == {"backward": 1}
    assert "optimizer" in got["aten::add_.Tensor"]["phases"]  # SGD's p.add_(grad, -lr)
    assert got["aten::addmm.default"]["status"] == "native"


def test_capture_sees_both_message_forms() -> None:
    with opcapture.OpCapture("cpu") as cap:  # roll runs on this host's CPU
        warnings.warn(XPU_DEBUG_WARNING.split("UserWarning: ", 1)[1], UserWarning, stacklevel=1)

        def c10_log_line() -> None:  # as from an autograd thread, straight to fd 2
            os.write(2, (XPU_DEBUG_LOGLINE + "\n").encode())

        t = threading.Thread(target=c10_log_line)
        t.start()
        t.join()
        torch.roll(torch.arange(4), 1)
    report = cap.report()
    assert set(report["fallback_seen"]) == {"aten::roll", "aten::sigmoid_backward.grad_input"}
    assert report["ops"]["aten::roll.default"]["status"] == "fallback"


PAYLOAD = '''
import pytest, torch

@pytest.mark.parametrize("wl", ["mlp", "conv"])
def test_workload(wl, device):
    torch.manual_seed(0)
    if wl == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        x = torch.randn(4, 8)
    else:
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(),
                                    torch.nn.Linear(8, 2))
        x = torch.randn(4, 1, 4, 4)
    opt = torch.optim.AdamW(model.parameters())
    torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 0, 1])).backward()
    opt.step()
'''


def test_recorded_run_builds_ops_json_and_grids(mini_project, python, tmp_path: Path,
                                                monkeypatch) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_wl.py").write_text(PAYLOAD)
    monkeypatch.setenv("ACCELGRID_CAPTURE_OPS", "1")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, proj / "results",
                                finalized=sessions.write_op_pages)) == 0
    folder = proj / "results" / "cpu-2.13"
    data = json.loads((folder / "ops.json").read_text())
    assert data["workloads"] == ["conv", "mlp"]
    assert data["ops"]["aten::convolution.default"]["workloads"] == {"conv": 1}
    assert set(data["ops"]["aten::addmm.default"]["workloads"]) == {"conv", "mlp"}
    assert data["ops"]["aten::addmm.default"]["status"] == "native"
    md = (folder / "ops.md").read_text()
    assert "| op | status | conv | mlp |" in md
    # A second "cell" where an op used to fall back shows when it stopped.
    older = json.loads(json.dumps(data))
    older["cell"], older["torch"] = "cpu-2.4", "2.4.1"
    older["ops"]["aten::addmm.default"]["status"] = "fallback"
    view = ops.cross_cell([older, data])
    assert view["cells"] == ["cpu-2.4", "cpu-2.13"]
    assert view["stopped_falling_back"]["aten::addmm.default"] == {"cpu": data["torch"]}
    assert "| `aten::addmm.default` | fallback | native |" in ops_pages.cross_markdown(view)


# Verbatim fallback lines as torch-xpu-ops prints them with PYTORCH_DEBUG_XPU_FALLBACK=1
# (XPUFallback.template line 17 on release/2.5; kernel names from its fallback lists), next
# to the names a dispatch mode captures for the same calls (docs/cuda/ops-cuda-2.11.json).
def _xpu_line(kernel: str) -> str:
    return (f"[W0612 10:00:00.000000000 XPUFallback.template:17] Warning: The operator "
            f"'aten::{kernel} on the XPU backend is falling back to run on the CPU. "
            "(function operator())")


FALLBACK_VS_CAPTURED = [
    ("linspace.out", "aten::linspace.default"),  # forward
    ("topk.values", "aten::topk.default"),
    ("sigmoid.out", "aten::sigmoid.default"),
    ("all.all_out", "aten::all.default"),
    ("upsample_bilinear2d_backward.grad_input",  # backward
     "aten::upsample_bilinear2d_backward.default"),
    ("sigmoid_backward.grad_input", "aten::sigmoid_backward.default"),
    ("lerp.Scalar_out", "aten::lerp_.Scalar"),  # optimizer (single-tensor Adam's lerp_)
]


@pytest.mark.parametrize(("kernel", "captured"), FALLBACK_VS_CAPTURED)
def test_fallback_message_matches_captured_call_by_base_op(kernel: str, captured: str) -> None:
    seen = ops_parse(_xpu_line(kernel))
    assert seen["fallback"] == {f"aten::{kernel}"}
    # The exact names differ: a name-for-name comparison can never match these.
    assert captured not in seen["fallback"]
    assert opcapture.classify_op(captured, "xpu", seen["fallback"], set()) == "fallback"


def test_base_op_forms() -> None:
    assert opcapture.base_op("aten::linspace.out") == "linspace"
    assert opcapture.base_op("aten::upsample_bilinear2d_backward.grad_input") == \
        "upsample_bilinear2d_backward"
    assert opcapture.base_op("aten::lerp.Scalar_out") == opcapture.base_op("lerp_.Scalar")
    assert opcapture.base_op("aten::_foreach_mul_.Scalar") == "_foreach_mul"
    assert opcapture.base_op("_foreach_mul") == "_foreach_mul"  # leading "_" is not in-place
    assert opcapture.base_op("aten::__rshift__.Scalar") == "__rshift__"
    assert opcapture.base_op("cauchy_") == opcapture.base_op("aten::cauchy_.default") == "cauchy"
    assert opcapture.overload_family("aten::lerp.Scalar_out") == "Scalar"
    assert opcapture.overload_family("aten::lerp_.Scalar") == "Scalar"
    assert opcapture.overload_family("aten::linspace.out") == "default"
    assert opcapture.overload_family("aten::_foreach_mul_.Tensor") == "Tensor"


def test_optimizer_fallback_does_not_leak_to_foreach_ops() -> None:
    fallback = ops_parse(_xpu_line("lerp.Scalar_out"))["fallback"]
    parsed = ops_parse(XPU_NOT_IMPLEMENTED.replace("nll_loss2d_forward", "_foreach_lerp_.Scalar"))
    missing = parsed["missing"]
    assert missing == {"aten::_foreach_lerp_.Scalar"}
    assert opcapture.classify_op("aten::_foreach_lerp_.Scalar", "xpu", fallback,
                                 missing) == "missing"
    assert opcapture.classify_op("aten::lerp_.Scalar", "xpu", fallback, missing) == "fallback"
    # An unrelated op keeps the dispatcher's answer.
    assert opcapture.classify_op("aten::addmm.default", "cpu", fallback, missing) == "native"


def test_xpu_fallback_beats_the_dispatcher() -> None:
    # On this CPU build roll has a CPU kernel; on XPU the dispatcher says True for ops on
    # torch-xpu-ops' list too. A fallback message must win over "native" either way.
    nothing: set[str] = set()
    assert opcapture.classify_op("aten::roll.default", "cpu", nothing, nothing) == "native"
    assert opcapture.classify_op("aten::roll.default", "cpu", {"aten::roll"}, nothing) == "fallback"
    assert opcapture.classify_op("aten::sigmoid.default", "xpu",
                              {"aten::sigmoid.out"}, nothing) == "fallback"


def test_report_keeps_one_row_per_called_op() -> None:
    with opcapture.OpCapture("cpu") as cap:
        torch.linspace(0, 1, 5)
        torch.topk(torch.arange(5.0), 2)
        os.write(2, (_xpu_line("linspace.out") + "\n").encode())
        cap.note_exception(NotImplementedError(
            XPU_NOT_IMPLEMENTED.split(": ", 1)[1].replace("nll_loss2d_forward", "topk.values")))
    report = cap.report()
    assert report["ops"]["aten::linspace.default"]["status"] == "fallback"
    assert report["ops"]["aten::topk.default"]["status"] == "missing"
    # The kernels the messages name are not extra rows: the program called the op above.
    assert "aten::linspace.out" not in report["ops"]
    assert "aten::topk.values" not in report["ops"]


# --- what the messages said reaches ops.json -------------------------------------------

def _has_kernel_on(registered: set[str]):
    """The dispatcher as an XPU build answers it: kernels on the XPU key for the names in
    ``registered`` (torch-xpu-ops registers its fallback list op by op there), the real
    answer of this CPU build for any other key. Only the XPU answers are simulated."""
    real = torch._C._dispatch_has_kernel_for_dispatch_key

    def has(name: str, key: str) -> bool:
        if key == "XPU":
            return name in registered
        return real(name, key)

    return has


def test_unimplemented_fallbacks_need_the_flag_and_no_device_kernel(monkeypatch) -> None:
    seen = ops_parse(_xpu_line("linspace.out"), _xpu_line("_foreach_mul_.Tensor"))["fallback"]
    assert seen == {"aten::linspace.out", "aten::_foreach_mul_.Tensor"}
    # release/2.5 lists linspace.out (a per-op XPU registration); _foreach_mul_.Tensor has
    # neither a kernel nor an entry there: it reaches the catch-all fallback.
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                        _has_kernel_on({"aten::linspace.out"}))
    on = {"PYTORCH_ENABLE_XPU_FALLBACK": "1"}
    assert opcapture.unimplemented_fallbacks(seen, "xpu", on) == {"aten::_foreach_mul_.Tensor"}
    assert opcapture.unimplemented_fallbacks(seen, "xpu", {}) == set()
    assert opcapture.unimplemented_fallbacks(
        seen, "xpu", {"PYTORCH_ENABLE_XPU_FALLBACK": "0"}) == set()
    assert opcapture.unimplemented_fallbacks(seen, "cuda", on) == set()  # no such flag
    assert opcapture.flag_on("1") and opcapture.flag_on(" 2 ")
    assert not opcapture.flag_on("0") and not opcapture.flag_on("yes") and \
        not opcapture.flag_on(None)


def test_report_says_missing_but_fell_back(monkeypatch) -> None:
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                        _has_kernel_on({"aten::linspace.out"}))
    monkeypatch.setenv("PYTORCH_ENABLE_XPU_FALLBACK", "1")
    with opcapture.OpCapture("xpu") as cap:  # no XPU here: the calls below are host calls
        torch.linspace(0, 1, 5)
        os.write(2, (_xpu_line("linspace.out") + "\n").encode())
        os.write(2, (_xpu_line("_foreach_mul_.Tensor") + "\n").encode())
    report = cap.report()
    assert report["fallback_seen"] == ["aten::_foreach_mul_.Tensor", "aten::linspace.out"]
    assert report["missing_fell_back"] == ["aten::_foreach_mul_.Tensor"]
    assert report["missing"] == []  # nothing raised
    # Named by messages only (the host calls are not the device's): rows of their own.
    assert report["ops"]["aten::_foreach_mul_.Tensor"] == {"count": 0, "phases": {},
                                                          "status": "missing"}
    assert report["ops"]["aten::linspace.out"]["status"] == "fallback"
    assert report["host_calls"] >= 1


def test_aggregate_keeps_fallback_seen_and_both_kinds_of_missing(tmp_path: Path) -> None:
    data = ops.aggregate(xpu_survey_cell(tmp_path))
    assert data is not None
    lin = data["ops"]["aten::linspace.default"]
    assert lin["status"] == "fallback"
    assert lin["fallback_seen"] == {"aten::linspace.out": ["instance-segmentation",
                                                           "semantic-segmentation"]}
    fm = data["ops"]["aten::_foreach_mul_.Tensor"]
    assert fm["missing_fell_back"] == {"aten::_foreach_mul_.Tensor": ["instance-segmentation"]}
    assert ops.missing_how(fm) == "fell-back"
    nll = data["ops"]["aten::nll_loss2d_forward.default"]
    assert nll["missing_seen"] == {"aten::nll_loss2d_forward": ["semantic-segmentation"]}
    assert ops.missing_how(nll) == "not-implemented"
    assert ops.missing_how(data["ops"]["aten::addmm.default"]) is None
    assert "fallback_seen" not in data["ops"]["aten::addmm.default"]
    assert data["fallback_seen"] == [
        {"kernel": "aten::_foreach_mul_.Tensor", "ops": ["aten::_foreach_mul_.Tensor"],
         "workloads": ["instance-segmentation"], "missing_fell_back": True},
        {"kernel": "aten::linspace.out", "ops": ["aten::linspace.default"],
         "workloads": ["instance-segmentation", "semantic-segmentation"],
         "missing_fell_back": False}]
    assert data["missing"] == [
        {"op": "aten::_foreach_mul_.Tensor", "how": "fell-back",
         "ops": ["aten::_foreach_mul_.Tensor"], "workloads": ["instance-segmentation"]},
        {"op": "aten::nll_loss2d_forward", "how": "not-implemented",
         "ops": ["aten::nll_loss2d_forward.default"], "workloads": ["semantic-segmentation"]}]
    md = ops_pages.cell_markdown(data)
    assert "2 missing, 1 fallback, 1 native (of the missing, 1 fell back)" in md
    assert "| op | status | messages named | instance-segmentation | semantic-segmentation |" in md
    assert ("| `aten::_foreach_mul_.Tensor` | missing (fell back) | "
            "aten::_foreach_mul_.Tensor | 2 |  |") in md
    assert "| `aten::linspace.default` | fallback | aten::linspace.out | 2 | 2 |" in md
    assert "| `aten::nll_loss2d_forward.default` | missing (not implemented) |" in md
    assert ("| `aten::linspace.out` | registered fallback | aten::linspace.default | "
            "instance-segmentation, semantic-segmentation |") in md
    assert ("| `aten::_foreach_mul_.Tensor` | missing, fell back | "
            "aten::_foreach_mul_.Tensor | instance-segmentation |") in md
    assert ("| `aten::nll_loss2d_forward` | not implemented | "
            "aten::nll_loss2d_forward.default | semantic-segmentation |") in md


XPU_MESSAGE_PAYLOAD = '''
import os, pytest, torch

# A CPU run prints no XPU fallback message: this test writes one verbatim, as
# torch-xpu-ops does with PYTORCH_DEBUG_XPU_FALLBACK=1, to fd 2 (where c10 logs go).
LINE = ("[W0612 10:00:00.000000000 XPUFallback.template:17] Warning: The operator "
        "'aten::linspace.out on the XPU backend is falling back to run on the CPU. "
        "(function operator())")

@pytest.mark.parametrize("wl", ["mlp", "grid"])
def test_workload(wl, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sigmoid(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    x = torch.randn(4, 8)
    if wl == "grid":
        x = x + torch.linspace(0, 1, 8)
        os.write(2, (LINE + "\\n").encode())
    torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 0, 1])).backward()
    opt.step()
'''


def test_recorded_cpu_run_feeds_ops_predict(mini_project, python, tmp_path: Path,
                                            monkeypatch, capsys) -> None:
    from accelgrid.cli import main

    proj = mini_project()
    (proj / "suites" / "payload" / "test_wl.py").write_text(XPU_MESSAGE_PAYLOAD)
    monkeypatch.setenv("ACCELGRID_CAPTURE_OPS", "1")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    assert run_cell(run_request(cell, python, proj, proj / "results",
                                finalized=sessions.write_op_pages)) == 0
    folder = proj / "results" / "cpu-2.13"
    data = json.loads((folder / "ops.json").read_text())
    # The message reached ops.json through the plugin, next to the call it matched.
    lin = data["ops"]["aten::linspace.default"]
    assert lin["status"] == "fallback"
    assert lin["fallback_seen"] == {"aten::linspace.out": ["grid"]}
    assert data["fallback_seen"] == [{"kernel": "aten::linspace.out",
                                      "ops": ["aten::linspace.default"], "workloads": ["grid"],
                                      "missing_fell_back": False}]
    assert "| `aten::linspace.default` | fallback | aten::linspace.out |" in \
        (folder / "ops.md").read_text()
    # (Before the capture ran inside pytest's own fd capture, lines written to fd 2 were lost.)

    # The real capture, fed to the command: every series in the data.
    capsys.readouterr()
    assert main(["ops", "predict", str(folder), "--all-series"]) == 0
    out = capsys.readouterr().out.splitlines()
    n = len(data["ops"])
    assert out[0] == f"captured: {folder}: cpu-2.13 (cpu, torch {data['torch']}), {n} ops"
    assert [line.split(" ", 2)[1] for line in out[1:12]] == [f"2.{m}" for m in range(4, 15)]
    doc = json.loads((folder / "ops-predicted.json").read_text())  # beside the input
    assert doc["series"] == [f"2.{m}" for m in range(4, 15)]
    for s, counts in doc["counts"].items():
        assert sum(counts.values()) == n, s
        assert out[1 + doc["series"].index(s)] == (
            f"xpu {s} (release/{s}): " + ", ".join(f"{counts[k]} {k}" for k in counts))
    pred = {op: e["predicted"] for op, e in doc["ops"].items()}
    # Upstream facts (release/2.4's fallback list: linspace.out, sigmoid.out, lerp.Scalar_out;
    # 2.5 implements sigmoid and lerp, 2.6 linspace).
    assert pred["aten::linspace.default"]["2.4"] == pred["aten::linspace.default"]["2.5"] \
        == "fallback"
    # From 2.6 linspace.out has an XPU kernel; linspace.default is its composite.
    assert pred["aten::linspace.default"]["2.6"] == "decomposed"
    assert pred["aten::sigmoid.default"]["2.4"] == "fallback"
    assert pred["aten::sigmoid.default"]["2.5"] == "native"
    assert pred["aten::lerp_.Scalar"]["2.4"] == "fallback"
    assert pred["aten::addmm.default"]["2.4"] == "native"
    assert doc["stopped_falling_back"]["aten::linspace.default"] == "2.6"
    assert doc["stopped_falling_back"]["aten::lerp_.Scalar"] == "2.5"
    assert doc["seed"]["agreement"].startswith("Agreement with the seed's table: ")
    md = (folder / "ops-predicted.md").read_text()
    assert "| `aten::linspace.default` | fallback | fallback | decomposed |" in md


# --- the capture's parts no other test reaches (docs/design/mutation.md, opcapture) ---------------

def test_a_forced_fallback_names_the_op_as_the_user_wrote_it() -> None:
    """torch-xpu-ops (src/ATen/native/xpu/XPUFallback.template) warns "The operator '<op>'
    registered to be forced to fallback to CPU." with <op> as written in
    PYTORCH_XPU_FALLBACK_OP, registered in its aten library: its own example is
    ``abs.out,div.Scalar``. Both spellings are the same aten kernel."""
    bare = "The operator 'abs.out' registered to be forced to fallback to CPU."
    qualified = "The operator 'aten::div.Scalar' registered to be forced to fallback to CPU."
    assert ops_parse(bare, qualified)["fallback"] == {"aten::abs.out", "aten::div.Scalar"}
    assert opcapture.classify_op("aten::abs.default", "xpu",
                              ops_parse(bare)["fallback"], set()) == "fallback"


@pytest.mark.parametrize("op", ["aten::zeros_like.default", "aten::linspace.default",
                                "aten::full_like.default"])
@pytest.mark.parametrize("device", ["cpu", "xpu"])
def test_composite_explicit_kernels_are_decomposed(op: str, device: str) -> None:
    """native_functions.yaml gives zeros_like, linspace (the functional overload; its
    ``.out`` has CPU/CUDA kernels) and full_like only a ``CompositeExplicitAutograd``
    kernel: written in other ops, it runs on any device, so no device kernel is needed."""
    nothing: set[str] = set()
    assert opcapture.classify_op(op, device, nothing, nothing) == "decomposed"
    assert opcapture.classify_op("aten::linspace.out", "cpu", nothing, nothing) == "native"


def test_an_op_after_the_optimizer_step_is_not_an_optimizer_op() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x = torch.randn(5, 4)
    with opcapture.OpCapture("cpu") as cap:
        _train_step(model, opt, x)
        model(x)  # the next forward (an eval, a logging pass) after the step
    phases = cap.report()["ops"]["aten::addmm.default"]["phases"]
    assert phases == {"forward": 2}


def test_captures_one_after_another_add_no_optimizer_hooks() -> None:
    """The phase hooks are global (every optimizer step of the process runs them): one
    pair for the process, not one more per capture (a runner captures per workload)."""
    from torch.optim import optimizer

    with opcapture.OpCapture("cpu"):
        pass
    before = (len(optimizer._global_optimizer_pre_hooks),
              len(optimizer._global_optimizer_post_hooks))
    for _ in range(2):
        with opcapture.OpCapture("cpu"):
            pass
    assert (len(optimizer._global_optimizer_pre_hooks),
            len(optimizer._global_optimizer_post_hooks)) == before


def test_an_op_runs_where_its_first_tensor_is() -> None:
    """On ``meta`` (not the CPU, available everywhere): an op on a meta tensor is the
    device's, the same op on a CPU tensor is host-side work."""
    a = torch.ones(3, device="meta")
    with opcapture.OpCapture("meta") as cap:
        torch.add(a, a)
        torch.sub(torch.ones(2), 1)
    report = cap.report()
    assert report["ops"]["aten::add.Tensor"]["count"] == 1
    assert "aten::sub.Tensor" not in report["ops"]
    assert report["host_calls"] == 2  # ones and sub on the CPU


def test_the_capture_still_shows_stderr_and_gives_fd_2_back(capfd) -> None:
    line = _xpu_line("linspace.out")
    with opcapture.OpCapture("cpu") as cap:
        os.write(2, (line + "\n").encode())
    os.write(2, b"after the capture\n")
    err = capfd.readouterr().err
    assert line in err  # copied into the log and still shown
    assert "after the capture" in err
    assert cap.report()["fallback_seen"] == ["aten::linspace.out"]


def test_a_workload_that_raises_inside_the_capture_is_classified_by_its_error() -> None:
    """The workload's NotImplementedError leaves the ``with`` block: its text (the verbatim
    upstream message, REFERENCE.md section 2) is what says the op is missing."""
    with pytest.raises(NotImplementedError):
        with opcapture.OpCapture("cpu") as cap:
            torch.ones(2)
            raise NotImplementedError(XPU_NOT_IMPLEMENTED.split(": ", 1)[1])
    report = cap.report()
    assert report["missing"] == ["aten::nll_loss2d_forward"]
    assert report["ops"]["aten::nll_loss2d_forward.default"]["status"] == "missing"


def test_ops_outside_aten_are_not_rows() -> None:
    """torch.profiler.record_function (HF Trainer, torch.profiler users) dispatches
    ``profiler::_record_function_enter_new``: not a device kernel, and not in the aten
    registries a row is predicted from."""
    with opcapture.OpCapture("cpu") as cap:
        with torch.profiler.record_function("step"):
            torch.ones(2) * 2
    assert set(cap.report()["ops"]) == {"aten::ones.default", "aten::mul.Tensor"}


@pytest.mark.parametrize("opts_out", [True, False], ids=["capture", "plant-default-mode"])
def test_a_fullgraph_compile_runs_under_capture(monkeypatch, opts_out: bool) -> None:
    """torchao's low-bit optimizers compile their step with fullgraph=True: under a mode
    that keeps TorchDispatchMode's default, dynamo skips the frame and the compile raises
    (every optimizer test failed so in the op-capture cell). The capture's mode opts out
    of compile internals: the compiled graph runs, its calls counted as it runs them. The
    plant: the same mode with the default back fails as the cell did."""
    import torch._dynamo

    if not opts_out:
        made = opcapture._make_mode_class

        def default_mode() -> type:
            base: Any = made()  # a class made at run time

            class Default(base):
                @classmethod
                def ignore_compile_internals(cls) -> bool:
                    return False
            return Default
        monkeypatch.setattr(opcapture, "_make_mode_class", default_mode)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    x = torch.randn(4)
    with opcapture.OpCapture("cpu") as cap:
        if not opts_out:
            with pytest.raises(RuntimeError, match="found no compiled frames"):
                compiled(x)
            return
        y = compiled(x)
    assert torch.equal(y, step(x))
    assert {"aten::relu.default", "aten::mul.Tensor"} <= set(cap.report()["ops"])


def test_a_step_that_raised_leaves_no_optimizer_phase_behind() -> None:
    # Seen in the op-capture cell: after the low-bit optimizers' steps raised, the next
    # tests' _scaled_mm and _grouped_mm were counted as optimizer ops.
    sgd: Any = torch.optim.SGD  # torch is importorskip's value here, not a module mypy reads

    class Raising(sgd):
        def step(self, closure=None):  # noqa: ANN001, ANN201 (Optimizer.step's signature)
            raise RuntimeError("the step fails")

    opt = Raising([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    with opcapture.OpCapture("cpu"), pytest.raises(RuntimeError, match="the step fails"):
        opt.step()
    with opcapture.OpCapture("cpu") as cap:
        torch.relu(torch.ones(2))
    assert cap.report()["ops"]["aten::relu.default"]["phases"] == {"forward": 1}
