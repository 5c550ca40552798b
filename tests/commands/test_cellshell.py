"""Working inside a cell: the cell env's own python runs the suites (venvs.PTH), and
``accelgrid env`` / ``accelgrid shell`` give a test what a run of the cell gives it.

Fast tests use a small project with a real (torch-less) virtual environment where nox
would build the cell's, and real ``accelgrid`` subprocesses. The slow tests use the real
cpu-2.13 env (built by nox with uv on first use): its python runs suites/smoke with no
PYTHONPATH, and what ``accelgrid env`` prints, and what a test started by ``accelgrid
shell`` or after ``eval`` records, equals what a real run of the cell recorded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix
from accelgrid.host import venvs
from accelgrid.results import provenance
from accelgrid.run.cell import plan_inputs

ROOT = Path(__file__).resolve().parents[2]
SHOW = ("import json, os, sys; print(json.dumps({'prefix': sys.prefix, "
        "'env': dict(os.environ)}))")


def accelgrid(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
              stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelgrid", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def project(mini_project, tmp_path: Path) -> Path:
    """A small project (cells cpu-2.4, cpu-2.13, xpu-...) whose cpu-2.13 env is built:
    a real virtual environment where nox puts it, and src/ linking to accelgrid's."""
    proj = mini_project()
    (proj / "src").symlink_to(ROOT / "src")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(venvs.env_dir(proj, cell))], check=True)
    return proj


def env_of(proj: Path) -> Path:
    return venvs.env_dir(proj, load_matrix(proj / "matrix.yaml").cell("cpu-2.13"))


def clean(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what this test process has that a user's shell would not."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH" and not k.startswith(
        (contract.PREFIX, "PYTEST_"))}


# --------------------------------------------------------------------------- the link


def test_a_linked_env_imports_accelgrid_from_the_checkout(project: Path, tmp_path: Path) -> None:
    python = venvs.python_in(env_of(project))
    code = "import accelgrid.base.contract as c; print(c.__file__)"
    bare = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env=clean(dict(os.environ)))
    assert "No module named 'accelgrid'" in bare.stderr   # what issue #18 saw
    pth, before = venvs.link_project(python, project)
    assert pth.name == venvs.PTH and before is None
    linked = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, env=clean(dict(os.environ)))
    assert linked.returncode == 0, linked.stderr
    assert linked.stdout.strip() == str(project / "src" / "accelgrid" / "base" / "contract.py")
    # Linked from another checkout (an env copied over): relinked, and it says so.
    pth.write_text("/elsewhere/src\n")
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), "env", "cpu-2.13")
    assert proc.returncode == 0, proc.stderr
    assert (f"its env imported accelgrid from /elsewhere/src; now from {project}/src"
            in proc.stderr)
    assert pth.read_text() == f"{project}/src\n"


# --------------------------------------------------------------------------- env, shell


def test_env_prints_the_variables_of_a_run_for_eval(project: Path) -> None:
    matrix = str(project / "matrix.yaml")
    # Another cell's known issues in the caller's shell: a run drops them, so does env.
    stale = {contract.KNOWN_ISSUES: "/tmp/other-cell/known_issues.json"}
    as_json = accelgrid("--matrix", matrix, "env", "cpu-2.13", "--json", env=stale)
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)
    debug = project / "results" / "cpu-2.13" / ".debug"
    assert found["env_dir"] == str(env_of(project))
    assert found["python"] == str(venvs.python_in(env_of(project)))
    assert found["unset"] == [contract.KNOWN_ISSUES] and found["pass"] == "single"
    assert {k: v for k, v in found["set"].items() if k.startswith("ACCELGRID_")
            and k not in (contract.COMMIT, contract.DIRTY, contract.SET_VARS)} == {
        "ACCELGRID_CELL": "cpu-2.13", "ACCELGRID_DEVICE": "cpu", "ACCELGRID_TORCH": "2.13",
        "ACCELGRID_PROFILE": "default", "ACCELGRID_PASS": "single",
        "ACCELGRID_TORCH_CHANNEL": "release",
        "ACCELGRID_RESULTS": str(debug),
        # The run's side of the plan (as a run's pytest gets it): pins, matrix entry, flags.
        "ACCELGRID_PLAN_INPUTS": plan_inputs(load_matrix(project / "matrix.yaml").cell(
            "cpu-2.13"))}
    assert found["set"]["CUDA_VISIBLE_DEVICES"] == ""   # a cpu cell's tests see no GPU
    # A pytest started by hand records what the cell set as a run does (env.json's values).
    assert {"ACCELGRID_CELL", "ACCELGRID_RESULTS", "PYTHONPATH"} <= set(
        found["set"][contract.SET_VARS].split(","))
    # The same, eval'd by a real shell: its python is the env's and sees exactly that.
    shown = subprocess.run(
        ["bash", "-c", f'eval "$("$0" -m accelgrid --matrix {matrix} env cpu-2.13)" && '
                       f'python -c "{SHOW}"', sys.executable],
        capture_output=True, text=True, env={**os.environ, **stale}, timeout=300)
    assert shown.returncode == 0, shown.stderr
    inside = json.loads(shown.stdout)
    assert inside["prefix"] == found["env_dir"]
    assert contract.KNOWN_ISSUES not in inside["env"]
    assert {k: inside["env"].get(k) for k in found["set"]} == found["set"]
    assert inside["env"]["VIRTUAL_ENV"] == found["env_dir"]


def test_shell_runs_a_command_in_the_env_and_exits_with_its_status(project: Path) -> None:
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), "shell", "cpu-2.13", "--",
                     "python", "-c", SHOW + "; sys.exit(7)")
    assert proc.returncode == 7, proc.stderr
    inside = json.loads(proc.stdout)
    assert inside["prefix"] == str(env_of(project))
    assert inside["env"]["ACCELGRID_CELL"] == "cpu-2.13"
    assert inside["env"]["ONEAPI_DEVICE_SELECTOR"] == "!level_zero:gpu"
    assert inside["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(project / "src")


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_no_venv_gives_this_interpreter_the_variables_and_activates_nothing(
        project: Path) -> None:
    """As `nox --no-venv -s CELL` (GPU hosts with torch preinstalled): this interpreter,
    the run's variables, no env; a cell whose torch is not this interpreter's is refused
    with the run's own message. (The tests' interpreter has torch 2.13.)"""
    matrix = str(project / "matrix.yaml")
    as_json = accelgrid("--matrix", matrix, "env", "cpu-2.13", "--no-venv", "--json")
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)
    assert found["env_dir"] is None and found["python"] == sys.executable
    assert found["set"]["ACCELGRID_CELL"] == "cpu-2.13"
    assert "VIRTUAL_ENV" not in found["set"] and "PATH" not in found["set"]
    printed = accelgrid("--matrix", matrix, "env", "cpu-2.13", "--no-venv").stdout
    assert "# env: --no-venv: no env, the interpreter as it is" in printed
    assert "VIRTUAL_ENV" not in printed and "export PATH" not in printed
    proc = accelgrid("--matrix", matrix, "shell", "cpu-2.13", "--no-venv", "--",
                     sys.executable, "-c", SHOW + "; sys.exit(5)",
                     env={"VIRTUAL_ENV": "/somewhere/else"})
    assert proc.returncode == 5, proc.stderr
    inside = json.loads(proc.stdout)
    assert inside["prefix"] == sys.prefix
    assert inside["env"]["ACCELGRID_CELL"] == "cpu-2.13"
    assert inside["env"]["PATH"] == os.environ["PATH"]
    assert inside["env"]["VIRTUAL_ENV"] == "/somewhere/else"   # left as the caller had it
    refused = accelgrid("--matrix", matrix, "env", "cpu-2.4", "--no-venv")
    assert refused.returncode == 2
    assert re.search(r"^accelgrid env: cpu-2\.4: the env's inputs are not the matrix's: (.*; )?"
                     r"torch: wanted torch==2\.4\.\S+, found 2\.13\.\S+ \(--no-venv runs on the "
                     r"current interpreter; ACCELGRID_ACCEPT_INPUTS=1 runs on it anyway\)\n$",
                     refused.stderr), refused.stderr
    # Told to accept them, as the run is: the variables, and the plan's inputs beside them.
    taken = accelgrid("--matrix", matrix, "env", "cpu-2.4", "--no-venv", "--json",
                      env={"ACCELGRID_ACCEPT_INPUTS": "1"})
    assert taken.returncode == 0, taken.stderr
    planned = json.loads(json.loads(taken.stdout)["set"]["ACCELGRID_PLAN_INPUTS"])
    assert "torch" in planned["pins"] and planned["matrix_digest"]


def test_shell_without_a_command_starts_SHELL_there(project: Path) -> None:
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), "shell", "cpu-2.13",
                     env={"SHELL": "/bin/sh"},
                     stdin='echo "$ACCELGRID_CELL $VIRTUAL_ENV $ACCELGRID_PASS"; exit 3\n')
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.split() == ["cpu-2.13", str(env_of(project)), "single"]
    assert "accelgrid shell: cpu-2.13: " in proc.stderr and "`exit` leaves" in proc.stderr


@pytest.mark.parametrize("command", ["env", "shell"])
def test_an_unknown_cell_is_invalid_input_with_a_suggestion(project: Path, command: str) -> None:
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), command, "cpu-2.14")
    assert proc.returncode == 2
    assert proc.stderr == (f"accelgrid {command}: unknown cell 'cpu-2.14'; did you mean "
                           "'cpu-2.4'? (`accelgrid cells` lists all 5)\n")
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["env", "shell"])
def test_a_cell_without_its_env_says_how_to_build_it(project: Path, command: str) -> None:
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), command, "cpu-2.4")
    assert proc.returncode == 1
    cell = load_matrix(project / "matrix.yaml").cell("cpu-2.4")
    assert proc.stderr == (f"accelgrid {command}: cpu-2.4: its env {venvs.env_dir(project, cell)}"
                           " is not built yet; build it with: nox -s cpu-2.4 --install-only\n")
    assert proc.stdout == ""


# A noxfile whose session, named as the cell, only makes its env (uv: a second); its
# envdir as the project's noxfile sets it.
_ENV_ONLY_NOXFILE = ("import os\nimport nox\nnox.options.default_venv_backend = 'uv'\n"
                     "if os.environ.get('ACCELGRID_ENVDIR'):\n"
                     "    nox.options.envdir = os.environ['ACCELGRID_ENVDIR']\n\n\n"
                     "@nox.session(name='cpu-2.13')\ndef cell(session):\n    pass\n")


@pytest.mark.parametrize("where", ["deep-project", "long-envdir"])
def test_env_dir_is_where_nox_builds_the_env(mini_project, monkeypatch, where: str) -> None:
    """nox names an env from its envdir option as given (".nox", relative to the
    noxfile's folder; ACCELGRID_ENVDIR as set), hashing the name where that path would
    be too long: a deep project keeps `.nox/cpu-2-13`, a long envdir gets a hashed name.
    env_dir says where a real nox builds it, and env/shell print only their one line."""
    with tempfile.TemporaryDirectory() as base:
        # nox hashes when <envdir>/<name> passes 87 characters and envdir is under 91.
        pad = 85 - len(str(Path(base) / "proj" / ".nox"))
        deep = Path(base) / ("d" * pad) / "proj"
        shutil.copytree(mini_project(), deep)
        (deep / "noxfile.py").write_text(_ENV_ONLY_NOXFILE)
        if where == "long-envdir":
            monkeypatch.setenv("ACCELGRID_ENVDIR", str(deep / "envs"))
        cell = load_matrix(deep / "matrix.yaml").cell("cpu-2.13")
        env = venvs.env_dir(deep, cell)
        proc = accelgrid("--matrix", str(deep / "matrix.yaml"), "env", "cpu-2.13")
        assert proc.returncode == 1
        assert proc.stderr == (f"accelgrid env: cpu-2.13: its env {env} is not built yet; "
                               "build it with: nox -s cpu-2.13 --install-only\n")
        subprocess.run([sys.executable, "-m", "nox", "-s", "cpu-2.13"], cwd=deep,
                       check=True, capture_output=True, timeout=300)
        assert venvs.python_in(env).exists()
        if where == "deep-project":
            assert env == deep / ".nox" / "cpu-2-13"
        else:
            assert env.parent == deep / "envs" and re.fullmatch(r"[0-9a-f]{8}", env.name)


def test_shell_with_a_command_that_does_not_exist_says_so(project: Path) -> None:
    proc = accelgrid("--matrix", str(project / "matrix.yaml"), "shell", "cpu-2.13", "--",
                     "no-such-command-here")
    assert proc.returncode == 2
    assert proc.stderr == ("accelgrid shell: no command 'no-such-command-here' in the cell's "
                           "env or on PATH\n")


# --------------------------------------------------------------------------- real cell


@pytest.fixture(scope="module")
def cpu_python() -> Path:
    """cpu-2.13's env, built (or refreshed) by its nox session with --install-only, outside
    the checkout (conftest.cell_envdir; the tests using it ask for outside_envdir too); its
    link to this checkout (venvs.PTH) is there after that.

    The env is shared: under xdist other workers run it at the same time (test_nox, test_cli,
    the other tests here), so nothing of it is deleted here (the fixture once removed the
    .pth to see the build write it again, and a suite running in the env on the other worker
    then could not import accelgrid). A clean checkout, as CI has, builds the env from
    nothing, which is when the build must write the link; the session rewrites it only when
    it names something else, so a warm env is never touched."""
    from helpers.mini_projects import cell_envdir

    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(contract.ENVDIR, str(cell_envdir()))
        python = venvs.python_in(venvs.env_dir(ROOT, cell))
        assert sessions.prepared_python(ROOT, cell) == str(python)
    assert python.is_relative_to(cell_envdir())
    pth = venvs.site_packages(python) / venvs.PTH
    assert pth.read_text(encoding="utf-8").strip() == str((ROOT / "src").absolute())
    return python


@pytest.mark.slow
def test_the_cell_envs_own_python_runs_a_suite(cpu_python: Path, tmp_path: Path,
                                               outside_envdir: Path) -> None:
    proc = subprocess.run([str(cpu_python), "-m", "pytest", "suites/smoke", "-k", "matmul",
                           "-p", "no:cacheprovider", "-q"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=clean(dict(os.environ)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout


RUN_ONLY = (contract.RUN_ID, contract.PYTEST_ARGS, contract.SELECTION)


def comparable(env: dict[str, str]) -> dict[str, str]:
    """A recorded env without what differs by design between a run and a test by hand:
    the run's id and arguments, and the two paths into its results folder."""
    return {k: v for k, v in env.items()
            if k not in (*RUN_ONLY, contract.RESULTS, contract.KNOWN_ISSUES)}


@pytest.mark.slow
def test_env_and_shell_give_a_test_what_a_real_run_gives_it(cpu_python: Path, tmp_path: Path,
                                                           outside_envdir: Path) -> None:
    out = tmp_path / "results"
    base = {**os.environ, "ACCELGRID_RESULTS_DIR": str(out)}
    run = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s",
                          "cpu-2.13", "--", "suites/smoke", "-k", "matmul"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1500, env=base)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    folder = results.last_run(out / "cpu-2.13")[1]
    ran = json.loads((folder / contract.ENV_FILE).read_text())
    # What `accelgrid env` prints, applied to the same starting environment.
    printed = accelgrid("env", "cpu-2.13", "--json", env=base)
    assert printed.returncode == 0, printed.stderr
    found = json.loads(printed.stdout)
    debug = out / "cpu-2.13" / ".debug"
    assert found["results"] == str(debug) and found["set"][contract.RESULTS] == str(debug)
    applied = {k: v for k, v in base.items() if k not in found["unset"]} | found["set"]
    assert comparable(provenance.recorded_env(applied)) == comparable(ran["env"])
    assert set(RUN_ONLY) <= set(ran["env"]) and not set(RUN_ONLY) & set(found["set"])
    issues = json.loads(Path(found["set"][contract.KNOWN_ISSUES]).read_text())
    assert issues == json.loads(Path(ran["env"][contract.KNOWN_ISSUES]).read_text())
    # What a test started in the shell, or after eval, records: the run's env, its python.
    node = "suites/smoke/test_device_api.py"
    for how in ("shell", "eval"):
        if how == "shell":
            proc = accelgrid("shell", "cpu-2.13", "--", "python", "-m", "pytest", node, "-k",
                             "matmul", "-p", "no:cacheprovider", env=base)
        else:
            proc = subprocess.run(
                ["bash", "-c", 'eval "$("$0" -m accelgrid env cpu-2.13)" && python -m pytest '
                 f'{node} -k matmul -p no:cacheprovider', sys.executable],
                cwd=ROOT, capture_output=True, text=True, timeout=600, env=base)
        assert proc.returncode == 0, how + proc.stdout[-3000:] + proc.stderr[-3000:]
        by_hand = json.loads((debug / contract.ENV_FILE).read_text())
        assert comparable(by_hand["env"]) == comparable(ran["env"]), how
        assert by_hand["python"]["executable"] == ran["python"]["executable"] == str(cpu_python)
        recs = [json.loads(x) for x in (debug / contract.TESTS_FILE).read_text().splitlines()]
        assert [(r["nodeid"].split("::")[-1], r["outcome"]) for r in recs] == [
            ("test_allocation_and_matmul_match_cpu", "passed")], how
    shutil.rmtree(out)


def test_the_linked_source_is_compiled_ahead_where_no_bytecode_is_written(
        tmp_path: Path, monkeypatch) -> None:
    """PYTHONDONTWRITEBYTECODE: each process importing accelgrid from the checkout would
    compile it again; the session compiles it ahead (as installers do), only what changed
    since. With bytecode written at import, nothing is done."""
    import importlib.util

    module = tmp_path / "src" / "accelgrid" / "mod.py"
    module.parent.mkdir(parents=True)
    module.write_text("X = 1\n")
    cached = Path(importlib.util.cache_from_source(str(module)))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    venvs.compile_source(tmp_path)
    assert not cached.exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    venvs.compile_source(tmp_path)
    first = cached.read_bytes()
    venvs.compile_source(tmp_path)
    assert cached.read_bytes() == first   # unchanged: not compiled again
    module.write_text("X = 22\n")
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 10**9))
    venvs.compile_source(tmp_path)
    assert cached.read_bytes() != first
