"""The grid, tests x cells, from results folders against baselines: :func:`build_model`
is the model compared with baselines, :func:`write` writes the three grid files (and the
merged JUnit), :func:`grid` does both (``accelgrid grid`` and ``nox -s grid``) and returns
a :class:`GridReport`, which says what a command prints and whether the grid gates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import outcomes, outputs
from ..base.errors import AccelgridError, Regression
from ..base.jsonio import mapping
from ..results import junit
from ..results.cellresults import INCOMPLETE_PREFIX
from ..results.records import Change, Grid, LostCell
from . import compare, history, model, render_html, render_json, render_markdown
from . import expect as lost_cells
from .render_markdown import GITHUB_SUMMARY_LIMIT

__all__ = ["GITHUB_SUMMARY_LIMIT", "GridReport", "build_model", "grid", "write"]


def build_model(folders: Iterable[Path], baseline_dir: Path | None = None,
          read: list[Any] | None = None) -> Grid:
    """The grid model from results folders (each ``results/<cell>/`` or a folder holding
    many); with ``baseline_dir``, every cell that has ``<dir>/<cell>.json`` is compared.
    ``read``: see :func:`model.from_folders`."""
    grid_model = model.from_folders(folders, read)
    if baseline_dir is not None:
        compare.mark(grid_model, Path(baseline_dir))
    return grid_model


GRID_KIND = "grid"  # its manifest: .accelgrid-grid.json beside the files


def write(grid_model: Grid, out: Path, junit_xml: str | None = None) -> dict[str, Path]:
    """Write grid.json, grid.md and grid.html (and junit.xml, given its text) into
    ``out`` as one set (:func:`accelgrid.base.outputs.replace_files`); returns their
    paths."""
    files: dict[str, outputs.Content] = {
        "grid.json": render_json.render(grid_model), "grid.md": render_markdown.render(grid_model),
        "grid.html": render_html.render(grid_model)}
    if junit_xml is not None:
        # As ElementTree writes: a character UTF-8 cannot hold becomes a reference.
        files[junit.MERGED] = junit_xml.encode("utf-8", errors="xmlcharrefreplace")
    written = outputs.replace_files(Path(out), files, GRID_KIND, "accelgrid grid")
    paths = {"json": written["grid.json"], "md": written["grid.md"],
             "html": written["grid.html"]}
    if junit_xml is not None:
        paths["junit"] = written[junit.MERGED]
    return paths


@dataclass
class GridReport:
    """What :func:`grid` built and wrote."""

    model: Grid
    paths: dict[str, Path]
    folders: list[Path]  # the paths asked for

    added: list[Any] | None = None  # what the history got (history.Added), when given one

    @property
    def regressions(self) -> list[Change]:
        """Regressions that gate: those on tests the history calls flaky do not
        (report/history.py, the flaky policy)."""
        return [c for c in compare.regressions(self.model) if not c.get("flaky")]

    @property
    def flaky_regressions(self) -> list[Change]:
        return [c for c in compare.regressions(self.model) if c.get("flaky")]

    @property
    def lost(self) -> list[LostCell]:
        return self.model.get("lost") or []

    @property
    def lost_tests(self) -> list[Change]:
        """Baseline tests with no record in their column (a selected run's tests outside
        its selection are not among them: compare.mark). They gate unless allowed: a run
        that silently stopped running a test, or renamed it, checks less than its
        baseline says."""
        return [c for c in mapping(self.model.get("baseline")).get("changes", [])
                if c["change"] == compare.LOST]

    def lines(self, max_regressions: int = 50) -> list[str]:
        """What a command prints: each column's counts (or why it errored), the files
        written, and the changes against baselines with the first regressions."""
        out = []
        for col in self.model["columns"]:
            state = f"{col['status']}: {col['error']}" if col["error"] else ", ".join(
                f"{n} {o}" for o, n in col["counts"].items() if n)
            if col["status"] == "partial":
                state += f" (partial: {col['reason']})"
            out.append(f"{col['name']}: {state}")
            col_base = col.get("baseline")
            if col_base and "outside_selection" in col_base:
                out.append(f"{col['name']}: a selected run: {col_base['compared']} baseline "
                           f"tests compared, {col_base['outside_selection']} outside its "
                           "selection not compared (not lost)")
        if any(col["counts"].get(outcomes.NOT_RUN) for col in self.model["columns"]):
            out.append(f"({outcomes.NOT_RUN_MEANING}; grid.md says why, per suite)")
        out.append("wrote " + ", ".join(str(p) for p in self.paths.values()))
        base = self.model["baseline"]
        if base and self.model["columns"]:
            out.append("vs baselines: " + (
                ", ".join(f"{n} {k}" for k, n in base["counts"].items()
                          if n and k != compare.UNCHANGED) or "all as expected"))
            out += [f"REGRESSION {c['cell']}: {c['nodeid']}: {c['expected']} -> {c['outcome']}"
                    for c in self.regressions[:max_regressions]]
            out += [f"FLAKY (not gating) {c['cell']}: {c['nodeid']}: {c['expected']} -> "
                    f"{c['outcome']}" for c in self.flaky_regressions[:max_regressions]]
            out += [f"LOST TEST {c['cell']}: {c['nodeid']}: {c['expected']} -> no record"
                    for c in self.lost_tests[:max_regressions]]
        hist = self.model.get("history")
        if hist:
            for col in self.model["columns"]:
                since = mapping(col.get("history")).get("since")
                if since:
                    out.append(f"{col['name']} since its previous run: " + ", ".join(
                        f"{len(v)} {k.replace('_', ' ')}" for k, v in since.items()))
            out.append(f"history: {hist['db']}, last {hist['window']} runs per cell, "
                       f"{len(hist['flaky'])} flaky result(s)")
        out += [f"LOST {lost['cell']}: {lost['why']}" for lost in self.lost]
        return out

    @property
    def incomplete(self) -> list[str]:
        """``cell: why`` for each column whose run recorded less than it collected."""
        return [f"{col['name']}: {p.removeprefix(INCOMPLETE_PREFIX)}"
                for col in self.model["columns"] for p in col.get("problems") or ()
                if p.startswith(INCOMPLETE_PREFIX)]

    def check(self, allow_incomplete: bool = False, allow_lost: bool = False) -> None:
        """Raise AccelgridError when no results folder was found, Regression (exit 3) on
        any regression against the baselines, on an expected cell lost and on a lost
        test (unless ``allow_lost``), AccelgridError (exit 1) when a selected
        run's column compared none of its baseline's tests (everything selected is gone,
        or the selection holds only new tests: the gate checked nothing), and (exit 1)
        when a column's run is incomplete, unless ``allow_incomplete``."""
        if not self.model["columns"]:
            raise AccelgridError("no results folders found in "
                                 + " ".join(str(p) for p in self.folders))
        regressions = self.regressions
        lost_tests = [] if allow_lost else self.lost_tests
        if regressions or self.lost or lost_tests:
            raise Regression("; ".join(
                ([f"{len(regressions)} regression(s) against the baselines"]
                 if regressions else [])
                + ([f"{len(self.lost)} expected cell(s) lost: "
                    + ", ".join(lost["cell"] for lost in self.lost)] if self.lost else [])
                + ([_lost_tests_text(lost_tests) + " (--allow-lost to accept them)"]
                   if lost_tests else [])))
        base = self.model["baseline"]
        empty = base["nothing_compared"] if base else None
        if empty:
            raise AccelgridError(f"{', '.join(empty)}: a selected run that recorded none of "
                                 "its baseline's tests: nothing was compared")
        if self.incomplete and not allow_incomplete:
            raise AccelgridError("incomplete run(s), tests collected with no record: "
                                 + "; ".join(self.incomplete)
                                 + " (--allow-incomplete to accept them)")


def _lost_tests_text(lost: list[Change], shown: int = 3) -> str:
    """``N lost test(s) (in the baseline, no record): cell: nodeid, ...`` (the first few)."""
    names = [f"{c['cell']}: {c['nodeid']}" for c in lost[:shown]]
    more = f", and {len(lost) - shown} more" if len(lost) > shown else ""
    return (f"{len(lost)} lost test(s) (in the baseline, no record in the run): "
            + ", ".join(names) + more)


def with_history(grid_model: Grid, read: list[Any], db: Path | None,
                 expect: list[str] | None, window: int = history.DEFAULT_WINDOW
                 ) -> list[Any] | None:
    """Add the cells ``read`` (by :func:`build`) to the history ``db`` (when given) and
    annotate the model with it, then mark the ``expect``ed cells without results lost.
    Returns what was added."""
    added = None
    last_seen = None
    if db is not None:
        from ..results.history import open_store

        with open_store(db) as store:
            added = store.add_cells(read)
            history.annotate(grid_model, store, window)
            if expect:
                last_seen = {}
                for cell in expect:
                    runs = store.runs_of(cell, limit=1)
                    if runs:
                        last_seen[cell] = runs[-1]
    if expect:
        lost_cells.mark(grid_model, expect, last_seen)
    return added


def grid(folders: Iterable[Path], out: Path, baseline_dir: Path | None = None,
         step_summary: Path | str | None = None, history_db: Path | None = None,
         expect: list[str] | None = None, window: int = history.DEFAULT_WINDOW) -> GridReport:
    """Build the grid from ``folders`` (compared with ``baseline_dir`` when given), write
    grid.json/.md/.html and the merged JUnit (junit.xml) into ``out`` and append grid.md
    to ``step_summary`` (a GitHub job summary file) when given. With ``history_db`` the
    folders are added to that history and the grid shows it (:mod:`.history`); ``expect``
    names the cells that must have results (:mod:`.expect`). :meth:`GridReport.check`
    says whether it passed."""
    folders = [Path(p) for p in folders]
    read: list[Any] = []
    grid_model = build_model(folders, baseline_dir, read)
    added = with_history(grid_model, read, history_db, expect, window)
    # The same results as one JUnit file for other tools (the grid job uploads it).
    paths = write(grid_model, Path(out), junit.merged(folders, read)[0])
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(paths["md"].read_text(encoding="utf-8"))
    return GridReport(grid_model, paths, folders, added)
