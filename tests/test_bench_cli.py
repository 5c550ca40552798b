"""``accelgrid bench``: the command tree and its options (the benchmarks have their own
test files)."""

from __future__ import annotations

import pytest

from accelgrid.cli import main

OPTIONS = {
    "overhead": ["--matrix", "--cell", "--partial", "--partial-repeat", "--repeat", "--suites",
                 "--env-creation", "--out"],
    "offload": ["--matrix", "--device", "--sizes", "--dtypes", "--modes", "--steps",
                "--warmup", "--width", "--tokens", "--copy-mib", "--out", "--no-plot"],
    "grid": ["--matrix", "--cells", "--tests", "--repeat", "--budget", "--out", "--profile"],
    "ops": ["--matrix", "--cell", "--suites", "--repeat", "--out"],
}


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_bench_help_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "bench")
    assert "usage: accelgrid bench" in out
    for what in OPTIONS:
        assert what in out


@pytest.mark.parametrize("what", sorted(OPTIONS))
def test_each_benchmark_help_lists_its_options(capsys: pytest.CaptureFixture[str],
                                               what: str) -> None:
    out = _help(capsys, "bench", what)
    assert f"usage: accelgrid bench {what}" in out
    for option in OPTIONS[what]:
        assert option in out, option


def test_offload_help_keeps_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    out = " ".join(_help(capsys, "bench", "offload").split())
    for default in ("(default: auto)", "(default: 0.1,0.5,1)", "(default: fp32,bf16)",
                    "(default: none,offload,offload_grad)", "(default: 4096)",
                    "(default: results/bench-offload)", "{auto,cuda,xpu}"):
        assert default in out, default


def test_a_benchmark_must_be_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench"])
    assert exit_.value.code == 2
    assert "BENCHMARK" in capsys.readouterr().err


def test_bench_module_has_no_argparse() -> None:
    from pathlib import Path

    import accelgrid.bench

    for path in Path(accelgrid.bench.__file__).parent.glob("*.py"):
        assert "argparse" not in path.read_text(), path


@pytest.mark.parametrize("what", ["overhead", "offload", "grid", "ops"])
def test_benches_write_under_results_by_default(what: str) -> None:
    # A plain bench run never dirties the checkout: docs/ only with --out docs/measured.
    from accelgrid import cli

    out = str(cli.parse(["bench", what]).out)
    assert out == f"results/bench-{what}", out
