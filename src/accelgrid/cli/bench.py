"""``accelgrid bench devices|offload``: the user-facing benchmarks' options.

The benchmarks are :mod:`accelgrid.bench`'s modules, imported here for their descriptions
and defaults (the command line imports this group only for ``accelgrid bench``).
accelgrid's benchmarks of itself (overhead, grid, history, ops) live in the checkout's
tools/selfbench (``python -m tools.selfbench --help``), not in the package.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..base.errors import InvalidInput
from ..bench import Stopped, offload_cpu_adamw
from ..bench import devices as devices_bench
from ..bench import offload as offload_bench
from ._common import matrix_of

OFFLOAD = (
    "Peak device memory and median step time of torchao's CPUOffloadOptimizer "
    "(modes: none = plain fused AdamW on the device, offload, offload_grad = "
    "offload_gradients=True) on models of about the given sizes (transformer blocks, "
    "plain Linear stacks; mlp-gelu: a stack whose gradients go denormal), with the share "
    "of denormal gradients and optimizer state, optionally with denormals flushed in the "
    "CPU optimizer's threads, against the floor "
    "set by the bytes moved per step over the measured pinned copy bandwidth. Writes "
    "bench_offload.json, bench_offload.md and bench_offload.png (with matplotlib) to "
    "--out. Exits 2 without a CUDA/XPU device or torchao, 1 if a run failed (e.g. out "
    "of memory; the other runs are still reported). The model and the torchao import "
    "come from the offload suite's offload_helpers.py, found beside the matrix."
)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "bench", parents=[common],
        help="benchmarks: devices (multi-GPU scaling), offload (torchao's CPU offload)",
        description="Benchmarks: offload (torchao's CPUOffloadOptimizer on a CUDA/XPU "
                    "device), devices (a whole cell on 1, 2, 4, ... of the host's GPUs).")
    what = group.add_subparsers(dest="what", required=True, metavar="BENCHMARK")
    raw = argparse.RawDescriptionHelpFormatter

    p = what.add_parser("offload", parents=[common], description=OFFLOAD,
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        help="torchao's CPUOffloadOptimizer: peak memory and step time")
    p.add_argument(
        "--device",
        default="auto",
        choices=offload_bench.DEVICES,
        help="device to benchmark; auto picks cuda, else xpu (what torchao itself picks)",
    )
    p.add_argument("--sizes", default=offload_bench.DEFAULT_SIZES,
                   help="model sizes in billions of parameters, comma-separated")
    p.add_argument("--dtypes", default=",".join(offload_bench.DTYPES),
                   help=f"from {','.join(offload_bench.DTYPES)}")
    p.add_argument("--modes", default=",".join(offload_bench.MODES),
                   help=f"from {','.join(offload_bench.MODES)}")
    p.add_argument("--steps", type=int, default=10, help="timed steps per run (median kept)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    p.add_argument("--width", type=int, default=4096, help="width of the square layers")
    p.add_argument("--tokens", type=int, default=1024, help="batch rows per step")
    p.add_argument("--copy-mib", type=int, default=1024,
                   help="size of the pinned copies timed for bandwidth")
    p.add_argument("--out", type=Path, default=offload_bench.DEFAULT_OUT,
                   help="output directory")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--models", default=offload_bench.DEFAULT_MODELS,
                   help=f"from {','.join(offload_bench.MODELS)} (mlp-gelu: the denormal case)")
    p.add_argument("--flush-denormals", default="auto", choices=tuple(offload_bench.FLUSH),
                   help="flush denormals to zero in the CPU optimizer's threads; both: each "
                        "offload run without and with; auto (default): both for mlp-gelu, "
                        "off for the others")
    p.add_argument("--cpu-adamw", action="store_true",
                   help="only fused CPU AdamW over normal and denormal state, each way of "
                        "flushing side by side (no GPU needed; --steps, --warmup, --out)")
    p.set_defaults(func=_offload)

    p = what.add_parser("devices", parents=[common], formatter_class=raw,
                        description=devices_bench.__doc__,
                        help="a whole cell on 1, 2, 4, ... of this host's GPUs: the scaling")
    p.add_argument("--cell", required=True, help="a cuda or xpu cell, e.g. cuda-2.11")
    p.add_argument("--counts", default=None,
                   help="comma-separated device counts (default: 1, 2, 4, ... up to the "
                        "devices here)")
    p.add_argument("--repeat", type=int, default=devices_bench.DEFAULT_REPEAT,
                   help="runs per count (default: %(default)s)")
    p.add_argument("--workers-per-device", default=None, metavar="K,...",
                   help="a sweep: each count once per number of workers sharing each device "
                        "(whole numbers or auto, e.g. 1,auto; default: the runner's choice "
                        "only)")
    p.add_argument("--no-venv", action="store_true",
                   help="run the cell as `nox --no-venv` (this interpreter's packages)")
    p.add_argument("--out", default=devices_bench.DEFAULT_OUT,
                   help="folder for bench-devices.{json,md} (default: %(default)s; "
                        "docs/measured for committed figures)")
    p.set_defaults(func=_devices, passthrough="pytest_args")


def _devices(args: argparse.Namespace) -> int:
    counts = None
    if args.counts:
        try:
            counts = [int(x) for x in args.counts.split(",") if x.strip()]
        except ValueError:
            raise InvalidInput(f"--counts {args.counts!r}: whole numbers, comma-separated") \
                from None
    try:
        report = devices_bench.run(matrix_of(args), args.cell, counts=counts,
                                   repeat=args.repeat, no_venv=args.no_venv,
                                   pytest_args=args.pytest_args, out=args.out,
                                   per_device=devices_bench.parse_per_device(
                                       args.workers_per_device))
    except Stopped as exc:   # SIGTERM / SIGINT: the shell's code for it
        return 128 + exc.signum
    return 0 if all(r["rc"] == 0 for r in report["runs"]) else 1


def _offload(args: argparse.Namespace) -> int:
    suite = offload_bench.suite_dir(matrix_of(args))
    if args.cpu_adamw:
        offload_cpu_adamw.run_cpu_adamw(suite=suite, steps=args.steps, warmup=args.warmup,
                                        out=args.out)
        return 0
    sizes = offload_bench.parse_sizes(args.sizes)
    dtypes = offload_bench.split_list(args.dtypes, tuple(offload_bench.DTYPES), "dtypes")
    modes = offload_bench.split_list(args.modes, offload_bench.MODES, "modes")
    models = offload_bench.split_list(args.models, offload_bench.MODELS, "models")
    report = offload_bench.run(
        sizes, dtypes, modes, suite=suite,
        device=args.device, steps=args.steps, warmup=args.warmup, width=args.width,
        tokens=args.tokens, copy_mib=args.copy_mib, out=args.out, plot_png=not args.no_plot,
        models=models, flush=args.flush_denormals)
    return 1 if offload_bench.failed(report) else 0
