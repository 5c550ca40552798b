"""A device's own packages per torch series (``devices.<d>.packages``: an out-of-tree
backend's module such as torch_npu, whose version pairs with torch's series): the cells of
that device and series install them, the inputs check and env.json carry their pins; a
series of the device's cells without an entry, a key naming no series and a bad
requirement are refused with the file, line and key (tests/bad_matrices: device_packages_*)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract
from accelgrid.commands import containers
from accelgrid.config.matrix import load_matrix
from accelgrid.config.validation import ValidationFailed, load_schema
from accelgrid.host import inputs, install
from accelgrid.run.cell import plan_inputs

TESTS = Path(__file__).resolve().parents[1]

# tests/helpers/fake_device_spec.py's device (on the CPU's kernels), with its package for 2.13 only
# and none for 2.4.
FAKE_DEVICE = """devices:
  fakeacc:
    spec: fake_device_spec.py
    index: default
    detect: {always: true}
    runner: {labels: [ubuntu-24.04], hosted: true}
    packages:
      "2.13": ["six==1.16.0", "iniconfig>=2"]
      "2.4": []
"""
BASE = "docker.io/library/python:3.11-slim-bookworm@sha256:" + "a" * 64


def _project(mini_project, device: str = FAKE_DEVICE) -> Path:
    proj = mini_project()
    text = (proj / "matrix.yaml").read_text()
    text = text.replace("devices:\n", device, 1)
    text = text.replace("  device: [cpu, xpu]", "  device: [cpu, xpu, fakeacc]")
    (proj / "matrix.yaml").write_text(text)
    shutil.copy(TESTS / "helpers" / "fake_device_spec.py", proj / "fake_device_spec.py")
    return proj


def test_a_cell_gets_its_devices_packages_for_its_series_only(mini_project) -> None:
    matrix = load_matrix(_project(mini_project) / "matrix.yaml")
    assert matrix.devices["fakeacc"].packages == {"2.13": ("six==1.16.0", "iniconfig>=2"),
                                                  "2.4": ()}
    cell = matrix.cell("fakeacc-2.13")
    assert {"six==1.16.0", "iniconfig>=2"} <= set(cell.packages)
    assert cell.as_dict()["packages"] == list(cell.packages)
    # Another series' entry is not taken ([]: none); another device's cells get nothing.
    assert not {"six==1.16.0", "iniconfig>=2"} & set(matrix.cell("fakeacc-2.4").packages)
    for name in ("cpu-2.13", "xpu-2.13", "xpu-2.13-fallback-debug"):
        assert not any("six" in p or "iniconfig" in p for p in matrix.cell(name).packages)


def test_a_package_the_tools_list_already_is_listed_once(mini_project) -> None:
    proj = _project(mini_project)
    matrix_file = proj / "matrix.yaml"
    matrix_file.write_text(matrix_file.read_text().replace(
        "\ndevices:", "\ntools: [pytest==9.2.0, six==1.16.0]\ndevices:", 1))
    packages = load_matrix(matrix_file).cell("fakeacc-2.13").packages
    assert packages[:3] == ("pytest==9.2.0", "six==1.16.0", "iniconfig>=2")


def test_the_install_step_and_the_inputs_check_carry_them(mini_project) -> None:
    cell = load_matrix(_project(mini_project) / "matrix.yaml").cell("fakeacc-2.13")
    plan = install.plan(cell, uv_env={})
    tooling = plan.steps[1]
    assert tooling.description == "test tooling and suite packages"
    assert tooling.args[0] == cell.torch_requirement   # torch pinned beside them
    assert {"six==1.16.0", "iniconfig>=2"} <= set(tooling.args)
    # The == pin is checked before the tests; a range pins nothing exactly.
    pins = inputs.pins(cell, "torch==2.13.0")
    assert inputs.Pin("six", "six==1.16.0") in pins
    assert "iniconfig" not in {p.name for p in pins}
    # ... and named to the cell's pytest, whose env.json records its version.
    assert "six" in json.loads(plan_inputs(cell))["pins"]


def test_the_cells_image_installs_them(mini_project) -> None:
    device = FAKE_DEVICE.replace("    packages:", f"    container: {{family: cpu, base: {BASE}}}"
                                 "\n    packages:")
    proj = _project(mini_project, device)
    shutil.copytree(TESTS.parent / "containers", proj / "containers")   # the templates
    matrix = load_matrix(proj / "matrix.yaml")
    text = containers.render(matrix, matrix.cell("fakeacc-2.13"))
    assert "six==1.16.0" in text and "iniconfig>=2" in text
    assert "six==1.16.0" not in containers.render(matrix, matrix.cell("fakeacc-2.4"))


@pytest.mark.parametrize("entry, message", [
    ('      "2.13": ["six==1.16.0"]\n',
     "{file}:{line}: devices.fakeacc.packages: no entry for torch 2.4, the series of cell "
     "fakeacc-2.4 ([] if the device needs no package with it)"),
    ('      "2.13": []\n      "2.14": ["six==1.16.0"]\n      "2.4": []\n',
     "{file}:{line2}: devices.fakeacc.packages.2.14: unknown torch series '2.14' (known: "
     "2.4, 2.13); did you mean '2.4'?"),
    ('      "2.13": ["--index-url=https://example.org/simple"]\n      "2.4": []\n',
     "{file}:{line1}: devices.fakeacc.packages.2.13[0]: '--index-url=https://example.org/"
     "simple' is an installer option, not a requirement"),
])
def test_a_bad_entry_is_refused_in_one_line_where_it_is(mini_project, entry: str,
                                                        message: str) -> None:
    device = FAKE_DEVICE.split("    packages:\n")[0] + "    packages:\n" + entry
    proj = _project(mini_project, device)
    lines = (proj / "matrix.yaml").read_text().splitlines()
    where = lines.index("    packages:") + 1
    with pytest.raises(ValidationFailed) as info:
        load_matrix(proj / "matrix.yaml")
    assert str(info.value).splitlines() == [message.format(
        file=proj / "matrix.yaml", line=where, line1=where + 1, line2=where + 2)]


def test_a_malformed_requirement_is_refused_where_it_is(mini_project) -> None:
    """The rest of the line is packaging's own parse error, worded differently by its
    versions (the lowest-bounds test runs packaging's lower bound): the start is ours."""
    device = (FAKE_DEVICE.split("    packages:\n")[0] + "    packages:\n"
              '      "2.13": ["six=1.16.0"]\n      "2.4": []\n')
    proj = _project(mini_project, device)
    where = (proj / "matrix.yaml").read_text().splitlines().index("    packages:") + 2
    with pytest.raises(ValidationFailed) as info:
        load_matrix(proj / "matrix.yaml")
    assert str(info.value).startswith(
        f"{proj / 'matrix.yaml'}:{where}: devices.fakeacc.packages.2.13[0]: 'six=1.16.0' is "
        "not a requirement: ")


def test_the_schema_describes_the_key() -> None:
    device = load_schema("matrix")["properties"]["devices"]["additionalProperties"]
    key = device["properties"]["packages"]
    assert "torch-npu" in key["description"] and key["propertyNames"] == {
        "$ref": "#/$defs/series"}


@pytest.mark.slow
def test_a_real_cell_installs_its_devices_package_and_records_it(mini_project) -> None:
    """A fakeacc cell run by nox: the device's package (six, pure Python) is in the cell's
    env, importable there, and its pin is in env.json's packages."""
    proj = mini_project(noxfile=True)
    text = (proj / "matrix.yaml").read_text()
    text = text.replace("\ndevices:\n", "\n" + FAKE_DEVICE.replace(
        '["six==1.16.0", "iniconfig>=2"]', '["six==1.16.0"]'), 1)
    text = text.replace("  device: [cpu, xpu]", "  device: [fakeacc]")
    (proj / "matrix.yaml").write_text(text)
    shutil.copy(TESTS / "helpers" / "fake_device_spec.py", proj / "fake_device_spec.py")
    (proj / "suites" / "payload" / "test_six.py").write_text(
        "import six\n\ndef test_six(device):\n    assert six.__version__ == '1.16.0'\n")
    env = {**os.environ, contract.RESULTS_DIR: str(proj / "results")}
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"),
                           "-s", "fakeacc-2.13"], cwd=proj, capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = proj / "results" / "fakeacc-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems
    assert [(r["nodeid"].rsplit("::")[-1], r["outcome"]) for r in recs] == [("test_six",
                                                                            "passed")]
    env_json = json.loads((folder / contract.ENV_FILE).read_text())
    assert env_json["packages"]["six"] == "1.16.0"
