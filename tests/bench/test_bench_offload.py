"""``accelgrid bench offload`` on a host without CUDA/XPU: argument checks, the exit code
when it cannot run, the model and torchao import from the offload suite's helpers, the
Markdown table, and the whole run on the CPU with stand-ins for the device-only parts."""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from accelgrid.base.errors import InvalidInput
from accelgrid.bench import offload, offload_measure
from accelgrid.cli import main
from accelgrid.config.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "offload"
MATRIX = str(ROOT / "matrix.yaml")


# --- arguments -----------------------------------------------------------------------

def test_lists_and_sizes_are_parsed_and_checked() -> None:
    assert offload.split_list(" fp32, bf16 ,", tuple(offload.DTYPES), "dtypes") == ["fp32",
                                                                                    "bf16"]
    assert offload.parse_sizes("0.1,1,2.5") == [0.1, 1.0, 2.5]
    with pytest.raises(InvalidInput, match=r"bad --dtypes 'fp16'; choose from fp32, bf16"):
        offload.split_list("fp16", tuple(offload.DTYPES), "dtypes")
    with pytest.raises(InvalidInput, match="bad --modes ','"):
        offload.split_list(",", offload.MODES, "modes")
    for bad in ("0", "-1", "abc", "nan", "inf", ""):
        with pytest.raises(InvalidInput, match="bad --sizes"):
            offload.parse_sizes(bad)


@pytest.mark.parametrize(("argv", "message"), [
    (["--dtypes", "fp16"], "bad --dtypes 'fp16'"),
    (["--modes", "none,bogus"], "bad --modes 'none,bogus'"),
    (["--sizes", "0.1,0"], "bad --sizes '0.1,0'"),
    (["--steps", "0"], "--steps must be >= 1, not 0"),
    (["--warmup", "-1", "--width", "0"], "--warmup must be >= 0, not -1; --width must be >= 1"),
])
def test_bad_options_exit_2(argv: list[str], message: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "offload", "--matrix", MATRIX, *argv]) == 2
    assert message in capsys.readouterr().err


def test_each_measurements_process_calls_measure_task() -> None:
    """run's default target names offload_measure.measure_task by string (that module
    imports offload): it resolves, without importing torch."""
    module, _, name = offload.MEASURE_TASK.partition(":")
    assert getattr(importlib.import_module(module), name) is offload_measure.measure_task


def test_arguments_are_checked_before_anything_is_imported(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--steps must be >= 1"):
        offload.run([1.0], ["fp32"], ["none"], suite=tmp_path / "nowhere", steps=0)
    with pytest.raises(InvalidInput, match="bad --device 'tpu'"):
        offload.run([1.0], ["fp32"], ["none"], suite=tmp_path / "nowhere", device="tpu")


# --- cannot run here -----------------------------------------------------------------

def _has_accelerator() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def test_no_cuda_or_xpu_device_exits_2(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    if _has_accelerator():
        pytest.skip("this host has a CUDA/XPU device")
    out = tmp_path / "out"
    assert main(["bench", "offload", "--matrix", MATRIX, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA or XPU device" in err and "pytorch/ao/issues/958" in err
    assert main(["bench", "offload", "--matrix", MATRIX, "--device", "cuda"]) == 2
    assert "--device cuda requested but torch" in capsys.readouterr().err
    assert not out.exists()


def test_pick_device_follows_torchao() -> None:
    helpers = offload.suite_helpers(SUITE)

    def fake_torch(cuda: bool, xpu: bool | None) -> Any:
        t = types.SimpleNamespace(__version__="9.9",
                                  cuda=types.SimpleNamespace(is_available=lambda: cuda))
        if xpu is not None:
            t.xpu = types.SimpleNamespace(is_available=lambda: xpu)
        return t

    assert offload.pick_device(fake_torch(True, True), "auto", helpers) == ("cuda", "")
    assert offload.pick_device(fake_torch(False, True), "auto", helpers) == ("xpu", "")
    assert offload.pick_device(fake_torch(False, True), "xpu", helpers) == ("xpu", "")
    device, why = offload.pick_device(fake_torch(False, None), "auto", helpers)
    assert device is None and helpers.AO_958 in why
    device, why = offload.pick_device(fake_torch(False, False), "cuda", helpers)
    assert device is None and why == "--device cuda requested but torch 9.9 sees none"


# --- the suite's helpers ---------------------------------------------------------------

def test_suite_dir_is_the_matrix_offload_suite() -> None:
    assert offload.suite_dir(load_matrix(MATRIX)) == SUITE
    # A matrix without an offload suite: suites/offload beside it.
    assert offload.suite_dir(load_matrix(TESTS / "base_matrix.yaml")) == TESTS / "suites" / \
        "offload"


def test_suite_helpers_load_by_path_once(tmp_path: Path) -> None:
    helpers = offload.suite_helpers(SUITE)
    assert helpers.__file__ is not None
    assert Path(helpers.__file__) == SUITE / "offload_helpers.py"
    assert offload.suite_helpers(SUITE) is helpers
    assert not hasattr(helpers, "SUPPORTED_DEVICES")   # the device types say (offload)
    assert "offload_helpers" not in sys.modules or sys.modules["offload_helpers"] is not helpers
    with pytest.raises(InvalidInput, match="offload_helpers.py: no such file"):
        offload.suite_helpers(tmp_path)


def test_bench_model_is_the_wide_linear_stack_it_was() -> None:
    torch = pytest.importorskip("torch")
    helpers = offload.suite_helpers(SUITE)

    def former(width: int, depth: int, dtype: Any) -> Any:  # bench_offload._build_model
        layers = [torch.nn.Linear(width, width, bias=False, dtype=dtype) for _ in range(depth)]
        with torch.no_grad():
            for layer in layers:
                layer.weight.normal_(0.0, width**-0.5)
        return torch.nn.Sequential(*layers)

    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = helpers.bench_mlp(256, 3, "cpu", dtype)
        torch.manual_seed(0)
        ref = former(256, 3, dtype)
        assert len(model) == 3
        for got, want in zip(model, ref, strict=True):
            assert got.bias is None and got.weight.shape == (256, 256)
            assert got.weight.dtype == dtype and torch.equal(got.weight, want.weight)
    torch.manual_seed(0)
    weight = helpers.bench_mlp(512, 1, "cpu")[0].weight
    assert abs(weight.std().item() - 512**-0.5) < 0.002


# --- the table and a whole run ----------------------------------------------------------

ROWS = [
    {"size_b": 0.1, "dtype": "fp32", "mode": "none", "layers": 6, "params": 100_663_296,
     "peak_gib": 2.0, "step_ms": 10.0, "bytes_each_way": 0, "floor_ms": 0.0,
     "step_over_floor": None},
    {"size_b": 0.1, "dtype": "fp32", "mode": "offload", "layers": 6, "params": 100_663_296,
     "peak_gib": 0.5, "step_ms": 40.0, "bytes_each_way": 402_653_184, "floor_ms": 15.0,
     "step_over_floor": 40 / 15},
    {"size_b": 1.0, "dtype": "bf16", "mode": "offload_grad", "layers": 60,
     "error": "OutOfMemoryError: CUDA out of memory"},
]


def test_markdown_table_from_rows() -> None:
    table = offload.markdown_table(ROWS)
    lines = table.splitlines()
    assert lines[0].startswith("| model | params | dtype | mode | flush | peak GiB | saving |")
    assert lines[2] == "| mlp | 0.101 B | fp32 | none | off | 2.00 | – | 10.0 | 0.00 | 0.0 | – " \
                       "| – | – | – |"  # no host RSS in these rows
    assert lines[3] == "| mlp | 0.101 B | fp32 | offload | off | 0.50 | 75% | 40.0 | 0.40 | 15.0 " \
                       "| 2.67 | – | – | – |"
    assert lines[4] == ("| mlp | ~1.0 B | bf16 | offload_grad | off | OutOfMemoryError: CUDA out "
                        "of memory |" + " |" * 7 + " – |")
    assert table.endswith("\n") and len(lines) == 5


class _StandInOffload:
    """CPUOffloadOptimizer's interface over the wrapped optimizer, for a CPU-only host."""

    def __init__(self, params: Any, optimizer_class: type, *, offload_gradients: bool = False,
                 minimal_size: int = 4096) -> None:
        self.inner = optimizer_class(params)

    def step(self) -> None:
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)


@pytest.fixture
def cpu_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run on the CPU: the device, its memory counters, the copy bandwidth and torchao's
    optimizer are stood in for; the model, the training steps and the outputs are real."""
    pytest.importorskip("torch")
    helpers = offload.suite_helpers(SUITE)
    monkeypatch.setattr(offload, "pick_device", lambda torch, wanted, h: ("cpu", ""))
    monkeypatch.setattr(helpers, "import_cpu_offload", lambda: _StandInOffload)
    monkeypatch.setitem(sys.modules, "torchao", types.SimpleNamespace(__version__="0.0-test"))
    counters = {"memory_allocated": 0, "max_memory_allocated": 3 * 2**20,
                "device_name": "stand-in"}
    monkeypatch.setattr(offload_measure, "dispatch", lambda name, device, *a: counters.get(name))
    monkeypatch.setattr(offload_measure, "measure_bandwidth", lambda torch, device, nbytes: {
        "h2d_gbps": 10.0, "d2h_gbps": 5.0, "copy_bytes": nbytes})
    # Stand-ins live in this process: each configuration's measurement runs here, not in
    # a process of its own (tests/run/test_faults.py tests that structure with real processes).
    monkeypatch.setattr(offload, "isolated",
                        lambda task, target: offload_measure.measure_task(task))


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_whole_run_on_cpu_with_stand_ins(cpu_stand_ins: None, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = offload.run([0.0001], ["fp32"], list(offload.MODES), suite=SUITE, steps=2,
                         warmup=1, width=64, tokens=8, copy_mib=1, out=tmp_path,
                         plot_png=False, models=["mlp"])
    assert not offload.failed(report)
    rows = report["results"]
    assert [r["mode"] for r in rows] == list(offload.MODES)
    for r in rows:
        assert r["layers"] == 24 and r["params"] == 24 * 64 * 64 and "error" not in r
        assert r["peak_gib"] == 3 / 1024 and r["step_ms"] > 0
    assert rows[0]["bytes_each_way"] == 0 and rows[0]["baseline"].startswith("AdamW(")
    moved = 24 * 64 * 64 * 4  # every weight has >= minimal_size elements; fp32
    assert rows[1]["bytes_each_way"] == rows[2]["bytes_each_way"] == moved
    assert rows[1]["floor_ms"] == pytest.approx((moved / 5e9 + moved / 10e9) * 1e3)
    saved = json.loads((tmp_path / "bench_offload.json").read_text())
    assert saved["meta"]["torchao"] == "0.0-test" and saved["meta"]["width"] == 64
    assert saved["results"] == rows
    md = (tmp_path / "bench_offload.md").read_text()
    assert md.startswith("torch ")
    assert "stand-in; pinned copies H2D 10.0 GB/s, D2H 5.0 GB/s" in md
    assert md.endswith(offload.markdown_table(rows))
    assert not (tmp_path / "bench_offload.png").exists()
    out = capsys.readouterr().out
    assert "[bench offload] [3/3] mlp 0.0001 B fp32 offload_grad:" in out


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_a_failed_run_is_reported_and_exits_1(cpu_stand_ins: None, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    helpers = offload.suite_helpers(SUITE)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of memory\nmore")

    monkeypatch.setattr(helpers, "import_cpu_offload", lambda: broken)
    rc = main(["bench", "offload", "--matrix", MATRIX, "--sizes", "0.0001", "--dtypes", "bf16",
               "--models", "mlp",
               "--steps", "1", "--warmup", "0", "--width", "64", "--tokens", "4",
               "--copy-mib", "1", "--no-plot", "--out", str(tmp_path)])
    assert rc == 1
    rows = json.loads((tmp_path / "bench_offload.json").read_text())["results"]
    assert "error" not in rows[0]
    assert rows[1]["error"] == rows[2]["error"] == "RuntimeError: out of memory"
