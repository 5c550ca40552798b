"""``accelgrid bench offload``'s models (transformer blocks, the plain stack, the GELU
stack), its denormal report and flush, and ``--cpu-adamw``, on the CPU with stand-ins for
the device-only parts."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from accelgrid.bench import offload, offload_cpu_adamw, offload_measure
from accelgrid.cli import main

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "offload"
MATRIX = str(ROOT / "matrix.yaml")

torch = pytest.importorskip("torch")


@pytest.fixture
def helpers() -> Any:
    return offload.suite_helpers(SUITE)


def test_models_are_the_suite_helpers_models(helpers: Any) -> None:
    assert offload.MODELS == helpers.BENCH_MODELS
    with pytest.raises(ValueError, match="unknown bench model 'cnn'"):
        helpers.bench_model("cnn", 64, 1, "cpu")


def test_transformer_blocks_have_layernorm_gelu_and_residuals(helpers: Any) -> None:
    torch.manual_seed(0)
    model = helpers.bench_model("transformer", 256, 2, "cpu")
    assert sum(p.numel() for p in model.parameters()) == 2 * helpers.bench_params_per_layer(
        "transformer", 256)
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"LayerNorm", "Linear", "TransformerBlock"} <= kinds
    x = helpers.bench_input("transformer", 1000, 256, "cpu")
    assert x.shape == (3, 256, 256)  # whole sequences of BENCH_SEQ tokens
    assert model(x).shape == x.shape
    # Residuals: with every projection zeroed a block passes its input through.
    with torch.no_grad():
        for block in model:
            block.proj.weight.zero_(), block.proj.bias.zero_()
            block.fc2.weight.zero_(), block.fc2.bias.zero_()
    assert torch.equal(model(x), x)
    # GELU: each block's MLP calls it once.
    calls: list[Any] = []
    real = torch.nn.functional.gelu

    def counted(t: Any) -> Any:
        calls.append(t.shape)
        return real(t)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.functional, "gelu", counted)
        model(x)
    assert calls == [(3, 256, 1024)] * 2


def test_mlp_gelu_is_a_bias_free_stack_with_gelus(helpers: Any) -> None:
    torch.manual_seed(0)
    plain = helpers.bench_model("mlp", 64, 3, "cpu")
    torch.manual_seed(0)
    gelu = helpers.bench_model("mlp-gelu", 64, 3, "cpu")
    assert [type(m).__name__ for m in gelu] == ["Linear", "GELU", "Linear", "GELU", "Linear"]
    linears = [m for m in gelu if isinstance(m, torch.nn.Linear)]
    assert all(m.bias is None for m in linears)
    # Linear's own init (about sqrt(3) smaller than the plain stack's std width**-0.5).
    ratio = (plain[0].weight.std() / linears[0].weight.std()).detach()
    assert 1.5 < float(ratio) < 2.0
    assert helpers.bench_input("mlp", 8, 64, "cpu").shape == (8, 64)
    out = torch.full((2, 3), 2.0)
    assert float(helpers.bench_loss("mlp-gelu", out)) == 4.0   # mean of squares
    assert float(helpers.bench_loss("mlp", out)) == 12.0       # the others: the sum


def test_mlp_gelu_widths_scale_with_the_size(helpers: Any) -> None:
    """The bench's sizes (and more): 16 layers from the reference width (2048) up, where
    15 x Linear(8192) was 84 % denormal on an H200; narrower stacks a layer more per
    step of larger gradients; batch 64 throughout. The other models keep width and batch."""
    sizes = (0.1, 0.5, 1.0, 4.0)
    shapes = [helpers.bench_shape("mlp-gelu", s, 4096, 1024) for s in sizes]
    assert shapes == [(2496, 16, 64), (5568, 16, 64), (7936, 16, 64), (15808, 16, 64)]
    for (width, depth, _), size in zip(shapes, sizes, strict=True):
        assert abs(depth * width**2 / (size * 1e9) - 1) < 0.05
    assert helpers.bench_shape("mlp", 1.0, 4096, 1024) == (4096, 60, 1024)
    # Measured on the CPU (offload_helpers' comment): 1024 x 16 91.5 %, 128 x 17 94.4 %,
    # both close to the gate: the rule gives each a layer more.
    assert [helpers.denormal_depth(w) for w in (65536, 8192, 2048, 2047, 1024, 512, 128)] == [
        16, 16, 16, 17, 17, 17, 18]


@pytest.mark.parametrize("size_b", [0.0002, 0.005])
def test_mlp_gelu_is_the_denormal_case_at_small_sizes(helpers: Any, size_b: float) -> None:
    """On the CPU at small sizes, as the bench builds it: its squared gradients are
    denormal; the plain stack's, and mlp-gelu's under a sum loss, are not."""
    width, depth, rows = helpers.bench_shape("mlp-gelu", size_b, 4096, 1024)

    def share(kind: str, loss_kind: str) -> float:
        torch.manual_seed(0)
        model = helpers.bench_model(kind, width, depth, "cpu")
        helpers.bench_loss(loss_kind, model(helpers.bench_input(kind, rows, width, "cpu"))
                           ).backward()
        return helpers.denormal_fraction([p.grad for p in model.parameters()], squared=True)

    assert share("mlp-gelu", "mlp-gelu") >= helpers.DENORMAL_MIN
    assert share("mlp", "mlp") < 0.01
    assert share("mlp-gelu", "mlp") < helpers.DENORMAL_MIN


def test_denormal_fraction_counts_bit_patterns(helpers: Any) -> None:
    g = torch.tensor([1e-20, 1e-3, 0.0, -1e-21, 1e-40, 1.0])
    assert helpers.denormal_fraction([g]) == pytest.approx(1 / 6)  # 1e-40
    assert helpers.denormal_fraction([g], squared=True) == pytest.approx(3 / 6)
    assert helpers.denormal_fraction([g.bfloat16()], squared=True) == pytest.approx(3 / 6)
    assert helpers.denormal_fraction([]) == 0.0
    try:  # what a flushing thread sees does not change the count
        helpers.flush_denormals(True)
        assert helpers.denormal_fraction([g]) == pytest.approx(1 / 6)
    finally:
        helpers.flush_denormals(False)


def test_flush_reaches_every_intra_op_thread(helpers: Any) -> None:
    """torch.set_flush_denormal in the calling thread covers only its share of a parallel
    op; flush_denormals covers every OpenMP thread, and turns it off again."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.set_flush_denormal(True)
        assert helpers.flushed_share() == pytest.approx(0.5)  # the calling thread's half
        done = helpers.flush_denormals(True)
        if done.method != "openmp-team":
            pytest.skip(f"no OpenMP runtime to reach the pool's threads ({done.method})")
        assert done.flushed_share == 1.0 and done.threads == 2
        assert helpers.flush_denormals(False).flushed_share == 0.0
    finally:
        helpers.flush_denormals(False)
        torch.set_num_threads(threads)


class _StandInOffload:
    """CPUOffloadOptimizer's interface and state-dict layout over one optimizer."""

    def __init__(self, params: Any, optimizer_class: type, *, offload_gradients: bool = False,
                 minimal_size: int = 4096) -> None:
        self.inner = optimizer_class(params)

    def step(self) -> None:
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"offloaded": [self.inner.state_dict()]}


@pytest.fixture
def cpu_stand_ins(monkeypatch: pytest.MonkeyPatch, helpers: Any) -> None:
    monkeypatch.setattr(offload, "pick_device", lambda torch, wanted, h: ("cpu", ""))
    monkeypatch.setattr(helpers, "import_cpu_offload", lambda: _StandInOffload)
    monkeypatch.setitem(sys.modules, "torchao", types.SimpleNamespace(__version__="0.0-test"))
    counters = {"memory_allocated": 0, "max_memory_allocated": 2**20, "device_name": "stand-in"}
    monkeypatch.setattr(offload_measure, "dispatch", lambda name, device, *a: counters.get(name))
    monkeypatch.setattr(offload_measure, "measure_bandwidth", lambda torch, device, nbytes: {
        "h2d_gbps": 10.0, "d2h_gbps": 10.0, "copy_bytes": nbytes})
    # Stand-ins live in this process: the measurements run here, not each in a process
    # of its own (tests/run/test_faults.py tests that structure with real processes).
    monkeypatch.setattr(offload, "isolated",
                        lambda task, target: offload_measure.measure_task(task))


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_models_side_by_side_with_and_without_flush(cpu_stand_ins: None, tmp_path: Path) -> None:
    report = offload.run([0.0002], ["fp32"], list(offload.MODES), suite=SUITE, steps=1,
                         warmup=0, width=64, tokens=8, copy_mib=1, out=tmp_path,
                         plot_png=False, models=["transformer", "mlp-gelu"], flush="both")
    rows = report["results"]
    assert not offload.failed(report)
    # none runs once (its optimizer is on the device); each offload mode off and on.
    assert [(r["model"], r["mode"], r["flush_denormals"]) for r in rows[:5]] == [
        ("transformer", "none", False), ("transformer", "offload", False),
        ("transformer", "offload", True), ("transformer", "offload_grad", False),
        ("transformer", "offload_grad", True)]
    assert len(rows) == 10 and rows[5]["model"] == "mlp-gelu"
    assert rows[0]["layers"] == 4 and rows[5]["layers"] == 18  # 0.0002 B / 49984; 128 wide
    assert (rows[5]["width"], rows[5]["tokens"]) == (128, 64)
    assert all(r["grad_sq_denormal"] >= 0.9 for r in rows[5:])  # the bench asserts it
    for r in rows:
        assert 0.0 <= r["grad_sq_denormal"] <= 1.0 and 0.0 <= r["state_denormal"] <= 1.0
        assert ("flush" in r) == r["flush_denormals"]
    flushed = rows[2]["flush"]
    assert flushed["flushed_share"] == 1.0 or flushed["method"] != "openmp-team"
    assert offload.suite_helpers(SUITE).flushed_share() == 0.0  # turned off afterwards
    md = (tmp_path / "bench_offload.md").read_text()
    assert "| transformer | 0.000" in md and "| offload | on |" in md
    assert json.loads((tmp_path / "bench_offload.json").read_text())["meta"]["models"] == [
        "transformer", "mlp-gelu"]


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_a_denormal_model_that_is_not_denormal_fails_the_run(
        cpu_stand_ins: None, tmp_path: Path, helpers: Any, monkeypatch) -> None:
    """The planted fault: mlp-gelu under a sum loss (gradients far from denormal). The
    default flush (auto) runs mlp-gelu's offload modes without and with, the others off."""
    report = offload.run([0.0002], ["fp32"], ["none", "offload"], suite=SUITE, steps=1,
                         warmup=0, width=64, tokens=8, copy_mib=1, out=tmp_path,
                         plot_png=False, models=["mlp", "mlp-gelu"])
    assert not offload.failed(report)
    assert [(r["model"], r["mode"], r["flush_denormals"]) for r in report["results"]] == [
        ("mlp", "none", False), ("mlp", "offload", False), ("mlp-gelu", "none", False),
        ("mlp-gelu", "offload", False), ("mlp-gelu", "offload", True)]
    monkeypatch.setattr(helpers, "bench_loss", lambda kind, out: out.sum())
    monkeypatch.setattr(offload, "suite_helpers", lambda folder: helpers)
    report = offload.run([0.0002], ["fp32"], ["none"], suite=SUITE, steps=1, warmup=0,
                         width=64, tokens=8, copy_mib=1, out=tmp_path, plot_png=False,
                         models=["mlp-gelu"])
    assert offload.failed(report)
    assert report["results"][0]["error"].startswith(
        "mlp-gelu is not the denormal case here: ")


def test_cpu_adamw_side_by_side(tmp_path: Path, helpers: Any) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = offload_cpu_adamw.run_cpu_adamw(suite=SUITE, numel=2**16, steps=2, warmup=1,
                                       out=tmp_path)
    finally:
        torch.set_num_threads(threads)
    rows = {r["case"]: r for r in report["results"]}
    assert list(rows) == list(offload_cpu_adamw.CPU_ADAMW_CASES)
    assert rows["normal gradients"]["state_denormal"] == 0.0
    assert rows["denormal"]["state_denormal"] > 0.9 and rows["denormal"]["flushed_share"] == 0
    calling = rows["denormal, flush in the calling thread"]
    assert calling["flushed_share"] == pytest.approx(0.5)  # one of two threads
    every = rows["denormal, flush in every OpenMP thread"]
    if every["flush"] == "openmp-team":
        assert every["flushed_share"] == 1.0 and every["state_denormal"] == 0.0
    assert rows["denormal, 1 thread, flush"]["state_denormal"] == 0.0
    assert rows["denormal, 1 thread"]["state_denormal"] > 0.9
    assert (tmp_path / "bench_offload_cpu_adamw.md").read_text().count("\n| ") == 7
    assert helpers.flushed_share() == 0.0


def test_cpu_adamw_from_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload_cpu_adamw, "CPU_ADAMW_NUMEL", 2**12)
    assert main(["bench", "offload", "--matrix", MATRIX, "--cpu-adamw", "--steps", "1",
                 "--warmup", "0", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "bench_offload_cpu_adamw.json").exists()


def test_bad_models_and_flush_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "offload", "--matrix", MATRIX, "--models", "cnn"]) == 2
    assert "bad --models 'cnn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "offload", "--matrix", MATRIX, "--flush-denormals", "maybe"])


RSS_PLANT = '''
import os, signal

def task(task):
    hold = bytearray(b"\\x01") * (task["mib"] << 20)  # written: resident
    if task.get("die"):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer ends a process
    return {"held": len(hold)}
'''


def test_each_run_records_its_process_peak_host_memory(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each configuration's process reports its own peak RSS with its row (the
    host-memory growth question of issue #27, measured), not counting the bench's own
    memory (a forked child's ru_maxrss would); one the kernel killed gets a bound; the
    table shows both."""
    (tmp_path / "rss_plant.py").write_text(RSS_PLANT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    ballast = bytearray(b"\x01") * (512 << 20)  # the bench's own memory, resident
    small = offload.isolated({"mib": 0}, "rss_plant:task")
    big = offload.isolated({"mib": 256}, "rss_plant:task")
    del ballast
    assert "host_rss_peak_kib" not in big and big["held"] == 256 << 20
    assert small["host_rss_peak_gib"] < 0.1  # a bare interpreter, not the 0.5 GiB bench
    assert 0.24 < big["host_rss_peak_gib"] - small["host_rss_peak_gib"] < 0.3
    dead = offload.isolated({"mib": 384, "die": True}, "rss_plant:task")
    assert dead["killed"] and dead["host_rss_peak_gib"] is None
    assert dead["host_rss_peak_at_most_gib"] >= 0.375
    rows = [{"model": "mlp", "size_b": 1, "dtype": "fp32", "mode": "none", "params": 1,
             "peak_gib": 1.0, "step_ms": 1.0, "bytes_each_way": 0, "floor_ms": 0.0,
             "step_over_floor": None, "host_rss_peak_gib": 2.5},
            {"model": "mlp", "size_b": 1, "dtype": "fp32", "mode": "offload",
             "error": "killed by SIGKILL", "host_rss_peak_gib": None,
             "host_rss_peak_at_most_gib": 7.25}]
    table = offload.markdown_table(rows).splitlines()
    assert table[0].endswith("| host RSS GiB |")
    assert table[2].endswith("| 2.50 |") and table[3].endswith("| ≤ 7.25 |")
    assert len({line.count("|") for line in table}) == 1  # every row as wide as the head
