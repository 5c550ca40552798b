"""The results folder of a cell run, ``results/<cell>/``, written as the run goes.

A run of the whole cell writes ``results/<cell>/`` itself (it replaces the previous full
run); a run narrowed by its pytest arguments (paths, ``-k``, ``-m``, ``-x``, ...) writes
``results/<cell>/runs/<run-id>/`` instead, so it never passes for the whole cell nor
destroys the full run's results. ``results/<cell>/last-run.json`` names the latest run's
folder; ``results/<cell>/.lock`` is held (flock) by the run in progress.

Files of a run's folder:
  ``tests.jsonl``     one JSON object per finished test, appended and fsynced as each ends
  ``collected.json``  every collected test id (so tests that never ran become not-run)
  ``running/``        one file per worker naming the test it is in (crash/timeout attribution)
  ``env.json``        provenance (:mod:`accelgrid.provenance`), start and end
  ``junit.xml``       pytest's JUnit XML (absent if the run was killed)
  ``summary.json``    counts per outcome, the run id and selection, written when it ends
  ``multi_device.json`` multi-device tests deselected by the pinned pass (run next)

Reading them back: :func:`discover` finds cell folders under any paths (a cell's folder,
``results/`` or a CI artifacts download), :func:`read_cell` reads one for reports.

Every record carries the run's id (``run_id``, also in env.json and summary.json); a
reader ignores records of another run. Every string written is made encodable first
(:func:`safe`): a lone surrogate (a non-UTF-8 file name or env value, as Python decodes
them) becomes a backslash escape instead of ending the run.

Stdlib only: the cell's interpreter writes these through the pytest plugin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import outcomes

TESTS = "tests.jsonl"
COLLECTED = "collected.json"
RUNNING = "running"
ENV = "env.json"
JUNIT = "junit.xml"
SUMMARY = "summary.json"
MULTI_DEVICE = "multi_device.json"   # tests the pinned pass left for the all-devices pass
RUNS = "runs"                        # results/<cell>/runs/<run-id>/: runs with a selection
LAST_RUN = "last-run.json"           # results/<cell>/last-run.json: the latest run's folder
LOCK = ".lock"                       # results/<cell>/.lock: flock of the run in progress
# Any of these makes a folder a cell's results folder.
CELL_FILES = (TESTS, ENV, COLLECTED, SUMMARY)
# Folders never searched for cells: tool state, and a cell's own per-worker folder.
SKIP_DIRS = {".git", ".nox", ".venv", "venv", "node_modules", "__pycache__", RUNNING}
MAX_DEPTH = 6


RESULTS_DIR = "results"


def results_root(project_root: Path) -> Path:
    """Where cells write results: ``results/`` in the project, or $ACCELGRID_RESULTS_DIR."""
    return Path(os.environ.get("ACCELGRID_RESULTS_DIR") or project_root / RESULTS_DIR)


def suite_of(nodeid: str) -> str:
    """``suites/offload/test_x.py::t`` -> ``offload`` (the folder under suites/)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF is how surrogateescape carries an undecodable byte: show the byte.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text``, encodable as UTF-8: each lone surrogate becomes a backslash escape
    (``b"\\xff"`` decoded with surrogateescape, as ``os.listdir`` and ``os.environ`` give
    it, becomes the four characters ``\\xff``). Unchanged when already encodable."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def safe(data: Any) -> Any:
    """``data`` with every string in it (keys too, in dicts, lists and tuples) made
    encodable by :func:`safe_text`; other values are returned as they are."""
    if isinstance(data, str):
        return safe_text(data)
    if isinstance(data, dict):
        return {safe(k): safe(v) for k, v in data.items()}
    if isinstance(data, list):
        return [safe(v) for v in data]
    if isinstance(data, tuple):
        items = [safe(v) for v in data]
        return tuple(items) if type(data) is tuple else type(data)(*items)  # a namedtuple
    return data


def _dumps(data: Any, **kwargs: Any) -> str:
    # default=str: a value json does not know is written as its text, made safe too.
    return json.dumps(safe(data), default=lambda o: safe_text(str(o)), **kwargs)


def write_json(path: Path, data: Any) -> None:
    """Atomically replace ``path`` (a crash leaves the old or the new file, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dumps(data, indent=2, sort_keys=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_record(path: Path, record: dict[str, Any], durable: bool = False) -> None:
    """Append one test record in one write(2): once this returns, killing the process (or
    the whole session) cannot lose it. ``durable`` also fsyncs, against a host crash."""
    line = _dumps(record, sort_keys=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync(path: Path) -> None:
    """fsync ``path`` if it exists (once per session, not per record)."""
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_jsonl(path: Path, required: tuple[str, ...] = ("nodeid",)
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects of a JSON-lines file that have ``required`` keys, and a note per unusable
    line (a kill mid-write leaves a truncated last line)."""
    records, problems = [], []
    if not path.exists():
        return records, problems
    with path.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                problems.append(f"{path.name}:{n}: unreadable line (truncated write?)")
                continue
            if not isinstance(rec, dict) or any(k not in rec for k in required):
                problems.append(f"{path.name}:{n}: not a record with {', '.join(required)}")
                continue
            records.append(rec)
    return records, problems


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Test records of a tests.jsonl, and a note per unusable line."""
    return read_jsonl(path, ("nodeid", "outcome"))


def read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, f"{path.name} missing"
    except (OSError, json.JSONDecodeError) as exc:
        return None, f"{path.name} unreadable: {exc}"


def mark_running(results: Path, worker: str, nodeid: str, timeout: float | None) -> None:
    # Once per test: one small write in place, no temp file. A reader that finds it
    # half-written ignores it (read_json error), which only costs crash attribution.
    path = results / RUNNING / f"{worker}.json"
    data = _dumps({"nodeid": nodeid, "start": time.time(), "timeout": timeout})
    try:
        path.write_text(data, encoding="utf-8")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data, encoding="utf-8")


def clear_running(results: Path, worker: str) -> None:
    path = results / RUNNING / f"{worker}.json"
    if path.exists():
        path.write_text("", encoding="utf-8")


def running(results: Path) -> dict[str, dict[str, Any]]:
    """nodeid -> {start, timeout, worker} for tests a worker was in when it stopped."""
    out = {}
    folder = results / RUNNING
    if folder.is_dir():
        for f in folder.glob("*.json"):
            data, err = read_json(f)
            if not err and isinstance(data, dict) and "nodeid" in data:
                out[data["nodeid"]] = {**data, "worker": f.stem}
    return out


def crash_outcome(started: float | None, timeout: float | None, now: float | None = None) -> str:
    """A test whose worker died: ``timeout`` if it had run for (nearly) its limit."""
    if started is not None and timeout:
        elapsed = (now or time.time()) - started
        # pytest-timeout fires at the limit; allow for clock and dump time.
        if elapsed >= 0.95 * float(timeout):
            return outcomes.TIMEOUT
    return outcomes.CRASHED


def merged_torch(results: Path) -> dict[str, Any]:
    """env.json's ``torch`` section from the test processes' reports (``torch-*.json``)."""
    from .provenance import TORCH_REPORT_GLOB, merge_torch_reports

    reports = []
    for f in sorted(results.glob(TORCH_REPORT_GLOB)):
        data, err = read_json(f)
        if not err and isinstance(data, dict):
            reports.append(data)
    return merge_torch_reports(reports)


RUN_FIELDS = ("run_id", "pytest_args", "selection")  # a run's identity, in env/summary


def run_records(results: Path, run_id: str | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The test records of ``results/tests.jsonl`` that belong to run ``run_id`` (default:
    env.json's), and a note per unusable line or record of another run. Records without
    a run id (written before runs had one) belong to any run."""
    records, problems = read_records(results / TESTS)
    if run_id is None:
        env, _ = read_json(results / ENV)
        run_id = env.get("run_id") if isinstance(env, dict) else None
    if run_id:
        other = [r for r in records if r.get("run_id") not in (None, run_id)]
        if other:
            problems.append(f"{TESTS}: {len(other)} record(s) of another run ignored")
            records = [r for r in records if r.get("run_id") in (None, run_id)]
    return records, problems


def finalize(results: Path, reason: str, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Close a run's results after its pytest process ended, however it ended.

    Tests a dead worker was in become crashed/timeout; collected tests with no record
    become not-run with ``reason``; ``env.json`` gets its end; ``summary.json`` is written
    with ``run`` (:data:`RUN_FIELDS`: the run id, the user's pytest args, the selection).
    """
    run = {k: v for k, v in (run or {}).items() if k in RUN_FIELDS}
    env, _ = read_json(results / ENV)
    env = env if isinstance(env, dict) else None
    run_id = run.get("run_id") or (env or {}).get("run_id")
    cell = (env or {}).get("cell")
    extra = {k: v for k, v in (("run_id", run_id), ("cell", cell)) if v}
    records, _ = run_records(results, run_id)
    seen = {r["nodeid"] for r in records}
    for nodeid, info in running(results).items():
        if nodeid in seen:
            continue
        outcome = crash_outcome(info.get("start"), info.get("timeout"))
        rec = {"nodeid": nodeid, "outcome": outcome, "worker": info.get("worker"),
               "message": f"the test process died while running this test ({reason})",
               "duration": time.time() - info["start"] if info.get("start") else None,
               **extra}
        append_record(results / TESTS, rec)
        seen.add(nodeid)
    collected, _ = read_json(results / COLLECTED)
    for nodeid in collected or []:
        if nodeid not in seen:
            append_record(results / TESTS, {"nodeid": nodeid, "outcome": outcomes.NOT_RUN,
                                            "message": reason, **extra})
            seen.add(nodeid)
    if env is not None and (env.get("torch") or {}).get("pending"):
        env["torch"] = merged_torch(results)  # the run died before it merged them
        write_json(results / ENV, env)
    if env is not None and not env.get("end"):
        from .provenance import now  # local: provenance is the only user of datetime here
        env["end"] = now()
        env["status"] = "ended" if env.get("status") == "running" else env.get("status")
        env["end_reason"] = reason
        write_json(results / ENV, env)
    summary = summarize(results, run_id)
    for key in RUN_FIELDS:
        if key in run or key in (env or {}):
            summary[key] = run[key] if key in run else env[key]  # type: ignore[index]
    summary["partial"] = bool(summary.get("selection"))
    write_json(results / SUMMARY, summary)
    return summary


def last_outcomes(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One record per test id; a later record of the same test replaces an earlier one."""
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        out[rec["nodeid"]] = rec
    return out


def summarize(results: Path, run_id: str | None = None) -> dict[str, Any]:
    records, problems = run_records(results, run_id)
    tests = last_outcomes(records)
    counts = Counter(r["outcome"] for r in tests.values())
    env, _ = read_json(results / ENV)
    cell = env.get("cell") if isinstance(env, dict) else None
    return {"cell": cell or results.name, "total": len(tests),
            "counts": {o: counts.get(o, 0) for o in outcomes.ALL},
            "problems": problems}


# --- a cell's folder: the full run, runs with a selection, the lock --------------------

def clear_for_run(cell_folder: Path) -> None:
    """Empty ``results/<cell>/`` for a new full run: everything but the runs with a
    selection (``runs/``) and the lock file, which the new run holds."""
    cell_folder.mkdir(parents=True, exist_ok=True)
    for child in cell_folder.iterdir():
        if child.name in (RUNS, LOCK):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def run_folder(cell_folder: Path, run_id: str, partial: bool) -> Path:
    """Where a run writes: the cell's folder for a full run, ``runs/<run-id>/`` else."""
    return cell_folder / RUNS / run_id if partial else cell_folder


def write_last_run(cell_folder: Path, run_id: str, folder: Path,
                   selection: list[str]) -> None:
    """Name the run now starting as the cell's latest (:func:`last_run` reads it)."""
    rel = folder.relative_to(cell_folder).as_posix() if folder != cell_folder else "."
    write_json(cell_folder / LAST_RUN, {"run_id": run_id, "folder": rel,
                                        "selection": selection})


def last_run(cell_folder: Path) -> tuple[str | None, Path]:
    """(run id, folder) of the cell's latest run; (None, the cell's folder) when none is
    named, e.g. results written before runs had ids."""
    data, err = read_json(cell_folder / LAST_RUN)
    if err or not isinstance(data, dict) or not isinstance(data.get("folder"), str):
        return None, cell_folder
    folder = (cell_folder / data["folder"]).resolve()
    if cell_folder.resolve() not in (folder, *folder.parents):
        return None, cell_folder  # a hand-edited pointer out of the cell's folder
    return data.get("run_id"), folder


def prune_runs(cell_folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest of ``runs/*`` (by modification time)."""
    runs = cell_folder / RUNS
    if not runs.is_dir():
        return
    folders = sorted((p for p in runs.iterdir() if p.is_dir()),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[keep:]:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class CellResults:
    """A cell's results as read back for grids; ``error`` says why they are unusable."""

    name: str
    path: Path
    env: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None


def load_cell(path: Path) -> CellResults:
    """Read ``results/<cell>/``; missing or corrupt parts are noted, never raised."""
    cell = CellResults(name=path.name, path=path)
    if not path.is_dir():
        cell.error = f"{path} is not a results folder"
        return cell
    env, err = read_json(path / ENV)
    if err:
        cell.problems.append(err)
    elif isinstance(env, dict):
        cell.env = env
        cell.name = env.get("cell") or cell.name
    run = run_of(path, cell.env)
    records, problems = run_records(path, run.get("run_id") or "")
    cell.problems += problems
    if not (path / TESTS).exists():
        cell.error = "no tests.jsonl: the cell did not run or its results were lost"
    elif not records:
        cell.error = "tests.jsonl holds no test records"
    cell.tests = last_outcomes(records)
    if cell.env and cell.env.get("status") == "running" and not cell.env.get("end"):
        cell.problems.append("the run never finished (killed?): results are partial")
    if run.get("selection"):
        cell.problems.append(f"a selected run (pytest {' '.join(run['selection'])}), "
                             "not the whole cell")
    return cell


def run_of(path: Path, env: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's :data:`RUN_FIELDS` from its env.json, else its summary.json (pytest may
    have died before writing env.json); {} for results written before runs had ids."""
    for doc in (env if env is not None else read_json(path / ENV)[0],
                read_json(path / SUMMARY)[0]):
        if isinstance(doc, dict) and doc.get("run_id"):
            return {k: doc[k] for k in RUN_FIELDS if k in doc}
    return {}


# --- finding and reading results folders ------------------------------------------------

def is_cell(folder: Path) -> bool:
    """Whether ``folder`` holds a cell's results (any of :data:`CELL_FILES`)."""
    return any((folder / name).is_file() for name in CELL_FILES)


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """Cell folders given or found under ``paths``, and a note per path that was ignored.

    A path holding tests.jsonl/env.json/collected.json/summary.json is a cell; another
    folder is searched (depth <= 6) for such folders, e.g. an artifacts download; a folder
    with none, or a path that does not exist, is kept so it shows as an errored cell.
    A file is ignored (``results/*`` also matches the grids themselves) unless it is one of
    a cell's files, which stands for its folder.
    """
    found: list[Path] = []
    notes: list[str] = []
    for path in map(Path, paths):
        if path.is_file():
            if path.name in CELL_FILES:
                found.append(path.parent)
            else:
                notes.append(f"{path}: a file, not a results folder; ignored")
        elif not path.is_dir() or is_cell(path):
            found.append(path)
        else:
            inner = _search(path)
            found += inner or [path]
    unique: dict[Path, Path] = {}
    for folder in found:
        unique.setdefault(folder.resolve(), folder)
    return list(unique.values()), notes


def _search(top: Path) -> list[Path]:
    cells = []
    base = len(top.parts)
    for dirpath, dirnames, _ in os.walk(top):
        here = Path(dirpath)
        if here != top and is_cell(here):
            cells.append(here)
            dirnames[:] = []  # a cell's subfolders are its own (running/)
            continue
        if len(here.parts) - base >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
    return cells


def fill_cell_name(cell: CellResults) -> None:
    """Without env.json, take the cell's name from its records (an artifact's folder is
    often named after the artifact, not the cell)."""
    if cell.env.get("cell"):
        return
    for rec in cell.tests.values():
        if isinstance(rec.get("cell"), str) and rec["cell"]:
            cell.name = rec["cell"]
            return


def read_cell(folder: Path) -> CellResults:
    """A cell's results for a report: :func:`load_cell`, named by its records when
    env.json lacks the name, with outcomes this version does not know turned into errors
    (with the reason). A folder that does not exist is an errored cell; nothing raises."""
    if not folder.exists():
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
