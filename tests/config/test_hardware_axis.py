"""Hardware as an axis (#39 item 6): two `hardware:` pins of one device and series make two
cells named after the family, seen by `accelgrid cells` and `nox -l` alike; a name that
clashes is refused in one line; never one cell silently (GitHub Actions' include would
let the second rule overwrite the first)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from accelgrid.config.matrix import load_matrix

TESTS = Path(__file__).parents[1]
ROOT = TESTS.parent
PINS = """\
    - {device: xpu, torch: "2.13", hardware: pvc}
    - {device: xpu, torch: "2.13", hardware: ats-m, env: {ZE_AFFINITY_MASK: "0"}}
    - {device: xpu, torch: "2.13", hardware: ats-m, workers: 2}
"""


def _project(tmp_path: Path, extra: str, profiles: str = "") -> Path:
    text = (TESTS / "base_matrix.yaml").read_text() + extra
    if profiles:
        text = text.replace("profiles:\n", "profiles:\n" + profiles)
    (tmp_path / "matrix.yaml").write_text(text)
    return tmp_path / "matrix.yaml"


def test_two_families_make_two_cells_named_after_them(tmp_path: Path) -> None:
    matrix = load_matrix(_project(tmp_path, PINS))
    names = [c.name for c in matrix.cells]
    # The rules carry no profile: they pin every xpu 2.13 cell, the fallback-debug one too.
    assert [n for n in names if n.startswith("xpu-2.13")] == [
        "xpu-2.13-pvc", "xpu-2.13-fallback-debug-pvc",
        "xpu-2.13-ats-m", "xpu-2.13-fallback-debug-ats-m"]
    pvc, atsm = matrix.cell("xpu-2.13-pvc"), matrix.cell("xpu-2.13-ats-m")
    assert (pvc.hardware, atsm.hardware) == ("pvc", "ats-m")
    assert pvc.runner_labels == ("self-hosted", "intel-gpu", "intel-gpu-pvc")
    assert atsm.runner_labels == ("self-hosted", "intel-gpu", "intel-gpu-ats-m")
    # What a rule for one family sets stays with that family; a later rule naming the
    # family adds to its cell, not a third one.
    assert atsm.env == {"ZE_AFFINITY_MASK": "0"} and atsm.workers == 2
    assert pvc.env == {} and pvc.workers == 1
    # Cells of other series are not pinned, and keep their names.
    assert matrix.cell("xpu-2.4").hardware is None


def test_a_lone_pin_keeps_the_plain_name_and_drivers_split_too(tmp_path: Path) -> None:
    matrix = load_matrix(_project(tmp_path, '    - {device: xpu, torch: "2.4", hardware: pvc}\n'
                                  '    - {device: xpu, torch: "2.4", driver: lts}\n'))
    assert matrix.cell("xpu-2.4").hardware == "pvc"
    assert matrix.cell("xpu-2.4").driver == "lts"
    base = (TESTS / "base_matrix.yaml").read_text().replace(
        "      lts: {label: intel-driver-lts}",
        "      lts: {label: intel-driver-lts}\n      rolling: {label: intel-driver-rolling}")
    (tmp_path / "matrix.yaml").write_text(
        base + '    - {device: xpu, torch: "2.4", hardware: pvc, driver: lts}\n'
               '    - {device: xpu, torch: "2.4", driver: rolling}\n')
    matrix = load_matrix(tmp_path / "matrix.yaml")
    two = [c for c in matrix.cells if c.name.startswith("xpu-2.4")]
    assert [(c.name, c.hardware, c.driver) for c in two] == [
        ("xpu-2.4-lts", "pvc", "lts"), ("xpu-2.4-rolling", "pvc", "rolling")]
    assert two[1].runner_labels == ("self-hosted", "intel-gpu", "intel-gpu-pvc",
                                    "intel-driver-rolling")


def test_cells_and_nox_list_show_both(tmp_path: Path) -> None:
    path = _project(tmp_path, PINS)
    (tmp_path / "noxfile.py").write_text((ROOT / "noxfile.py").read_text())
    cells = subprocess.run([sys.executable, "-m", "accelgrid", "--matrix", str(path), "cells",
                            "--json", "--device", "xpu"],
                           capture_output=True, text=True, timeout=120, check=True)
    listed = {c["name"]: c["hardware"] for c in json.loads(cells.stdout)}
    assert listed == {"xpu-2.4": None, "xpu-2.13-pvc": "pvc", "xpu-2.13-ats-m": "ats-m",
                      "xpu-2.13-fallback-debug-pvc": "pvc",
                      "xpu-2.13-fallback-debug-ats-m": "ats-m"}
    nox = subprocess.run([sys.executable, "-m", "nox", "-f", str(tmp_path / "noxfile.py"),
                          "-l", "--json", "-t", "xpu"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180)
    assert nox.returncode == 0, nox.stderr
    assert {s["name"] for s in json.loads(nox.stdout)} == set(listed)


def test_a_family_name_that_clashes_is_refused_in_one_line(tmp_path: Path) -> None:
    # A profile named like the family makes the name xpu-2.13-pvc twice.
    path = _project(tmp_path, PINS + '    - {device: xpu, torch: "2.13", profile: pvc}\n',
                    profiles="  pvc: {devices: [xpu], env: {}}\n")
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{path}:") and "duplicate cell name 'xpu-2.13-pvc'" in lines[0]
