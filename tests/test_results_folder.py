"""The run folder's protocol (accelgrid.results) on real folders and records: each case
pins a behaviour a planted fault changed unseen (docs/mutation.md,
``python tools/mutate.py results``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract


def test_results_root_is_the_project_results_unless_the_variable_names_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.RESULTS_DIR, raising=False)
    assert results.results_root(tmp_path) == tmp_path / "results"
    monkeypatch.setenv(contract.RESULTS_DIR, "")  # empty: as unset
    assert results.results_root(tmp_path) == tmp_path / "results"
    monkeypatch.setenv(contract.RESULTS_DIR, str(tmp_path / "elsewhere"))
    assert results.results_root(tmp_path) == tmp_path / "elsewhere"


@pytest.mark.parametrize(("nodeid", "suite"), [
    ("suites/offload/test_x.py::t", "offload"),
    ("suites/smoke/test_device_api.py::test_a[cpu]", "smoke"),
    ("suites/test_top.py::t", "suites"),     # a file directly under suites/: no folder
    ("tests/test_x.py::t", "tests"),
    ("other/suites/x.py::t", "other"),
    ("test_x.py::t", "test_x.py"),
    ("suites/a/b/test_c.py::t[x/y]", "a"),  # a slash in the parameters is not a folder
])
def test_suite_of_is_the_folder_under_suites(nodeid: str, suite: str) -> None:
    assert results.suite_of(nodeid) == suite
