"""The seed's table (``data/seed_000_ops.json``: which ops fell back or were missing on
the XPU build the seed ran) against the XPU prediction: per seed row the captured calls
that exercise it, their worst predicted status and whether it agrees (:func:`compare_with_seed`),
the figures of docs/devices/xpu-prediction.md and the seed's Markdown table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..testing.opcapture import base_op, overload_family
from .xpu_data import load_seed, load_upstream, series_names
from .xpu_rules import FALLBACK_ERROR, FOREACH_COMPOSITES, predict_detail

# Worst first, for a seed row exercised by several captured overloads.
# A listed op without a CPU kernel fails even with PYTORCH_ENABLE_XPU_FALLBACK=1, where a
# missing op would run on the CPU: the worst.
SEVERITY = {FALLBACK_ERROR: 7, "missing": 6, "fallback": 5, "unknown": 4, "routed: cuda": 3,
            "routed: cpu": 2, "decomposed": 1, "native": 0}
SEED_EXPECTS = {"explicit": "fallback", "manual": "missing"}
# The seed ran pytorch/pytorch@21144ce (June 2024, before 2.4). torch-xpu-ops' release/2.4
# branched from its main on 2024-05-18 and ends 2024-06-04 (head 97d692e, "Add CPU fallback
# for GradScaler"): the state PyTorch pinned for 2.4, the only branch from that time.
# seed_series_agreement() backs this up: 2.4 is the series that agrees best with the seed.
SEED_SERIES = "2.4"


def _disagreement(expected: str, predicted: str) -> str:
    """Why a prediction differs from what the seed saw, as a category."""
    if predicted == "native":
        return "kernel-in-series"  # the release has a kernel the seed's build lacked
    if predicted == "decomposed":
        return "composite-in-series"  # the release runs a composite kernel (#127412, ...)
    if predicted == "fallback":
        return "on-fallback-list-in-series"  # seed: missing; the release lists it
    if predicted == "missing":
        return "not-on-fallback-list-in-series"  # seed: fell back; the release has no entry
    return "not-predictable"  # unknown


def compare_with_seed(captured: Mapping[str, Any] | Iterable[str], series: str = SEED_SERIES,
                      upstream: Mapping[str, Any] | None = None,
                      seed: Mapping[str, Any] | None = None,
                      core: Mapping[str, Any] | None = None,
                      torch_data: Mapping[str, Any] | None = None,
                      without_foreach_composites: bool = False) -> list[dict[str, Any]]:
    """Per seed row: the captured calls that exercise it, the prediction for ``series``,
    and whether it agrees with what the seed saw (explicit = fallback, manual = missing).

    A row is exercised by captured ops with its base op, or routed to one with it
    (``cudnn_batch_norm`` stands for ``native_batch_norm`` with that op's prediction);
    where several rows share a base op (``_foreach_mul.Scalar`` / ``.Tensor``) the
    overload family must match too. A row hit by several calls takes their worst
    prediction. Unexercised rows get ``agree: None`` and reason ``not-exercised``; they do
    not count in :func:`agreement_line`."""
    seed = load_seed() if seed is None else seed
    names = list(captured.keys() if isinstance(captured, Mapping) else captured)
    detail = predict_detail(names, series, upstream, core, torch_data,
                            without_foreach_composites)
    # What each call stands for on XPU: itself, or the op XPU calls instead.
    stands = {op: (d.get("xpu_op", op), d.get("xpu_status", d["status"]))
              for op, d in detail.items()}
    rows = seed["rows"]
    per_base: dict[str, int] = {}
    for row in rows:
        per_base[base_op(row["op"])] = per_base.get(base_op(row["op"]), 0) + 1
    out = []
    for row in rows:
        base, family = base_op(row["op"]), overload_family(row["op"])
        hits = sorted(op for op, (name, _) in stands.items() if base_op(name) == base
                      and (per_base[base] == 1 or overload_family(name) == family))
        expected = SEED_EXPECTS[row["status"]]
        result: dict[str, Any] = {"op": row["op"], "seed": row["status"], "expected": expected,
                                  "examples": row["examples"], "captured": hits,
                                  "predictions": {op: stands[op][1] for op in hits}}
        if not hits:
            result.update(predicted=None, agree=None, reason="not-exercised")
        else:
            worst = max((stands[op][1] for op in hits), key=SEVERITY.__getitem__)
            agree = worst == expected
            result.update(predicted=worst, agree=agree,
                          reason="agree" if agree else _disagreement(expected, worst))
        out.append(result)
    return out


def agreement_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """``Agreement with the seed's table: N of M rows (P %)`` over the exercised rows."""
    judged = [r for r in rows if r.get("agree") is not None]
    n, m = sum(1 for r in judged if r["agree"]), len(judged)
    pct = round(100 * n / m) if m else 0
    return f"Agreement with the seed's table: {n} of {m} rows ({pct} %)"


def seed_rows(series: str = SEED_SERIES, upstream: Mapping[str, Any] | None = None,
              seed: Mapping[str, Any] | None = None, core: Mapping[str, Any] | None = None,
              torch_data: Mapping[str, Any] | None = None,
              without_foreach_composites: bool = False) -> list[dict[str, Any]]:
    """The seed's rows predicted by their own names for ``series`` (no capture needed)."""
    seed = load_seed() if seed is None else seed
    return compare_with_seed([row["op"] for row in seed["rows"]], series, upstream, seed,
                             core, torch_data, without_foreach_composites)


def seed_series_agreement(upstream: Mapping[str, Any] | None = None,
                          seed: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None,
                          torch_data: Mapping[str, Any] | None = None,
                          without_foreach_composites: bool = True
                          ) -> dict[str, tuple[int, int]]:
    """Per series, how many of the seed's rows its data reproduce: ``(agree, rows)``, each
    row predicted by its own name. Evidence for which release stands for the seed's
    nightly; by default with the foreach composites taken away, as in that nightly."""
    upstream = load_upstream() if upstream is None else upstream
    out = {}
    for s in series_names(upstream):
        rows = seed_rows(s, upstream, seed, core, torch_data, without_foreach_composites)
        out[s] = (sum(1 for r in rows if r["agree"]), len(rows))
    return out


def seed_figures(upstream: Mapping[str, Any] | None = None,
                 seed: Mapping[str, Any] | None = None, core: Mapping[str, Any] | None = None,
                 torch_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The two seed figures of docs/devices/xpu-prediction.md: the seed against the torch it ran
    (the pre-#127412 nightly: release 2.4 without the foreach composites) and the seed's
    rows predicted for the 2.4.x release, each as its one line, with the rows that differ."""
    nightly = seed_rows(SEED_SERIES, upstream, seed, core, torch_data, True)
    release = seed_rows(SEED_SERIES, upstream, seed, core, torch_data, False)
    differ = [r for r in release if r["agree"] is False]
    n, m = sum(1 for r in nightly if r["agree"]), len(nightly)
    k, j = sum(1 for r in release if r["agree"]), len(release)
    return {
        "nightly": nightly, "release": release, "release_differs": differ,
        "nightly_line": (f"Seed against the nightly it ran (release {SEED_SERIES} data before "
                         f"{FOREACH_COMPOSITES}): {n} of {m} rows ({round(100 * n / m)} %)"),
        "release_line": (f"Seed's rows predicted for the {SEED_SERIES}.x release: {k} of {j} "
                         f"rows agree ({round(100 * k / j)} %); {len(differ)} differ"),
    }


def seed_table(rows: Iterable[Mapping[str, Any]], series: str) -> str:
    """The seed's rows: what it saw, the captured calls, the prediction, agree or why not."""
    lines = [f"| seed row | seed saw | captured calls | predicted ({series}) | agrees | reason |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        calls = ", ".join(f"`{op}`" for op in r["captured"]) or "—"
        agrees = {True: "yes", False: "no", None: "—"}[r["agree"]]
        lines.append(f"| `{r['op']}` | {r['seed']} ({r['expected']}) | {calls} | "
                     f"{r['predicted'] or '—'} | {agrees} | {r['reason']} |")
    return "\n".join(lines) + "\n"
