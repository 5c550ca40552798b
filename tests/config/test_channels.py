"""Torch from PyTorch's nightly and test channels (matrix ``torch.<series>.channel``,
``devices.<d>.channels``): the requirement and index a cell gets, what ``accelgrid plan``
shows, the newest nightly resolved when the env is built (a real nox session against a
local nightly index of tiny fake wheels: the real one is out of reach here), the channel
in the run's record and JUnit, and the grid naming both nightlies since the previous run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.channel_cases import NIGHTLY_CPU, TEST_CPU, with_channels
from helpers.container_cases import project_copy
from helpers.report_cases import write_cell
from helpers.wheels import fake_pypi, fake_wheel, installed_torch, nox_install_only, simple_index
from packaging.requirements import Requirement

from accelgrid import report
from accelgrid.base import contract
from accelgrid.cli import main
from accelgrid.config.matrix import load_matrix
from accelgrid.host import install
from accelgrid.host import stamp as install_stamp
from accelgrid.report import model
from accelgrid.results import junit
from accelgrid.results.history import open_store
from accelgrid.run import cellenv, preflight

TESTS = Path(__file__).resolve().parents[1]

@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_copy(tmp_path)


@pytest.fixture
def pypi(tmp_path: Path) -> Path:
    return fake_pypi(tmp_path / "pypi")



@pytest.fixture
def matrix_file(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(with_channels((TESTS / "base_matrix.yaml").read_text()))
    return path


def test_a_nightly_range_takes_only_the_nightlies_of_its_release(matrix_file: Path) -> None:
    cell = load_matrix(matrix_file).cell("cpu-2.16")
    assert cell.channel == "nightly" and cell.index == NIGHTLY_CPU
    spec = Requirement(cell.torch_requirement).specifier
    def takes(v: str) -> bool:
        return spec.contains(v, prereleases=True)
    assert takes("2.16.0.dev20261201") and takes("2.16.0.dev20261201+cpu")
    for other in ("2.16.0", "2.16.0rc1", "2.15.0.dev20261201", "2.16.1.dev20261201", "2.17.0"):
        assert not takes(other), other
    # No +cpu on a range (PEP 440 allows a local label only with ==): the channel's
    # index holds only its variant's builds.
    assert install.torch_requirement(cell, tag="cpu") == cell.torch_requirement
    # One nightly, pinned: that build, with the CPU tag.
    text = matrix_file.read_text().replace('torch: "2.16.0",', 'torch: "2.16.0.dev20261130",')
    matrix_file.write_text(text)
    one = load_matrix(matrix_file).cell("cpu-2.16")
    assert install.torch_requirement(one, tag="cpu") == "torch==2.16.0.dev20261130+cpu"
    assert not install.resolved_at_run(one)


def test_the_test_channel_pins_the_release_from_its_own_index(matrix_file: Path) -> None:
    cell = load_matrix(matrix_file).cell("cpu-2.17")
    assert cell.channel == "test" and cell.index == TEST_CPU
    assert install.torch_requirement(cell, tag="cpu") == "torch==2.17.0+cpu"
    plan = install.plan(cell, uv_env={})
    assert plan.steps[0].args == ("--extra-index-url", TEST_CPU, install.torch_requirement(cell))
    assert not plan.daily
    # A channel's index must answer: no fallback to pip's configuration (a cpu release
    # cell's, docs/guides/running.md), which would hold some other build.
    matrix = load_matrix(matrix_file)
    assert not install.can_fall_back(cell) and not install.can_fall_back(matrix.cell("cpu-2.16"))
    # A release cell of the same matrix keeps the device's own index.
    assert load_matrix(matrix_file).cell("cpu-2.13").index == "default"


def test_a_nightly_env_is_resolved_anew_each_day(matrix_file: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix(matrix_file)
    nightly = install.plan(matrix.cell("cpu-2.16"), uv_env={})
    release = install.plan(matrix.cell("cpu-2.13"), uv_env={})
    assert nightly.daily and nightly.steps[0].args[0] == "--upgrade"
    assert "--upgrade" not in release.steps[0].args
    stamps = {}
    for day in ("2026-12-01", "2026-12-02"):
        monkeypatch.setattr(install, "nightly_day", lambda day=day: day)
        stamps[day] = (install_stamp.pins(nightly, tmp_path)["digest"],
                       install_stamp.pins(release, tmp_path)["digest"])
    assert stamps["2026-12-01"][0] != stamps["2026-12-02"][0]   # the nightly: a new install
    assert stamps["2026-12-01"][1] == stamps["2026-12-02"][1]   # a release: still warm


def test_plan_shows_the_channel_and_its_index(matrix_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--matrix", str(matrix_file), "plan", "cpu-2.16"]) == 0
    out = capsys.readouterr().out
    torch_line = next(ln for ln in out.splitlines() if ln.startswith("torch "))
    assert torch_line.split()[1] == "torch>=2.16.0.dev0,<2.16.0a0"
    assert torch_line.endswith(f"from {NIGHTLY_CPU}")
    assert "PyTorch's nightly channel: the newest nightly in that range" in out
    assert main(["--matrix", str(matrix_file), "cells"]) == 0
    listed = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()}
    assert "torch 2.16.0 (nightly)" in listed["cpu-2.16"]
    assert "torch 2.17.0 (test)" in listed["cpu-2.17"]
    assert "torch 2.13.0 " in listed["cpu-2.13"] and "(" not in listed["cpu-2.13"]
    assert main(["--matrix", str(matrix_file), "plan", "cpu-2.16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["channel"] == "nightly" and data["index"] == NIGHTLY_CPU
    assert data["install"]["index"] == NIGHTLY_CPU


def test_the_channel_is_in_the_runs_env_and_its_junit(matrix_file: Path, tmp_path: Path) -> None:
    cell = load_matrix(matrix_file).cell("cpu-2.16")
    env = cellenv.cell_env(cell, tmp_path, tmp_path / "out", base={},
                           checked=preflight.check(cell, tmp_path, {}))
    assert env[contract.TORCH_CHANNEL] == "nightly"
    props = dict(junit.suite_properties(env))
    assert props["torch_channel"] == "nightly"


def test_the_grid_shows_the_exact_nightly_and_names_both_since_the_previous_run(
        tmp_path: Path) -> None:
    flags: dict[str, Any] = {"env": {contract.TORCH_CHANNEL: "nightly"}}
    t = "suites/smoke/test_n.py::"
    nights = [write_cell(tmp_path / f"n{i}", "cpu-2.16",
                         {t + "a": "passed", t + "b": outcome},
                         torch=f"2.16.0.dev2026120{i + 1}+cpu", run_id=f"n{i}",
                         start=f"2026-12-0{i + 1}T03:00:00+00:00", project={"commit": "c"},
                         **flags)
              for i, outcome in enumerate(["passed", "failed"])]
    column = model.from_folders([nights[1]])["columns"][0]
    assert column["torch_build"] == "2.16.0.dev20261202+cpu (nightly)"
    assert column["torch_channel"] == "nightly"
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(nights[:1])
    made = report.grid([nights[1]], tmp_path / "out", history_db=db)
    hist = made.model["columns"][0]["history"]
    assert hist["builds"] == {"previous": "2.16.0.dev20261201+cpu (nightly)",
                              "this": "2.16.0.dev20261202+cpu (nightly)"}
    assert hist["since"]["new_failures"] == [t + "b"]
    row = next(ln for ln in made.paths["md"].read_text().splitlines()
               if ln.startswith("| cpu-2.16 | 2026-12-01"))
    assert ("torch 2.16.0.dev20261201+cpu (nightly) → 2.16.0.dev20261202+cpu (nightly)"
            in row)


def test_the_same_build_twice_names_no_builds(tmp_path: Path) -> None:
    nights = [write_cell(tmp_path / f"n{i}", "cpu-2.13", {"t.py::a": "passed"},
                         run_id=f"r{i}", start=f"2026-12-0{i + 1}T03:00:00+00:00")
              for i in range(2)]
    db = tmp_path / "h.sqlite"
    with open_store(db) as store:
        store.add(nights[:1])
    made = report.grid([nights[1]], tmp_path / "out", history_db=db)
    assert made.model["columns"][0]["history"]["builds"] is None


# --- a real nox session against a local nightly index ----------------------------------

def _nightly_project(mini_project, index: str) -> Path:
    proj = mini_project(noxfile=True)
    matrix = proj / "matrix.yaml"
    matrix.write_text(with_channels(matrix.read_text(), nightly=index))
    return proj


@pytest.mark.slow
def test_a_nightly_cell_installs_the_newest_nightly_and_a_newer_one_the_next_day(
        mini_project, tmp_path: Path, pypi: Path) -> None:
    built = tmp_path / "built"
    wheels = [fake_wheel(built, "torch", f"2.16.0.dev{day}+cpu") for day in (20261130, 20261201)]
    index_root = tmp_path / "nightly-index"
    proj = _nightly_project(mini_project, simple_index(index_root, wheels))
    proc = nox_install_only(proj, pypi, "cpu-2.16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert installed_torch(proj, "cpu-2.16") == ["torch-2.16.0.dev20261201+cpu.dist-info"]
    # The next night's build appears; the env of yesterday (its stamp names that day, so
    # here: no stamp) installs again and takes it over the one it holds.
    simple_index(index_root, [fake_wheel(built, "torch", "2.16.0.dev20261202+cpu")])
    (proj / ".nox" / "cpu-2-16" / install_stamp.STAMP).unlink()
    proc = nox_install_only(proj, pypi, "cpu-2.16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert installed_torch(proj, "cpu-2.16") == ["torch-2.16.0.dev20261202+cpu.dist-info"]


def test_a_nightly_cells_image_takes_the_newest_and_is_rebuilt_daily(
        project: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from helpers.container_cases import HADOLINT

    from accelgrid.commands import containers

    path = project / "matrix.yaml"   # the project's matrix with a nightly xpu-2.16
    text = path.read_text()
    assert '"2.16": {torch: "2.16.0"' in text and "channel: nightly}" in text  # its series
    path.write_text(text.replace("  include:\n",
                                 '  include:\n    - {device: xpu, torch: "2.16"}\n', 1))
    matrix = load_matrix(path)
    tags = {}
    for day in ("2026-12-01", "2026-12-02"):
        monkeypatch.setattr(install, "nightly_day", lambda day=day: day)
        tags[day] = [containers.spec(matrix, matrix.cell(c), settings={}).tag
                     for c in ("xpu-2.16", "xpu-2.13")]
    assert tags["2026-12-01"][0] != tags["2026-12-02"][0]   # a new nightly: a new image
    assert tags["2026-12-01"][1] == tags["2026-12-02"][1]   # a release: the same one
    file = containers.render(matrix, matrix.cell("xpu-2.16"), input_hash="0" * 64)
    assert ("RUN pip install --upgrade --extra-index-url "
            "https://download.pytorch.org/whl/nightly/xpu 'torch>=2.16.0.dev0,<2.16.0a0'"
            in file)
    if HADOLINT is not None:
        cf = tmp_path / "Containerfile"
        cf.write_text(file)
        proc = subprocess.run([HADOLINT, "--no-color", "--failure-threshold", "info", str(cf)],
                              capture_output=True, text=True)
        assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout
