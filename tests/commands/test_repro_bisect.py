"""`accelgrid repro` and `accelgrid bisect`: verdicts and the bisection on synthetic
outcomes; real nox runs (--no-venv, the dev interpreter's torch) of a project with its own
registry and reproductions; heavy proofs on real multi-GB cell envs (ACCELGRID_HEAVY=1)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.commands import bisect, repro
from accelgrid.config.matrix import load_matrix
from accelgrid.config.model import Cell

ROOT = Path(__file__).resolve().parents[2]
HEAVY = os.environ.get("ACCELGRID_HEAVY") == "1"


# --- verdicts and search on synthetic results -------------------------------------------
def _recs(*outcomes_messages: tuple[str, str]) -> dict[str, dict]:
    return {f"t.py::test_{i}": {"nodeid": f"t.py::test_{i}", "outcome": o, "message": m}
            for i, (o, m) in enumerate(outcomes_messages)}


@pytest.mark.parametrize("recs,word,detail", [
    (_recs(("xfailed", "pytorch/ao#958: ...")), "reproduces", "pytorch/ao#958: ..."),
    (_recs(("passed", ""), ("failed", "AssertionError: boom")), "reproduces",
     "1 of 2 tests; AssertionError: boom"),
    (_recs(("xpassed", "[XPASS(strict)] looks fixed")), "fixed", "1 xpassed"),
    (_recs(("passed", ""), ("skipped", "xpu only")), "fixed", "1 passed, 1 skipped"),
    (_recs(("skipped", "XPU-to-CPU fallback is an xpu matter")), "not run",
     "XPU-to-CPU fallback is an xpu matter"),
    (_recs(("timeout", "")), "inconclusive", "timed out"),
    ({}, "not run", "no test ran"),
])
def test_verdict(recs: dict, word: str, detail: str) -> None:
    assert repro.verdict(recs) == (word, detail)


def _cells(*versions: str) -> list[Cell]:
    matrix = load_matrix(ROOT / "matrix.yaml")
    return [matrix.cell(f"cpu-{v}") for v in versions]


VERSIONS = ("2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14")


@pytest.mark.parametrize("first_new", range(1, len(VERSIONS)))
def test_bisection_finds_the_first_change(first_new: int) -> None:
    cells = _cells(*VERSIONS)
    calls = []

    def outcome_of(cell: Cell) -> bisect.Outcome:
        calls.append(cell.name)
        return bisect.Outcome("passed" if cells.index(cell) >= first_new else "failed")

    seen, verdict, changed = bisect.search(cells, outcome_of)
    assert changed is cells[first_new]
    assert verdict.startswith(f"the outcome changes at torch {cells[first_new].pins['torch']}")
    assert len(calls) == len(set(calls)) <= 5  # 7 versions: 2 ends + at most 3 halvings
    lines = bisect.table(cells, seen)
    assert lines[0].split()[:3] == ["torch", "cell", "outcome"]
    assert sum("bisection skipped it" in ln for ln in lines) == len(cells) - len(calls)


def test_run_all_lists_every_change_and_no_change() -> None:
    cells = _cells("2.4", "2.5", "2.6")
    by = {"cpu-2.4": "failed", "cpu-2.5": "passed", "cpu-2.6": "failed"}
    seen, verdict, changed = bisect.search(cells, lambda c: bisect.Outcome(by[c.name]),
                                           run_all=True)
    assert changed is cells[1] and "1 later change(s)" in verdict and len(seen) == 3
    _, verdict, changed = bisect.search(cells, lambda c: bisect.Outcome("passed"))
    assert changed is None and verdict.startswith("no change between torch 2.4.1 and 2.6.0")


def test_unknown_version_stops_the_bisection() -> None:
    cells = _cells("2.4", "2.5", "2.6")

    def outcome_of(cell: Cell) -> bisect.Outcome:
        if cell.name == "cpu-2.6":
            return bisect.Outcome("not run", "env failed", ran=False)
        return bisect.Outcome("failed")

    _, verdict, changed = bisect.search(cells, outcome_of)
    assert changed is None and verdict == "cannot bisect: cpu-2.6 ran no test (env failed)"


# --- real nox runs on a small project ---------------------------------------------------------
REPRO_BUG = '''
import pytest
pytestmark = pytest.mark.upstream("acme/widgets#1")

def test_widget_works():
    assert 1 + 1 == 3, "widget is broken"
'''
REPRO_FIXED = '''
import pytest
pytestmark = pytest.mark.upstream("acme/widgets#2")

def test_gadget_works():
    assert 1 + 1 == 2
'''
REGISTRY = '''
schema: 1
issues:
  "acme/widgets#1":
    title: widgets break
    scope: {devices: [cpu, xpu]}
    tests: [suites/repro/test_acme_widgets_1.py]
    expect: failed
    match: "widget is broken"
  "acme/widgets#2":
    title: gadgets broke once
    scope: {devices: [cpu]}
    tests: [suites/repro/test_acme_widgets_2.py]
    expect: failed
'''


@pytest.fixture
def repro_project(mini_project) -> Path:
    proj = mini_project()
    (proj / "suites" / "repro").mkdir()
    shutil.copy(ROOT / "suites" / "repro" / "conftest.py", proj / "suites" / "repro")
    (proj / "suites" / "repro" / "test_acme_widgets_1.py").write_text(REPRO_BUG)
    (proj / "suites" / "repro" / "test_acme_widgets_2.py").write_text(REPRO_FIXED)
    (proj / "known_issues.yaml").write_text(REGISTRY)
    shutil.copy(ROOT / "noxfile.py", proj / "noxfile.py")
    return proj


def _cli(proj: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ACCELGRID_NO_KNOWN_ISSUES"}
    env["ACCELGRID_RESULTS_DIR"] = str(proj / "results")
    return subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), *args], cwd=proj, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_repro_in_every_cell_of_the_scope(repro_project: Path) -> None:
    proc = _cli(repro_project, "repro", "acme/widgets#1", "--no-venv")
    got = dict(ln.split(None, 1) for ln in proc.stdout.splitlines() if " → " in ln)
    # cpu-2.13 runs on the dev interpreter; its torch is not 2.4's; no xpu here.
    assert list(got) == ["cpu-2.4", "cpu-2.13", "xpu-2.4", "xpu-2.13", "xpu-2.13-fallback-debug"]
    assert got["cpu-2.4"].startswith("→ not run (the session ran no test: ")
    assert re.search(r"the env's inputs are not the matrix's: (.*; )?torch: wanted "
                     r"torch==2\.4\.\S+, found 2\.13", got["cpu-2.4"]), got["cpu-2.4"]
    assert got["cpu-2.13"].startswith("→ reproduces (acme/widgets#1: widgets break "
                                      "(https://github.com/acme/widgets/issues/1))")
    for xpu in ("xpu-2.4", "xpu-2.13", "xpu-2.13-fallback-debug"):
        assert got[xpu] == "→ not run (xpu not present: none of /dev/dri/renderD* exists)"
    assert proc.returncode == 1  # cpu-2.4 could not run
    cell_folder = repro_project / "results" / "repro" / "acme-widgets-1" / "cpu-2.13"
    run_id, folder = results.last_run(cell_folder)  # a selected run: runs/<run-id>/
    assert run_id is not None
    assert folder == (cell_folder / "runs" / run_id).resolve()
    assert (folder / "tests.jsonl").exists() and (folder / "junit.xml").exists()


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_repro_fixed_with_expect(repro_project: Path) -> None:
    proc = _cli(repro_project, "repro", "acme/widgets#2", "--cell", "cpu-2.13", "--no-venv",
                "--expect", "fixed")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("cpu-2.13 → "))
    # In scope but passing: the registry turns it into a strict xpass, i.e. "fixed".
    assert line.startswith("cpu-2.13 → fixed (1 xpassed)")


def test_repro_errors_are_one_line(repro_project: Path) -> None:
    proc = _cli(repro_project, "repro", "acme/widgets#3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "acme/widgets#3 is not in" in proc.stderr and "did you mean" in proc.stderr
    proc = _cli(repro_project, "repro", "acme/widgets#1", "--cell", "cpu-2.31")
    assert proc.returncode == 2 and "unknown cell 'cpu-2.13'" not in proc.stderr
    assert "did you mean 'cpu-2.13'?" in proc.stderr


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_bisect_runs_each_version_through_nox(repro_project: Path) -> None:
    # --no-venv: only the dev interpreter's torch (2.13) can run; 2.4 shows as not run.
    proc = _cli(repro_project, "bisect", "suites/repro/test_acme_widgets_2.py",
                "--device", "cpu", "--no-venv", "--all")
    out = proc.stdout
    assert "torch 2.4.1 (cpu-2.4) → not run" in out
    assert "torch 2.13.0 (cpu-2.13) → xpassed" in out
    assert "verdict: no change: xpassed on every version that ran (1 of 2)" in out
    assert proc.returncode == 1
    proc = _cli(repro_project, "bisect", "suites/repro/test_acme_widgets_2.py",
                "--device", "xpu")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("accelgrid bisect: xpu not present: none of "
                                   "/dev/dri/renderD* exists")


# --- heavy: real cell environments (GBs each); ACCELGRID_HEAVY=1 ----------------------------
def _real(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    envdir = os.environ.get("ACCELGRID_NOX_ENVDIR")
    extra = ["--envdir", envdir] if envdir else []
    return subprocess.run([sys.executable, "-m", "accelgrid", *args, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.heavy
@pytest.mark.skipif(not HEAVY, reason="builds multi-GB cell envs; set ACCELGRID_HEAVY=1")
def test_heavy_ao_958_reproduces_on_two_torch_versions() -> None:
    proc = _real("repro", "pytorch/ao#958", "--cell", "cpu-2.4", "--cell", "cpu-2.13", "-R",
                 "--expect", "reproduces")
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for cell in ("cpu-2.4 ", "cpu-2.13"):
        assert f"\n{cell} → reproduces (pytorch/ao#958: " in proc.stdout


@pytest.mark.heavy
@pytest.mark.skipif(not HEAVY, reason="builds multi-GB cell envs; set ACCELGRID_HEAVY=1")
def test_heavy_bisect_finds_torch_2_5_for_127929() -> None:
    proc = _real("bisect", "suites/repro/test_pytorch_pytorch_127929.py::"
                 "test_xpu_memory_api_exists", "--device", "cpu", "--torch", "2.4", "--torch",
                 "2.5", "--torch", "2.6", "--torch", "2.13")
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("verdict: the outcome changes at torch 2.5.1 (cpu-2.5): xfailed on 2.4.1 → "
            "passed on 2.5.1") in proc.stdout
    rows = {ln.split()[0]: ln.split()[2] for ln in proc.stdout.splitlines()
            if ln[:1].isdigit() and "cpu-" in ln}
    assert rows["2.4.1"] == "xfailed" and rows["2.5.1"] == "passed"


def test_repro_files_follow_the_naming_rule() -> None:
    for path in sorted((ROOT / "suites" / "repro").glob("test_*.py")):
        text = textwrap.dedent(path.read_text())
        issue = text.split('pytest.mark.upstream("', 1)[1].split('"', 1)[0]
        assert repro.known_issues.repro_file(issue) == f"suites/repro/{path.name}"


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_local_wheel_cell_runs_only_when_named(repro_project: Path) -> None:
    """A cell whose torch is a local wheel (xpu-2.4 in matrix.yaml: a source build) is in
    the scope but excluded from default runs: repro says so; --cell runs it."""
    path = repro_project / "matrix.yaml"
    path.write_text(path.read_text().replace(
        "  include:\n", '  include:\n    - {device: cpu, torch: "2.4", torch_wheel: wheels/cpu}\n'))
    proc = _cli(repro_project, "repro", "acme/widgets#2", "--no-venv")
    lines = [ln for ln in proc.stdout.splitlines() if " → " in ln]
    assert lines[0] == (f"cpu-2.4  → not run (torch from a local wheel ({repro_project}/wheels/"
                        "cpu): excluded from default runs; run it with --cell cpu-2.4)")
    assert lines[1].startswith("cpu-2.13 → fixed") and len(lines) == 2
    assert proc.returncode == 0   # like an absent device, a cell run on request is no failure
    # Named, it runs: here without the wheel, so it says what is missing, in one line.
    proc = _cli(repro_project, "repro", "acme/widgets#2", "--cell", "cpu-2.4")
    [line] = [ln for ln in proc.stdout.splitlines() if " → " in ln]
    assert line == (f"cpu-2.4 → not run (torch comes from a local wheel and {repro_project}/"
                    "wheels/cpu does not exist (build torch 2.4 from source and put its wheel "
                    "there: docs/devices/xpu.md))")
    assert "Traceback" not in proc.stderr
    listed = _cli(repro_project, "repro", "--list").stdout
    assert "cells in scope: cpu-2.4 (local torch wheel: --cell only), cpu-2.13" in listed


def test_repro_unknown_or_excluded_cell_is_one_line(repro_project: Path) -> None:
    path = repro_project / "matrix.yaml"
    path.write_text(path.read_text().replace(
        "  include:\n", '  exclude:\n    - {device: cpu, torch: "2.4"}\n  include:\n'))
    proc = _cli(repro_project, "repro", "acme/widgets#2", "--cell", "cpu-2.4")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "accelgrid repro: cell 'cpu-2.4' is excluded by matrix.yaml:38 matrix.exclude[0] "
        "({device: cpu, torch: 2.4}); add an include rule for it to run it"]
    proc = _cli(repro_project, "repro", "acme/widgets#2", "--cell", "xpu-2.31")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "unknown cell 'xpu-2.31'; did you mean 'xpu-2.13'?" in proc.stderr


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_bisect_repro_and_predict_outputs_are_no_cell_columns(repro_project: Path,
                                                              tmp_path: Path) -> None:
    """Real ``accelgrid run``, ``bisect``, ``repro`` and ``ops predict --out
    results/predicted`` (issue 36, item 5): ``accelgrid grid results/*`` and ``publish``
    show the cell's column alone, and say in one line each what they passed over."""
    import json

    proj, res = repro_project, repro_project / "results"
    assert _cli(proj, "run", "cpu-2.13", "--no-venv").returncode in (0, 1)
    _cli(proj, "bisect", "suites/repro/test_acme_widgets_2.py", "--device", "cpu",
         "--no-venv", "--all")
    _cli(proj, "repro", "acme/widgets#2", "--cell", "cpu-2.13", "--no-venv")
    done = _cli(proj, "ops", "predict", str(ROOT / "docs" / "cuda" / "ops-cuda-2.11.json"),
                "--series", "2.8", "--out", str(res / "predicted"))
    assert done.returncode == 0, done.stderr
    given = sorted(str(p) for p in res.iterdir())
    assert {Path(p).name for p in given} >= {"cpu-2.13", "bisect", "repro", "predicted"}
    grid = _cli(proj, "grid", *given, "--out", str(tmp_path / "g"))
    site = _cli(proj, "publish", *given, "--out", str(tmp_path / "site"))
    for done, doc in ((grid, tmp_path / "g" / "grid.json"),
                      (site, tmp_path / "site" / "grid.json")):
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        columns = [c["name"] for c in json.loads(doc.read_text())["columns"]]
        assert columns == ["cpu-2.13"], (columns, done.stderr[-3000:])
    notes = grid.stderr
    assert f"{res / 'predicted'}: accelgrid's own output (ops-predicted)" in notes, notes
    assert "a bisection's runs (accelgrid bisect), left out" in notes, notes
    assert f"{res / 'repro'}: reproductions (accelgrid repro), left out" in notes, notes
