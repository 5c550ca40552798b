"""Where a cell's results go, ``results/<cell>/``, and what a run's folder holds.

A run of the whole cell writes ``results/<cell>/`` itself (:func:`clear_for_run` empties it
for the new run); a run narrowed by its pytest arguments (paths, ``-k``, ``-m``, ``-x``, ...)
writes ``results/<cell>/runs/<run-id>/`` instead (:func:`run_folder`; old ones go with
:func:`prune_runs`), so it never passes for the whole cell nor destroys the full run's
results. ``results/<cell>/last-run.json`` names the latest run's folder
(:func:`write_last_run`, :func:`last_run`); ``results/<cell>/.lock`` is held (flock) by the
run in progress. :func:`suite_of` names the folder under ``suites/`` a test id is in.

Files of a run's folder:
  ``tests.jsonl``     one JSON object per finished test, appended and fsynced as each ends
                      (:mod:`.writing`)
  ``collected.json``  every collected test id (so tests that never ran become not-run)
  ``running/``        one file per worker naming the test it is in (crash/timeout
                      attribution, :mod:`.markers`)
  ``env.json``        provenance (:mod:`accelgrid.results.provenance`), start and end
  ``junit.xml``       pytest's JUnit XML (absent if the run was killed)
  ``summary.json``    counts per outcome, the run id and selection, written when it ends
                      (:mod:`.summary`, :mod:`.finish`)
  ``pytest.log``      pytest's own output, each pass's appended (the console shows progress)
  ``multi_device.json`` multi-device tests deselected by the pinned pass (run next)
  ``.update.lock``    flock held around every shared write
                      (:func:`accelgrid.base.jsonio.locked`)

Stdlib only: the cell's interpreter reads these through the pytest plugin.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..base import contract
from ..base.jsonio import read_json, refuse_symlink, write_json

__all__ = [
    "clear_for_run", "last_run", "prune_runs", "results_root", "run_folder", "selected_runs",
    "suite_of", "write_last_run",
]


def results_root(project_root: Path) -> Path:
    """Where cells write results: ``results/`` in the project, or $ACCELGRID_RESULTS_DIR."""
    return Path(os.environ.get(contract.RESULTS_DIR) or project_root / contract.RESULTS_FOLDER)


def suite_of(nodeid: str) -> str:
    """``suites/offload/test_x.py::t`` -> ``offload`` (the folder under suites/)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "suites" else parts[0]


def clear_for_run(cell_folder: Path) -> None:
    """Empty ``results/<cell>/`` for a new full run: everything but the runs with a
    selection (``runs/``) and the lock file, which the new run holds."""
    refuse_symlink(cell_folder)  # emptying a link would empty the folder it names
    cell_folder.mkdir(parents=True, exist_ok=True)
    for child in cell_folder.iterdir():  # a symlink child: the link goes, not its target
        if child.name in (contract.RUNS_DIR, contract.LOCK_FILE):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def run_folder(cell_folder: Path, run_id: str, partial: bool) -> Path:
    """Where a run writes: the cell's folder for a full run, ``runs/<run-id>/`` else."""
    return cell_folder / contract.RUNS_DIR / run_id if partial else cell_folder


def write_last_run(cell_folder: Path, run_id: str, folder: Path,
                   selection: list[str]) -> None:
    """Name the run now starting as the cell's latest (:func:`last_run` reads it)."""
    rel = folder.relative_to(cell_folder).as_posix() if folder != cell_folder else "."
    write_json(cell_folder / contract.LAST_RUN_FILE, {"run_id": run_id, "folder": rel,
                                        "selection": selection})


def last_run(cell_folder: Path) -> tuple[str | None, Path]:
    """(run id, folder) of the cell's latest run; (None, the cell's folder) when none is
    named, e.g. results written before runs had ids."""
    data, err = read_json(cell_folder / contract.LAST_RUN_FILE)
    if err or not isinstance(data, dict) or not isinstance(data.get("folder"), str):
        return None, cell_folder
    folder = (cell_folder / data["folder"]).resolve()
    if cell_folder.resolve() not in (folder, *folder.parents):
        return None, cell_folder  # a hand-edited pointer out of the cell's folder
    return data.get("run_id"), folder


def selected_runs(cell_folder: Path) -> list[Path]:
    """The run folders under ``runs/`` (selected runs), newest first (by modification
    time); links are never followed."""
    runs = cell_folder / contract.RUNS_DIR
    refuse_symlink(runs)
    if not runs.is_dir():
        return []
    return sorted((p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()),
                  key=lambda p: p.stat().st_mtime, reverse=True)


def prune_runs(cell_folder: Path, keep: int, dry_run: bool = False) -> list[Path]:
    """Remove all but the ``keep`` newest of ``runs/*``, never the run last-run.json names
    (the latest, perhaps still running); returns what was (with ``dry_run``: would be)
    removed."""
    latest = last_run(cell_folder)[1]
    gone = [p for p in selected_runs(cell_folder)[keep:] if p.resolve() != latest]
    if not dry_run:
        for old in gone:
            shutil.rmtree(old, ignore_errors=True)
    return gone
