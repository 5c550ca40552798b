"""Out-of-sample checks of the XPU prediction: dated upstream observations of single ops
on XPU builds (``data/xpu_observations.json``, issues and PRs), each predicted as of its
build (a release by its series' data; a nightly by torch-xpu-ops' main on its date,
``data/xpu_ops_nightly.json``) and counted in docs/devices/xpu-prediction.md's agreement line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.errors import InvalidInput
from .xpu_data import load_nightlies, load_observations, load_upstream, series_names
from .xpu_rules import NIGHTLY_BEFORE_127412, predict_detail


def predict_observation(obs: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                        nightlies: Mapping[str, Any] | None = None,
                        core: Mapping[str, Any] | None = None,
                        torch_data: Mapping[str, Any] | None = None) -> dict[str, str]:
    """One observation's prediction: a release by its series' data; a nightly by
    torch-xpu-ops' main on its date with the yaml of the release it led to, and without
    the foreach composites before :data:`NIGHTLY_BEFORE_127412`."""
    upstream = load_upstream() if upstream is None else upstream
    series = obs.get("series") or nightly_series(obs["date"], upstream)
    if obs.get("build") == "nightly":
        nightlies = load_nightlies() if nightlies is None else nightlies
        try:
            entry = nightlies["nightlies"][obs["date"]]
        except KeyError:
            raise InvalidInput(f"no torch-xpu-ops snapshot for the nightly of {obs['date']} "
                               "(tools/extract_xpu_ops.py --nightly)") from None
        upstream = {"series": {series: entry}}
        before = obs["date"] < NIGHTLY_BEFORE_127412
    else:
        before = False
    detail = predict_detail([obs["op"]], series, upstream, core, torch_data, before,
                            routing=False)
    return detail[obs["op"]]


def nightly_series(date: str, upstream: Mapping[str, Any] | None = None) -> str:
    """The release a nightly of ``date`` led to: the first series whose torch-xpu-ops
    release branch ends on or after that date (the branch is cut from main then)."""
    upstream = load_upstream() if upstream is None else upstream
    for s in series_names(upstream):
        if upstream["series"][s].get("date", "") >= date:
            return s
    return series_names(upstream)[-1]


def observation_agreement(observations: Mapping[str, Any] | None = None,
                          **data: Any) -> tuple[list[dict[str, Any]], str]:
    """Every observation with its prediction and ``agree``, and the line
    ``Agreement with upstream observations: N of M (P %)``."""
    observations = load_observations() if observations is None else observations
    rows = []
    for obs in observations["observations"]:
        pred = predict_observation(obs, **data)
        rows.append(dict(obs) | {"predicted": pred["status"], "rule": pred["rule"],
                                 "agree": pred["status"] == obs["observed"]})
    n, m = sum(1 for r in rows if r["agree"]), len(rows)
    pct = round(100 * n / m) if m else 0
    return rows, f"Agreement with upstream observations: {n} of {m} ({pct} %)"
