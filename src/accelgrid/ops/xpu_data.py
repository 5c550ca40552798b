"""The packaged upstream facts the XPU prediction reads (``src/accelgrid/data/``):
torch-xpu-ops' per-series kernels and fallback list (``xpu_ops.json``), PyTorch's
per-series dispatch facts (``torch_registrations.json``), its core XPU registrations
(``xpu_core_ops.json``), the seed's table, the dated upstream observations and the nightly
snapshots; and the torch series they cover (:func:`series_names`, :func:`data_horizon`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("accelgrid").joinpath("data", name)
                      .read_text(encoding="utf-8"))


def load_upstream() -> dict[str, Any]:
    """The packaged per-series extraction: ``{"series": {"2.4": {"branch", "commit",
    "native", "fallback", "sources", ...}}, ...}`` (see tools/extract_xpu_ops.py)."""
    return _read("xpu_ops.json")


def load_core() -> dict[str, Any]:
    """XPU kernels PyTorch itself registers outside its yaml, with their sources."""
    return _read("xpu_core_ops.json")


def load_seed() -> dict[str, Any]:
    """The seed's ops x examples table as extracted facts, with its provenance."""
    return _read("seed_000_ops.json")


def load_torch() -> dict[str, Any]:
    """PyTorch's per-series dispatch facts (tools/extract_torch_registrations.py): the
    first series whole, later ones as changes; :func:`torch_ops` rebuilds one series."""
    return _read("torch_registrations.json")


def load_observations() -> dict[str, Any]:
    """Dated upstream observations of single ops on XPU builds, with their links."""
    return _read("xpu_observations.json")


def load_nightlies() -> dict[str, Any]:
    """torch-xpu-ops' main as of each observation's nightly date (tools/extract_xpu_ops.py
    --nightly)."""
    return _read("xpu_ops_nightly.json")


def torch_ops(torch_data: Mapping[str, Any], series: str) -> dict[str, str] | None:
    """``{op: code}`` of PyTorch's native_functions.yaml in torch ``series`` (codes:
    tools/extract_torch_registrations.py), or None where the data has no such series."""
    if series not in torch_data.get("series", {}):
        return None
    ops: dict[str, str] = {}
    for s in sorted(torch_data["series"], key=series_key):
        entry = torch_data["series"][s]
        if "ops" in entry:
            ops = dict(entry["ops"])
        else:
            ops.update(entry.get("set", {}))
            for name in entry.get("drop", []):
                ops.pop(name, None)
        if s == series:
            return ops
    return None


def series_names(upstream: Mapping[str, Any]) -> list[str]:
    """The series in ``upstream``, oldest first ("2.10" after "2.9")."""
    return sorted(upstream["series"], key=lambda s: tuple(int(x) for x in s.split(".")))


def data_horizon(upstream: Mapping[str, Any] | None = None) -> tuple[str, str, str]:
    """The newest series with torch-xpu-ops data: ``(series, branch, date of its head)``.
    Series after it are predicted ``unknown``."""
    upstream = load_upstream() if upstream is None else upstream
    last = series_names(upstream)[-1]
    e = upstream["series"][last]
    return last, e["branch"], e.get("date", "")


def core_for(core: Mapping[str, Any], series: str) -> tuple[dict[str, str], str]:
    """``({op: source}, note)``: the core XPU registrations (data/xpu_core_ops.json,
    tools/extract_core_registrations.py) that stand for torch ``series``, and one line
    on what they are. A series the data lacks takes the nearest earlier one's, said so
    in the note; before the first, none."""
    have = sorted(core.get("series", {}), key=series_key)
    known = [s for s in have if series_key(s) <= series_key(series)]
    if not known:
        return {}, f"no core registration data for torch {series}"
    entry = core["series"][known[-1]]
    src = sorted({v for v in entry["ops"].values()})
    note = ("this release's own files" if entry.get("per_release") else
            "not this release's own files: " + "; ".join(src))
    if known[-1] != series:
        note = f"no core registration data for torch {series}: torch {known[-1]}'s ({note})"
    return dict(entry["ops"]), note


def series_key(series: str) -> tuple[int, ...]:
    """A series' sort key: ``2.10`` after ``2.9``."""
    return tuple(int(x) for x in series.split(".") if x.isdigit())


def series_of(version: str | None) -> str | None:
    """The series of a torch version: ``2.5.1+xpu`` -> ``2.5``; None if it has none."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return f"{m[1]}.{m[2]}" if m else None
