"""The history on real, committed results (issue #25's "done when"): the H200 cuda-2.11
runs and the cpu runs under docs/, added to one history, gridded and published; and the
nightly workflow's grid job as rendered: its grid and publish scripts run night after
night on a restored history, and only its pages job may write to GitHub Pages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelgrid import report
from accelgrid.commands import ci
from accelgrid.report import site
from accelgrid.results.cellresults import read_cell
from accelgrid.results.history import CODE, open_store

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "measured"
# Whole-cell runs of cuda-2.11 on the H200, oldest first (their env.json start times).
CUDA_RUNS = [DOCS / "h200-2026-11-30", DOCS / "h200-2026-12-01" / "cell-1gpu",
             DOCS / "h200-2026-12-01" / "cell-1gpu-4245ab9"]
CPU_RUNS = [DOCS / "hf-examples-2026-12-01" / "cpu-2.11",
            DOCS / "hf-examples-2026-12-01" / "cpu-2.5", DOCS / "containers-2026-12-01"]
WORKFLOW = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())
PR = yaml.safe_load((ROOT / ci.PR_WORKFLOW).read_text())


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


def test_real_h200_and_cpu_results_in_one_history_grid_and_site(tmp_path: Path) -> None:
    before = _snapshot(CUDA_RUNS + CPU_RUNS)
    db = tmp_path / "history.sqlite"
    with open_store(db) as store:
        done, _ = store.add(CUDA_RUNS + CPU_RUNS)
        assert [a.status for a in done] == ["added"] * 6
        again, _ = store.add(CUDA_RUNS)
        assert [a.status for a in again] == ["already"] * 3
        assert store.cells() == ["cpu-2.11", "cpu-2.13", "cpu-2.5", "cuda-2.11"]
        cuda = store.runs_of("cuda-2.11")
        assert [r["run_id"] for r in cuda] == [read_cell(f).env["run_id"] for f in CUDA_RUNS]
        assert {r["device_name"] for r in cuda} == {"NVIDIA H200"}
    # The latest run of each cell, gridded with the history (the grid adds what it is
    # given: already there).
    latest = [CUDA_RUNS[-1], *CPU_RUNS]
    made = report.grid(latest, tmp_path / "grid", history_db=db)
    col = next(c for c in made.model["columns"] if c["cell"] == "cuda-2.11")
    assert [r["run_id"] for r in col["history"]["runs"]] == [r["run_id"] for r in cuda]
    # "Since the previous run", checked against the two runs' records themselves.
    prev, last = (read_cell(f).tests for f in CUDA_RUNS[1:])
    since = col["history"]["since"]
    assert since["appeared"] == sorted(set(last) - set(prev))
    assert since["vanished"] == sorted(set(prev) - set(last))
    bad = {"failed", "error", "xpassed", "timeout", "crashed"}
    assert since["new_failures"] == sorted(
        n for n in set(last) & set(prev) if last[n]["outcome"] in bad
        and prev[n]["outcome"] not in bad)
    rows = {r["nodeid"]: r for r in made.model["rows"]}
    oldest = read_cell(CUDA_RUNS[0]).tests
    for nodeid, rec in last.items():
        strip = rows[nodeid]["cells"][col["name"]]["history"]
        assert len(strip) == 3 and strip[-1] == CODE[rec["outcome"]]
        assert strip[1] == (CODE[prev[nodeid]["outcome"]] if nodeid in prev else ".")
        assert strip[0] == (CODE[oldest[nodeid]["outcome"]] if nodeid in oldest else ".")
    cpu_cols = [c for c in made.model["columns"] if c["device"] == "cpu"]
    assert len(cpu_cols) == 3 and all(len(c["history"]["runs"]) == 1 for c in cpu_cols)
    # The site from the same history: every cell has its page, tests their strips.
    site.publish(latest, tmp_path / "site", history_db=db)
    pages = {p.relative_to(tmp_path / "site").as_posix()
             for p in (tmp_path / "site").rglob("*.html")}
    assert {"index.html", "cells/cuda-2.11.html", "cells/cpu-2.13.html",
            "tests/index.html"} <= pages
    cell_page = (tmp_path / "site" / "cells" / "cuda-2.11.html").read_text()
    assert all(r["run_id"] in cell_page for r in cuda)
    assert "NVIDIA H200" in (tmp_path / "site" / "index.html").read_text()
    assert _snapshot(CUDA_RUNS + CPU_RUNS) == before  # the results were only read


def _steps(job: dict) -> dict[str, dict]:
    return {s.get("name") or s["uses"].split("@")[0]: s for s in job["steps"]}


def test_grid_job_restores_adds_publishes_and_only_pages_deploys() -> None:
    jobs = WORKFLOW["jobs"]
    grid = jobs["grid"]
    names = list(_steps(grid))
    restore = next(n for n in names if n.startswith("Restore the history"))
    gridded = next(n for n in names if n.startswith("Grid"))
    publish = next(n for n in names if n.startswith("Publish the site"))
    upload_pages = "Upload the site for GitHub Pages"
    # Restored before the grid adds the night's results, published after, then uploaded
    # again (the next night restores it) and handed to Pages.
    order = [restore, "Download cell results", gridded, publish, "Upload the history",
             upload_pages]
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order)
    # Scheduled runs only (tests/commands/test_relay.py evaluates it per event).
    assert grid["env"]["ACCELGRID_HISTORY"] == (
        "${{ github.event_name == 'schedule' && 'history/history.sqlite' || '' }}")
    steps = _steps(grid)
    assert "gh run download" in steps[restore]["run"] and "--name history" in steps[restore]["run"]
    assert steps["Upload the history"]["with"]["path"] == "history/history.sqlite"
    up = steps[upload_pages]
    assert up["uses"] == "actions/upload-pages-artifact@" + ci.ACTIONS["upload-pages-artifact"][1]
    assert up["with"]["path"] == "site/" and up["id"] == "pages"
    assert "hashFiles('site/index.html')" in up["if"] and "!inputs.pull_request" in up["if"]
    assert grid["outputs"]["pages"] == "${{ steps.pages.outcome == 'success' }}"
    pages = jobs["pages"]
    assert pages["needs"] == "grid" and "needs.grid.outputs.pages == 'true'" in pages["if"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert [s["uses"] for s in pages["steps"]] == [
        "actions/deploy-pages@" + ci.ACTIONS["deploy-pages"][1]]
    # No other job (nor the workflow) may write to Pages; only the relay's callbacks
    # (tests/commands/test_relay.py) mint OIDC tokens beside it.
    assert WORKFLOW["permissions"] == {"contents": "read"}
    for name, job in jobs.items():
        if name != "pages":
            assert "pages" not in (job.get("permissions") or {}), name
            assert name in ("relay", "relay-report") or "id-token" not in (
                job.get("permissions") or {}), name
    # Pull requests never publish.
    assert "pages" not in PR["jobs"]
    assert "upload-pages-artifact" not in (ROOT / ci.PR_WORKFLOW).read_text()


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("nights", [2])
def test_rendered_grid_and_publish_steps_add_each_night_to_the_history(
        tmp_path: Path, nights: int) -> None:
    """The grid job's own scripts, as rendered, on two nights of real cuda-2.11 results:
    the second night's grid and site show both runs from the history the first left
    (what the restore step hands it), and the expected xpu cell is lost (exit 3) while
    the site is still written."""
    grid = WORKFLOW["jobs"]["grid"]
    steps = _steps(grid)
    gridded = next(s for n, s in steps.items() if n.startswith("Grid"))["run"]
    publish = next(s for n, s in steps.items() if n.startswith("Publish the site"))["run"]
    work = tmp_path / "job"
    work.mkdir()
    shutil.copytree(ROOT / "baselines", work / "baselines")
    (work / "expected.json").write_text(json.dumps(["cuda-2.11", "xpu-2.13"]))
    # A scheduled run's env (its ACCELGRID_HISTORY is an expression of the event).
    env = {**os.environ, **grid["env"], "ACCELGRID_HISTORY": "history/history.sqlite",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for night, source in enumerate(CUDA_RUNS[1:1 + nights]):
        shutil.rmtree(work / "results", ignore_errors=True)
        shutil.rmtree(work / "site", ignore_errors=True)
        shutil.copytree(source, work / "results" / "cuda-2.11")
        ran = _bash(gridded, work, env)
        assert ran.returncode == 3, ran.stdout + ran.stderr
        assert "xpu-2.13" in ran.stdout + ran.stderr
        pub = _bash(publish, work, env)
        assert (work / "site" / "index.html").is_file(), pub.stdout + pub.stderr
        with open_store(work / "history" / "history.sqlite") as store:
            assert len(store.runs_of("cuda-2.11")) == night + 1
    page = (work / "site" / "cells" / "cuda-2.11.html").read_text()
    for source in CUDA_RUNS[1:1 + nights]:
        run_id = read_cell(source).env["run_id"]
        assert run_id is not None and run_id in page
    index = (work / "site" / "index.html").read_text()
    assert "xpu-2.13" in index and "lost" in index
