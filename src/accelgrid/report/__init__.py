"""Reports from results folders: the grid (tests x cells) against baselines, as JSON,
Markdown and HTML, and the op-coverage pages.

    model.py            the grid model from results folders (:func:`model.build`)
    compare.py          baselines: files, :func:`compare.classify`, :func:`compare.mark`
    render_json.py      grid.json (docs/grid-schema.md)
    render_markdown.py  grid.md (fits a GitHub job summary)
    render_html.py      grid.html (one self-contained page)
    ops_pages.py        ops.json/.md/.html per cell, ops-grid.* across cells

:func:`build` is the model compared with baselines, :func:`write` writes the three grid
files and :func:`grid` does both (``accelgrid grid`` and ``nox -s grid``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import outcomes
from ..errors import AccelgridError, Regression
from ..results import refuse_symlink, write_text
from . import compare, model, render_html, render_json, render_markdown
from .render_markdown import GITHUB_SUMMARY_LIMIT

__all__ = ["GITHUB_SUMMARY_LIMIT", "GridReport", "build", "grid", "write"]


def build(folders: Iterable[Path], baseline_dir: Path | None = None) -> dict[str, Any]:
    """The grid model from results folders (each ``results/<cell>/`` or a folder holding
    many); with ``baseline_dir``, every cell that has ``<dir>/<cell>.json`` is compared."""
    grid_model = model.build(folders)
    if baseline_dir is not None:
        compare.mark(grid_model, Path(baseline_dir))
    return grid_model


def write(grid_model: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write grid.json, grid.md and grid.html into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "grid.json", "md": out / "grid.md", "html": out / "grid.html"}
    for path in paths.values():  # refused before anything is written
        refuse_symlink(path)
    write_text(paths["json"], render_json.render(grid_model))
    write_text(paths["md"], render_markdown.render(grid_model))
    write_text(paths["html"], render_html.render(grid_model))
    return paths


@dataclass
class GridReport:
    """What :func:`grid` built and wrote."""

    model: dict[str, Any]
    paths: dict[str, Path]
    folders: list[Path]  # the paths asked for

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return compare.regressions(self.model)

    def lines(self, max_regressions: int = 50) -> list[str]:
        """What a command prints: each column's counts (or why it errored), the files
        written, and the changes against baselines with the first regressions."""
        out = []
        for col in self.model["columns"]:
            state = f"errored: {col['error']}" if col["error"] else ", ".join(
                f"{n} {o}" for o, n in col["counts"].items() if n)
            if col["status"] == "partial":
                state += f" (partial: {col['reason']})"
            out.append(f"{col['name']}: {state}")
            base = col.get("baseline") or {}
            if "outside_selection" in base:
                out.append(f"{col['name']}: a selected run: {base['compared']} baseline "
                           f"tests compared, {base['outside_selection']} outside its "
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
        return out

    def check(self) -> None:
        """Raise AccelgridError when no results folder was found, Regression (exit 3) on
        any regression against the baselines, AccelgridError (exit 1) when a selected
        run's column compared none of its baseline's tests (everything selected is gone,
        or the selection holds only new tests: the gate checked nothing)."""
        if not self.model["columns"]:
            raise AccelgridError("no results folders found in "
                                 + " ".join(str(p) for p in self.folders))
        if self.regressions:
            raise Regression(f"{len(self.regressions)} regression(s) against the baselines")
        empty = (self.model["baseline"] or {}).get("nothing_compared")
        if empty:
            raise AccelgridError(f"{', '.join(empty)}: a selected run that recorded none of "
                                 "its baseline's tests: nothing was compared")


def grid(folders: Iterable[Path], out: Path, baseline_dir: Path | None = None,
         step_summary: Path | str | None = None) -> GridReport:
    """Build the grid from ``folders`` (compared with ``baseline_dir`` when given), write
    grid.json/.md/.html into ``out`` and append grid.md to ``step_summary`` (a GitHub job
    summary file) when given. :meth:`GridReport.check` says whether it passed."""
    folders = [Path(p) for p in folders]
    grid_model = build(folders, baseline_dir)
    paths = write(grid_model, Path(out))
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(paths["md"].read_text(encoding="utf-8"))
    return GridReport(grid_model, paths, folders)
