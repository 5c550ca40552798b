"""What ``accelgrid bench offload`` prints and writes: its progress lines, the Markdown
table and header of ``bench_offload.md``, and the PNG (peak memory and step time per run).

The rows are :func:`accelgrid.bench.offload_measure.run_one`'s; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def log(msg: str) -> None:
    """One progress line of the bench."""
    print(f"[bench offload] {msg}", flush=True)


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def pct(value: Any) -> str:
    """A share as a percentage (``0.5%``), a tiny one in scientific notation, None as –."""
    if value is None:
        return "–"
    return f"{value:.1%}" if value >= 0.001 or value == 0 else f"{value:.1e}"


def rss(row: dict[str, Any]) -> str:
    """The row's process's peak host RSS (GiB), ``≤ x`` where only a bound is known."""
    if row.get("host_rss_peak_gib") is not None:
        return f"{row['host_rss_peak_gib']:.2f}"
    bound = row.get("host_rss_peak_at_most_gib")
    return f"≤ {bound:.2f}" if bound is not None else "–"


def header(meta: dict[str, Any], bandwidth: dict[str, float], bench_seq: int,
           denormal_batch: int) -> str:
    """bench_offload.md's first paragraph: the versions, the device and its copy bandwidth,
    the batch (``bench_seq``: the transformer's sequence length; ``denormal_batch``:
    mlp-gelu's rows) and what the columns mean."""
    return (
        f"torch {meta['torch']}, torchao {meta['torchao']}, {meta['device_name']}; pinned "
        f"copies H2D {bandwidth['h2d_gbps']:.1f} GB/s, D2H {bandwidth['d2h_gbps']:.1f} GB/s; "
        f"{meta['tokens']} x {meta['width']} batch (transformer: sequences of {bench_seq}; "
        f"mlp-gelu: {denormal_batch} rows, its width and depth from the size, in "
        "the JSON), median "
        f"of {meta['steps']} steps, {meta['intra_op_threads']} CPU threads, each run in its "
        "own process. grad² denormal: share of "
        "gradient elements whose square is a denormal float; v denormal: share of Adam's "
        "exp_avg_sq that is one; flush: denormals flushed to zero in every thread of the "
        "CPU optimizer; host RSS: the peak resident set of the run's process.\n\n"
    )


def _group(r: dict[str, Any]) -> tuple[str, float, str]:
    """The runs a saving is relative to, and a plot's bar group: model, size and dtype."""
    return (r.get("model", "mlp"), r["size_b"], r["dtype"])


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per run; saving is relative to the ``none`` run of the same model, size and
    dtype. ``flush``: denormals flushed in the CPU optimizer's threads (offload modes)."""
    plain = {_group(r): r.get("peak_gib") for r in rows if r["mode"] == "none"}
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
            lines.append(f"{head} {r['error']} |" + " |" * 7 + f" {rss(r)} |")
            continue
        ref = plain.get(_group(r))
        saving = 1 - r["peak_gib"] / ref if ref and r["mode"] != "none" else None
        lines.append(
            f"{head} {r['peak_gib']:.2f} | {_fmt(saving, '.0%')} | {r['step_ms']:.1f} "
            f"| {r['bytes_each_way'] / 1e9:.2f} | {r['floor_ms']:.1f} "
            f"| {_fmt(r['step_over_floor'], '.2f')} | {pct(r.get('grad_sq_denormal'))} "
            f"| {pct(r.get('state_denormal'))} | {rss(r)} |"
        )
    return "\n".join(lines) + "\n"


def _series(r: dict[str, Any]) -> str:
    return r["mode"] + ("+flush" if r.get("flush_denormals") else "")


def plot(rows: list[dict[str, Any]], path: Path, modes: Sequence[str]) -> bool:
    """Peak memory and step time per run, its series in the order of ``modes``; False
    (with a message) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed; skipping the PNG")
        return False
    ok = [r for r in rows if "error" not in r]
    groups = sorted({_group(r) for r in ok})
    names = [m + f for m in modes for f in ("", "+flush")
             if any(_series(r) == m + f for r in ok)]
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(13, 4.5))
    bar = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs, mem, step, floor = [], [], [], []
        for i, g in enumerate(groups):
            for r in ok:
                if _group(r) == g and _series(r) == name:
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
