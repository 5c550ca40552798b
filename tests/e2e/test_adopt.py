"""accelgrid in another repository (#38): the pytest11 entry point, ``accelgrid init``,
cell envs that install accelgrid itself, CI that installs it by version."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from accelgrid import __version__, cli, results
from accelgrid.base import contract
from accelgrid.base.errors import AccelgridError
from accelgrid.commands import ci, init
from accelgrid.config.matrix import load_matrix
from accelgrid.host import venvs
from accelgrid.testing import autoload

ROOT = Path(__file__).resolve().parents[2]

# A project of its own: a conftest fixture named as ours, a test that says which plugins
# pytest registered.
PROBE = '''
def test_probe(pytestconfig, request):
    pm = pytestconfig.pluginmanager
    print("PROBE", pm.has_plugin("accelgrid"), pm.has_plugin("{plugin}"),
          sum(1 for p in pm.get_plugins() if getattr(p, "__name__", "") == "{plugin}"))
'''.replace("{plugin}", autoload.PLUGIN)


def _pytest(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(contract.PREFIX) and k not in ("PYTEST_PLUGINS",
                                                               "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
                                                               "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:xdist", *args], cwd=project, capture_output=True,
                          text=True, timeout=120, env={**base, **env})


def _probe(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return next(ln[ln.index("PROBE"):].split()[1:] for ln in proc.stdout.splitlines()
                if "PROBE" in ln)


def _shown(text: str) -> str:
    """pytest's output less the header line naming the installed plugins (where the entry
    point shows: ``plugins: ..., accelgrid-0.1.0``) and the run's time."""
    return re.sub(r" in [0-9.]+s ", " ", "\n".join(
        ln for ln in text.splitlines() if not ln.startswith("plugins:")))


@pytest.mark.slow
def test_plain_pytest_elsewhere_is_as_without_accelgrid(tmp_path: Path) -> None:
    """pytest finds the entry point (the shim is registered) but, without a cell, not the
    plugin: the fixtures, markers and results of a plain run are those of a run with the
    entry point blocked (-p no:accelgrid)."""
    (tmp_path / "test_probe.py").write_text(PROBE + "\ndef test_device(device):\n    pass\n")
    on = _pytest(tmp_path, "-s", "test_probe.py::test_probe")
    assert _probe(on) == ["True", "False", "0"]
    # The device fixture is not ours to give outside a cell: the same error either way.
    plain = _pytest(tmp_path, "-q", "-k", "device")
    blocked = _pytest(tmp_path, "-q", "-k", "device", "-p", "no:accelgrid")
    assert plain.returncode == blocked.returncode == 1
    assert "fixture 'device' not found" in plain.stdout
    for what in ("--fixtures", "--markers"):
        shown, without = (_shown(_pytest(tmp_path, what, *more).stdout)
                          for more in ((), ("-p", "no:accelgrid")))
        assert shown == without and "tmp_path" in _shown(_pytest(tmp_path, "--fixtures").stdout)
    assert "device_type" not in _pytest(tmp_path, "--fixtures").stdout


@pytest.mark.slow
def test_a_cell_run_registers_the_plugin_once_however_it_is_named(tmp_path: Path) -> None:
    """With ACCELGRID_CELL set the entry point registers the plugin; a conftest naming it
    too, and the runner's PYTEST_PLUGINS, register nothing twice (pluggy would raise)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    cell = {contract.CELL: "cpu-2.13", contract.DEVICE: "cpu"}
    assert _probe(_pytest(tmp_path, "-s", **cell)) == ["True", "True", "1"]
    (tmp_path / "conftest.py").write_text(f"pytest_plugins = [{autoload.PLUGIN!r}]\n")
    assert _probe(_pytest(tmp_path, "-s", **cell)) == ["True", "True", "1"]
    assert _probe(_pytest(tmp_path, "-s", PYTEST_PLUGINS=autoload.PLUGIN,
                          **cell)) == ["True", "True", "1"]
    # Autoload off (as the runner starts pytest): PYTEST_PLUGINS alone brings it.
    (tmp_path / "conftest.py").unlink()
    assert _probe(_pytest(tmp_path, "-s", PYTEST_PLUGINS=autoload.PLUGIN,
                          PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **cell)) == ["False", "True", "1"]


def test_accelgrid_checkout_is_known_by_its_project_name(tmp_path: Path) -> None:
    assert venvs.is_accelgrid_checkout(ROOT)
    assert not venvs.is_accelgrid_checkout(tmp_path)  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "Accel_Grid"\n')
    assert not venvs.is_accelgrid_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "AccelGrid"\n')
    assert venvs.is_accelgrid_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "torch-xpu-ops"\n')
    assert not venvs.is_accelgrid_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project\nname = "accelgrid"\n')  # broken
    assert not venvs.is_accelgrid_checkout(tmp_path)


def test_a_runner_from_a_checkout_links_cell_envs_to_it() -> None:
    """This test run's accelgrid is this checkout (editable): its cell envs link here; a
    runner from a wheel has none (the wheel test below)."""
    assert venvs.runner_checkout() == ROOT


def test_a_cell_env_elsewhere_installs_the_runners_accelgrid(tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.delenv(contract.WHEEL, raising=False)
    assert venvs.self_requirement() == f"accelgrid=={__version__}"
    wheel = tmp_path / f"accelgrid-{__version__}-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setenv(contract.WHEEL, str(wheel))
    assert venvs.self_requirement() == str(wheel)
    for bad in (tmp_path / "missing.whl", tmp_path):
        monkeypatch.setenv(contract.WHEEL, str(bad))
        with pytest.raises(AccelgridError, match=contract.WHEEL):
            venvs.self_requirement()
    assert venvs.installed_accelgrid(sys.executable) == __version__


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "backend"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "my-backend"\nversion = "1.0"\n')
    (repo / ".gitignore").write_text("build/")  # no newline at its end
    return repo


def test_init_writes_a_project_whose_matrix_and_ci_work(tmp_path: Path, capsys) -> None:
    repo = _repo(tmp_path)
    assert cli.main(["init", "--root", str(repo), "--devices", "cpu,xpu"]) == 0
    own = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    series = init.newest_series(own["torch"])
    matrix = load_matrix(repo / "matrix.yaml")
    assert [c.name for c in matrix.cells] == [f"cpu-{series}", f"xpu-{series}"]
    # The devices and pins are accelgrid's own, not made up.
    written = yaml.safe_load((repo / "matrix.yaml").read_text())
    assert written["torch"] == {series: own["torch"][series]}
    assert written["devices"] == {d: own["devices"][d] for d in ("cpu", "xpu")}
    assert written["tools"] == own["tools"]
    for rel in (*ci.OUTPUTS, init.NOXFILE, init.EXAMPLE):
        assert (repo / rel).is_file(), rel
    assert (repo / ".gitignore").read_text() == "build/\n/results/\n/site/\n"
    # Its workflows install accelgrid by version, never the repository itself.
    for rel in (ci.WORKFLOW, ci.PR_WORKFLOW):
        text = (repo / rel).read_text()
        assert f"pip install --quiet accelgrid=={__version__}" in text
        assert "--editable" not in text
    assert cli.main(["ci", "check", "--matrix", str(repo / "matrix.yaml")]) == 0
    capsys.readouterr()


def test_accelgrids_own_workflows_install_its_checkout() -> None:
    files = ci.render(load_matrix(ROOT / "matrix.yaml"))
    assert "pip install --quiet --constraint constraints.txt --editable ." in files[ci.WORKFLOW]
    assert "accelgrid==" not in files[ci.WORKFLOW]


def test_init_refuses_to_overwrite_and_force_does(tmp_path: Path, capsys) -> None:
    repo = _repo(tmp_path)
    (repo / "noxfile.py").write_text("# theirs\n")
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ci.WORKFLOW).write_text("# theirs\n")
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    assert cli.main(["init", "--root", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "noxfile.py" in err and ci.WORKFLOW in err and "--force" in err
    assert "matrix.yaml" not in err  # only the files that exist
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before  # nothing written
    assert (repo / "noxfile.py").read_text() == "# theirs\n"
    assert cli.main(["init", "--root", str(repo), "--force"]) == 0
    out = capsys.readouterr().out
    assert "noxfile.py: overwritten" in out and "matrix.yaml: written" in out
    assert "sessions.register" in (repo / "noxfile.py").read_text()
    # .gitignore entries once, however often init runs.
    assert cli.main(["init", "--root", str(repo), "--force"]) == 0
    assert (repo / ".gitignore").read_text().count("/results/") == 1


@pytest.mark.parametrize("args, message", [
    (["--devices", "cpu,tpu"], "tpu"),
    (["--devices", ","], "none given"),
    (["--torch", "1.0"], "--torch 1.0"),
])
def test_init_refuses_what_accelgrid_does_not_know(tmp_path: Path, capsys, args,
                                                    message) -> None:
    repo = _repo(tmp_path)
    assert cli.main(["init", "--root", str(repo), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (repo / "matrix.yaml").exists()


def test_newest_series_is_the_newest_release() -> None:
    torch = {"2.9": {"torch": "2.9.0"}, "2.13": {"torch": "2.13.0"},
             "2.16": {"torch": "2.16.0", "channel": "nightly"}}
    assert init.newest_series(torch) == "2.13"


@dataclass(frozen=True)
class Adopted:
    """accelgrid's wheel installed (not editable) in a fresh venv, and an empty git
    repository that its ``accelgrid init`` set up."""

    tmp: Path
    repo: Path
    accelgrid: str
    env: dict[str, str]
    series: str

    def run(self, *args: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.accelgrid, *args], cwd=self.repo, env={**self.env, **env},
                              capture_output=True, text=True, timeout=timeout)

    def cell_python(self, cell: str) -> Path:
        return self.tmp / "envs" / cell.replace(".", "-") / "bin" / "python"


@pytest.fixture(scope="module")
def adopted(tmp_path_factory) -> Iterator[Adopted]:
    """Built and installed once for the wheel tests below: the build, the venv and its
    install are most of a minute."""
    tmp = tmp_path_factory.mktemp("adopt")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    dist = tmp / "dist"
    subprocess.run([uv, "build", "--wheel", "-o", str(dist), str(ROOT)], check=True,
                   capture_output=True, timeout=300)
    wheel = next(dist.glob("accelgrid-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # pip: the host's pip configuration (its indexes) is where the dependencies come from.
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    repo = tmp / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(contract.PREFIX)
           and k not in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS", "PYTHONPATH")}
    env.update({contract.WHEEL: str(wheel), contract.ENVDIR: str(tmp / "envs")})
    # 2.13: the torch this host has a wheel of.
    adopted = Adopted(tmp, repo, str(venv / "bin/accelgrid"), env, "2.13")
    run = adopted.run("init", "--torch", adopted.series, timeout=120)
    assert run.returncode == 0, run.stderr
    assert not (repo / "conftest.py").exists()
    yield adopted
    shutil.rmtree(tmp, ignore_errors=True)   # its venv and cell envs: 2 GB


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_runs_an_init_projects_cpu_cell(adopted: Adopted) -> None:
    """accelgrid's wheel, installed (not editable) in a fresh venv: `accelgrid init` in an
    empty git repository, its cpu cell (nox) to a grid naming the example test; the cell
    env has accelgrid from the wheel and pytest finds the plugin through the entry point
    (no conftest)."""
    cell = f"cpu-{adopted.series}"
    run = adopted.run("run", cell, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"installing accelgrid {__version__}" in run.stdout + run.stderr
    run = adopted.run("grid", f"results/{cell}")
    assert run.returncode == 0, run.stderr
    grid = json.loads((adopted.repo / "results" / "grid.json").read_text())
    assert "test_add_matches_cpu" in json.dumps(grid)
    # The cell env's accelgrid is the wheel's, and its pytest finds the plugin by the
    # entry point alone.
    python = adopted.cell_python(cell)
    probe = adopted.tmp / "probe"
    probe.mkdir()
    (probe / "test_probe.py").write_text(PROBE)
    shown = subprocess.run([str(python), "-m", "pytest", "-s", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "test_probe.py"], cwd=probe,
                           env={**adopted.env, contract.CELL: cell, contract.DEVICE: "cpu"},
                           capture_output=True, text=True, timeout=300)
    assert _probe(shown) == ["True", "True", "1"]
    located = subprocess.run([str(python), "-c", "import accelgrid; print(accelgrid.__file__)"],
                             capture_output=True, text=True, check=True, env=adopted.env)
    assert str(ROOT) not in located.stdout and "site-packages" in located.stdout


def _doc_section(path: Path, heading: str) -> str:
    """The text of a markdown file's section: from the line starting with ``heading`` to
    the next heading of its level."""
    text = path.read_text(encoding="utf-8")
    start = text.index("\n" + heading) + 1
    level = heading.split(" ")[0] + " "
    end = text.find("\n" + level, start + 1)
    return text[start:end if end >= 0 else None]


def _fenced(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", section, flags=re.M | re.S)


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_runs_a_spec_devices_cell(adopted: Adopted) -> None:
    """docs/guides/adopting.md's section 3 walked as written in the repository init set up, its
    device (npu there) being tests/helpers/fake_device_spec.py's fakeacc (a PrivateUse1-style
    device on the CPU's kernels): the spec file where the section's matrix names it, the
    section's matrix lines, then its commands, to a grid naming the example test with
    fakeacc in the cell's records and env.json."""
    section = _doc_section(ROOT / "docs" / "guides" / "adopting.md", "## 3. ")
    # The first yaml block adds the device; the next (its packages: torch_npu) is not
    # walked, fakeacc being on the CPU's kernels.
    (block, *_), (commands,) = _fenced(section, "yaml"), _fenced(section, "sh")
    # The doc's device under the name the spec file declares (DEVICE_NAME).
    doc_device, device = "npu", "fakeacc"
    lines = yaml.safe_load(block.replace(doc_device, device))
    entry = lines["devices"][device]
    spec = adopted.repo / entry["spec"]
    spec.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tests" / "helpers" / "fake_device_spec.py", spec)
    matrix_file = adopted.repo / "matrix.yaml"
    matrix = yaml.safe_load(matrix_file.read_text())
    assert set(matrix["matrix"]["device"]) < set(lines["matrix"]["device"])  # init's kept
    matrix["devices"].update(lines["devices"])
    matrix["matrix"]["device"] = lines["matrix"]["device"]
    matrix_file.write_text(yaml.safe_dump(matrix, sort_keys=False))

    cell = f"{device}-{adopted.series}"
    steps = []
    for line in commands.splitlines():
        args = shlex.split(line, comments=True)
        assert args[0] == "accelgrid", line
        steps.append([re.sub(rf"\b{doc_device}-[0-9.]+", cell, a) for a in args[1:]])
    assert ["run", cell] in steps and ["grid", f"results/{cell}"] in steps
    # The doc's detection finds no such device here: its cell stops before building an
    # env, and runs with ACCELGRID_SKIP_DETECT=1, as the section says.
    if not any(glob.glob(p) for p in entry["detect"].get("paths_any", [])):
        run = adopted.run("run", cell)
        assert run.returncode != 0 and f"{cell}: " in run.stdout + run.stderr
        assert not adopted.cell_python(cell).exists()
    for args in steps:
        run = adopted.run(*args, timeout=1200, **{contract.SKIP_DETECT: "1"})
        assert run.returncode == 0, (args, run.stdout[-3000:] + run.stderr[-3000:])
    assert adopted.run("ci", "check").returncode == 0  # the render step made them current

    grid = json.loads((adopted.repo / "results" / "grid.json").read_text())
    assert "test_add_matches_cpu" in json.dumps(grid) and cell in json.dumps(grid)
    folder = adopted.repo / "results" / cell
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    assert {r["device"] for r in recs} == {device}
    assert {r["outcome"] for r in recs if "test_add_matches_cpu" in r["nodeid"]} == {"passed"}
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["device_type"] == device
    assert env["env"][contract.DEVICE_SPEC] == entry["spec"]
