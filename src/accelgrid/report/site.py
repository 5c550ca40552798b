"""``accelgrid publish``: a static site (GitHub Pages) from the night's results and the
history, every page linked from every other.

    index.html            the latest grid (grid.html, with its history strips) + grid.json/.md
    hud.html              runs x cells: a row per (CI) run, newest first, a square per result
                          linking to its cell's page and its CI run (accelgrid.report.hud)
    cells/<cell>.html     per cell: provenance, its runs in the window, since the previous
                          run, its failing tests with since when, its flaky tests
    tests/<suite>.html    per test of a suite: each cell's strip (oldest first), flaky
                          badges, since when it fails; tests/index.html lists the suites
    ops/                  op coverage per cell with captured ops, ops-grid across them, and
                          ops-predicted (those ops per XPU release), when any cell captured

No page loads anything from outside the site; every page is plain HTML that works from a
file:// URL as from GitHub Pages.
"""

from __future__ import annotations

import html
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from markupsafe import Markup

from .. import __version__, ops
from ..base import outputs
from ..base.errors import AccelgridError, InvalidInput
from ..base.lifetime import signals_held
from ..ops import xpu_prediction
from ..results.cellresults import discover
from ..results.history import BAD_CODES, open_store, run_row
from ..results.records import Column, Grid, Row
from . import history, hud, ops_pages, render_html, render_json, render_markdown
from ._common import templates
from .grid import build_model, with_history

DESCRIPTION = """\
Write a static site for GitHub Pages from results folders and the history: the latest grid
(index.html), a page per cell, per-test history by suite, and the op-coverage and
predicted-XPU pages when cells captured ops. The results are added to the history first
(--history, default results/history.sqlite), as `accelgrid grid --history` does.

  accelgrid publish results/* --history history.sqlite --out site
  accelgrid publish artifacts --history --expect @expected.json --baseline baselines --out site

ci/README.md ("Published grid") says how the nightly workflow keeps the history.
"""
STRIP_CLASS = render_html.STRIP_CLASS


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def slug(name: str) -> str:
    """A file name for a cell or suite."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "_"


def _strip(strip: str) -> str:
    return ('<span class="strip" title="oldest first: ' + _e(history.strip_text(strip)) + '">'
            + "".join(f'<i class="{STRIP_CLASS.get(c, "absent")}"></i>' for c in strip)
            + "</span>")


def _run(run: dict[str, Any] | None) -> str:
    if not run:
        return "never (in the history)"
    return (f"{_e(run.get('start'))} (run <code>{_e(run.get('run_id'))}</code>, commit "
            f"<code>{_e(str(run.get('commit_sha'))[:12])}</code>, torch "
            f"{_e(run.get('torch_build'))})" + (" or earlier" if run.get("earliest") else ""))


def _page(title: str, nav: str, body: str) -> str:
    return templates().get_template("site.html.j2").render(
        title=title, nav=Markup(nav), body=Markup(body)) + "\n"


def _nav(prefix: str, ops_here: bool) -> str:
    links = [("index.html", "latest grid"), ("hud.html", "runs × cells"),
             ("tests/index.html", "tests by suite")]
    if ops_here:
        links += [("ops/ops-grid.html", "op coverage"), ("ops/ops-predicted.html", "predicted XPU")]
    return " · ".join(f'<a href="{prefix}{href}">{label}</a>' for href, label in links)


def _cell_head(col: Column, ops_cells: set[str]) -> list[str]:
    """A cell page's status, link to its op coverage, provenance and counts."""
    parts = [f"<p>status: <b>{_e(col['status'])}</b>"
             + (f": {_e(col['reason'])}" if col.get("reason") else "") + "</p>", "<dl>"]
    if col["cell"] in ops_cells:
        parts.insert(1, f'<p><a href="../ops/{slug(col["cell"])}.html">op coverage of this '
                        "cell</a></p>")
    for key in ("torch_build", "torch_git", "device_name", "driver", "host", "python",
                "commit", "start", "end"):
        if col.get(key):
            parts.append(f"<dt>{_e(key)}</dt><dd>{_e(col[key])}</dd>")
    parts.append("</dl>")
    parts.append("<p>" + ", ".join(f"{n} {_e(o)}" for o, n in col["counts"].items() if n)
                 + "</p>")
    return parts


def _cell_runs(hist: dict[str, Any]) -> list[str]:
    """A cell page's table of its runs in the window, newest first."""
    if not hist.get("runs"):
        return []
    parts = [f"<h2>Runs in the window ({len(hist['runs'])})</h2><table><tr><th>start"
             "</th><th>run</th><th>commit</th><th>torch</th><th>runner</th>"
             "<th>CI</th></tr>"]
    for r in reversed(hist["runs"]):
        ci = r.get("ci_url")
        # id: the runs x cells page's squares link here
        parts.append(f'<tr id="run-{_e(r["run_id"])}"><td>{_e(r["start"])}</td>'
                     f"<td><code>{_e(r['run_id'])}</code></td>"
                     f"<td><code>{_e(str(r['commit_sha'])[:12])}</code></td>"
                     f"<td>{_e(r['torch_build'])}</td><td>{_e(r['runner'])}</td><td>"
                     + (f'<a href="{_e(ci)}">run</a>' if ci else "") + "</td></tr>")
    parts.append("</table>")
    return parts


def _cell_since(hist: dict[str, Any]) -> list[str]:
    """A cell page's changes since its previous run."""
    since = hist.get("since")
    if not since:
        return []
    parts = [f"<h2 id=\"since\">Since the previous run ({_run(hist['previous'])})</h2>"]
    if hist.get("builds"):   # a nightly against the night before: both builds
        parts.append(f"<p>torch {_e(hist['builds']['previous'])} → "
                     f"{_e(hist['builds']['this'])}</p>")
    for key, label in (("new_failures", "new failures"), ("fixed", "fixed"),
                       ("stopped", "stopped running"), ("appeared", "appeared"),
                       ("vanished", "vanished")):
        items = since.get(key, [])
        parts.append(f"<h3>{label} ({len(items)})</h3>")
        if items:
            parts.append("<ul>" + "".join(f"<li><code>{_e(n)}</code></li>"
                                          for n in items[:500]) + "</ul>")
    return parts


def _cell_tests(model: Grid, name: str) -> list[str]:
    """A cell page's failing tests (since when) and flaky tests."""
    parts: list[str] = []
    failing, flaky = [], []
    for row in model["rows"]:
        entry = row["cells"].get(name)
        if not entry:
            continue
        if entry.get("failing_since"):
            failing.append((row, entry))
        if entry.get("flaky"):
            flaky.append((row, entry))
    if failing:
        parts.append(f"<h2>Failing ({len(failing)})</h2><table><tr><th>test</th><th>history"
                     "</th><th>failing since</th><th>last passed</th></tr>")
        for row, entry in failing:
            parts.append(f"<tr><td><code>{_e(row['nodeid'])}</code></td>"
                         f"<td>{_strip(entry.get('history') or '')}</td>"
                         f"<td>{_run(entry['failing_since'])}</td>"
                         f"<td>{_run(entry.get('last_passed'))}</td></tr>")
        parts.append("</table>")
    if flaky:
        parts.append(f"<h2>Flaky ({len(flaky)})</h2><ul>")
        for row, entry in flaky:
            f = entry["flaky"]
            parts.append(f"<li><span class=\"flaky\">flaky</span> <code>{_e(row['nodeid'])}"
                         f"</code> {_strip(entry.get('history') or '')} "
                         + ("passed only on a rerun" if f["reruns"] else
                            f"{f['flips']} flips in {f['pairs']} (rate {f['rate']})") + "</li>")
        parts.append("</ul>")
    return parts


def _cell_page(col: Column, model: Grid, nav: str, ops_cells: set[str]
               ) -> str:
    hist = col.get("history") or {}
    parts = (_cell_head(col, ops_cells) + _cell_runs(hist) + _cell_since(hist)
             + _cell_tests(model, col["name"]))
    return _page(f"accelgrid: {col['name']}", nav, "\n".join(parts))


def _suite_page(suite: str, rows: list[Row], cols: list[Column],
                nav: str) -> str:
    parts = ["<p>Each test's last runs per cell, oldest first. Cells where it passed every "
             "run are counted, not drawn.</p>", "<table><tr><th>test</th><th>history</th></tr>"]
    names = [c["name"] for c in cols]
    for row in rows:
        steady, drawn = 0, []
        for name in names:
            entry = row["cells"].get(name)
            if not entry:
                continue
            strip = entry.get("history")
            if strip is not None and not strip.strip("P"):
                steady += 1
                continue
            badge = ' <span class="flaky">flaky</span>' if entry.get("flaky") else ""
            since = (f" failing since {_run(entry['failing_since'])}"
                     if entry.get("failing_since") else "")
            shown = _strip(strip) if strip else _e(entry["outcome"])
            drawn.append(f'<li><a href="../cells/{slug(name)}.html">{_e(name)}</a> {shown}'
                         f"{badge}{since}</li>")
        test_id = "t-" + slug(row["nodeid"])
        parts.append(f'<tr id="{_e(test_id)}"><td><code>{_e(row["nodeid"])}</code></td><td>'
                     + (f"<ul>{''.join(drawn)}</ul>" if drawn else "")
                     + (f"passed every run in {steady} cell(s)" if steady else "")
                     + "</td></tr>")
    parts.append("</table>")
    return _page(f"accelgrid: suite {suite}", nav, "\n".join(parts))


@dataclass
class Site:
    """What :func:`publish` wrote."""

    out: Path
    model: Grid
    pages: int
    notes: list[str] = field(default_factory=list)
    added: list[Any] | None = None

    def lines(self) -> list[str]:
        out = [f"note: {n}" for n in self.notes]
        for a in self.added or []:
            if a.status == "skipped":
                out.append(f"note: history: {a.cell} not added: {a.why}")
        added = [a for a in self.added or [] if a.status in ("added", "replaced")]
        if self.added is not None:
            out.append(f"history: {len(added)} run(s) added, "
                       f"{sum(a.status == 'already' for a in self.added)} already there")
        lost = self.model.get("lost") or []
        out += [f"LOST {lost_cell['cell']}: {lost_cell['why']}" for lost_cell in lost]
        out.append(f"wrote {self.pages} pages to {self.out} (open {self.out / 'index.html'})")
        return out


SITE_KIND = "site"
MANIFEST = outputs.manifest_name(SITE_KIND)  # the files a publish wrote: the only ones it replaces
_NEW, _OLD = "accelgrid-new", "accelgrid-old"  # beside the site while it is swapped


def _manifest(target: Path, shown: Path) -> set[str] | None:
    """The files an earlier publish wrote into ``target`` (its manifest's list); None when
    ``target`` is new or an empty folder. Anything else (a file, a folder of files with no
    manifest, a manifest that is not one) is refused before anything is read or written."""
    if not target.name:
        raise InvalidInput(f"--out {shown}: name a folder for the site, not the root")
    if not target.exists():
        return None
    if not target.is_dir():
        raise InvalidInput(f"--out {shown} is a file, not a folder")
    if not any(target.iterdir()):
        return None
    path = target / MANIFEST
    if not path.is_file():
        raise InvalidInput(f"--out {shown} holds files that accelgrid publish did not write "
                           f"(no {MANIFEST}): not replacing them; name an empty or new folder")
    return outputs.listed(path, "accelgrid publish")


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() or p.is_symlink())


def _keep_others(target: Path, new: Path, ours: set[str], written: set[str]) -> None:
    """Bring the files of ``target`` that no publish wrote (a CNAME, a page of the user's)
    into ``new``: hard links, so ``target`` stays whole until the swap. One where the new
    site writes a file is refused: replacing it would delete what is not the site's."""
    our_dirs = {p.as_posix() for f in ours for p in PurePosixPath(f).parents}
    for dirpath, dirnames, filenames in os.walk(target):
        here = Path(dirpath)
        for name in dirnames + filenames:
            src = here / name
            rel = src.relative_to(target).as_posix()
            if rel in ours or rel == MANIFEST:
                continue  # the site's own
            if src.is_dir() and not src.is_symlink():
                if rel in our_dirs:
                    continue  # the site's own folder: walked into
                (new / rel).mkdir(parents=True, exist_ok=True)
                continue
            if rel in written:
                raise InvalidInput(f"{src}: a file accelgrid publish did not write, where the "
                                   "new site writes one: move it away and publish again")
            dest = new / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                os.symlink(os.readlink(src), dest)
                continue
            try:
                os.link(src, dest)
            except OSError:  # a filesystem without hard links
                shutil.copy2(src, dest)


def _swap(new: Path, target: Path) -> None:
    """``new`` becomes ``target``; the old site is deleted once the new one is in place.
    SIGTERM/SIGINT wait while it runs: a stop leaves the old site or the new, never
    neither (a SIGKILL between the two renames leaves the old one beside, named _OLD)."""
    with signals_held():
        if not target.exists():
            os.rename(new, target)
            return
        old = target.with_name(f".{target.name}.{_OLD}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
        try:
            os.rename(new, target)
        except OSError:
            os.rename(old, target)
            raise
        shutil.rmtree(old)


def publish(folders: list[Path], out: Path, history_db: Path | None = None,
            baseline_dir: Path | None = None, expect: list[str] | None = None,
            window: int = history.DEFAULT_WINDOW) -> Site:
    """Write the site into ``out``: built in a folder beside it and swapped in, so ``out``
    holds the old site or the new one whatever the moment a signal comes; files of ``out``
    that no publish wrote (not in its manifest) are kept, and a non-empty folder without a
    manifest is refused. SIGTERM/SIGINT raise :class:`Stopped` after the temporary
    folder is removed."""
    out = Path(out)
    target = out.resolve()  # through a symlink: the folder it names is replaced
    ours = _manifest(target, out)
    read: list[Any] = []
    model = build_model(folders, baseline_dir, read)
    if not model["columns"] and not expect:
        raise AccelgridError("no results folders found in " + " ".join(map(str, folders)))
    added = with_history(model, read, history_db, expect, window)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Beside the site (one filesystem, so the swap is a rename), hidden, this process's own.
    new = target.with_name(f".{target.name}.{_NEW}-{os.getpid()}")
    shutil.rmtree(new, ignore_errors=True)
    try:
        new.mkdir()
        runs = _hud_runs(history_db, read)
        pages, notes = _write_site(new, folders, model, runs)
        written = _files(new)
        outputs.record(new, SITE_KIND, f"accelgrid publish {__version__}", set(written))
        if ours is not None:
            _keep_others(target, new, ours, set(written))
        _swap(new, target)
    finally:
        with signals_held():
            shutil.rmtree(new, ignore_errors=True)
    return Site(out, model, pages, notes, added)


def _hud_runs(history_db: Path | None, read: list[Any]) -> list[dict[str, Any]]:
    """The cell runs the runs x cells page shows: the history's newest, else the folders'."""
    if history_db is not None:
        with open_store(history_db) as store:
            return store.recent_runs(hud.CELL_RUNS)
    found = [run_row(cell, path) for path, cell in read if not cell.error]
    return [r for r in found if r is not None]


def _write_site(out: Path, folders: list[Path], model: Grid, runs: list[dict[str, Any]]
                ) -> tuple[int, list[str]]:
    """Every page of the site into the empty folder ``out``; (pages, notes)."""
    notes: list[str] = []
    ops_cells = _ops_pages(folders, out / "ops", notes)
    ops_here = bool(ops_cells)
    pages = 0
    (out / "grid.json").write_text(render_json.render(model), encoding="utf-8")
    (out / "grid.md").write_text(render_markdown.render(model), encoding="utf-8")
    top_nav = _nav("", ops_here) + " · cells: " + " ".join(
        f'<a href="cells/{slug(c["name"])}.html">{_e(c["name"])}</a>' for c in model["columns"])
    (out / "index.html").write_text(render_html.render(model, nav=top_nav), encoding="utf-8")
    pages += 1
    # The grid's columns first (the matrix's order), then cells only the history has.
    cell_pages = {c["cell"]: f"cells/{slug(c['name'])}.html" for c in model["columns"]}
    cells = list(cell_pages) + sorted({r["cell"] for r in runs} - set(cell_pages))
    hud_rows = hud.rows(runs)
    shown = [c for c in cells if any(c in r["results"] for r in hud_rows)]
    (out / "hud.html").write_text(_page(
        "accelgrid: runs × cells", _nav("", ops_here), hud.page_body(hud_rows, shown, cell_pages)),
        encoding="utf-8")
    pages += 1
    nav = _nav("../", ops_here)
    (out / "cells").mkdir()
    for col in model["columns"]:
        (out / "cells" / f"{slug(col['name'])}.html").write_text(
            _cell_page(col, model, nav, ops_cells), encoding="utf-8")
        pages += 1
    suites: dict[str, list[Row]] = {}
    for row in model["rows"]:
        suites.setdefault(row["suite"], []).append(row)
    (out / "tests").mkdir()
    index = ["<ul>"]
    for suite, rows in suites.items():
        (out / "tests" / f"{slug(suite)}.html").write_text(
            _suite_page(suite, rows, model["columns"], nav), encoding="utf-8")
        bad = sum(1 for r in rows for e in r["cells"].values()
                  if (e.get("history") or "")[-1:] in BAD_CODES or e.get("flaky"))
        index.append(f'<li><a href="{slug(suite)}.html">{_e(suite)}</a>: {len(rows)} tests, '
                     f"{bad} failing or flaky results</li>")
        pages += 1
    index.append("</ul>")
    (out / "tests" / "index.html").write_text(
        _page("accelgrid: tests by suite", nav, "\n".join(index)), encoding="utf-8")
    pages += 1
    (out / ".nojekyll").write_text("", encoding="utf-8")  # Pages serves files as they are
    return pages, notes


def _ops_pages(folders: list[Path], out: Path, notes: list[str]) -> set[str]:
    """Op coverage per cell that captured ops, across them, and predicted for XPU;
    returns the cells that have a page."""
    paths, _ = discover(folders)
    found = []
    for path in paths:
        data = ops.aggregate(path) if path.is_dir() else None
        if data is None:
            continue
        found.append(data)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{slug(data['cell'])}.html").write_text(ops_pages.cell_html(data),
                                                        encoding="utf-8")
    if not found:
        return set()
    ops_pages.write_cross(ops.cross_cell(found), out)
    try:
        captured = ops.merge([ops.load_captured(p) for p in paths
                              if p.is_dir() and ops.aggregate(p) is not None])
        chosen, more = xpu_prediction.choose_series(None, None, True)
        notes += more
        ops_pages.write_predicted(xpu_prediction.predicted_view(captured, chosen), out)
    except AccelgridError as exc:
        notes.append(f"predicted XPU pages not written: {exc}")
    return {d["cell"] for d in found}

