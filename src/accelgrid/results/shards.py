"""Shards: a cell's tests split across N runners, and their results merged back into one
column.

A shard run (``accelgrid run CELL --shard K/N``, or ``ACCELGRID_SHARD=K/N nox -s CELL``)
collects the whole cell and keeps the tests :func:`assign` gives shard K: the slowest
first, each to the shard with the least time so far (durations recorded by an earlier run
of the cell, ``ACCELGRID_SHARD_DURATIONS``: a results folder or a JSON object
``{nodeid: seconds}``; without any, every test counts the same, so shards get equal
counts). The assignment depends only on the collected ids and the durations, so every
shard of a run, on any runner, computes the same split; give every shard the same
durations. Tests marked ``multi_device`` stay together in one shard.

Each shard writes ``<results>/shard-K-of-N/<cell>/``; a grid merges the shards of a cell
into one column (:func:`merge`), partial and naming the shards it lacks when one is
missing.

Standard library only: the pytest plugin runs the selection inside the cell.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..base import contract, jsonio
from . import cellresults, plan
from .cleaning import read_records

_SPEC = re.compile(r"^\s*(\d{1,3})\s*/\s*(\d{1,3})\s*$")
MAX_SHARDS = 64   # as matrix.yaml's shards


class ShardError(ValueError):
    """A shard spec or durations file that cannot be used; the message is one line."""


def parse(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); ShardError for anything but K/N with 1 <= K <= N <= 64."""
    m = _SPEC.match(text or "")
    if not m:
        raise ShardError(f"shard {text[:40]!r}: expected K/N, e.g. 1/2")
    index, total = int(m[1]), int(m[2])
    if not 1 <= total <= MAX_SHARDS or not 1 <= index <= total:
        raise ShardError(f"shard {text[:40]!r}: K/N needs 1 <= K <= N <= {MAX_SHARDS}")
    return index, total


def folder_name(index: int, total: int) -> str:
    """Where a shard's results go under the results root: ``shard-1-of-2``."""
    return f"shard-{index}-of-{total}"


def durations(source: str | os.PathLike[str] | None) -> dict[str, float]:
    """Recorded durations per test id from ``source``: a results folder (its records;
    one holding several cells: all of them) or a JSON object of ids to seconds. {} for
    None or a folder with no records; ShardError for a file that is not such an object."""
    if not source:
        return {}
    path = Path(source)
    if path.is_file():
        data, err = jsonio.read_json(path)
        if err or not isinstance(data, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()):
            raise ShardError(f"{path}: {err or 'expected a JSON object of test ids to seconds'}")
        return {str(k): float(v) for k, v in data.items() if v == v and v >= 0}
    folders, _ = cellresults.discover([path]) if path.is_dir() else ([], [])
    out: dict[str, float] = {}
    for folder in folders:
        records, _ = read_records(folder / contract.TESTS_FILE)
        for rec in records:
            d = rec.get("duration")
            if isinstance(d, int | float) and d == d and d >= 0:
                out[str(rec["nodeid"])] = float(d)
    return out


def assign(nodeids: Iterable[str], total: int, recorded: Mapping[str, float] | None = None,
           together: Iterable[str] = ()) -> dict[str, int]:
    """Each test id -> its shard (1..``total``): longest processing time first. A test
    without a recorded duration counts as the median of the recorded ones (1 s when none
    is), so without durations every shard gets an equal count; ``together`` (the
    multi-device tests) is one unit."""
    ids = list(dict.fromkeys(nodeids))
    recorded = recorded or {}
    known = sorted(recorded[i] for i in ids if i in recorded)
    default = known[len(known) // 2] if known else 1.0
    wanted = set(together)
    group = [i for i in ids if i in wanted]
    units: list[tuple[float, str, list[str]]] = [
        (recorded.get(i, default), i, [i]) for i in ids if i not in wanted]
    if group:
        units.append((sum(recorded.get(i, default) for i in group), group[0], group))
    # Slowest first; ties in id order, so every shard computes the same split.
    units.sort(key=lambda u: (-u[0], u[1]))
    load = [0.0] * total
    count = [0] * total
    out: dict[str, int] = {}
    for weight, _, members in units:
        shard = min(range(total), key=lambda s: (load[s], count[s], s))
        load[shard] += weight
        count[shard] += len(members)
        for member in members:
            out[member] = shard + 1
    return out


def selected(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """This process's shard from ``ACCELGRID_SHARD`` (None: the whole cell)."""
    env = os.environ if env is None else env
    text = env.get(contract.SHARD, "").strip()
    return parse(text) if text else None


ASSIGNMENT = "shards.json"   # in a shard run's folder: the split its first pass computed


def keep(items: list[Any], env: Mapping[str, str] | None = None) -> tuple[list[Any], list[Any]]:
    """pytest items split into (this shard's, the others') by :func:`assign` over the
    whole collection. A later pass of the run that collects only what an earlier one left
    it (a list of ids) uses the split the first pass wrote (:data:`ASSIGNMENT`): split
    again, a subset would be divided differently."""
    env = os.environ if env is None else env
    shard = selected(env)
    if shard is None:
        return items, []
    index, total = shard
    ids = [item.nodeid for item in items]
    folder = Path(env[contract.RESULTS]) if env.get(contract.RESULTS) else None
    run = env.get(contract.RUN_ID, "")
    earlier: dict[str, Any] = {}
    if folder is not None:
        data, err = jsonio.read_json(folder / ASSIGNMENT)
        if not err and isinstance(data, dict) and data.get("run_id") == run \
                and isinstance(data.get("assign"), dict):
            earlier = data["assign"]
    if ids and all(isinstance(earlier.get(i), int) for i in ids):
        where = {i: int(earlier[i]) for i in ids}
    else:
        together = [item.nodeid for item in items
                    if item.get_closest_marker(contract.MULTI_DEVICE_MARK) is not None]
        where = assign(ids, total, durations(env.get(contract.SHARD_DURATIONS)), together)
        if folder is not None:
            def add(known: Any) -> dict[str, Any]:
                known = known if isinstance(known, dict) and known.get("run_id") == run else {}
                return {"run_id": run, "shard": f"{index}/{total}",
                        "assign": {**(known.get("assign") or {}), **where}}

            folder.mkdir(parents=True, exist_ok=True)
            jsonio.update_json(folder / ASSIGNMENT, add)
    mine = [item for item in items if where[item.nodeid] == index]
    return mine, [item for item in items if where[item.nodeid] != index]


# --- merging shards back into one cell --------------------------------------------------

def shard_of(cell: cellresults.CellResults) -> tuple[int, int] | None:
    """The shard a cell's results come from (env.json's record of ACCELGRID_SHARD)."""
    env = cell.env.get("env") if isinstance(cell.env.get("env"), dict) else {}
    try:
        return selected(env)
    except ShardError:
        return None


def _differences(keys: Mapping[int, Mapping[str, Any]], total: int) -> list[str]:
    """What differs between shards' plan inputs (:func:`plan.merge_key`), field by field:
    ``commit: 1/2 abc, 2/2 def``; a package by its name."""
    fields: dict[str, dict[int, Any]] = {}
    for index, key in keys.items():
        for name, value in key.items():
            if name == "packages" and isinstance(value, Mapping):
                continue
            fields.setdefault(name, {})[index] = value
        given = key.get("packages")
        packages: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        names: set[str] = set()
        for other in keys.values():
            names.update(other.get("packages") or {})
        for name in names:
            fields.setdefault(f"package {name}", {})[index] = packages.get(name)
    return [f"{name}: " + ", ".join(f"{i}/{total} {v}" for i, v in sorted(values.items()))
            for name, values in fields.items() if len({json.dumps(v, sort_keys=True)
                                                       for v in values.values()}) > 1]


def merge(cells: list[cellresults.CellResults]) -> list[cellresults.CellResults]:
    """``cells`` with the shards of each cell (same name and shard count) merged into one:
    every shard's tests, the first shard's env, each shard's problems. What makes the
    merged column not one run's is named and gates (an ``incomplete:`` problem, exit 1
    unless --allow-incomplete): a missing shard, an errored or empty one, a shard index
    found twice, shards whose plans name other inputs (commit, torch, pins, matrix
    entry), and a shard's own incompleteness. Cells run whole pass through."""
    out: list[cellresults.CellResults] = []
    groups: dict[tuple[str, int], list[tuple[int, cellresults.CellResults]]] = {}
    place: dict[tuple[str, int], int] = {}
    for cell in cells:
        shard = shard_of(cell)
        if shard is None:
            out.append(cell)
            continue
        key = (cell.name, shard[1])
        if key not in groups:
            groups[key] = []
            place[key] = len(out)     # the merged cell takes the first shard's place
            out.append(cell)
        groups[key].append((shard[0], cell))
    gate = cellresults.INCOMPLETE_PREFIX
    for (name, total), members in groups.items():
        members.sort(key=lambda m: (m[0], str(m[1].env.get("start") or "")))
        first = members[0][1]
        merged = cellresults.CellResults(name=name, path=first.path, env=first.env.copy(),
                                         plan=first.plan)
        seen: dict[int, cellresults.CellResults] = {}
        for index, cell in members:
            if index in seen:
                merged.problems.append(
                    f"{gate}shard {index}/{total} twice ({seen[index].path} and {cell.path}): "
                    "not one run's shards; the later one is used")
            seen[index] = cell
        status: dict[str, str] = {}
        for index, cell in sorted(seen.items()):
            merged.tests.update(cell.tests)
            for p in cell.problems:  # a shard's own incompleteness gates the column too
                merged.problems.append(
                    f"{gate}shard {index}/{total}: {p.removeprefix(gate)}"
                    if p.startswith(gate) else f"shard {index}/{total}: {p}")
            if cell.error:
                merged.problems.append(f"{gate}shard {index}/{total} errored: {cell.error}")
            status[str(index)] = ("errored" if cell.error else "partial" if cell.problems
                                  else "ok")
        missing = [i for i in range(1, total + 1) if i not in seen]
        if missing:
            merged.problems.append(
                gate + "missing shard" + ("s " if len(missing) > 1 else " ")
                + ", ".join(f"{i}/{total}" for i in missing) + ": their tests are not here")
        keys = {i: k for i, c in seen.items() if c.plan is not None
                and (k := plan.merge_key(c.plan.get("inputs"))) is not None}
        differ = _differences(keys, total) if len(keys) > 1 else []
        if differ:
            merged.problems.append(f"{gate}shards ran on different inputs ("
                                   + "; ".join(differ) + "): not one column")
        if not merged.tests:
            merged.error = f"no shard of {name} holds test records"
        merged.env["shards"] = {"total": total, "present": sorted(seen),
                                "paths": [str(seen[i].path) for i in sorted(seen)],
                                "status": status}
        out[place[(name, total)]] = merged
    return out


def write_durations(path: Path, recorded: Mapping[str, float]) -> None:
    """``recorded`` as a durations file (:func:`durations` reads it back)."""
    path.write_text(json.dumps(dict(sorted(recorded.items())), indent=1), encoding="utf-8")
