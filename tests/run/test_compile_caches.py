"""Inductor's and Triton's caches go into the cell's env (run.cellenv.compile_caches), so a
warm re-run of the compile suite compiles nothing; a value the host sets wins."""

from __future__ import annotations

import sys
from pathlib import Path

from accelgrid.run import cellenv, preflight


def test_a_venv_python_keeps_its_caches_in_its_env(tmp_path: Path) -> None:
    env = tmp_path / "cpu-2-13"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    caches = cellenv.compile_caches(env / "bin" / "python")
    assert caches == {"TORCHINDUCTOR_CACHE_DIR": str(env / cellenv.CACHE_DIR / "inductor"),
                      "TRITON_CACHE_DIR": str(env / cellenv.CACHE_DIR / "triton")}


def test_a_python_outside_a_venv_keeps_torchs_defaults(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    assert cellenv.compile_caches(tmp_path / "bin" / "python") == {}
    assert cellenv.compile_caches(None) == {}


def test_the_cell_env_sets_them_unless_the_host_did(tmp_path: Path) -> None:
    from accelgrid.config.matrix import load_matrix

    cell = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml").cell("cpu-2.13")
    root = tmp_path
    python = sys.executable  # accelgrid's own venv (the tests run in one)
    expect = cellenv.compile_caches(python)
    assert expect, "premise: the tests run in a virtual environment"
    env = cellenv.cell_env(cell, root, tmp_path / "out", base={}, python=python,
                           checked=preflight.check(cell, root, {}))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == expect["TORCHINDUCTOR_CACHE_DIR"]
    host = {"TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}
    env = cellenv.cell_env(cell, root, tmp_path / "out", python=python, base=host,
                           checked=preflight.check(cell, root, host))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere"
