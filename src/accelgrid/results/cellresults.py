"""A cell's results read back: :func:`discover` finds cell folders under any paths (a
cell's folder, ``results/`` or a CI artifacts download), :func:`read_cell` reads one
(:class:`CellResults`) for grids, baselines, JUnit, shards and history; missing or corrupt
parts are noted, never raised.

Stdlib only (the JUnit merge and shards read cells too, and live in the in-cell layer).
"""


from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from ..base import contract, outcomes, outputs, text
from ..base.errors import InvalidInput
from ..base.jsonio import json_kind, read_json
from ..base.redact import redact
from . import plan as run_plan
from .cleaning import run_records
from .summary import RUN_FIELDS, incompleteness, last_outcomes

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import Plan, TestRecord

# Folders never searched for cells: tool state, and a cell's own per-worker folder.
SKIP_DIRS = {".git", ".nox", ".venv", "venv", "node_modules", "__pycache__", contract.RUNNING_DIR}
MAX_DEPTH = 6


# A cell name from a file (env.json, a record) must look like one before it names a
# column or a baseline file (baselines/<cell>.json).
CELL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
# env.json's fields as reports read them: name -> expected type (ReadEnv's).
_ENV_TYPES: dict[str, type | tuple[type, ...]] = {
    "cell": str, "device_type": str, "start": str, "end": str, "status": str,
    "end_reason": str, "exitstatus": int, "host": dict, "python": dict, "project": dict,
    "ci": dict,
    "torch": dict, "env": dict, "packages": dict, "run_id": str, "pytest_args": list,
    "selection": list, "passes": list,
}
# Sub-fields read from env.json's mappings: (section, key) -> accepted types.
_ENV_SUBFIELDS: dict[tuple[str, str], tuple[type, ...]] = {
    ("host", "name"): (str,), ("python", "version"): (str,), ("project", "commit"): (str,),
    ("torch", "version"): (str,), ("torch", "git_version"): (str,),
    ("torch", "cuda_runtime"): (str,), ("torch", "xpu_runtime"): (str,),
    ("torch", "driver"): (str,), ("torch", "error"): (str,), ("torch", "devices"): (list,),
    ("torch", "device_count"): (int,),
}


class MergedShards(TypedDict):
    """What :func:`accelgrid.results.shards.merge_shards` adds to a merged cell's env."""

    total: int
    present: list[int]
    paths: list[str]
    status: dict[str, str]   # shard index -> ok, partial or errored


class ReadEnv(TypedDict, total=False):
    """env.json as read back (:func:`clean_env`): any field may be missing (an old or
    damaged file) or null; one that is there has its type (:data:`_ENV_TYPES`; the
    mappings' fields that reports read are checked too). records.Env is the file as
    written."""

    cell: str | None
    device_type: str | None
    start: str | None
    end: str | None
    status: str | None
    end_reason: str | None
    exitstatus: int | None
    torch: dict[str, Any] | None      # records.TorchFacts; its read fields checked
    python: dict[str, Any] | None
    packages: dict[str, str] | None   # text values only
    env: dict[str, str] | None        # text values only, redacted
    host: dict[str, Any] | None
    project: dict[str, Any] | None
    ci: dict[str, str] | None         # text values only
    run_id: str | None
    pytest_args: list[object] | None
    selection: list[object] | None
    passes: list[object] | None
    shards: MergedShards              # a merged sharded cell's (not in the file)


def clean_env(env: Any) -> tuple[ReadEnv, list[str]]:
    """env.json's content with the types reports rely on, and a note per field that had
    another type (dropped). Flags and packages keep only text values; recorded flags are
    redacted again (an artifact may come from a version that redacted less)."""
    if not isinstance(env, dict):
        return {}, [f"env.json holds a {json_kind(env)}, not a mapping; ignored"]
    notes: list[str] = []
    out = dict(env)
    for name, types in _ENV_TYPES.items():
        value = out.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            out.pop(name)
            notes.append(f"env.json: {name} is a {json_kind(value)}; ignored")
    for (section, key), types in _ENV_SUBFIELDS.items():
        part = out.get(section)
        if isinstance(part, dict) and part.get(key) is not None and (
                not isinstance(part[key], types) or isinstance(part[key], bool)):
            out[section] = {k: v for k, v in part.items() if k != key}
            notes.append(f"env.json: {section}.{key} is a {json_kind(part[key])}; ignored")
    if isinstance(out.get("torch"), dict) and "devices" in out["torch"]:
        out["torch"] = {**out["torch"], "devices": [
            d for d in out["torch"]["devices"] if isinstance(d, dict)]}
    for section in ("env", "packages", "ci"):
        if isinstance(out.get(section), dict):
            kept = {str(k): v for k, v in out[section].items() if isinstance(v, str)}
            if len(kept) != len(out[section]):
                notes.append(f"env.json: {section} has values that are not text; dropped")
            out[section] = redact(kept) if section in ("env", "ci") else kept
    cell = out.get("cell")
    if isinstance(cell, str) and not CELL_NAME.match(cell):
        out.pop("cell")
        notes.append(f"env.json: cell {cell[:60]!r} is not a cell name; ignored")
    # Every field ReadEnv names has its type now (checked above); others pass as they are.
    return cast(ReadEnv, out), notes


@dataclass
class CellResults:
    """A cell's results as read back for grids; ``error`` says why they are unusable."""

    name: str
    path: Path
    # env.json as read back: any field may be missing (an old or damaged file), those
    # present have the types clean_env checks (records.Env is the file as written).
    env: ReadEnv = field(default_factory=lambda: ReadEnv())
    tests: dict[str, TestRecord] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    # plan.json (results.plan): each pass's inputs and pytest's counts; None before plans
    plan: Plan | None = None


def load_cell(path: Path) -> CellResults:
    """Read ``results/<cell>/``; missing or corrupt parts are noted, never raised."""
    cell = CellResults(name=path.name, path=path)
    try:
        is_dir = path.is_dir()
    except OSError:
        is_dir = False
    if not is_dir:
        # os.path's checks, not Path's: a name too long to stat raises there.
        cell.error = f"{path} is not a results folder" + (
            " (a symlink loop)" if os.path.islink(path) and not os.path.exists(path) else "")
        return cell
    outside = _links_out(path)  # never read records from outside the folder given
    if contract.TESTS_FILE in outside:
        cell.error = outside[contract.TESTS_FILE]
        return cell
    env, err = ((None, outside[contract.ENV_FILE]) if contract.ENV_FILE in outside
                else read_json(path / contract.ENV_FILE))
    if err:
        cell.problems.append(err)
    else:
        cell.env, notes = clean_env(env)
        cell.problems += notes
        cell.name = cell.env.get("cell") or cell.name
    run = run_of(path, cell.env, read_summary=contract.SUMMARY_FILE not in outside)
    records, problems = run_records(path, run.get("run_id") or "")
    cell.problems += problems
    unreadable = [p for p in problems if p.startswith(tuple(
        f"{contract.TESTS_FILE} {why}"
        for why in ("is a folder", "not a regular", "unreadable", "missing")))]
    if not os.path.lexists(path / contract.TESTS_FILE):
        cell.error = "no tests.jsonl: the cell did not run or its results were lost"
    elif unreadable:
        cell.error = unreadable[0]
    elif not records:
        cell.error = "tests.jsonl holds no test records"
    cell.tests = last_outcomes(records)
    if cell.env and cell.env.get("status") == "running" and not cell.env.get("end"):
        cell.problems.append("the run never finished (killed?): results are partial")
    # The plan against the records as they are now (records lost after the run ended
    # count too); without collected.json, what the run's end found (summary.json).
    collected, _ = read_json(path / contract.COLLECTED_FILE)
    summary, _ = read_json(path / contract.SUMMARY_FILE)
    why = (incompleteness(collected, set(cell.tests), cell.env.get("passes"))
           if isinstance(collected, list) else
           summary.get("incomplete") if isinstance(summary, dict) else None)
    if why:
        cell.problems.append(INCOMPLETE_PREFIX + str(why))
    # pytest's own counts against the recorder's (each pass that reached its end).
    cell.plan = run_plan.read(path)
    counts = run_plan.count_mismatch(cell.plan, records)
    if counts:
        cell.problems.append(INCOMPLETE_PREFIX + counts)
    if run.get("selection"):
        cell.problems.append(f"{SELECTED_RUN} (pytest {' '.join(run['selection'])}), "
                             "not the whole cell")
    return cell


def _links_out(path: Path) -> dict[str, str]:
    """name -> why, for each of ``path``'s files that is a symlink leading out of the
    folder given (it is not read)."""
    out: dict[str, str] = {}
    try:
        top = path.resolve()
    except (OSError, RuntimeError):
        return out
    for name in (contract.TESTS_FILE, contract.ENV_FILE, contract.SUMMARY_FILE):
        item = path / name
        if not item.is_symlink():
            continue
        try:
            target = item.resolve()
        except (OSError, RuntimeError):
            continue  # a loop: the readers say so
        if top != target and top not in target.parents:
            out[name] = f"{name} is a symlink out of {path} (to {target}); not read"
    return out


# A cell's problem that says its run recorded less than it collected (summary.json's
# ``incomplete``): the grid gates on it (exit 1) unless --allow-incomplete.
INCOMPLETE_PREFIX = "incomplete: "
# A cell's problem that says its run ran a selection (-k, a path, -x): `baseline update
# --add-new` accepts it, since a new test is run that way.
SELECTED_RUN = "a selected run"


def run_of(path: Path, env: Mapping[str, Any] | None = None, read_summary: bool = True
           ) -> dict[str, Any]:
    """A run's :data:`RUN_FIELDS` from its env.json, else its summary.json (pytest may
    have died before writing env.json); {} for results written before runs had ids."""
    for doc in (env if env is not None else read_json(path / contract.ENV_FILE)[0],
                read_json(path / contract.SUMMARY_FILE)[0] if read_summary else None):
        if isinstance(doc, dict) and doc.get("run_id"):
            return {k: doc[k] for k in RUN_FIELDS if k in doc}
    return {}


def is_cell(folder: Path) -> bool:
    """Whether ``folder`` holds a cell's results (any of :data:`contract.CELL_FILES`)."""
    return any((folder / name).is_file() for name in contract.CELL_FILES)


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """Cell folders given or found under ``paths``, and a note per path that was ignored.

    A path holding tests.jsonl/env.json/collected.json/summary.json is a cell; another
    folder is searched (depth <= 6) for such folders, e.g. an artifacts download; a folder
    with none, or a path that does not exist, is kept so it shows as an errored cell.
    A file is ignored (``results/*`` also matches the grids themselves) unless it is one of
    a cell's files, which stands for its folder. Folders of another kind (their
    ``.accelgrid-<kind>.json``, :mod:`accelgrid.base.outputs`) are passed over with a note:
    a bisection's or a reproduction's runs found in a search (naming one shows them), and
    the output of a report (``ops predict --out``, ``grid --out``, a site) named here.
    """
    found: list[Path] = []
    notes: list[str] = []
    for path in map(Path, paths):
        passed = _passed_over(path)
        if passed:
            notes.append(passed)
            continue
        if path.is_file():
            if path.name in contract.CELL_FILES:
                found.append(path.parent)
            else:
                notes.append(f"{path}: a file, not a results folder; ignored")
        elif not path.is_dir() or is_cell(path):
            found.append(path)
        elif path.name == contract.REPRO_DIR:
            notes.append(f"{path}: reproductions (accelgrid repro), left out of the cells' "
                         f"grid; name {path}/<issue> to show them")
        else:
            inner, runs = _search(path)
            notes += [f"{folder}: {RUN_KINDS[kind]}, left out of the cells' grid; name "
                      f"{folder} to show them" for folder, kind in runs]
            found += inner or ([] if runs else [path])
    unique: dict[Path, Path] = {}
    for folder in found:
        try:
            key = folder.resolve()
        except (OSError, RuntimeError):  # a symlink loop: keep it, it shows as errored
            key = Path(os.path.abspath(folder))
        unique.setdefault(key, folder)
    return list(unique.values()), notes


def require_runs(paths: Iterable[Path]) -> list[Path]:
    """``paths``, when each path exists and every folder among them holds at least one
    cell run or is one :func:`discover` passes over with a note (an ``ops predict
    --out`` among the results, a bisection's runs); else :class:`InvalidInput`, one line
    naming the first path that does not (absent, unreadable, too long a name, a folder with
    no cell under it), or all of them when they hold no cell at all. A plain file that is
    not a cell's (``results/*`` matches the grids too) is passed over, as :func:`discover`
    does. A command that writes from results calls this first, so a mistyped path
    overwrites nothing and never reads as "all as expected"."""
    paths = [Path(p) for p in paths]
    found: list[Path] = []
    usable: list[Path] = []
    for path in paths:
        shown = text.one_line(str(path), 200)
        try:
            exists = path.exists()
            plain_file = exists and path.is_file() and path.name not in contract.CELL_FILES
            inside, notes = discover([path]) if exists and not plain_file else ([], [])
            folders = [f for f in inside if f.is_dir() and is_cell(f)]
        except OSError as exc:  # ENAMETOOLONG, ELOOP, EACCES: said, not a traceback
            raise InvalidInput(f"{shown}: cannot be read ({exc.strerror or exc})") from None
        if not exists:
            raise InvalidInput(f"{shown}: no such file or folder")
        usable.append(path)
        if not folders and not plain_file and notes:
            continue  # passed over with a note (a report's output, a bisection): no typo
        if not folders and not plain_file:
            raise InvalidInput(f"{shown}: holds no cell run (no {contract.TESTS_FILE}, "
                               f"{contract.ENV_FILE} or {contract.SUMMARY_FILE} under it)")
        found += folders
    if not found:
        names = text.one_line(" ".join(map(str, paths)), 200)
        raise InvalidInput(f"no results folders found in {names}")
    return usable


# Files accelgrid's reports write into a folder of their own (``ops predict --out DIR``,
# ``grid --out DIR``): such a folder among the results is passed over, not taken for a
# mistyped path.
REPORT_FILES = ("grid.json", "ops-grid.json", "ops-predicted.json", "hf-tests.json")


def _outputs(folder: Path) -> bool:
    return folder.is_dir() and any((folder / name).is_file() for name in REPORT_FILES)


# Folders of runs that are not the matrix's cells (:func:`accelgrid.base.outputs.mark`).
RUN_KINDS = {"bisect": "a bisection's runs (accelgrid bisect)",
             "repro": "a reproduction's runs (accelgrid repro)"}


def _passed_over(path: Path) -> str | None:
    """The note for ``path`` when it is a report's output, not a cell run: a folder with
    no cell's file of its own holding a manifest of a kind not in :data:`RUN_KINDS`
    (``ops predict --out results/predicted``) or, from before manifests, report files
    (:data:`REPORT_FILES`), and no cell below it (``grid --out results`` writes beside
    the cells)."""
    try:
        if not path.is_dir() or is_cell(path):
            return None
        kinds = [k for k in outputs.kinds(path) if k not in RUN_KINDS]
        if not kinds and not _outputs(path):
            return None
        if _search(path)[0]:
            return None
    except OSError:
        return None
    what = ", ".join(kinds) if kinds else "report files"
    return f"{path}: accelgrid's own output ({what}), not a cell run; passed over"


def _search(top: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Cell folders under ``top``, and the folders of runs of :data:`RUN_KINDS` passed
    over (with their kind)."""
    cells = []
    runs: list[tuple[Path, str]] = []
    base = len(top.parts)
    for dirpath, dirnames, _ in os.walk(top):
        here = Path(dirpath)
        if here != top and is_cell(here):
            cells.append(here)
            dirnames[:] = []  # a cell's subfolders are its own (running/)
            continue
        kind = next((k for k in outputs.kinds(here) if k in RUN_KINDS), None) \
            if here != top else None
        if kind:
            runs.append((here, kind))
            dirnames[:] = []
            continue
        if len(here.parts) - base >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and d != contract.REPRO_DIR)
    return cells, runs


def fill_cell_name(cell: CellResults) -> None:
    """Without env.json, take the cell's name from its records (an artifact's folder is
    often named after the artifact, not the cell)."""
    if cell.env.get("cell"):
        return
    for rec in cell.tests.values():
        if isinstance(rec.get("cell"), str) and CELL_NAME.match(rec["cell"]):
            cell.name = rec["cell"]
            return


def read_cell(folder: Path) -> CellResults:
    """A cell's results for a report: :func:`load_cell`, named by its records when
    env.json lacks the name, with outcomes this version does not know turned into errors
    (with the reason). A folder that does not exist is an errored cell; nothing raises."""
    if not os.path.lexists(folder):
        cell = CellResults(name=folder.name, path=folder)
        cell.error = f"results folder {folder} does not exist"
        return cell
    cell = load_cell(folder)
    fill_cell_name(cell)
    # Records written by another version (or by hand) may carry outcomes or ids this
    # version does not know; they become errors with the reason rather than crash a grid.
    for nodeid, rec in list(cell.tests.items()):
        if rec["outcome"] not in outcomes.ALL:
            cell.problems.append(f"{nodeid}: unknown outcome {rec['outcome']!r}")
            cell.tests[nodeid] = {**rec, "outcome": outcomes.ERROR,
                                  "message": f"unknown outcome {rec['outcome']!r} recorded; "
                                             f"{rec.get('message') or ''}".strip("; ")}
        if not isinstance(nodeid, str):
            cell.tests[str(nodeid)] = cell.tests.pop(nodeid)
    return cell
