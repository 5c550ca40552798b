"""``accelgrid bench offload``: what torchao's CPUOffloadOptimizer saves and costs on a GPU.

For models of about the requested sizes (billions of parameters) — ``transformer``
(pre-LayerNorm blocks: attention, a GELU MLP, residuals), ``mlp`` (a plain stack of
bias-free square Linear layers) and, on request, ``mlp-gelu`` (the denormal case: a
bias-free stack with a GELU between the layers, batch 64, a mean-of-squares loss, its
width scaled to the size, :func:`offload_helpers.bench_shape`; nothing renormalises it, so
its gradients shrink into denormal floats; a run where under 90 % of its squared gradients
are denormal fails, and its offload modes run without and with the flush by default) —
each dtype and each mode — ``none`` (plain fused AdamW on the device),
``offload`` (CPUOffloadOptimizer) and ``offload_grad`` (``offload_gradients=True``) — it
measures peak device memory and the median step time, sets the step time against the
floor given by the bytes the offload moves per step (gradients device->host, parameters
host->device) over the measured pinned copy bandwidth, and reports the share of gradient
elements whose square is a denormal float and of Adam's second moment that is one (the
CPU optimizer step slows down on denormal arithmetic). With ``--flush-denormals on|both``
the offload modes also run with denormals flushed to zero in every thread of the CPU
optimizer's intra-op pool (:func:`offload_helpers.flush_denormals`). Writes
``bench_offload.json``, ``bench_offload.md`` and, with matplotlib, ``bench_offload.png``.

``--cpu-adamw`` (:func:`run_cpu_adamw`) needs no GPU: fused CPU AdamW over normal and
denormal-heavy state, with each way of flushing denormals side by side.

The models (:func:`offload_helpers.bench_model`), the denormal flush and the torchao
import (:func:`offload_helpers.import_cpu_offload`: ``torchao.optim`` or
``torchao.prototype.low_bit_optim``) come from the offload suite's own helper module,
``suites/offload/offload_helpers.py``, loaded by path (:func:`suite_helpers`): the
benchmark measures what the suite tests, and there is one copy of each. That module stays
in the suite because it runs inside cell envs and in a bare subprocess (it imports torch
only, never accelgrid).

torch, torchao and the helpers are imported inside :func:`run`, so importing this module
is cheap and works on any host; without a CUDA or XPU device (or without torch or torchao)
:func:`run` raises :class:`NotRunnable`, exit code 2.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import importlib.util
import inspect
import math
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .. import devices
from ..base.errors import EXIT_INVALID, AccelgridError, InvalidInput
from ..devices.backends import dispatch
from . import write_outputs

if TYPE_CHECKING:  # an annotation only: running the benchmark loads no matrix
    from ..config.model import Matrix

MODES = ("none", "offload", "offload_grad")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
# The built-in device types torchao's CPUOffloadOptimizer runs on (DeviceType.offload), in
# the order torchao itself picks them (cuda, else xpu).
DEVICES = ("auto", *(d.name for d in devices.BUILTIN if d.offload))
MODELS = ("transformer", "mlp", "mlp-gelu")  # offload_helpers.BENCH_MODELS
DEFAULT_MODELS = "transformer,mlp"
FLUSH = {"off": (False,), "on": (True,), "both": (False, True),
         "auto": ()}  # auto: both for mlp-gelu (the denormal case), else off


def flushes(flush: str, model_kind: str) -> tuple[bool, ...]:
    """The flush settings each offload run of ``model_kind`` is measured with."""
    if flush == "auto":
        return FLUSH["both"] if model_kind == "mlp-gelu" else FLUSH["off"]
    return FLUSH[flush]
GiB = 2**30
DEFAULT_SIZES = "0.1,0.5,1"
CPU_ADAMW_NUMEL = 2**26  # elements per case of --cpu-adamw (4 tensors; 1 GiB per fp32 copy)
DEFAULT_OUT = Path("results/bench-offload")
SUITE = "offload"
HELPERS = "offload_helpers.py"
_HELPERS_MODULE = "accelgrid_offload_suite_helpers"  # its name in sys.modules


class NotRunnable(AccelgridError):
    """This host cannot run the benchmark: no CUDA/XPU device, no torch or no torchao."""

    return_code = EXIT_INVALID


def split_list(value: str, allowed: Sequence[str] | None, what: str) -> list[str]:
    """The items of a comma-separated option; InvalidInput when empty or not in ``allowed``."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    _check(items, allowed, what, value)
    return items


def _check(items: Sequence[str], allowed: Sequence[str] | None, what: str, shown: str) -> None:
    if not items or any(allowed is not None and v not in allowed for v in items):
        choose = f"; choose from {', '.join(allowed)}" if allowed is not None else ""
        raise InvalidInput(f"bad --{what} {shown!r}{choose}")


def parse_sizes(value: str) -> list[float]:
    """``--sizes``: positive, finite numbers of billions of parameters."""
    try:
        sizes = [float(s) for s in split_list(value, None, "sizes")]
    except ValueError:
        sizes = []
    if not sizes or any(not math.isfinite(s) or s <= 0 for s in sizes):
        raise InvalidInput(f"bad --sizes {value!r}: positive numbers (billions of "
                           "parameters), comma-separated")
    return sizes


def suite_dir(matrix: Matrix) -> Path:
    """The offload suite's folder: its path in the matrix, else ``suites/offload``."""
    suite = matrix.suites.get(SUITE)
    return matrix.root / (suite.path if suite is not None else f"suites/{SUITE}")


def suite_helpers(folder: Path) -> ModuleType:
    """``offload_helpers`` of the suite in ``folder``, imported by path (suites/ is not a
    package; the module imports torch); loaded again only for another folder."""
    path = (Path(folder) / HELPERS).resolve()
    loaded = sys.modules.get(_HELPERS_MODULE)
    if loaded is not None and Path(loaded.__file__ or "") == path:
        return loaded
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file (the offload suite's helpers, where "
                           "bench offload gets its model and torchao import)")
    spec = importlib.util.spec_from_file_location(_HELPERS_MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_HELPERS_MODULE] = module  # dataclasses look their module up while loading
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_HELPERS_MODULE]
        raise
    return module


def _log(msg: str) -> None:
    print(f"[bench offload] {msg}", flush=True)


def pick_device(torch: Any, wanted: str, helpers: ModuleType) -> tuple[str | None, str]:
    """(device, "") or (None, why not); ``auto`` picks cuda, else xpu, as torchao does."""
    has = {d.name: d.available(torch) for d in devices.TYPES.values() if d.offload}
    if wanted == "auto":
        for name, present in has.items():
            if present:
                return name, ""
        named = " or ".join(n.upper() for n in has)
        return None, (
            f"no {named} device; CPUOffloadOptimizer supports only "
            f"{' and '.join(n.upper() for n in has)} ({helpers.AO_958})"
        )
    if not has.get(wanted):
        return None, f"--device {wanted} requested but torch {torch.__version__} sees none"
    return wanted, ""


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
            moved = _offloaded_numel(model, offload_cls) * next(model.parameters()).element_size()
        x = helpers.bench_input(model_kind, tokens, width, device, dtype)
        dispatch("synchronize", device)
        dispatch("reset_peak_memory_stats", device)
        times = []
        for i in range(warmup + steps):
            dispatch("synchronize", device)
            t0 = time.perf_counter()
            helpers.bench_loss(model_kind, model(x)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            dispatch("synchronize", device)
            if i >= warmup:
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
        if flush:
            helpers.flush_denormals(False)
        row.update(denormals(torch, helpers, model, optimizer, x, device, model_kind))
        share = row.get("grad_sq_denormal")
        if model_kind == "mlp-gelu" and not (share is not None and share >= helpers.DENORMAL_MIN):
            # The denormal case is the point of this model: a run where it is not fails.
            row["error"] = (f"mlp-gelu is not the denormal case here: {_pct(share)} of squared "
                            f"gradients denormal (the bench needs >= "
                            f"{helpers.DENORMAL_MIN:.0%})")
    except Exception as exc:  # keep going: one OOM should not lose the other rows
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        if flush:
            helpers.flush_denormals(False)
        del model, optimizer, x
        _free(torch, device)
    return row


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


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _pct(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.1%}" if value >= 0.001 or value == 0 else f"{value:.1e}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per run; saving is relative to the ``none`` run of the same model, size and
    dtype. ``flush``: denormals flushed in the CPU optimizer's threads (offload modes)."""
    def group(r: dict[str, Any]) -> tuple:
        return (r.get("model", "mlp"), r["size_b"], r["dtype"])

    plain = {group(r): r.get("peak_gib") for r in rows if r["mode"] == "none"}
    lines = [
        "| model | params | dtype | mode | flush | peak GiB | saving | step ms "
        "| GB moved each way | floor ms | step / floor | grad² denormal | v denormal "
        "| host RSS GiB |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        params = f"{r['params'] / 1e9:.3g} B" if "params" in r else f"~{r['size_b']} B"
        flush = "on" if r.get("flush_denormals") else "off"
        head = f"| {r.get('model', 'mlp')} | {params} | {r['dtype']} | {r['mode']} | {flush} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} |" + " |" * 7 + f" {_rss(r)} |")
            continue
        ref = plain.get(group(r))
        saving = 1 - r["peak_gib"] / ref if ref and r["mode"] != "none" else None
        lines.append(
            f"{head} {r['peak_gib']:.2f} | {_fmt(saving, '.0%')} | {r['step_ms']:.1f} "
            f"| {r['bytes_each_way'] / 1e9:.2f} | {r['floor_ms']:.1f} "
            f"| {_fmt(r['step_over_floor'], '.2f')} | {_pct(r.get('grad_sq_denormal'))} "
            f"| {_pct(r.get('state_denormal'))} | {_rss(r)} |"
        )
    return "\n".join(lines) + "\n"


def _rss(row: dict[str, Any]) -> str:
    """The row's process's peak host RSS (GiB), ``≤ x`` where only a bound is known."""
    if row.get("host_rss_peak_gib") is not None:
        return f"{row['host_rss_peak_gib']:.2f}"
    bound = row.get("host_rss_peak_at_most_gib")
    return f"≤ {bound:.2f}" if bound is not None else "–"


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

    def group(r: dict[str, Any]) -> tuple:
        return (r.get("model", "mlp"), r["size_b"], r["dtype"])

    def series(r: dict[str, Any]) -> str:
        return r["mode"] + ("+flush" if r.get("flush_denormals") else "")

    groups = sorted({group(r) for r in ok})
    names = [m + f for m in MODES for f in ("", "+flush") if any(series(r) == m + f for r in ok)]
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(13, 4.5))
    bar = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs, mem, step, floor = [], [], [], []
        for i, g in enumerate(groups):
            for r in ok:
                if group(r) == g and series(r) == name:
                    xs.append(i + (j - (len(names) - 1) / 2) * bar)
                    mem.append(r["peak_gib"])
                    step.append(r["step_ms"])
                    floor.append(r["floor_ms"])
        ax_mem.bar(xs, mem, bar, label=name)
        ax_time.bar(xs, step, bar, label=name)
        if name != "none":
            floor_label = "transfer floor" if name == names[-1] else None
            ax_time.scatter(
                xs, floor, marker="_", s=200, color="black", zorder=3, label=floor_label
            )
    labels = [f"{m}\n{s} B {d}" for m, s, d in groups]
    for ax, title in ((ax_mem, "peak device memory (GiB)"), (ax_time, "median step time (ms)")):
        ax.set_xticks(range(len(groups)), labels)
        ax.set_title(title)
        ax.legend()
    ax_time.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --- one process per configuration -------------------------------------------------------
# Every measurement runs in a fresh Python process that exits when it is done: whatever a
# configuration leaves in host memory (pinned blocks cached by torch's host allocator,
# CPU optimizer states kept by reference cycles of torchao's gradient hooks, freed memory
# glibc's per-thread arenas keep) goes back to the system with it, so run 13 of 20 sees
# the memory run 1 saw. A process the kernel's OOM killer ends is that row's outcome.
# It reports its own peak resident set with its result (each row's host memory, so growth
# from one configuration to the next shows in the records): VmHWM, the high-water mark of
# its own address space; not ru_maxrss, which a child forked from the bench starts at the
# bench's own size (Linux keeps it across exec). None where /proc has no VmHWM.
_CHILD = (
    "import importlib, json, re, sys\n"
    "module, name = sys.argv[1].rsplit(':', 1)\n"
    "task = json.loads(open(sys.argv[2], encoding='utf-8').read())\n"
    "result = getattr(importlib.import_module(module), name)(task)\n"
    "try:\n"
    "    status = open('/proc/self/status', encoding='utf-8').read()\n"
    "    result['host_rss_peak_kib'] = int(re.search(r'VmHWM:\\s*(\\d+)', status)[1])\n"
    "except (OSError, TypeError):\n"
    "    result['host_rss_peak_kib'] = None\n"
    "with open(sys.argv[3], 'w', encoding='utf-8') as fh:\n"
    "    json.dump(result, fh)\n"
)


def _children_peak_kib() -> int:
    """The largest ``ru_maxrss`` of this process's waited-for children, in KiB (Linux):
    an upper bound of each one's own peak."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def isolated(task: dict[str, Any], target: str) -> dict[str, Any]:
    """``target(task)`` (``module:function``, returning a JSON-able dict) in a new Python
    process (its own process group, stopped with the caller); its result, or
    ``{"error": ...}`` saying how the process died: a signal (SIGKILL: most likely the
    kernel's OOM killer), an exit status with the last line it printed. Either way with
    ``host_rss_peak_gib``, the process's peak resident set (its own figure; None where it
    gave none), and for one that died ``host_rss_peak_at_most_gib``: its peak was at most
    the largest ``ru_maxrss`` of this process's children so far."""
    import json
    import tempfile

    from ..base import lifetime

    with tempfile.TemporaryDirectory(prefix="accelgrid-offload-") as tmp:
        task_path, result_path = Path(tmp) / "task.json", Path(tmp) / "result.json"
        task_path.write_text(json.dumps(task), encoding="utf-8")
        done = lifetime.run_group([sys.executable, "-c", _CHILD, target, str(task_path),
                                   str(result_path)])
        for line in done.stdout.splitlines():  # its progress lines, as they would be
            print(line, file=sys.stderr, flush=True)
        if done.returncode == 0 and result_path.is_file():
            try:
                result = json.loads(result_path.read_text(encoding="utf-8"))
            except ValueError as exc:
                result = {"error": f"its result could not be read: {exc}"}
            kib = result.pop("host_rss_peak_kib", None)
            return {**result, "host_rss_peak_gib": None if kib is None else kib / 2**20}
    return {**_died(done), "host_rss_peak_gib": None,
            "host_rss_peak_at_most_gib": _children_peak_kib() / 2**20}


def _died(done: Any) -> dict[str, Any]:
    """How a configuration's process that left no result ended."""
    import signal

    if done.returncode < 0:
        sig = -done.returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
        why = " (most likely the kernel's OOM killer: host memory ran out)" \
            if sig == signal.SIGKILL else ""
        return {"error": f"killed by {name}{why}", "killed": True}
    last = [ln for ln in done.stdout.splitlines() if ln.strip()][-1:] or ["no output"]
    return {"error": f"its process exited with {done.returncode}: {last[0][:200]}"}


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


def run(
    sizes: Sequence[float],
    dtypes: Sequence[str],
    modes: Sequence[str],
    *,
    suite: Path,
    device: str = "auto",
    steps: int = 10,
    warmup: int = 2,
    width: int = 4096,
    tokens: int = 1024,
    copy_mib: int = 1024,
    out: str | Path = DEFAULT_OUT,
    plot_png: bool = True,
    models: Sequence[str] = ("transformer", "mlp"),
    flush: str = "auto",
    target: str = f"{__name__}:measure_task",
) -> dict[str, Any]:
    """Run the benchmark, each measurement in its own process (:func:`isolated`;
    ``target``: the function those processes call, :func:`measure_task`), writing
    ``bench_offload.{json,md}`` to ``out`` after each row (and the png at the end), and
    return the report (``meta``, ``bandwidth``, ``results``: one row per run, with ``error`` where a
    run failed, e.g. out of memory; the other runs still go on).

    ``models``: from :data:`MODELS`. ``flush``: ``off``, ``on`` or ``both`` (each offload
    run once without and once with denormals flushed in the CPU optimizer's threads; the
    ``none`` runs, whose optimizer is on the device, only without).

    ``suite``: the offload suite's folder (:func:`suite_dir`). Raises InvalidInput for bad
    arguments, NotRunnable (exit 2) without torch, a CUDA/XPU device or torchao's
    CPUOffloadOptimizer.
    """
    _check(dtypes, tuple(DTYPES), "dtypes", ",".join(dtypes))
    _check(modes, MODES, "modes", ",".join(modes))
    _check([device], DEVICES, "device", device)
    _check(models, MODELS, "models", ",".join(models))
    _check([flush], tuple(FLUSH), "flush-denormals", flush)
    problems = [f"--{name} must be >= {least}, not {value}" for name, value, least in (
        ("steps", steps, 1), ("warmup", warmup, 0), ("width", width, 1), ("tokens", tokens, 1),
        ("copy-mib", copy_mib, 1)) if value < least]
    if not sizes or any(not math.isfinite(s) or s <= 0 for s in sizes):
        problems.insert(0, f"--sizes must be positive numbers, not {list(sizes)}")
    if problems:
        raise InvalidInput("; ".join(problems))

    try:
        import torch
    except ImportError as exc:
        raise NotRunnable("torch is not installed") from exc
    helpers = suite_helpers(suite)
    picked, why = pick_device(torch, device, helpers)
    if picked is None:
        raise NotRunnable(why)
    try:
        offload_cls = helpers.import_cpu_offload()
    except helpers.OffloadUnavailable as exc:
        raise NotRunnable(f"torchao's CPUOffloadOptimizer is unavailable ({exc})") from exc
    del offload_cls  # the measurements import it in their own processes

    first = isolated({"kind": "bandwidth", "suite": str(suite), "device": picked,
                      "nbytes": copy_mib * 2**20}, target)
    if "error" in first:
        raise AccelgridError(f"measuring the pinned copy bandwidth failed: {first['error']}")
    ao_version, name, bandwidth = first["torchao"], first["device_name"], first["bandwidth"]
    _log(f"torch {first['torch']}, torchao {ao_version}, {picked}: {name}")
    _log(
        f"pinned copies: host->device {bandwidth['h2d_gbps']:.1f} GB/s, "
        f"device->host {bandwidth['d2h_gbps']:.1f} GB/s"
    )

    rows: list[dict[str, Any]] = []
    plan = [(k, s, d, m, f) for k in models for d in dtypes for s in sorted(sizes) for m in modes
            for f in flushes(flush, k) if not (f and m == "none")]
    started = time.perf_counter()
    meta = {
        "torch": first["torch"],
        "torchao": ao_version,
        "device": picked,
        "device_name": name,
        "host": platform.node(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "width": width,
        "tokens": tokens,
        "steps": steps,
        "warmup": warmup,
        "models": list(models),
        "flush_denormals": flush,
        "intra_op_threads": first["threads"],
        "planned": len(plan),
        "one_process_per_run": True,
    }
    header = (
        f"torch {meta['torch']}, torchao {meta['torchao']}, {name}; pinned copies "
        f"H2D {bandwidth['h2d_gbps']:.1f} GB/s, D2H {bandwidth['d2h_gbps']:.1f} GB/s; "
        f"{tokens} x {width} batch (transformer: sequences of {first['bench_seq']}; "
        f"mlp-gelu: {helpers.DENORMAL_BATCH} rows, its width and depth from the size, in "
        "the JSON), median "
        f"of {steps} steps, {first['threads']} CPU threads, each run in its own process. "
        "grad² denormal: share of "
        "gradient elements whose square is a denormal float; v denormal: share of Adam's "
        "exp_avg_sq that is one; flush: denormals flushed to zero in every thread of the "
        "CPU optimizer; host RSS: the peak resident set of the run's process.\n\n"
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for n, (kind, size_b, dtype_name, mode, flushed) in enumerate(plan, 1):
        args = {"size_b": size_b, "dtype_name": dtype_name, "mode": mode, "width": width,
                "tokens": tokens, "steps": steps, "warmup": warmup, "bandwidth": bandwidth,
                "model_kind": kind, "flush": flushed}
        row = isolated({"kind": "row", "suite": str(suite), "device": picked, "args": args},
                       target)
        if "error" in row and "model" not in row:  # the process died: the row says how
            row = {"model": kind, "size_b": size_b, "dtype": dtype_name, "mode": mode,
                   "flush_denormals": flushed, **row}
        rows.append(row)
        # Each row as it ends: a later run killed (or the whole bench) loses nothing.
        write_outputs(out, "bench_offload", {"meta": meta, "bandwidth": bandwidth,
                                             "results": rows}, header + markdown_table(rows))
        head = (f"[{n}/{len(plan)}] {kind} {size_b} B {dtype_name} {mode}"
                f"{' flush' if flushed else ''}:")
        if "error" in row:
            _log(f"{head} {row['error']}")
        else:
            _log(
                f"{head} {row['params'] / 1e9:.3g} B params, peak {row['peak_gib']:.2f} GiB, "
                f"step {row['step_ms']:.1f} ms (floor {row['floor_ms']:.1f} ms), grad² "
                f"denormal {_pct(row.get('grad_sq_denormal'))}, host RSS {_rss(row)} GiB "
                f"[{time.perf_counter() - started:.0f} s]"
            )

    report = {"meta": meta, "bandwidth": bandwidth, "results": rows}
    table = markdown_table(rows)
    write_outputs(out, "bench_offload", report, header + table)
    print(table, flush=True)
    if plot_png and plot(rows, out / "bench_offload.png"):
        _log(f"wrote {out / 'bench_offload.png'}")
    _log(f"wrote {out / 'bench_offload.json'} and {out / 'bench_offload.md'}")
    return report


def failed(report: dict[str, Any]) -> bool:
    """Whether a run of the report failed (``accelgrid bench offload`` then exits 1)."""
    return any("error" in r for r in report["results"])


# --- fused CPU AdamW over denormal floats (no device needed) --------------------------------

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
    _log(f"fused CPU AdamW over {numel:,} fp32 elements, {threads} threads, "
         f"torch {torch.__version__}")
    rows = []
    for case, (scale, how, case_threads) in CPU_ADAMW_CASES.items():
        torch.set_num_threads(case_threads or threads)
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
            for i in range(warmup + steps):
                t0 = time.perf_counter()
                optimizer.step()
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            share = helpers.flushed_share()
        finally:
            helpers.flush_denormals(False)
            torch.set_num_threads(threads)
        second = [optimizer.state[p]["exp_avg_sq"] for p in params]
        rows.append({"case": case, "threads": case_threads or threads, "flush": method,
                     "step_ms": statistics.median(times) * 1e3,
                     "min_step_ms": min(times) * 1e3, "flushed_share": share,
                     "state_denormal": helpers.denormal_fraction(second)})
        del optimizer, params, second
        _log(f"{case}: {rows[-1]['step_ms']:.1f} ms (flushed share {share:.2f})")
    report = {"meta": {"torch": torch.__version__, "numel": numel, "threads": threads,
                       "steps": steps, "warmup": warmup, "host": platform.node(),
                       "cpu": platform.processor() or platform.machine(),
                       "date": datetime.datetime.now(datetime.UTC).isoformat(
                           timespec="seconds")},
              "results": rows}
    lines = ["| case | threads | flush | step ms (median) | min | flushed share | v denormal |",
             "|---|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['threads']} | {r['flush']} | {r['step_ms']:.1f} "
              f"| {r['min_step_ms']:.1f} | {r['flushed_share']:.2f} "
              f"| {_pct(r['state_denormal'])} |" for r in rows]
    table = "\n".join(lines) + "\n"
    write_outputs(out, "bench_offload_cpu_adamw", report,
                  f"torch {torch.__version__}, {numel:,} fp32 elements in 4 tensors, median "
                  f"of {steps} steps.\n\n" + table)
    print(table, flush=True)
    return report
