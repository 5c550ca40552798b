"""A cheap, CI-run form of the registrations re-extraction (the full one needs every
series' wheel: test_extract_torch_registrations.py's TORCH_WHEELS test, by hand): the dev
venv pins torch 2.13.0, whose wheel ships its native_functions.yaml (torchgen/packaged).
Extracted afresh by the tool from that copy, series 2.13 must equal the packaged data's."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from accelgrid.ops import xpu_prediction as xp

ROOT = Path(__file__).resolve().parents[2]
YAML_IN_WHEEL = "torchgen/packaged/ATen/native/native_functions.yaml"


def test_packaged_2_13_registrations_match_the_installed_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torchgen = pytest.importorskip("torchgen")
    version = torch.__version__.split("+")[0]
    if not version.startswith("2.13."):
        pytest.skip(f"torch {version} installed; the dev venv's 2.13 is what this compares")
    yaml_file = Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"
    # The tool reads wheels: the installed copy, in a zip named as the wheel it came from.
    wheel = tmp_path / f"torch-{version}-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(yaml_file, YAML_IN_WHEEL)
    out = tmp_path / "registrations.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "extract_torch_registrations.py"),
                           str(wheel), "--out", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fresh = json.loads(out.read_text())["series"]["2.13"]["ops"]
    packaged = xp.torch_ops(xp.load_torch(), "2.13")
    assert packaged is not None, "the packaged data has no series 2.13"
    assert sorted(set(fresh) ^ set(packaged))[:20] == []
    assert {op: code for op, code in fresh.items() if packaged[op] != code} == {}
