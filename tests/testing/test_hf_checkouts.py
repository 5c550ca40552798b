"""ACCELGRID_TRANSFORMERS_SRC: one value serves cells pinned to different transformers.

Fast tests: suites/hf_examples/checkouts.find on fake checkouts made in tmp_path (a folder
with examples/pytorch/, setup.py and src/transformers/__init__.py holding __version__).
The slow test runs the real ``transformers_src`` fixture in the real cpu-2.13 cell env
(transformers 5.24.0) through ``accelgrid shell``: a checkout at another version, or a
folder without the cell's version, makes the script tests not-run with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid.base import contract
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix
from suites.hf_examples import checkouts

ROOT = Path(__file__).resolve().parents[2]


def fake_checkout(path: Path, version: str, quote: str = '"') -> Path:
    (path / "examples" / "pytorch").mkdir(parents=True)
    (path / "src" / "transformers").mkdir(parents=True)
    (path / "src" / "transformers" / "__init__.py").write_text(
        f"# transformers\n__version__ = {quote}{version}{quote}\n")
    (path / "setup.py").write_text(f'setup(name="transformers", version="{version}")\n')
    return path


@pytest.fixture
def by_version(tmp_path: Path) -> Path:
    """A folder of checkouts named both ways: v5.17.0 and 4.57.5."""
    fake_checkout(tmp_path / "co" / "v5.17.0", "5.17.0")
    fake_checkout(tmp_path / "co" / "4.57.5", "4.57.5", quote="'")
    return tmp_path / "co"


def test_a_folder_of_checkouts_serves_each_version(by_version: Path) -> None:
    assert checkouts.find(str(by_version), "5.17.0")[0] == by_version / "v5.17.0"
    assert checkouts.find(str(by_version), "4.57.5")[0] == by_version / "4.57.5"


def test_a_version_without_a_checkout_names_every_place_looked_at(by_version: Path) -> None:
    found, why = checkouts.find(str(by_version), "5.24.0")
    assert found is None
    assert (f"no transformers checkout at 5.24.0 (the installed version) from "
            f"ACCELGRID_TRANSFORMERS_SRC={by_version}; looked at {by_version}/v5.24.0 (does "
            f"not exist); {by_version}/5.24.0 (does not exist)") in why


def test_a_version_template_is_filled_in(tmp_path: Path) -> None:
    fake_checkout(tmp_path / "transformers-5.24.0", "5.24.0")
    value = str(tmp_path / "transformers-{version}")
    assert checkouts.find(value, "5.24.0")[0] == tmp_path / "transformers-5.24.0"
    found, why = checkouts.find(value, "4.57.5")
    assert found is None and f"looked at {tmp_path}/transformers-4.57.5 (does not exist)" in why


def test_one_checkout_serves_its_own_version_only(by_version: Path) -> None:
    one = by_version / "v5.17.0"
    assert checkouts.find(str(one), "5.17.0")[0] == one
    found, why = checkouts.find(str(one), "5.24.0")
    assert found is None and f"looked at {one} (a checkout at 5.17.0)" in why


def test_a_folder_that_is_no_checkout_says_so(tmp_path: Path) -> None:
    (tmp_path / "co" / "v5.24.0" / "src").mkdir(parents=True)   # no transformers inside
    found, why = checkouts.find(str(tmp_path / "co"), "5.24.0")
    assert found is None
    assert f"{tmp_path}/co/v5.24.0 (not a transformers checkout" in why


def test_checkout_version_reads_the_source_not_the_folder_name(tmp_path: Path) -> None:
    fake_checkout(tmp_path / "v5.24.0", "5.17.0")   # misnamed: its source says 5.17.0
    found, why = checkouts.find(str(tmp_path), "5.24.0")
    assert found is None and "(a checkout at 5.17.0)" in why
    assert checkouts.checkout_version(tmp_path) is None


@pytest.mark.slow
def test_the_fixture_in_a_real_cell_makes_a_mismatch_not_run(tmp_path: Path,
                                                             outside_envdir: Path) -> None:
    """In cpu-2.13's real env (transformers 5.24.0): no checkout, a checkout at 5.17.0 or a folder
    without 5.24.0 make test_example_script not-run (it failed before); a folder with a
    5.24.0 checkout is used (the script is missing from the fake: not-run, saying so)."""
    sessions.prepared_python(ROOT, load_matrix(ROOT / "matrix.yaml").cell("cpu-2.13"))
    co = tmp_path / "co"
    fake_checkout(co / "v5.17.0", "5.17.0")
    fake_checkout(co / "v4.57.5", "4.57.5")
    out = tmp_path / "results"
    node = "suites/hf_examples/test_example_scripts.py::test_example_script[run_glue]"

    def run(value: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "accelgrid", "shell", "cpu-2.13", "--", "python", "-m",
             "pytest", node, "-p", "no:cacheprovider", "-q"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "ACCELGRID_RESULTS_DIR": str(out),
                 "ACCELGRID_TRANSFORMERS_SRC": value})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        lines = (out / "cpu-2.13" / ".debug" / contract.TESTS_FILE).read_text().splitlines()
        (rec,) = [json.loads(x) for x in lines]
        return rec

    rec = run("")   # no checkout at all: a gap the cell could fill, not-run saying how
    assert rec["outcome"] == "not-run", rec
    assert rec["message"] == ("no transformers checkout: set ACCELGRID_TRANSFORMERS_SRC to "
                              "one at v5.24.0 (or a folder of checkouts by version)")
    rec = run(str(co / "v5.17.0"))
    assert rec["outcome"] == "not-run", rec
    assert f"looked at {co}/v5.17.0 (a checkout at 5.17.0)" in rec["message"]
    rec = run(str(co))
    assert rec["outcome"] == "not-run", rec
    assert f"looked at {co}/v5.24.0 (does not exist); {co}/5.24.0 (does not exist)" \
        in rec["message"]
    fake_checkout(co / "5.24.0", "5.24.0")
    rec = run(str(co))
    assert rec["outcome"] == "not-run", rec
    assert rec["message"] == "text-classification/run_glue.py is not in this transformers checkout"
