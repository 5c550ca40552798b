"""The grid model: tests x cells from results folders, one plain dict.

:func:`from_folders` finds the cell folders under the paths given
(:func:`accelgrid.results.cellresults.discover`),
reads each (missing, partial or corrupt results make that cell an errored or partial
column with the reason; nothing else is lost) and returns::

    {"schema": 2, "generated": ..., "outcomes": [...], "columns": [column, ...],
     "rows": [row, ...], "baseline": None, "notes": [...]}

(docs/reference/grid-schema.md; ``baseline`` is filled by :func:`accelgrid.report.compare.mark`).
Rows are tests grouped by suite (``suites/<name>/``) and workload (the parametrize id, or
the test function when not parametrized); columns are cells ordered by device, torch
version and profile.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, cast

from packaging.version import Version

from .. import ops
from ..base import contract, outcomes
from ..base.jsonio import mapping
from ..base.versions import version_key
from ..results import history, reasons, shards, suite_of
from ..results.cellresults import CellResults, discover, read_cell
from ..results.provenance import now
from ..results.records import Column, Grid, Result, Row

SCHEMA_VERSION = 2
# ``properties``: what the test recorded, bounded and redacted when read
# (:func:`accelgrid.results.clean_properties`); an empty mapping is left out.
RECORD_FIELDS = ("outcome", "message", "duration", "worker", "device", "issue", "longrepr",
                 "properties")
ISSUE_RE = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def split_nodeid(nodeid: str) -> tuple[str, str, str | None]:
    """(file, test function, parametrize id or None) of a pytest node id."""
    path, _, rest = nodeid.partition("::")
    name, bracket, param = rest.partition("[")
    if bracket and param.endswith("]"):
        param = param[:-1]
    return path, name.rsplit("::", 1)[-1] or path, (param or None) if bracket else None


def new_row(nodeid: str) -> Row:
    """An empty row for ``nodeid`` (no results yet)."""
    _, func, param = split_nodeid(nodeid)
    return {"nodeid": nodeid, "suite": suite_of(nodeid), "workload": param or func,
            "test": func, "cells": {}}


def row_key(row: Row) -> tuple[str, str, str]:
    """Rows are ordered by suite, workload, node id."""
    return row["suite"], row["workload"], row["nodeid"]


def _issue(value: Any) -> dict[str, str] | None:
    """A record's ``issue`` as {id, url, title}; only http(s) links are kept."""
    if isinstance(value, str):
        m = ISSUE_RE.match(value.strip())
        if m:
            value = {"id": value.strip(),
                     "url": f"https://github.com/{m[1]}/issues/{m[2]}"}
        else:
            value = {"id": value, "url": value}
    if not isinstance(value, dict):
        return None
    url = str(value.get("url") or "")
    if not url.startswith(("https://", "http://")):
        m = ISSUE_RE.match(str(value.get("id") or ""))
        url = f"https://github.com/{m[1]}/issues/{m[2]}" if m else ""
    out = {"id": str(value.get("id") or url or "issue"), "url": url}
    if value.get("title"):
        out["title"] = str(value["title"])
    return out


def _parse_name(name: str) -> tuple[str, str, str]:
    device, _, rest = name.partition("-")
    series, _, profile = rest.partition("-")
    if series and not series[0].isdigit():  # not <device>-<torch>[-<profile>]
        series, profile = "", rest
    return device, series, profile or "default"


def _column(cell: CellResults, key: str) -> Column:
    env = cell.env or {}
    flags = mapping(env.get("env"))
    torch = mapping(env.get("torch"))
    devices = [d for d in torch.get("devices") or [] if isinstance(d, dict)]
    version = torch.get("version")
    names = list(dict.fromkeys(str(d.get("name")) for d in devices if d.get("name")))
    counts: dict[str, int] = {o: 0 for o in outcomes.ALL}
    for rec in cell.tests.values():
        counts[rec["outcome"]] += 1
    device, series, profile = _parse_name(cell.name)
    problems = list(cell.problems)
    if torch.get("error"):
        problems.append(str(torch["error"]))
    # A --no-venv run told to accept other inputs than its pins (accelgrid.host.inputs).
    other = mapping(env.get("inputs"))
    ran_on = [str(x) for key in ("accepted_mismatch", "altered")
              if isinstance(listed := other.get(key), list) for x in listed]
    if ran_on:
        problems.append("ran on other inputs than its pins (accepted): " + "; ".join(ran_on))
    status: Literal["errored", "partial", "ok"] = (
        "errored" if cell.error else ("partial" if problems else "ok"))
    return {
        "name": key,
        "cell": cell.name,
        "device": flags.get(contract.DEVICE) or env.get("device_type") or device,
        "torch_series": flags.get(contract.TORCH) or series,
        "profile": flags.get(contract.PROFILE) or profile,
        "torch_version": version,
        "torch_build": history.torch_build(env),
        "torch_channel": flags.get(contract.TORCH_CHANNEL) or "release",
        "torch_git": torch.get("git_version"),
        "device_name": ", ".join(names) or None,
        "device_count": torch.get("device_count"),
        "driver": torch.get("driver"),
        "host": mapping(env.get("host")).get("name"),
        "python": mapping(env.get("python")).get("version"),
        "commit": mapping(env.get("project")).get("commit"),
        "start": env.get("start"),
        "end": env.get("end"),
        "packages": env.get("packages") or {},
        "env_flags": flags,
        "counts": counts,
        "total": len(cell.tests),
        # Why tests were skipped or not run, per suite: counts alone read like breakage.
        "reasons": reasons.group(cell.tests.values()),
        "status": status,
        "error": cell.error,
        "problems": problems,
        "reason": cell.error or "; ".join(problems) or None,
        # The pytest args that narrowed the run ([] for the whole cell): such a column is
        # partial, and tests outside it are not lost (compare.mark).
        "selection": [str(a) for a in env.get("selection") or []]
        if isinstance(env.get("selection"), list) else [],
        "path": str(cell.path),
        "baseline": None,
        "ops_vs_predicted": ops.folder_check(cell.path),  # None unless xpu with ops.json
    }


def _sort_key(col: Column) -> tuple[str, Version, bool, str, str]:
    series = col["torch_series"] or ""
    return (col["device"], version_key(series),
            col["profile"] != "default", col["profile"], col["name"])


def from_folders(folders: Iterable[Path], read: list[tuple[Path, CellResults]] | None = None
          ) -> Grid:
    """The grid model from results folders (each ``results/<cell>/`` or a folder holding
    many); its ``baseline`` is None (see :func:`accelgrid.report.build_model`). ``read``, when
    given, gets each (folder, cell) read, for the history to add without reading again."""
    paths, notes = discover(folders)
    cells = [read_cell(p) for p in paths]
    if read is not None:
        read += zip(paths, cells, strict=True)
    cells = shards.merge(cells)   # a cell's shards: one column
    keys: Counter[str] = Counter()
    columns, by_key = [], {}
    for cell in cells:
        keys[cell.name] += 1
        # The same cell twice (two runs, two artifacts) gets two columns, told apart.
        key = cell.name if keys[cell.name] == 1 else f"{cell.name}#{keys[cell.name]}"
        columns.append(_column(cell, key))
        by_key[key] = cell
    columns.sort(key=_sort_key)
    rows: dict[str, Row] = {}
    for col in columns:
        name = col["name"]
        for nodeid, rec in by_key[name].tests.items():
            row = rows.get(nodeid)
            if row is None:
                row = rows[nodeid] = new_row(nodeid)
            entry = {k: v for k in RECORD_FIELDS if (v := rec.get(k)) not in (None, "", {})}
            duration = entry.get("duration")
            if isinstance(duration, float):
                entry["duration"] = round(duration, 4)
            if "issue" in entry:
                issue = _issue(entry.pop("issue"))
                if issue:
                    entry["issue"] = issue
            # The record's fields by name (RECORD_FIELDS are Result's), the issue normalised.
            row["cells"][name] = cast(Result, entry)
    return {"schema": SCHEMA_VERSION, "generated": now(), "outcomes": list(outcomes.ALL),
            "columns": columns, "rows": sorted(rows.values(), key=row_key), "baseline": None,
            "notes": notes}
