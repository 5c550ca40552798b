"""A run's plan (``plan.json``): what each pass (and shard) was about to run on, written
before its tests start, and what pytest itself counted when the pass ended.

The runner hands the cell's side of the plan to the in-cell recorder through
``ACCELGRID_PLAN_INPUTS`` (:data:`accelgrid.base.contract.PLAN_INPUTS`: the pinned
package names, the digest of the matrix entry, the names of the cell's env flags); the
recorder adds what the cell's interpreter holds (:func:`inputs`: torch's version and local
build tag and each pinned package as installed, from their metadata, no import; the
project commit; the flags' values as set) at its session start. The collected ids stay in
``collected.json`` (folders written before plan.json keep reading as they did).

Readers judge the records against the plan: :func:`count_mismatch` (pytest's counts vs
the recorder's), and shards merge only with equal :func:`merge_key` (commit, torch, pins,
matrix entry).

Standard library and pytest's `packaging` only (base.versions): the pytest plugin writes it
inside the cell.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..base import contract, jsonio
from ..base.versions import installed_version

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import Plan, PlanInputs, TestRecord


def digest(value: Any) -> str:
    """A short, stable digest of a JSON-able value (the matrix entry: ``Cell.as_dict()``)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def runner_inputs(pins: Iterable[str], matrix_entry: Mapping[str, Any],
                  flags: Iterable[str]) -> str:
    """The value of ``ACCELGRID_PLAN_INPUTS`` the runner sets for a cell's pytest."""
    return json.dumps({"pins": sorted(dict.fromkeys(pins)), "matrix_digest": digest(
        dict(matrix_entry)), "flags": sorted(dict.fromkeys(flags))})


def _given(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(env.get(contract.PLAN_INPUTS) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def pinned_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The cell's pinned package names, as the runner gave them (none outside a run)."""
    pins = _given(os.environ if env is None else env).get("pins")
    return [str(p) for p in pins] if isinstance(pins, list) else []


def _version(name: str) -> str | None:
    try:
        return installed_version(name)
    except ValueError:   # a name importlib refuses
        return None


def inputs(env: Mapping[str, str] | None = None) -> PlanInputs:
    """The inputs of a pass as its interpreter sees them (metadata only: no import)."""
    env = os.environ if env is None else env
    given = _given(env)
    torch = _version("torch")
    named = given.get("flags")
    flags: list[Any] = named if isinstance(named, list) else []
    matrix = given.get("matrix_digest")
    return {
        "torch": torch,
        "torch_local": torch.partition("+")[2] or None if torch else None,
        "packages": {name: _version(name) for name in pinned_names(env)},
        "commit": env.get(contract.COMMIT) or None,
        "dirty": env.get(contract.DIRTY) == "1",
        "matrix_digest": matrix if isinstance(matrix, str) else None,
        "flags": {str(k): env.get(str(k)) for k in flags},
    }


def merge_key(inputs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What shards must share to be one column: commit, torch, pins, matrix entry."""
    if not isinstance(inputs, Mapping):
        return None
    return {k: inputs.get(k) for k in ("commit", "torch", "packages", "matrix_digest")}


def start_pass(folder: Path, pass_name: str, run_id: str | None, cell: str,
               env: Mapping[str, str] | None = None) -> Plan:
    """Add this pass (and its inputs) to ``folder/plan.json``, under the folder's lock:
    the run's inputs are the first pass's; a pass whose inputs differ keeps its own."""
    env = os.environ if env is None else env
    mine = inputs(env)
    shard = env.get(contract.SHARD) or None

    def add(known: Any) -> dict[str, Any]:
        if not (isinstance(known, dict) and known.get("run_id") == run_id
                and isinstance(known.get("passes"), list)):
            known = {"run_id": run_id, "cell": cell, "shard": shard, "inputs": mine,
                     "passes": []}
        entry: dict[str, Any] = {"name": pass_name}
        if known.get("inputs") != mine:
            entry["inputs"] = mine
        known["passes"] = [p for p in known["passes"]
                           if not (isinstance(p, dict) and p.get("name") == pass_name)]
        known["passes"].append(entry)
        return cast("dict[str, Any]", known)

    return cast("Plan", jsonio.update_json(folder / contract.PLAN_FILE, add))


def end_pass(folder: Path, pass_name: str, collected: int | None, reported: int | None,
             counts: Mapping[str, int], exitstatus: int) -> None:
    """pytest's own counts of the pass at its end: ``collected`` (session.testscollected),
    ``reported``: the tests it reported an outcome for (None: no terminal reporter), and
    its terminal summary's ``counts`` per outcome."""
    def add(known: Any) -> Any:
        if not isinstance(known, dict) or not isinstance(known.get("passes"), list):
            return known  # never started (a test deleted it): nothing to compare with
        for entry in known["passes"]:
            if isinstance(entry, dict) and entry.get("name") == pass_name:
                entry.update(collected=collected, outcomes=dict(counts),
                             exitstatus=int(exitstatus))
                if reported is not None:
                    entry["reported"] = reported
        return known

    jsonio.update_json(folder / contract.PLAN_FILE, add)


def read(folder: Path) -> Plan | None:
    """``folder/plan.json``, or None (absent, unreadable: a run before plans)."""
    data, err = jsonio.read_json(folder / contract.PLAN_FILE)
    if err or not isinstance(data, dict) or not isinstance(data.get("passes"), list):
        return None
    return cast("Plan", data)


def count_mismatch(plan: Mapping[str, Any] | None, records: Iterable[TestRecord]
                   ) -> str | None:
    """Why pytest's own counts disagree with the records, or None: for each pass that
    reached its end, the tests pytest collected and those it reported an outcome for
    against the tests the recorder wrote for that pass (a file's collection error is
    no test)."""
    if not plan:
        return None
    recorded: dict[str, set[str]] = {}
    for rec in records:
        if rec.get("phase") != "collect":
            recorded.setdefault(str(rec.get("pass")), set()).add(rec["nodeid"])
    out = []
    for entry in plan.get("passes") or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("collected"), int):
            continue
        name = str(entry.get("name"))
        mine = len(recorded.get(name, ()))
        told = entry.get("reported")
        if entry["collected"] != mine or (isinstance(told, int) and told != mine):
            out.append(f"pass {name}: pytest collected {entry['collected']} and reported "
                       f"{told}, the recorder wrote {mine}")
    return "; ".join(out) or None
