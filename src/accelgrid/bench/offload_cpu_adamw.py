"""``accelgrid bench offload --cpu-adamw``: fused CPU AdamW over normal and denormal-heavy
state, with each way of flushing denormals side by side (:func:`run_cpu_adamw`). Needs
no GPU: what CPUOffloadOptimizer runs on the CPU for each offloaded parameter, alone.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..base.errors import InvalidInput
from . import write_outputs
from .offload import DEFAULT_OUT, NotRunnable, suite_helpers
from .offload_report import log, pct

CPU_ADAMW_NUMEL = 2**26  # elements per case of --cpu-adamw (4 tensors; 1 GiB per fp32 copy)

CPU_ADAMW_CASES = {
    # case: (gradient scale, how denormals are flushed, intra-op threads: None = as set)
    "normal gradients": (1e-3, "none", None),
    "denormal": (1e-20, "none", None),
    "denormal, flush in the calling thread": (1e-20, "calling-thread", None),
    "denormal, flush in every OpenMP thread": (1e-20, "every-thread", None),
    "denormal, 1 thread": (1e-20, "none", 1),
    "denormal, 1 thread, flush": (1e-20, "calling-thread", 1),
}


def run_cpu_adamw(
    *,
    suite: Path,
    numel: int | None = None,
    steps: int = 10,
    warmup: int = 2,
    out: str | Path = DEFAULT_OUT,
) -> dict[str, Any]:
    """Fused CPU AdamW — what CPUOffloadOptimizer runs for each offloaded parameter — over
    4 fp32 parameters of ``numel / 4`` elements, side by side: gradients of normal size,
    gradients of 1e-20 (their squares, and Adam's second moment, are denormal floats) with
    no flush, with ``torch.set_flush_denormal(True)`` in the calling thread only, with
    :func:`offload_helpers.flush_denormals` (every OpenMP thread), and on one intra-op
    thread without and with the calling thread flushing. Per case: the median step
    time, the share of a parallel probe's denormal results flushed
    (:func:`offload_helpers.flushed_share`) and the share of ``exp_avg_sq`` left
    denormal. Writes ``bench_offload_cpu_adamw.json``
    and ``.md`` to ``out``. Needs torch only. ``numel`` defaults to
    :data:`CPU_ADAMW_NUMEL`."""
    numel = CPU_ADAMW_NUMEL if numel is None else numel
    problems = [f"--{n} must be >= {least}, not {v}" for n, v, least in (
        ("steps", steps, 1), ("warmup", warmup, 0), ("numel", numel, 4)) if v < least]
    if problems:
        raise InvalidInput("; ".join(problems))
    try:
        import torch
    except ImportError as exc:
        raise NotRunnable("torch is not installed") from exc
    helpers = suite_helpers(suite)
    threads = torch.get_num_threads()
    log(f"fused CPU AdamW over {numel:,} fp32 elements, {threads} threads, "
        f"torch {torch.__version__}")
    rows = []
    for case, (scale, how, case_threads) in CPU_ADAMW_CASES.items():
        rows.append(_case(torch, helpers, case, scale, how, case_threads or threads,
                          threads, numel, steps + warmup, warmup))
        log(f"{case}: {rows[-1]['step_ms']:.1f} ms (flushed share "
            f"{rows[-1]['flushed_share']:.2f})")
    report = {"meta": {"torch": torch.__version__, "numel": numel, "threads": threads,
                       "steps": steps, "warmup": warmup, "host": platform.node(),
                       "cpu": platform.processor() or platform.machine(),
                       "date": datetime.datetime.now(datetime.UTC).isoformat(
                           timespec="seconds")},
              "results": rows}
    table = _table(rows)
    write_outputs(out, "bench_offload_cpu_adamw", report,
                  f"torch {torch.__version__}, {numel:,} fp32 elements in 4 tensors, median "
                  f"of {steps} steps.\n\n" + table)
    print(table, flush=True)
    return report


def _case(torch: Any, helpers: ModuleType, case: str, scale: float, how: str,
          case_threads: int, threads: int, numel: int, total: int,
          warmup: int) -> dict[str, Any]:
    """One case's row: ``total`` steps of fused AdamW on ``case_threads`` intra-op threads
    with denormals flushed as ``how`` says; flushing off and ``threads`` back after."""
    torch.set_num_threads(case_threads)
    try:
        if how == "every-thread":
            method = helpers.flush_denormals(True).method
        else:
            method = "calling-thread" if how == "calling-thread" else "none"
            torch.set_flush_denormal(how == "calling-thread")
        gen = torch.Generator().manual_seed(0)
        params = [torch.zeros(numel // 4) for _ in range(4)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * scale
        optimizer = torch.optim.AdamW(params, fused=True)
        times = []
        for i in range(total):
            t0 = time.perf_counter()
            optimizer.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        share = helpers.flushed_share()
    finally:
        helpers.flush_denormals(False)
        torch.set_num_threads(threads)
    second = [optimizer.state[p]["exp_avg_sq"] for p in params]
    return {"case": case, "threads": case_threads, "flush": method,
            "step_ms": statistics.median(times) * 1e3,
            "min_step_ms": min(times) * 1e3, "flushed_share": share,
            "state_denormal": helpers.denormal_fraction(second)}


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | threads | flush | step ms (median) | min | flushed share | v denormal |",
             "|---|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['threads']} | {r['flush']} | {r['step_ms']:.1f} "
              f"| {r['min_step_ms']:.1f} | {r['flushed_share']:.2f} "
              f"| {pct(r['state_denormal'])} |" for r in rows]
    return "\n".join(lines) + "\n"
