"""``accelgrid bench offload``: what torchao's CPUOffloadOptimizer saves and costs on a GPU.

For MLP stacks of about the requested sizes (billions of parameters), each dtype and each
mode — ``none`` (plain fused AdamW on the device), ``offload`` (CPUOffloadOptimizer) and
``offload_grad`` (``offload_gradients=True``) — it measures peak device memory and the
median step time, and sets the step time against the floor given by the bytes the offload
moves per step (gradients device->host, parameters host->device) over the measured pinned
copy bandwidth. Writes ``bench_offload.json``, ``bench_offload.md`` and, with matplotlib,
``bench_offload.png``.

torch and torchao are imported inside :func:`main`, so importing this module is cheap and
works on any host; without a CUDA or XPU device :func:`main` returns 2.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import inspect
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from accelgrid.backends import dispatch

MODES = ("none", "offload", "offload_grad")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
GiB = 2**30
AO_958 = "https://github.com/pytorch/ao/issues/958"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelgrid bench offload",
        description=(
            "Peak device memory and median step time of torchao's CPUOffloadOptimizer "
            "(modes: none = plain fused AdamW on the device, offload, offload_grad = "
            "offload_gradients=True) on MLP stacks of about the given sizes, against the floor "
            "set by the bytes moved per step over the measured pinned copy bandwidth. Writes "
            "bench_offload.json, bench_offload.md and bench_offload.png (with matplotlib) to "
            "--out. Exits 2 without a CUDA/XPU device or torchao, 1 if a run failed (e.g. out "
            "of memory; the other runs are still reported)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cuda", "xpu"),
        help="device to benchmark; auto picks cuda, else xpu (what torchao itself picks)",
    )
    parser.add_argument(
        "--sizes",
        default="0.1,0.5,1",
        help="model sizes in billions of parameters, comma-separated",
    )
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"from {','.join(DTYPES)}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"from {','.join(MODES)}")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run (median kept)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    parser.add_argument("--width", type=int, default=4096, help="width of the square layers")
    parser.add_argument("--tokens", type=int, default=1024, help="batch rows per step")
    parser.add_argument(
        "--copy-mib", type=int, default=1024, help="size of the pinned copies timed for bandwidth"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results/bench-offload"), help="output directory"
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    return parser


def _split(value: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if allowed is not None and v not in allowed]
    if not items or bad:
        raise ValueError(f"bad --{what} {value!r}; choose from {', '.join(allowed or ())}")
    return items


def _log(msg: str) -> None:
    print(f"[bench offload] {msg}", flush=True)


def _pick_device(torch: Any, wanted: str) -> tuple[str | None, str]:
    """(device, "") or (None, why not)."""
    has = {
        "cuda": torch.cuda.is_available(),
        "xpu": hasattr(torch, "xpu") and torch.xpu.is_available(),
    }
    if wanted == "auto":
        for name in ("cuda", "xpu"):
            if has[name]:
                return name, ""
        return None, (
            f"no CUDA or XPU device; CPUOffloadOptimizer supports only CUDA and XPU ({AO_958})"
        )
    if not has[wanted]:
        return None, f"--device {wanted} requested but torch {torch.__version__} sees none"
    return wanted, ""


def _import_offload() -> tuple[type, str]:
    """CPUOffloadOptimizer (torchao.optim from 0.10, prototype.low_bit_optim before)."""
    errors = []
    for name in ("torchao.optim", "torchao.prototype.low_bit_optim"):
        try:
            cls = getattr(importlib.import_module(name), "CPUOffloadOptimizer", None)
        except ModuleNotFoundError as exc:
            errors.append(str(exc))
            continue
        if cls is not None:
            version = getattr(importlib.import_module("torchao"), "__version__", "?")
            return cls, version
        errors.append(f"{name} has no CPUOffloadOptimizer")
    raise ImportError("; ".join(errors))


def measure_bandwidth(torch: Any, device: str, nbytes: int, repeats: int = 5) -> dict[str, float]:
    """Median pinned host->device and device->host copy bandwidth, in GB/s (1e9 B/s)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    rates: dict[str, list[float]] = {"h2d": [], "d2h": []}
    for i in range(repeats + 1):  # the first round warms up both directions
        for direction, (dst, src) in (("h2d", (dev, host)), ("d2h", (host, dev))):
            dispatch("synchronize", device)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            dispatch("synchronize", device)
            if i:
                rates[direction].append(nbytes / (time.perf_counter() - t0) / 1e9)
    del host, dev
    _free(torch, device)
    return {
        "h2d_gbps": statistics.median(rates["h2d"]),
        "d2h_gbps": statistics.median(rates["d2h"]),
        "copy_bytes": nbytes,
    }


def _free(torch: Any, device: str) -> None:
    gc.collect()  # the offload optimizer's grad hooks close over it: reference cycles
    dispatch("empty_cache", device)
    host_empty = getattr(torch._C, "_host_emptyCache", None)
    if host_empty is not None:  # release cached pinned blocks between model sizes
        host_empty()


def _build_model(torch: Any, device: str, dtype: Any, width: int, depth: int) -> Any:
    """``depth`` bias-free ``width x width`` Linear layers, initialised with std width**-0.5
    so activations neither vanish nor blow up through a deep linear stack."""
    layers = [
        torch.nn.Linear(width, width, bias=False, device=device, dtype=dtype) for _ in range(depth)
    ]
    with torch.no_grad():
        for layer in layers:
            layer.weight.normal_(0.0, width**-0.5)
    return torch.nn.Sequential(*layers)


def _offloaded_numel(model: Any, offload_cls: type) -> int:
    """Elements CPUOffloadOptimizer moves each way per step: trainable params of at least
    ``minimal_size`` elements (all trainable params in torchao versions without it)."""
    param = inspect.signature(offload_cls.__init__).parameters.get("minimal_size")
    minimal = param.default if param is not None else 0
    return sum(p.numel() for p in model.parameters() if p.requires_grad and p.numel() >= minimal)


def run_one(
    torch: Any,
    offload_cls: type,
    device: str,
    *,
    size_b: float,
    dtype_name: str,
    mode: str,
    args: argparse.Namespace,
    bandwidth: dict[str, float],
) -> dict[str, Any]:
    """One (size, dtype, mode) measurement; errors (e.g. out of memory) are recorded."""
    dtype = getattr(torch, DTYPES[dtype_name])
    depth = max(1, round(size_b * 1e9 / (args.width * args.width)))
    row: dict[str, Any] = {"size_b": size_b, "dtype": dtype_name, "mode": mode, "layers": depth}
    _free(torch, device)
    base = dispatch("memory_allocated", device)
    model = optimizer = x = None
    try:
        torch.manual_seed(0)
        model = _build_model(torch, device, dtype, args.width, depth)
        row["params"] = sum(p.numel() for p in model.parameters())
        if mode == "none":
            # fused: the fastest stock on-device AdamW, and what the offload runs on the CPU;
            # torch builds without a fused kernel for this device get the default one.
            params = list(model.parameters())
            try:
                optimizer = torch.optim.AdamW(params, fused=True)
                row["baseline"] = "AdamW(fused=True)"
            except RuntimeError:
                optimizer = torch.optim.AdamW(params)
                row["baseline"] = "AdamW()"
            moved = 0
        else:
            optimizer = offload_cls(
                model.parameters(), torch.optim.AdamW, offload_gradients=mode == "offload_grad"
            )
            moved = _offloaded_numel(model, offload_cls) * model[0].weight.element_size()
        x = torch.randn(args.tokens, args.width, device=device, dtype=dtype)
        dispatch("synchronize", device)
        dispatch("reset_peak_memory_stats", device)
        times = []
        for i in range(args.warmup + args.steps):
            dispatch("synchronize", device)
            t0 = time.perf_counter()
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            dispatch("synchronize", device)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        peak = dispatch("max_memory_allocated", device) - base
        floor_s = moved / (bandwidth["d2h_gbps"] * 1e9) + moved / (bandwidth["h2d_gbps"] * 1e9)
        step_s = statistics.median(times)
        row.update(
            peak_gib=peak / GiB,
            step_ms=step_s * 1e3,
            bytes_each_way=moved,
            floor_ms=floor_s * 1e3,
            step_over_floor=step_s / floor_s if floor_s else None,
        )
    except Exception as exc:  # keep going: one OOM should not lose the other rows
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        del model, optimizer, x
        _free(torch, device)
    return row


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per run; saving is relative to the ``none`` run of the same size and dtype."""
    plain = {(r["size_b"], r["dtype"]): r.get("peak_gib") for r in rows if r["mode"] == "none"}
    lines = [
        "| params | dtype | mode | peak GiB | saving | step ms | GB moved each way "
        "| floor ms | step / floor |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        params = f"{r['params'] / 1e9:.3g} B" if "params" in r else f"~{r['size_b']} B"
        if "error" in r:
            lines.append(f"| {params} | {r['dtype']} | {r['mode']} | {r['error']} |" + " |" * 5)
            continue
        ref = plain.get((r["size_b"], r["dtype"]))
        saving = 1 - r["peak_gib"] / ref if ref and r["mode"] != "none" else None
        lines.append(
            f"| {params} | {r['dtype']} | {r['mode']} | {r['peak_gib']:.2f} "
            f"| {_fmt(saving, '.0%')} | {r['step_ms']:.1f} | {r['bytes_each_way'] / 1e9:.2f} "
            f"| {r['floor_ms']:.1f} | {_fmt(r['step_over_floor'], '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Peak memory and step time per run; False (with a message) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _log("matplotlib is not installed; skipping the PNG")
        return False
    ok = [r for r in rows if "error" not in r]
    groups = sorted({(r["size_b"], r["dtype"]) for r in ok})
    modes = [m for m in MODES if any(r["mode"] == m for r in ok)]
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(13, 4.5))
    bar = 0.8 / max(1, len(modes))
    for j, mode in enumerate(modes):
        xs, mem, step, floor = [], [], [], []
        for i, group in enumerate(groups):
            for r in ok:
                if (r["size_b"], r["dtype"]) == group and r["mode"] == mode:
                    xs.append(i + (j - (len(modes) - 1) / 2) * bar)
                    mem.append(r["peak_gib"])
                    step.append(r["step_ms"])
                    floor.append(r["floor_ms"])
        ax_mem.bar(xs, mem, bar, label=mode)
        ax_time.bar(xs, step, bar, label=mode)
        if mode != "none":
            floor_label = "transfer floor" if mode == modes[-1] else None
            ax_time.scatter(
                xs, floor, marker="_", s=200, color="black", zorder=3, label=floor_label
            )
    labels = [f"{s} B\n{d}" for s, d in groups]
    for ax, title in ((ax_mem, "peak device memory (GiB)"), (ax_time, "median step time (ms)")):
        ax.set_xticks(range(len(groups)), labels)
        ax.set_title(title)
        ax.legend()
    ax_time.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success, 2 when it cannot run here (reason on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sizes = [float(s) for s in _split(args.sizes, None, "sizes")]
        dtypes = _split(args.dtypes, tuple(DTYPES), "dtypes")
        modes = _split(args.modes, MODES, "modes")
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    if any(not math.isfinite(s) or s <= 0 for s in sizes) or args.steps < 1 or args.warmup < 0:
        parser.error("--sizes must be positive, --steps >= 1, --warmup >= 0")

    try:
        import torch
    except ImportError:
        print("bench offload: torch is not installed", file=sys.stderr)
        return 2
    device, why = _pick_device(torch, args.device)
    if device is None:
        print(f"bench offload: {why}", file=sys.stderr)
        return 2
    try:
        offload_cls, ao_version = _import_offload()
    except ImportError as exc:
        print(
            f"bench offload: torchao's CPUOffloadOptimizer is unavailable ({exc})", file=sys.stderr
        )
        return 2

    name = dispatch("device_name", device)
    _log(f"torch {torch.__version__}, torchao {ao_version}, {device}: {name}")
    bandwidth = measure_bandwidth(torch, device, args.copy_mib * 2**20)
    _log(
        f"pinned copies: host->device {bandwidth['h2d_gbps']:.1f} GB/s, "
        f"device->host {bandwidth['d2h_gbps']:.1f} GB/s"
    )

    rows = []
    plan = [(s, d, m) for d in dtypes for s in sorted(sizes) for m in modes]
    started = time.perf_counter()
    for n, (size_b, dtype_name, mode) in enumerate(plan, 1):
        row = run_one(
            torch,
            offload_cls,
            device,
            size_b=size_b,
            dtype_name=dtype_name,
            mode=mode,
            args=args,
            bandwidth=bandwidth,
        )
        rows.append(row)
        head = f"[{n}/{len(plan)}] {size_b} B {dtype_name} {mode}:"
        if "error" in row:
            _log(f"{head} {row['error']}")
        else:
            _log(
                f"{head} {row['params'] / 1e9:.3g} B params, peak {row['peak_gib']:.2f} GiB, "
                f"step {row['step_ms']:.1f} ms (floor {row['floor_ms']:.1f} ms) "
                f"[{time.perf_counter() - started:.0f} s]"
            )

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "torchao": ao_version,
        "device": device,
        "device_name": name,
        "host": platform.node(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "width": args.width,
        "tokens": args.tokens,
        "steps": args.steps,
        "warmup": args.warmup,
    }
    report = {"meta": meta, "bandwidth": bandwidth, "results": rows}
    (args.out / "bench_offload.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown_table(rows)
    header = (
        f"torch {meta['torch']}, torchao {meta['torchao']}, {name}; pinned copies "
        f"H2D {bandwidth['h2d_gbps']:.1f} GB/s, D2H {bandwidth['d2h_gbps']:.1f} GB/s; "
        f"{args.tokens} x {args.width} batch, median of {args.steps} steps.\n\n"
    )
    (args.out / "bench_offload.md").write_text(header + table)
    print(table, flush=True)
    if not args.no_plot and plot(rows, args.out / "bench_offload.png"):
        _log(f"wrote {args.out / 'bench_offload.png'}")
    _log(f"wrote {args.out / 'bench_offload.json'} and {args.out / 'bench_offload.md'}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
