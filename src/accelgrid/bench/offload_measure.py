"""One measurement of ``accelgrid bench offload``, in the configuration's own process
(:func:`accelgrid.bench.offload_process.isolated` calls :func:`measure_task`): the pinned
copy bandwidth, or one (model, size, dtype, mode, flush) row (:func:`run_one`): peak
device memory, the median step time against the transfer floor, and the shares of
denormal gradients and of Adam's second moment (:func:`denormals`).

torch, torchao and the offload suite's helpers are imported by :func:`measure_task` in
that process; the functions below take them as arguments.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..devices.backends import dispatch
from .offload import DTYPES, suite_helpers
from .offload_report import pct

GiB = 2**30


def measure_task(task: dict[str, Any]) -> dict[str, Any]:
    """In a configuration's own process: import torch, torchao and the helpers, then
    measure the bandwidth (``task["kind"] == "bandwidth"``, with the facts for the
    report's header) or one row (:func:`run_one`)."""
    import torch

    helpers = suite_helpers(Path(task["suite"]))
    offload_cls = helpers.import_cpu_offload()
    device = task["device"]
    if task["kind"] == "bandwidth":
        return {"bandwidth": measure_bandwidth(torch, device, task["nbytes"]),
                "torch": torch.__version__,
                "torchao": getattr(importlib.import_module("torchao"), "__version__", "?"),
                "device_name": dispatch("device_name", device),
                "threads": torch.get_num_threads(), "bench_seq": helpers.BENCH_SEQ}
    return run_one(torch, helpers, offload_cls, device, **task["args"])


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


def _offloaded_numel(model: Any, offload_cls: type) -> int:
    """Elements CPUOffloadOptimizer moves each way per step: trainable params of at least
    ``minimal_size`` elements (all trainable params in torchao versions without it)."""
    param = inspect.signature(offload_cls).parameters.get("minimal_size")  # its __init__
    minimal = param.default if param is not None else 0
    return sum(p.numel() for p in model.parameters() if p.requires_grad and p.numel() >= minimal)


def run_one(
    torch: Any,
    helpers: ModuleType,
    offload_cls: type,
    device: str,
    *,
    size_b: float,
    dtype_name: str,
    mode: str,
    width: int,
    tokens: int,
    steps: int,
    warmup: int,
    bandwidth: dict[str, float],
    model_kind: str = "mlp",
    flush: bool = False,
) -> dict[str, Any]:
    """One (model, size, dtype, mode, flush) measurement; errors (e.g. out of memory) are
    recorded in the row."""
    dtype = getattr(torch, DTYPES[dtype_name])
    width, depth, tokens = helpers.bench_shape(model_kind, size_b, width, tokens)
    row: dict[str, Any] = {"model": model_kind, "size_b": size_b, "dtype": dtype_name,
                           "mode": mode, "flush_denormals": flush, "layers": depth,
                           "width": width, "tokens": tokens}
    _free(torch, device)
    base = dispatch("memory_allocated", device)
    model = optimizer = x = None
    try:
        if flush:
            done = helpers.flush_denormals(True)
            row["flush"] = {"method": done.method, "threads": done.threads,
                            "flushed_share": done.flushed_share}
        torch.manual_seed(0)
        model = helpers.bench_model(model_kind, width, depth, device, dtype)
        row["params"] = sum(p.numel() for p in model.parameters())
        optimizer, moved = _optimizer(torch, offload_cls, model, mode, row)
        x = helpers.bench_input(model_kind, tokens, width, device, dtype)
        times = _timed_steps(helpers, model_kind, model, optimizer, x, device,
                             warmup + steps, warmup)
        peak = dispatch("max_memory_allocated", device) - base
        row.update(_timings(times, moved, bandwidth, peak))
        if flush:
            helpers.flush_denormals(False)
        row.update(denormals(torch, helpers, model, optimizer, x, device, model_kind))
        _check_denormal_case(row, helpers, model_kind)
    except Exception as exc:  # keep going: one OOM should not lose the other rows
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        if flush:
            helpers.flush_denormals(False)
        del model, optimizer, x
        _free(torch, device)
    return row


def _optimizer(torch: Any, offload_cls: type, model: Any, mode: str,
               row: dict[str, Any]) -> tuple[Any, int]:
    """The run's optimizer and the bytes it moves each way per step (0 on the device);
    the ``none`` mode's AdamW is named in ``row["baseline"]``."""
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
        return optimizer, 0
    optimizer = offload_cls(
        model.parameters(), torch.optim.AdamW, offload_gradients=mode == "offload_grad"
    )
    moved = _offloaded_numel(model, offload_cls) * next(model.parameters()).element_size()
    return optimizer, moved


def _timed_steps(helpers: ModuleType, model_kind: str, model: Any, optimizer: Any, x: Any,
                 device: str, total: int, warmup: int) -> list[float]:
    """``total`` training steps from a reset peak-memory counter; the seconds of each
    after the first ``warmup``."""
    dispatch("synchronize", device)
    dispatch("reset_peak_memory_stats", device)
    times = []
    for i in range(total):
        dispatch("synchronize", device)
        t0 = time.perf_counter()
        helpers.bench_loss(model_kind, model(x)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dispatch("synchronize", device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def _timings(times: list[float], moved: int, bandwidth: dict[str, float],
             peak: int) -> dict[str, Any]:
    """The row's peak memory and median step time, set against the floor the bytes moved
    each way give over the measured copy bandwidth."""
    floor_s = moved / (bandwidth["d2h_gbps"] * 1e9) + moved / (bandwidth["h2d_gbps"] * 1e9)
    step_s = statistics.median(times)
    return {"peak_gib": peak / GiB, "step_ms": step_s * 1e3, "bytes_each_way": moved,
            "floor_ms": floor_s * 1e3,
            "step_over_floor": step_s / floor_s if floor_s else None}


def _check_denormal_case(row: dict[str, Any], helpers: ModuleType, model_kind: str) -> None:
    """An mlp-gelu row whose squared gradients are not denormal enough gets an error."""
    share = row.get("grad_sq_denormal")
    if model_kind == "mlp-gelu" and not (share is not None and share >= helpers.DENORMAL_MIN):
        # The denormal case is the point of this model: a run where it is not fails.
        row["error"] = (f"mlp-gelu is not the denormal case here: {pct(share)} of squared "
                        f"gradients denormal (the bench needs >= "
                        f"{helpers.DENORMAL_MIN:.0%})")


def denormals(
    torch: Any, helpers: ModuleType, model: Any, optimizer: Any, x: Any, device: str,
    model_kind: str = "mlp",
) -> dict[str, float | None]:
    """After the timed steps, one more backward (no step): ``grad_sq_denormal``, the share
    of gradient elements whose square is a denormal float (device gradients, or the
    offloaded host copies where the device ones were freed), and ``state_denormal``, the
    share of Adam's second moment (``exp_avg_sq``; on the host for offloaded params) that
    is denormal; None where the optimizer does not expose them."""
    helpers.bench_loss(model_kind, model(x)).backward()
    dispatch("synchronize", device)  # every stream: the offload's gradient copies too
    host = getattr(optimizer, "param_d2h_map", None) or {}
    grads = []
    for p in model.parameters():
        if p.grad is not None:
            grads.append(p.grad)
        elif p in host and getattr(host[p], "grad", None) is not None:
            grads.append(host[p].grad)
    out: dict[str, float | None] = {
        "grad_sq_denormal": helpers.denormal_fraction(grads, squared=True) if grads else None
    }
    optimizer.zero_grad(set_to_none=True)
    try:
        state = optimizer.state_dict()
        if isinstance(state, dict) and "state" in state:  # a plain torch optimizer
            parts = [state]
        else:
            parts = list(helpers.offloaded_states(state))
            if isinstance(state, dict) and state.get("on-device"):
                parts.append(state["on-device"])
        second = [s["exp_avg_sq"] for part in parts for s in part["state"].values()
                  if "exp_avg_sq" in s]
    except (AttributeError, KeyError, TypeError):
        second = []
    out["state_denormal"] = helpers.denormal_fraction(second) if second else None
    return out
