"""Ranges in the wheel, pins in CI (#38): pyproject.toml's runtime dependencies are ranges
with tested lower bounds, constraints.txt pins what this repository tests with, and the
cell envs' runner tools (matrix.yaml ``tools``) pin the same versions."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers.mini_projects import TOOLS, make_project
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from accelgrid.base import contract
from accelgrid.config.cells import RERUN_TOOL
from accelgrid.host import pipconfig

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"


def _pyproject(text: str | None = None) -> dict:
    return tomllib.loads(text if text is not None else (ROOT / "pyproject.toml").read_text())


def _requirements(project: dict) -> list[Requirement]:
    deps = list(project["project"]["dependencies"])
    for extra in project["project"].get("optional-dependencies", {}).values():
        deps += extra
    return [Requirement(d) for d in deps]


def pins(lines: list[str] | tuple[str, ...]) -> dict[str, Version]:
    """``name==version`` lines (comments and blanks skipped) by canonical name; anything
    else is no pin and raises."""
    out: dict[str, Version] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==" or "*" in spec[0].version:
            raise ValueError(f"{line}: not an exact pin")
        out[canonicalize_name(req.name)] = Version(spec[0].version)
    return out


def problems(project: dict, constraints: list[str], *tool_lists: tuple[str, ...]) -> list[str]:
    """Where pyproject's ranges, the constraints and the cells' tool pins disagree."""
    found: list[str] = []
    pinned = pins(constraints)
    for req in _requirements(project):
        name: str = canonicalize_name(req.name)
        if name not in pinned:
            found.append(f"{req.name}: not pinned in constraints.txt")
        elif not req.specifier.contains(pinned[name], prereleases=True):
            found.append(f"{req.name}: the pin {pinned[name]} is outside {req.specifier}")
    for req in map(Requirement, project["project"]["dependencies"]):
        ops = {s.operator for s in req.specifier}
        if ops & {"==", "==="} or ">=" not in ops:
            found.append(f"{req.name}: a runtime dependency needs a range with a lower bound, "
                         f"not {req.specifier or 'nothing'}")
    for tools in tool_lists:
        for name, version in pins(tools).items():
            if name in pinned and pinned[name] != version:
                found.append(f"{name}: the cells pin {version}, constraints.txt {pinned[name]}")
    return found


def test_ranges_constraints_and_cell_tools_agree() -> None:
    matrix = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    assert problems(_pyproject(), CONSTRAINTS.read_text().splitlines(),
                    tuple(matrix["tools"]), TOOLS, (RERUN_TOOL,)) == []
    # Every name in constraints.txt is one of pyproject's: no stray pins.
    names = {canonicalize_name(r.name) for r in _requirements(_pyproject())}
    assert set(pins(CONSTRAINTS.read_text().splitlines())) == names
    # The cell's runner tools are among them (the pins compared above are real).
    assert {"pytest", "pytest-xdist", "pytest-timeout"} <= set(pins(tuple(matrix["tools"])))


PLANTED = """
[project]
name = "x"
dependencies = ["pytest>=8.3.0,<10"]
"""


@pytest.mark.parametrize(("pin", "tools", "why"), [
    ("pytest==9.2.0", ("pytest==9.2.0",), None),
    ("pytest==8.3.0", (), None),                    # the lower bound itself: inside
    ("pytest==9.999", (), None),                    # just under the upper bound: inside
    ("pytest==10.0.0", (), "outside"),              # the upper bound itself: outside
    ("pytest==8.2.99", (), "outside"),              # just under the lower bound
    ("pytest==10.0.0rc1", (), "outside"),           # a pre-release of the next major
    ("pytest==9.2.0", ("pytest==9.2.1",), "the cells pin 9.2.1"),
    ("pytest-xdist==3.8.0", (), "not pinned"),
])
def test_planted_disagreements_are_found(pin: str, tools: tuple[str, ...],
                                         why: str | None) -> None:
    found = problems(_pyproject(PLANTED), [pin], tools)
    if why is None:
        assert found == []
    else:
        assert len(found) == 1 and why in found[0], found


@pytest.mark.parametrize("dep", ['"pytest==9.2.0"', '"pytest"', '"pytest<10"'])
def test_a_runtime_pin_or_a_missing_lower_bound_is_refused(dep: str) -> None:
    project = _pyproject(PLANTED.replace('"pytest>=8.3.0,<10"', dep))
    found = problems(project, ["pytest==9.2.0"])
    assert len(found) == 1 and "needs a range with a lower bound" in found[0], found


def test_constraints_lines_are_exact_pins() -> None:
    with pytest.raises(ValueError, match="not an exact pin"):
        pins(["pytest>=9"])
    with pytest.raises(ValueError, match="not an exact pin"):
        pins(["pytest==9.*"])
    assert pins(["# a comment", "", "PyYAML==6.0.4  # why"]) == {"pyyaml": Version("6.0.4")}


def lowest(project: dict) -> list[str]:
    """The runtime dependencies at their lower bounds, as ``==`` constraints."""
    out = []
    for req in map(Requirement, project["project"]["dependencies"]):
        low = [s.version for s in req.specifier if s.operator == ">="]
        out.append(f"{req.name}=={low[0]}")
    return out


# The part of the quick set the lowest install runs: the CLI, the matrix and its validation,
# plans, versions, the grid's rendering, installs, nox's sessions and the in-cell plugin's
# recording (pytest, xdist, timeout at their lowest).
LOWEST_TESTS = ("cli/test_cli.py", "config/test_matrix.py", "config/test_validation.py",
                "run/test_plan.py", "base/test_versions.py", "report/test_report_render.py",
                "host/test_install.py", "e2e/test_nox.py", "testing/test_recording.py")


@pytest.mark.slow
def test_the_lowest_bounds_pass_a_part_of_the_quick_set(tmp_path: Path) -> None:
    """The wheel (whose METADATA has no exact runtime pin) installed in a fresh venv with
    every runtime dependency at its lower bound (torch as constraints.txt pins it) runs
    :data:`LOWEST_TESTS`, then a mini cell through nox (its env built by the lowest uv) to a
    grid. Measured here at load ~5: 11-15 s to install, 24-33 s
    of tests, 15 s for the cell and its grid (50-70 s in all)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    dist = tmp_path / "dist"
    subprocess.run([uv, "build", "--wheel", "-o", str(dist), str(ROOT)], check=True,
                   capture_output=True, timeout=300)
    wheel = next(dist.glob("accelgrid-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        meta = email.message_from_bytes(zf.read(next(
            n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))))
    runtime = [Requirement(r) for r in meta.get_all("Requires-Dist") or []
               if "extra ==" not in r]
    assert runtime and all("==" not in str(r.specifier) for r in runtime), runtime
    low = lowest(_pyproject())
    torch = next(f"torch=={v}" for n, v in pins(CONSTRAINTS.read_text().splitlines()).items()
                 if n == "torch")
    (tmp_path / "lowest.txt").write_text("\n".join([*low, torch]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(contract.PREFIX)
           and k not in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS", "PYTHONPATH")
           and not k.startswith("PYTEST_XDIST")}
    # uv reads no pip configuration: the host's indexes and local wheels passed on.
    env.update(pipconfig.uv_env_from_pip(pipconfig.pip_settings(), env))
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True,
                   env=env, timeout=120)
    python = str(venv / "bin" / "python")
    run = subprocess.run([uv, "pip", "install", "-q", "--python", python, "-c",
                          str(tmp_path / "lowest.txt"), str(wheel), "torch"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    installed = subprocess.run([uv, "pip", "freeze", "--python", python], env=env,
                               capture_output=True, text=True, check=True).stdout.splitlines()
    got = pins([ln for ln in installed if "==" in ln])
    assert {n: got[canonicalize_name(n)] for n in pins(low)} == pins(low)
    installing = time.monotonic() - started
    run = subprocess.run([python, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                          "--basetemp", str(tmp_path / "t"),
                          *(str(ROOT / "tests" / t) for t in LOWEST_TESTS)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    tested = time.monotonic() - started - installing
    proj = make_project(tmp_path / "proj", noxfile=True)
    (proj / "suites" / "payload" / "test_one.py").write_text(
        "def test_one(device):\n    assert device == 'cpu'\n")
    cell = subprocess.run([python, "-m", "nox", "-f", str(proj / "noxfile.py"), "-s",
                           "cpu-2.13"], cwd=proj, capture_output=True, text=True, timeout=900,
                          env={**env, contract.RESULTS_DIR: str(proj / "results")})
    assert cell.returncode == 0, cell.stdout[-3000:] + cell.stderr[-3000:]
    assert "created with uv" in cell.stderr
    grid = subprocess.run([str(venv / "bin" / "accelgrid"), "grid", "results/cpu-2.13",
                           "--out", "results"], cwd=proj, env=env, capture_output=True,
                          text=True, timeout=300)
    assert grid.returncode == 0, grid.stderr
    assert "test_one" in (proj / "results" / "grid.json").read_text()
    print(f"lowest bounds: installed in {installing:.0f} s, tested in {tested:.0f} s, "
          f"a mini cell and its grid in {time.monotonic() - started - installing - tested:.0f} s")


def test_the_pinned_installs_use_the_constraints() -> None:
    """.ci/run and the README's first command install with constraints.txt; the README
    says what that first command costs (time and disk)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -c constraints.txt -e '.[dev]'" in ci
    readme = (ROOT / "README.md").read_text()
    first = readme.split("```sh\n", 1)[1].splitlines()[0]
    assert "pip install -c constraints.txt -e '.[dev]'" in first
    cost = readme.split("```\n", 2)[1]  # the paragraph after the commands
    assert re.search(r"about [0-9½]+ minutes and [0-9.]+ GB of disk", cost), cost[:300]
