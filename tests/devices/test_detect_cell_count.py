"""The xpu device count as the cell's own env sees it (devices.xpu.cell_xpu_ids): the cell
python's torch.xpu.device_count() first, then sycl-ls in that env, then sysfs; fake cell
pythons and a fake sycl-ls are scripts printing what the real ones print.

sycl-ls lines are upstream's, verbatim:
- intel/intel-extension-for-pytorch#702 (2024-09-11, oneAPI 2024.2, Arc A770 + UHD 770);
- intel/compute-runtime#970 (2026-08-25, Unified Runtime over Level-Zero V2, Arc B390);
- intel/intel-extension-for-pytorch#494 (2023-12-24, the older "[opencl:gpu:2]" form:
  OpenCL lines, which torch does not use).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from helpers.fake_hosts import fake_gpu

from accelgrid.devices import xpu
from accelgrid.host import detect

IPEX_702 = """\
[opencl:cpu][opencl:0] Intel(R) OpenCL, 12th Gen Intel(R) Core(TM) i9-12900K OpenCL 3.0 (Build 0) [2024.18.7.0.11_160000]
[opencl:gpu][opencl:1] Intel(R) OpenCL Graphics, Intel(R) Arc(TM) A770 Graphics OpenCL 3.0 NEO  [24.22.29735.27]
[opencl:gpu][opencl:2] Intel(R) OpenCL Graphics, Intel(R) UHD Graphics 770 OpenCL 3.0 NEO  [24.22.29735.27]
[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) A770 Graphics 1.3 [1.3.29735]
"""  # noqa: E501 (verbatim)
CR_970 = """\
[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero V2, Intel(R) Arc(TM) B390 GPU 30.0.4 [1.15.38308+4]
[opencl:cpu][opencl:0] Intel(R) OpenCL, Intel(R) Core(TM) Ultra X7 358H OpenCL 3.0 (Build 0) [2026.21.3.0.31_160000]
[opencl:gpu][opencl:1] Intel(R) OpenCL Graphics, Intel(R) Arc(TM) B390 GPU OpenCL 3.0 NEO  [26.18.38308.4]
"""  # noqa: E501 (verbatim)
IPEX_494 = """\
[opencl:cpu:0] Intel(R) OpenCL, Intel(R) Xeon(R) Platinum 8480+ 3.0 [2023.16.7.0.21_160000]
[opencl:gpu:2] Intel(R) OpenCL Graphics, Intel(R) Data Center GPU Max 1100 3.0 [23.22.26516.32]
"""


def test_sycl_ls_lines_count_level_zero_gpus_only():
    assert xpu.sycl_ls_gpus(IPEX_702) == [IPEX_702.splitlines()[3]]
    assert len(xpu.sycl_ls_gpus(CR_970)) == 1
    assert xpu.sycl_ls_gpus(IPEX_494) == []
    assert len(xpu.sycl_ls_gpus(IPEX_702 + CR_970)) == 2


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _python_printing(tmp_path: Path, out: str, rc: int = 0) -> Path:
    # A cell python: prints what `python -c "import torch; print(...)"` would, and records
    # the flat-hierarchy value it was run with (the cell's env must reach it).
    return _script(tmp_path / "python", f'echo "$ZE_FLAT_DEVICE_HIERARCHY" > '
                   f'"{tmp_path}/seen"\nprintf "{out}"\nexit {rc}\n')


def _two_stack_host(root: Path) -> None:
    fake_gpu(root, 128, 0x8086, 0x0BD5, tiles=2)   # Data Center GPU Max 1550, 2 stacks


@pytest.fixture
def env(tmp_path):
    # The fake sycl-ls first; the system's tools (cat) after it.
    return {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}


def test_cell_torch_count_agrees_with_sysfs(tmp_path, env):
    _two_stack_host(tmp_path / "root")
    py = _python_printing(tmp_path, "2\\n")
    ids, how = xpu.cell_xpu_ids(str(py), env, root=tmp_path / "root")
    assert ids == ["0", "1"]
    assert how == "torch.xpu.device_count() in the cell env: 2 (sysfs agrees)"
    assert (tmp_path / "seen").read_text().strip() == "FLAT"


def test_cell_torch_count_wins_where_it_differs(tmp_path, env):
    # COMPOSITE in the cell env: the card is one device to torch; sysfs (FLAT from the
    # same env would say 2) is overruled by what the cell's torch counts.
    _two_stack_host(tmp_path / "root")
    py = _python_printing(tmp_path, "1\\n")
    ids, how = xpu.cell_xpu_ids(str(py), env, root=tmp_path / "root")
    assert ids == ["0"] and how.endswith("(sysfs sees 2: the count wins)")
    # A torch that sees none (a CPU build in an xpu cell): zero, not sysfs's two.
    py = _python_printing(tmp_path, "0\\n")
    assert xpu.cell_xpu_ids(str(py), env, root=tmp_path / "root")[0] == []


def test_sycl_ls_in_the_cell_env_when_torch_cannot_say(tmp_path, env):
    _two_stack_host(tmp_path / "root")
    (tmp_path / "bin").mkdir()
    _script(tmp_path / "bin" / "sycl-ls", f"cat <<'EOF'\n{IPEX_702}EOF\n")
    py = _python_printing(tmp_path, "Traceback\\nModuleNotFoundError: No module named torch\\n",
                          rc=1)
    ids, how = xpu.cell_xpu_ids(str(py), env, root=tmp_path / "root")
    assert ids == ["0"]
    assert how.startswith("torch.xpu.device_count() in the cell env: no count (exit 1")
    assert "sycl-ls: 1 Level Zero GPUs" in how and "the count wins" in how


def test_sycl_ls_count_less_the_igpu_torch_drops(tmp_path, env):
    # A770 + an iGPU in sysfs, sycl-ls listing two Level Zero GPUs (the second line in
    # compute-runtime#970's form): torch >= 2.7 drops the integrated one.
    root = tmp_path / "root"
    fake_gpu(root, 128, 0x8086, 0x56A0)   # Arc A770 (DG2-G10)
    fake_gpu(root, 129, 0x8086, 0x7D55)   # Meteor Lake iGPU
    (tmp_path / "bin").mkdir()
    two = IPEX_702 + CR_970.splitlines()[0] + "\n"
    _script(tmp_path / "bin" / "sycl-ls", f"cat <<'EOF'\n{two}EOF\n")
    ids, how = xpu.cell_xpu_ids(None, env, root=root, torch_version="2.8")
    assert ids == ["0"] and "2 Level Zero GPUs, 1 integrated dropped" in how
    assert how.endswith("(sysfs agrees)")


def test_sysfs_alone_without_a_cell_python_or_sycl_ls(tmp_path, env):
    _two_stack_host(tmp_path / "root")
    env = {**env, "PATH": str(tmp_path / "no-tools")}
    assert xpu.cell_xpu_ids(None, env, root=tmp_path / "root") == (
        ["0", "1"], "sysfs: 2 devices")


def test_device_ids_uses_the_cell_python_and_explicit_choices_win(tmp_path, env,
                                                                   monkeypatch):
    _two_stack_host(tmp_path / "root")
    monkeypatch.setenv("ACCELGRID_HOST_ROOT", str(tmp_path / "root"))
    py = _python_printing(tmp_path, "1\\n")
    assert detect.device_ids(xpu.DEVICE, env, python=str(py)) == ["0"]
    assert detect.device_ids(xpu.DEVICE, env) == ["0", "1"]            # no python: sysfs
    assert detect.device_ids_how(xpu.DEVICE, {**env, "ZE_AFFINITY_MASK": "1"}, str(py)) == (
        ["1"], "ZE_AFFINITY_MASK")


def test_a_real_torch_without_xpu_defers_to_the_next_source(tmp_path, env):
    # This box's torch (a CPU build): the real query, run by a real interpreter, gives no
    # count, so sysfs answers; the reason is said.
    import sys

    _two_stack_host(tmp_path / "root")
    env = {**env, "PATH": str(tmp_path / "no-tools")}
    ids, how = xpu.cell_xpu_ids(sys.executable, env, root=tmp_path / "root")
    assert ids == ["0", "1"]
    assert how == ("torch.xpu.device_count() in the cell env: no count (exit 0: torch built "
                   "without XPU); sysfs: 2 devices")
