"""tools/extract_torch_registrations.py on small wheels built here in the real layout
(torchgen/packaged/ATen/native/native_functions.yaml inside a torch-X.Y.Z-...whl zip), and,
with TORCH_WHEELS set to a folder of the real PyPI wheels, the packaged data against them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "extract_torch_registrations.py"

# Entries in native_functions.yaml's own forms (comma-joined keys, a delegate, none).
YAML_A = """\
- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU, CUDA: add_out
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
- func: _foreach_mul_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()
  dispatch:
    CompositeExplicitAutograd: foreach_tensor_mul_scalar_kernel_slow_
    CUDA: foreach_tensor_mul_scalar_kernel_cuda_
- func: pixel_shuffle(Tensor self, int upscale_factor) -> Tensor
  dispatch:
    CPU: pixel_shuffle_cpu
    CompositeExplicitAutogradNonFunctional: math_pixel_shuffle
- func: silu_backward(Tensor grad_output, Tensor self) -> Tensor
  structured_delegate: silu_backward.grad_input
  dispatch:
    CompositeImplicitAutograd: math_silu_backward
- func: dropout(Tensor input, float p, bool train) -> Tensor
"""
YAML_B = YAML_A.replace("    CPU, CUDA: add_out\n", "    CPU, CUDA: add_out\n    XPU: add_xpu\n"
                        ).replace("- func: dropout(Tensor input, float p, bool train) -> Tensor\n",
                                  "")


def _wheel(folder: Path, version: str, text: str) -> Path:
    path = folder / f"torch-{version}-cp312-none-macosx_11_0_arm64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torchgen/packaged/ATen/native/native_functions.yaml", text)
        z.writestr("torch/__init__.py", "")
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)


def test_codes_changes_and_provenance(tmp_path: Path) -> None:
    a, b = _wheel(tmp_path, "2.4.1", YAML_A), _wheel(tmp_path, "2.6.0", YAML_B)
    out = tmp_path / "t.json"
    proc = _run(str(b), str(a), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    s24, s26 = data["series"]["2.4"], data["series"]["2.6"]
    assert s24["ops"] == {"_foreach_mul_.Scalar": "EB", "add.Tensor": ">add.out",
                          "add.out": "BC", "dropout": "I", "pixel_shuffle": "FBC",
                          "silu_backward": "I>silu_backward.grad_input"}
    assert s26["set"] == {"add.out": "XBC"} and s26["drop"] == ["dropout"]
    assert s24["source"]["wheel"] == a.name and s24["source"]["torch"] == "2.4.1"
    import hashlib
    assert s24["source"]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    from accelgrid.ops import xpu_prediction as xp
    ops26 = xp.torch_ops(data, "2.6")
    assert ops26 is not None and ops26["add.out"] == "XBC"
    assert "dropout" not in ops26
    assert xp.torch_ops(data, "2.5") is None
    # --check: same wheels, same file; a changed wheel differs (exit 1).
    assert _run(str(a), str(b), "--out", str(out), "--check").returncode == 0
    _wheel(tmp_path, "2.6.0", YAML_A)
    assert _run(str(a), str(b), "--out", str(out), "--check").returncode == 1


def test_bad_inputs_fail_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "numpy-2.0.0-cp312-none-any.whl"
    bad.write_bytes(b"")
    proc = _run(str(bad), "--out", str(tmp_path / "o.json"))
    assert proc.returncode != 0 and "not a torch wheel file name" in proc.stderr
    empty = tmp_path / "torch-2.5.1-cp312-none-any.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("torch/__init__.py", "")
    proc = _run(str(empty), "--out", str(tmp_path / "o.json"))
    assert proc.returncode != 0 and "no torchgen/packaged" in proc.stderr
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
    two = [_wheel(tmp_path / d, "2.5.1", YAML_A) for d in ("x", "y")]
    proc = _run(*map(str, two), "--out", str(tmp_path / "o.json"))
    assert proc.returncode != 0 and "two wheels for series 2.5" in proc.stderr


@pytest.mark.skipif(not os.environ.get("TORCH_WHEELS"),
                    reason="set TORCH_WHEELS to a folder of the torch wheels to re-extract")
def test_packaged_data_matches_the_wheels() -> None:
    wheels = sorted(Path(os.environ["TORCH_WHEELS"]).glob("torch-*.whl"))
    packaged = resources.files("accelgrid").joinpath("data", "torch_registrations.json")
    proc = _run(*map(str, wheels), "--out", str(packaged), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
