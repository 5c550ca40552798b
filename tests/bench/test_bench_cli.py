"""``accelgrid bench`` and ``python -m tools.selfbench``: the command trees and their
options (the benchmarks have their own test files)."""

from __future__ import annotations

import pytest

from accelgrid.cli import main
from tools.selfbench import __main__ as selfbench

OPTIONS = {
    "offload": ["--matrix", "--device", "--sizes", "--dtypes", "--modes", "--steps",
                "--warmup", "--width", "--tokens", "--copy-mib", "--out", "--no-plot"],
    "devices": ["--matrix", "--cell", "--counts", "--repeat", "--workers-per-device",
                "--no-venv", "--out"],
}
# accelgrid's benchmarks of itself: the checkout's tools, not the package's commands.
SELF = {
    "overhead": ["--matrix", "--cell", "--partial", "--partial-repeat", "--repeat", "--suites",
                 "--env-creation", "--out"],
    "grid": ["--matrix", "--cells", "--tests", "--repeat", "--budget", "--out", "--profile"],
    "history": ["--matrix", "--nights", "--cells", "--tests", "--window", "--repeat", "--out"],
    "ops": ["--matrix", "--cell", "--suites", "--repeat", "--out"],
}


def _help(capsys: pytest.CaptureFixture[str], *argv: str, entry=main) -> str:
    with pytest.raises(SystemExit) as exit_:
        entry([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_bench_help_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "bench")
    assert "usage: accelgrid bench" in out
    for what in OPTIONS:
        assert what in out
    for what in SELF:   # gone from the package's command
        assert what not in out.split("BENCHMARK", 1)[1]
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "overhead"])
    assert exit_.value.code == 2
    capsys.readouterr()


def test_selfbench_help_lists_the_self_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, entry=selfbench.main)
    assert "usage: python -m tools.selfbench" in out
    for what in SELF:
        assert what in out


@pytest.mark.parametrize("what", sorted(SELF))
def test_each_self_benchmark_help_lists_its_options(capsys: pytest.CaptureFixture[str],
                                                    what: str) -> None:
    out = _help(capsys, what, entry=selfbench.main)
    assert f"usage: python -m tools.selfbench {what}" in out
    for option in SELF[what]:
        assert option in out, option


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


@pytest.mark.parametrize("what", ["offload", "overhead", "grid", "history", "ops"])
def test_benches_write_under_results_by_default(what: str) -> None:
    # A plain bench run never dirties the checkout: docs/ only with --out docs/measured.
    from accelgrid.cli import parser

    args = (parser.parse(["bench", what]) if what in OPTIONS
            else selfbench.build_parser().parse_args([what]))
    assert str(args.out) == f"results/bench-{what}", args.out
