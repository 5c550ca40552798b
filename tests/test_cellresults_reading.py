"""Reading a cell back (accelgrid.results.cellresults) on folders the results API writes:
each case pins a behaviour a planted fault changed unseen (docs/mutation.md,
``python tools/mutate.py cellresults``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accelgrid import results
from accelgrid.base import contract, jsonio
from accelgrid.results import cellresults

A = "suites/smoke/test_device_api.py::test_a"
B = "suites/smoke/test_device_api.py::test_b"


def cell_folder(root: Path, name: str = "cpu-2.13", env: dict[str, Any] | None = None,
                records: dict[str, str] | None = None) -> Path:
    """A finished cell's folder, written as a run writes it (env.json, appended records)."""
    folder = root / name
    folder.mkdir(parents=True)
    jsonio.write_json(folder / contract.ENV_FILE, {
        "cell": name, "device_type": "cpu", "start": "s", "end": "e", "status": "finished",
        **(env or {})})
    for nodeid, outcome in (records if records is not None else {A: "passed"}).items():
        results.append_record(folder / contract.TESTS_FILE,
                              {"nodeid": nodeid, "outcome": outcome, "cell": name})
    return folder


def test_env_torch_devices_keep_only_the_mappings(tmp_path: Path) -> None:
    cell = cellresults.read_cell(cell_folder(tmp_path, env={"torch": {
        "version": "2.13.0", "devices": [{"name": "Box"}, "junk", 3, None]}}))
    assert cell.env["torch"]["devices"] == [{"name": "Box"}]
    assert cell.env["torch"]["version"] == "2.13.0"


def test_a_long_bad_cell_name_is_quoted_cut_to_60_characters(tmp_path: Path) -> None:
    bad = "/" + "x" * 100
    cell = cellresults.read_cell(cell_folder(tmp_path, env={"cell": bad}))
    note = next(p for p in cell.problems if "is not a cell name" in p)
    assert note == f"env.json: cell {bad[:60]!r} is not a cell name; ignored"
    assert cell.name == "cpu-2.13" and "cell" not in cell.env


def test_a_path_that_is_not_a_folder_is_an_errored_cell(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    cell = cellresults.load_cell(plain)
    assert cell.error == f"{plain} is not a results folder"
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    assert cellresults.load_cell(loop).error == f"{loop} is not a results folder (a symlink loop)"
    assert cellresults.load_cell(tmp_path / "absent").error == (
        f"{tmp_path / 'absent'} is not a results folder")
