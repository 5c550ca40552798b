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

``--cpu-adamw`` (:func:`accelgrid.bench.offload_cpu_adamw.run_cpu_adamw`) needs no GPU:
fused CPU AdamW over normal and denormal-heavy state, with each way of flushing denormals
side by side.

This module holds the options, the suite's helpers and :func:`run`; each measurement
(:mod:`.offload_measure`) runs in a process of its own (:mod:`.offload_process`), and
:mod:`.offload_report` writes the progress lines, the Markdown table and the PNG.

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
import importlib.util
import math
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .. import devices
from ..base.errors import EXIT_INVALID, AccelgridError, InvalidInput
from . import write_outputs
from .offload_process import isolated
from .offload_report import header, log, markdown_table, pct, plot, rss

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


DEFAULT_SIZES = "0.1,0.5,1"
DEFAULT_OUT = Path("results/bench-offload")
SUITE = "offload"
HELPERS = "offload_helpers.py"
_HELPERS_MODULE = "accelgrid_offload_suite_helpers"  # its name in sys.modules
# What each measurement's process runs (offload_measure imports this module: named, not
# imported, here).
MEASURE_TASK = "accelgrid.bench.offload_measure:measure_task"


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
    target: str = MEASURE_TASK,
) -> dict[str, Any]:
    """Run the benchmark, each measurement in its own process (:func:`isolated`;
    ``target``: the function those processes call,
    :func:`accelgrid.bench.offload_measure.measure_task`), writing
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
    _check_arguments(sizes, dtypes, modes, device, models, flush, (
        ("steps", steps, 1), ("warmup", warmup, 0), ("width", width, 1), ("tokens", tokens, 1),
        ("copy-mib", copy_mib, 1)))
    picked, helpers = _runnable(suite, device)
    first = _first(suite, picked, copy_mib, target)
    bandwidth = first["bandwidth"]
    plan = [(k, s, d, m, f) for k in models for d in dtypes for s in sorted(sizes) for m in modes
            for f in flushes(flush, k) if not (f and m == "none")]
    started = time.perf_counter()
    meta = {
        "torch": first["torch"], "torchao": first["torchao"], "device": picked,
        "device_name": first["device_name"], "host": platform.node(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "width": width, "tokens": tokens, "steps": steps, "warmup": warmup,
        "models": list(models), "flush_denormals": flush,
        "intra_op_threads": first["threads"], "planned": len(plan),
        "one_process_per_run": True,
    }
    head = header(meta, bandwidth, first["bench_seq"], helpers.DENORMAL_BATCH)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    task = {"kind": "row", "suite": str(suite), "device": picked}
    common = {"width": width, "tokens": tokens, "steps": steps, "warmup": warmup,
              "bandwidth": bandwidth}
    rows: list[dict[str, Any]] = []
    for n, item in enumerate(plan, 1):
        rows.append(_row(task, common, item, target))
        # Each row as it ends: a later run killed (or the whole bench) loses nothing.
        write_outputs(out, "bench_offload", {"meta": meta, "bandwidth": bandwidth,
                                             "results": rows}, head + markdown_table(rows))
        _log_row(f"[{n}/{len(plan)}]", item, rows[-1], started)
    report = {"meta": meta, "bandwidth": bandwidth, "results": rows}
    table = markdown_table(rows)
    write_outputs(out, "bench_offload", report, head + table)
    print(table, flush=True)
    if plot_png and plot(rows, out / "bench_offload.png", MODES):
        log(f"wrote {out / 'bench_offload.png'}")
    log(f"wrote {out / 'bench_offload.json'} and {out / 'bench_offload.md'}")
    return report


def _check_arguments(sizes: Sequence[float], dtypes: Sequence[str], modes: Sequence[str],
                     device: str, models: Sequence[str], flush: str,
                     counts: Sequence[tuple[str, int, int]]) -> None:
    """InvalidInput for a choice not offered, a size that is no positive number or one of
    ``counts`` (option, value, least) below its least."""
    _check(dtypes, tuple(DTYPES), "dtypes", ",".join(dtypes))
    _check(modes, MODES, "modes", ",".join(modes))
    _check([device], DEVICES, "device", device)
    _check(models, MODELS, "models", ",".join(models))
    _check([flush], tuple(FLUSH), "flush-denormals", flush)
    problems = [f"--{name} must be >= {least}, not {value}" for name, value, least in counts
                if value < least]
    if not sizes or any(not math.isfinite(s) or s <= 0 for s in sizes):
        problems.insert(0, f"--sizes must be positive numbers, not {list(sizes)}")
    if problems:
        raise InvalidInput("; ".join(problems))


def _runnable(suite: Path, device: str) -> tuple[str, ModuleType]:
    """The device to run on and the suite's helpers; NotRunnable without torch, such a
    device or torchao's CPUOffloadOptimizer."""
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
    return picked, helpers


def _first(suite: Path, picked: str, copy_mib: int, target: str) -> dict[str, Any]:
    """The pinned copy bandwidth and the facts of the report's header, measured in a
    process of their own; AccelgridError where that fails."""
    first = isolated({"kind": "bandwidth", "suite": str(suite), "device": picked,
                      "nbytes": copy_mib * 2**20}, target)
    if "error" in first:
        raise AccelgridError(f"measuring the pinned copy bandwidth failed: {first['error']}")
    bandwidth = first["bandwidth"]
    log(f"torch {first['torch']}, torchao {first['torchao']}, {picked}: {first['device_name']}")
    log(
        f"pinned copies: host->device {bandwidth['h2d_gbps']:.1f} GB/s, "
        f"device->host {bandwidth['d2h_gbps']:.1f} GB/s"
    )
    return first


def _row(task: dict[str, Any], common: dict[str, Any], item: tuple[str, float, str, str, bool],
         target: str) -> dict[str, Any]:
    """One configuration's row, measured in its own process: ``item`` is (model, size,
    dtype, mode, flush); a process that died gets a row saying how."""
    kind, size_b, dtype_name, mode, flushed = item
    args = {"size_b": size_b, "dtype_name": dtype_name, "mode": mode, "width": common["width"],
            "tokens": common["tokens"], "steps": common["steps"], "warmup": common["warmup"],
            "bandwidth": common["bandwidth"], "model_kind": kind, "flush": flushed}
    row = isolated({**task, "args": args}, target)
    if "error" in row and "model" not in row:  # the process died: the row says how
        row = {"model": kind, "size_b": size_b, "dtype": dtype_name, "mode": mode,
               "flush_denormals": flushed, **row}
    return row


def _log_row(count: str, item: tuple[str, float, str, str, bool], row: dict[str, Any],
             started: float) -> None:
    kind, size_b, dtype_name, mode, flushed = item
    head = f"{count} {kind} {size_b} B {dtype_name} {mode}{' flush' if flushed else ''}:"
    if "error" in row:
        log(f"{head} {row['error']}")
    else:
        log(
            f"{head} {row['params'] / 1e9:.3g} B params, peak {row['peak_gib']:.2f} GiB, "
            f"step {row['step_ms']:.1f} ms (floor {row['floor_ms']:.1f} ms), grad² "
            f"denormal {pct(row.get('grad_sq_denormal'))}, host RSS {rss(row)} GiB "
            f"[{time.perf_counter() - started:.0f} s]"
        )


def failed(report: dict[str, Any]) -> bool:
    """Whether a run of the report failed (``accelgrid bench offload`` then exits 1)."""
    return any("error" in r for r in report["results"])
