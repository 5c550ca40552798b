"""How the project's own tests run: a plain ``pytest`` leaves the end-to-end set (``slow``)
out and ``-m`` decides alone; the slow tests' cell envs live outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mini_projects import ROOT, cell_envdir

from accelgrid import venvs
from accelgrid.matrix import load_matrix


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p",
                           "no:cacheprovider", "tests/test_nox.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.split("::")[-1] for line in proc.stdout.splitlines() if "::" in line]


def test_a_plain_pytest_leaves_the_slow_set_out_and_m_decides() -> None:
    quick, slow = _collected(), _collected("-m", "slow")
    assert "test_real_cpu_cell_end_to_end" in slow and "test_real_cpu_cell_end_to_end" not in quick
    assert "test_list_has_a_session_per_cell" in quick and not set(quick) & set(slow)
    assert sorted(_collected("-m", "slow or not slow")) == sorted(quick + slow)


def test_cell_envs_go_where_accelgrid_envdir_says(monkeypatch, tmp_path: Path) -> None:
    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13")
    assert venvs.env_dir(ROOT, cell) == ROOT / ".nox" / "cpu-2-13"
    monkeypatch.setenv("ACCELGRID_ENVDIR", str(tmp_path / "envs"))
    assert venvs.env_dir(ROOT, cell) == tmp_path / "envs" / "cpu-2-13"


def test_the_slow_tests_envs_are_outside_the_checkout(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ACCELGRID_TEST_ENVS", raising=False)
    where = cell_envdir()
    assert not where.is_relative_to(ROOT)
    assert where.parent.parts[-2:] == ("accelgrid", "test-envs")
    monkeypatch.setenv("ACCELGRID_TEST_ENVS", str(tmp_path))
    assert cell_envdir().parent == tmp_path   # one folder per checkout under it
    assert cell_envdir().name == where.name and len(where.name) == 12


@pytest.mark.parametrize("name", ["ACCELGRID_ENVDIR", "ACCELGRID_WORKERS_PER_DEVICE"])
def test_each_test_starts_from_the_same_variables(name: str) -> None:
    # conftest's autouse fixtures: mini projects keep their envs beside them, and plans
    # do not depend on this host's cores.
    assert os.environ.get(name) == (None if name == "ACCELGRID_ENVDIR" else "1")
