"""What a cell run tells the user: progress per suite on the console, pytest's whole
output in the run's pytest.log, why tests did not run (per suite, with counts) at the
end and in grid.md, and the env build's steps with their timings. Real pytest runs of
small suites, real uv installs, a real nox session, grids from the real results."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.mini_projects import run_request

from accelgrid import report, results
from accelgrid.base import contract, outcomes
from accelgrid.config.matrix import load_matrix
from accelgrid.host import install
from accelgrid.run import console
from accelgrid.run.cell import run_cell

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

SUITE_ONE = '''
import pytest
from accelgrid.base.outcomes import not_run

def test_pass():
    print("CAPTURED-OUT-OF-A-PASSED-TEST")

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.mark.parametrize("i", range(3))
def test_skip(i):
    pytest.skip("needs an accelerator (ao#958)")

def test_other_skip():
    pytest.skip("cpu does not claim Stream")

def test_not_run():
    not_run("needs torchcodec (not installed)")
'''
SUITE_TWO = '''
import time

def test_a():
    time.sleep(1.5)

def test_b():
    time.sleep(1.5)

def test_c():
    time.sleep(1.5)
'''


def _project(mini_project) -> Path:
    proj = mini_project()
    for name, text in (("one", SUITE_ONE), ("two", SUITE_TWO)):
        (proj / "suites" / name).mkdir()
        (proj / "suites" / name / f"test_{name}.py").write_text(text)
    return proj


def _run(proj: Path, *args: str) -> tuple[int, Path]:
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    rc = run_cell(run_request(cell, sys.executable, proj, proj / "results", list(args)))
    return rc, results.last_run(proj / "results" / "cpu-2.13")[1]


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_console_shows_progress_per_suite_and_why_tests_did_not_run(
        mini_project, capfd) -> None:
    proj = _project(mini_project)
    rc, folder = _run(proj, "suites/one", "suites/two")
    out, err = capfd.readouterr()
    assert rc == 1   # test_fail
    lines = [ln.removeprefix("accelgrid: cpu-2.13: ") for ln in out.splitlines()]
    assert "10 tests to run: one 7, two 3" in lines
    assert any(re.fullmatch(r"one 7/7 done: 1 passed, 1 failed, 4 skipped, 1 not-run "
                            r"\[\d+ s\]", ln) for ln in lines), lines
    assert any(re.fullmatch(r"two 3/3 done: 3 passed \[\d+ s\]", ln) for ln in lines), lines
    # No internal pass names: what runs, in words.
    assert not any(" pass single" in ln for ln in lines)
    assert any(ln.startswith("running the cell's tests, with the host's accelerators hidden "
                             "(1 worker, time limit 10 min); pytest's output goes to ")
               for ln in lines), lines
    # The end: counts, what not-run means, reasons grouped per suite, what failed.
    summary = lines[lines.index(next(ln for ln in lines if ln.startswith("10 tests: "))):]
    assert summary[0].startswith("10 tests: 4 passed, 1 failed, 4 skipped, 1 not-run -> ")
    assert summary[1] == f"  ({outcomes.NOT_RUN_MEANING})"
    assert summary[2:6] == [
        "why 5 tests did not run, per suite:",
        "  one: 3 skipped — needs an accelerator (ao#958)",
        "  one: 1 skipped — cpu does not claim Stream",
        "  one: 1 not-run — needs torchcodec (not installed)"]
    assert summary[6] == "1 test went wrong:"
    assert summary[7].startswith("  FAILED suites/one/test_one.py::test_fail: "
                                 "AssertionError: one is not two")
    assert summary[8].startswith("pytest's full report (every test with its captured output): ")
    # pytest's own report, -rA passes included, is in the log and not on the console.
    for text in ("CAPTURED-OUT-OF-A-PASSED-TEST", "PASSES", "short test summary info"):
        assert text not in out + err
    log = (folder / contract.PYTEST_LOG_FILE).read_text()
    assert "= PASSES =" in log and "CAPTURED-OUT-OF-A-PASSED-TEST" in log
    assert "PASSED suites/two/test_two.py::test_c" in log
    assert re.search(r"1 failed, 4 passed, 5 skipped", log), log[-500:]
    assert len(out.splitlines()) < 20, out


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_a_long_suite_reports_while_it_runs(mini_project, capfd, monkeypatch) -> None:
    proj = _project(mini_project)
    monkeypatch.setattr(console, "HEARTBEAT_S", 1.0)
    assert _run(proj, "suites/two")[0] == 0
    lines = [ln.removeprefix("accelgrid: cpu-2.13: ") for ln in capfd.readouterr().out
             .splitlines() if ln.startswith("accelgrid: cpu-2.13: two ")]
    so_far = [ln for ln in lines if re.match(r"two [12]/3 so far: [12] passed \[\d+ s\]$", ln)]
    assert so_far and lines.index(so_far[0]) < len(lines) - 1, lines
    assert re.fullmatch(r"two 3/3 done: 3 passed \[\d+ s\]", lines[-1]), lines


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_pytest_that_stops_early_shows_why(mini_project, capfd) -> None:
    proj = _project(mini_project)
    rc, folder = _run(proj, "suites/two", "--no-such-option")
    err = capfd.readouterr().err
    assert rc == 4
    assert "accelgrid: cpu-2.13: pytest exited with 4 (usage error); the end of its output:" \
        in err
    assert "unrecognized arguments: --no-such-option" in err
    assert "unrecognized arguments: --no-such-option" in (
        folder / contract.PYTEST_LOG_FILE).read_text()


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_grid_md_says_why_tests_did_not_run_per_cell_and_suite(mini_project, tmp_path) -> None:
    proj = _project(mini_project)
    _, mixed = _run(proj, "suites/one")
    made = report.grid([mixed], tmp_path / "grid")
    md = (tmp_path / "grid" / "grid.md").read_text()
    counts_row = next(ln for ln in md.splitlines() if ln.startswith("| cpu-2.13 |"))
    after = md[md.index(counts_row):]
    assert after.split("\n")[2] == f"➖ {outcomes.NOT_RUN_MEANING}."
    assert ("### Why tests did not run\n\n| cell | suite | outcome | tests | reason |\n"
            "| --- | --- | --- | --- | --- |\n"
            "| cpu-2.13 | one | ⏭️ skipped | 3 | needs an accelerator (ao#958) |\n"
            "| cpu-2.13 | one | ⏭️ skipped | 1 | cpu does not claim Stream |\n"
            "| cpu-2.13 | one | ➖ not-run | 1 | needs torchcodec (not installed) |\n") in md
    column = json.loads((tmp_path / "grid" / "grid.json").read_text())["columns"][0]
    assert column["reasons"][0] == {"suite": "one", "outcome": "skipped",
                                    "reason": "needs an accelerator (ao#958)", "count": 3}
    assert f"({outcomes.NOT_RUN_MEANING}; grid.md says why, per suite)" in made.lines()
    page = (tmp_path / "grid" / "grid.html").read_text()
    assert ("<summary>Why tests did not run: 5 tests in 1 cell, per suite and reason</summary>"
            in page)
    meaning = html.escape(outcomes.NOT_RUN_MEANING).replace("&#x27;", "&#39;")  # jinja2's
    assert f'<p><span class="chip not-run">–</span> {meaning}.</p>' in page
    assert ('<tr><td>cpu-2.13</td><td>one</td><td class="not-run">– not-run</td><td>1</td>'
            "<td>needs torchcodec (not installed)</td></tr>") in page
    assert ('<td class="skipped">s skipped</td><td>3</td><td>needs an accelerator (ao#958)'
            "</td></tr>") in page
    # A run where everything passed: no reasons, no explanation of an outcome it lacks.
    _, clean = _run(proj, "suites/two")
    made = report.grid([clean], tmp_path / "clean")
    md = (tmp_path / "clean" / "grid.md").read_text()
    assert "Why tests did not run" not in md and outcomes.NOT_RUN_MEANING not in md
    page = (tmp_path / "clean" / "grid.html").read_text()
    assert "Why tests did not run" not in page and "not-run: accelgrid" not in page
    assert not any(outcomes.NOT_RUN_MEANING in ln for ln in made.lines())


def _uv(*args: str, env: dict[str, str]) -> str:
    uv = Path(sys.executable).with_name("uv")
    proc = subprocess.run([str(uv), *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_uv_changes_reads_what_a_real_install_did(tmp_path: Path) -> None:
    import os

    from accelgrid.host import pipconfig

    env = {**os.environ, **pipconfig.uv_env_from_pip(pipconfig.pip_settings()),
           "VIRTUAL_ENV": str(tmp_path / "venv")}
    _uv("venv", "-q", "--python", sys.executable, str(tmp_path / "venv"), env=env)
    first = _uv("pip", "install", "packaging==26.4", "pluggy", env=env)
    assert install.uv_changes(first, ["pluggy"]).startswith("2 installed (pluggy ")
    assert "packaging 26.4" in install.uv_changes(first)
    again = _uv("pip", "install", "packaging==26.4", env=env)
    assert install.uv_changes(again) == "nothing to change, all installed already"
    _uv("pip", "uninstall", "pluggy", env=env)
    assert install.uv_changes(_uv("pip", "install", "pluggy", env=env)).startswith(
        "1 installed (pluggy ")


NOXFILE = '''
import sys
sys.path.insert(0, {src!r})
import nox
from accelgrid.commands import envbuild
from accelgrid.host import install, pipconfig
from accelgrid.config.matrix import load_matrix

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
CELL = load_matrix({matrix!r}).cell("cpu-2.13")


@nox.session
def tiny(session):
    steps = tuple(install.Step(f"step {{i}}", tuple(arg.split())) for i, arg in
                  enumerate(session.posargs, 1))
    plan = install.InstallPlan(CELL.name, "default", steps,
                               pipconfig.uv_env_from_pip(pipconfig.pip_settings()))
    session.env.update(plan.env)
    envbuild.build_env(session, CELL, plan)
'''


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_env_build_prints_each_step_with_what_and_how_long(tmp_path: Path) -> None:
    (tmp_path / "noxfile.py").write_text(textwrap.dedent(NOXFILE.format(
        src=str(SRC), matrix=str(ROOT / "tests" / "base_matrix.yaml"))))

    def nox(*posargs: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nox", "-s", "tiny", "--", *posargs],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)

    (tmp_path / "wheels").mkdir()   # an index option: its step says it, not the list
    proc = nox(f"--find-links {tmp_path / 'wheels'} packaging==26.4", "--no-deps pluggy")
    assert proc.returncode == 0, proc.stderr
    lines = [ln.removeprefix("nox > cpu-2.13: ") for ln in proc.stderr.splitlines()]
    assert re.fullmatch(r"\[1/3\] environment \.nox/tiny: created with uv in \d+\.\d s",
                        lines[2]), lines
    assert lines[3:7:2] == ["[2/3] installing step 1: packaging==26.4",
                            "[3/3] installing step 2: --no-deps pluggy"]
    assert re.fullmatch(r"\[2/3\] 1 installed \(packaging 26\.4\) \[\d+\.\d s\]", lines[4])
    assert re.fullmatch(r"\[3/3\] 1 installed \(pluggy [\d.]+\) \[\d+\.\d s\]", lines[6])
    assert "uv pip install" not in proc.stderr   # the step lines say it, once
    again = nox("packaging==26.4")
    lines = [ln.removeprefix("nox > cpu-2.13: ") for ln in again.stderr.splitlines()]
    assert "[1/2] environment .nox/tiny: reused" in lines
    assert any(re.fullmatch(r"\[2/2\] nothing to change, all installed already "
                            r"\[\d+\.\d s\]", ln) for ln in lines), lines
    failed = nox("accelgrid-no-such-package==0.0.1")
    assert failed.returncode != 0
    assert re.search(r"cpu-2\.13: installing step 1 failed after \d+\.\d s:\n",
                     failed.stderr), failed.stderr
    assert "accelgrid-no-such-package" in failed.stderr.split("failed after", 1)[1]


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (48, "48 s"), (125, "2 min 05 s"),
                                           (3599.9, "60 min")])
def test_elapsed_reads_as_minutes_and_seconds(seconds: float, text: str) -> None:
    assert console.elapsed(seconds) == text


# --- one way to the console ----------------------------------------------------------------
def test_say_prefixes_the_cell_and_picks_the_stream(capsys: pytest.CaptureFixture[str]) -> None:
    console.say("cpu-2.13", "running the cell's tests")
    console.say("cpu-2.13", "pytest exited with 4 (usage error); the end of its output:"
                "\n    ERROR: bad", err=True)
    console.say(None, "no guard for pytest's process group", err=True)
    out, err = capsys.readouterr()
    assert out == "accelgrid: cpu-2.13: running the cell's tests\n"
    assert err == ("accelgrid: cpu-2.13: pytest exited with 4 (usage error); the end of its "
                   "output:\n    ERROR: bad\naccelgrid: no guard for pytest's process group\n")


def test_every_line_of_a_run_goes_through_say() -> None:
    """No print() in the run's modules (nor the session step after it) but say's own:
    a line printed beside it would skip its prefix, stream choice and flush."""
    import ast

    files = [*sorted((SRC / "accelgrid" / "run").rglob("*.py")),   # the head start too
             SRC / "accelgrid" / "commands" / "sessions.py",
             SRC / "accelgrid" / "commands" / "envbuild.py"]
    printing = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "print"
                        and (path.name, fn.name) != ("console.py", "say")):
                    printing.append(f"{path.name}:{node.lineno} in {fn.name}")
    assert printing == []
    assert len(files) > 5
