"""accelgrid.testing's marks in real pytest runs: only_on / skip_on / needs_devices / dtypes
skip before the test, with the reason and the cell's device; bad uses fail at collection."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import testing

ROOT = Path(__file__).resolve().parents[2]

PAYLOAD = '''
from accelgrid.testing import dtypes, needs_devices, only_on, skip_on

@only_on("xpu", reason="an xpu matter")
def test_only_xpu(device): pass

@only_on("cpu")
def test_only_cpu(device): pass

@only_on(offload=True)
def test_only_offload(device): pass

@skip_on(float64=False, reason="no float64 here")
def test_skip_without_float64(device): pass

@skip_on("cuda", "mps")
def test_skip_cuda_mps(device): pass

@needs_devices(1)
def test_one_device(device): pass

@needs_devices(2)
def test_two_devices(device): pass

@dtypes("float32", "float64")
def test_dtype(device, dtype):
    import torch
    assert torch.zeros(1, dtype=dtype, device=device).dtype == dtype
'''

SPEC = """DEVICE_NAME = "fakegpu"
TORCH_DEVICE = "cpu"
OFFLOAD = True
FLOAT64 = False
"""


def _run(tmp_path: Path, device: str, spec: Path | None = None) -> dict[str, str]:
    """Each test's outcome, and the skip reason as pytest -rA prints it."""
    (tmp_path / "test_payload.py").write_text(PAYLOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELGRID_")}
    env.update({"ACCELGRID_DEVICE": device, "PYTHONPATH": str(ROOT / "src"),
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    if spec is not None:
        env["ACCELGRID_DEVICE_SPEC"] = str(spec)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "accelgrid.testing.pytest_plugin",
                           "-rA", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if m := re.match(r"^PASSED \S+::(\S+)", line):
            out[m.group(1)] = "passed"
        elif m := re.match(r"^SKIPPED \[\d+\] \S+: (.*)$", line):
            out.setdefault("skips", "")
            out["skips"] += m.group(1) + "\n"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_marks_on_a_cpu_cell(tmp_path) -> None:
    got = _run(tmp_path, "cpu")
    assert sorted(k for k, v in got.items() if v == "passed") == [
        "test_dtype[fp32]", "test_dtype[fp64]", "test_one_device", "test_only_cpu",
        "test_skip_cuda_mps", "test_skip_without_float64"]
    skips = got["skips"].splitlines()
    assert sorted(skips) == sorted([
        "an xpu matter; this cell is cpu",
        "runs on offload=True only; this cell is cpu",
        "needs 2 cpu devices, this process sees 1",
    ])


def test_marks_read_a_spec_devices_facts(tmp_path) -> None:
    """A spec device on the CPU's kernels: its own facts (offload, no float64), and the
    cpu's marks match it too (its tensors are on the cpu)."""
    spec = tmp_path / "fakegpu_spec.py"
    spec.write_text(SPEC)
    got = _run(tmp_path, "fakegpu", spec)
    assert sorted(k for k, v in got.items() if v == "passed") == [
        "test_dtype[fp32]", "test_one_device", "test_only_cpu", "test_only_offload",
        "test_skip_cuda_mps"]
    assert sorted(got["skips"].splitlines()) == sorted([
        "an xpu matter; this cell is fakegpu",
        "no float64 here; this cell is fakegpu",
        "needs 2 fakegpu devices, this process sees 1",
        "fakegpu cannot hold torch.float64 tensors",
    ])


@pytest.mark.parametrize("make, message", [
    (lambda: testing.only_on(), "only_on needs a device type or a fact"),
    (lambda: testing.only_on("XPU"), "'XPU' is not a device type name"),
    (lambda: testing.skip_on(fp64=False), "no device fact 'fp64'; known: accelerator"),
    (lambda: testing.needs_devices(0), "n must be a positive int"),
    (lambda: testing.dtypes("float33"), "torch has no dtype 'float33'"),
])
def test_a_wrong_use_fails_at_once(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_import_first_across_a_packages_paths(tmp_path, monkeypatch) -> None:
    """import_first takes the first path that has the name, says what it tried when none
    has it, and lets a broken install's own import error through."""
    from accelgrid.testing import Unavailable, import_first

    pkg = tmp_path / "fakeao"
    (pkg / "prototype").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.9'\n")
    (pkg / "prototype" / "__init__.py").write_text("")
    (pkg / "prototype" / "optim.py").write_text("class AdamW8bit: pass\n")
    (pkg / "broken.py").write_text("import fakeao_dependency_that_is_missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = ("fakeao.optim", "fakeao.prototype.optim")
    assert import_first("AdamW8bit", paths).__name__ == "AdamW8bit"

    class Mine(Unavailable):
        pass

    with pytest.raises(Mine, match=r"fakeao 0\.9 has no AdamW4bit \(fakeao\.optim: no such "
                                   r"module; fakeao\.prototype\.optim: no AdamW4bit\)"):
        import_first("AdamW4bit", paths, Mine)
    with pytest.raises(Unavailable, match="notthere is not installed"):
        import_first("X", ("notthere.optim",))
    with pytest.raises(ModuleNotFoundError, match="fakeao_dependency_that_is_missing"):
        import_first("X", ("fakeao.broken",))
