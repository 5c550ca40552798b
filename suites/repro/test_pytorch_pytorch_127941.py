"""pytorch/pytorch#127941: ops silently falling back from XPU to CPU (cdist, linspace,
topk, roll, upsample_*; performance of the Hugging Face examples). Fixed in 2.5,
``linspace.out`` in 2.6.

Each op runs in a fresh interpreter with ``PYTORCH_DEBUG_XPU_FALLBACK=1`` (read when torch
loads), which makes torch-xpu-ops report every fallback; correct is no report. XPU only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("pytorch/pytorch#127941")

OPS = {
    "cdist": "torch.cdist(torch.rand(4, 3, device=d), torch.rand(5, 3, device=d))",
    "linspace": "torch.linspace(0, 1, 11, device=d)",
    "topk": "torch.topk(torch.rand(64, device=d), 5)",
    "roll": "torch.roll(torch.rand(4, 6, device=d), 2, 1)",
    "upsample_bilinear2d": "F.interpolate(torch.rand(1, 2, 4, 4, device=d), scale_factor=2, "
                           "mode='bilinear')",
    "upsample_nearest2d": "F.interpolate(torch.rand(1, 2, 4, 4, device=d), scale_factor=2, "
                          "mode='nearest')",
}
# The aten ops each case reaches on XPU (tests/ops/test_repro_prediction.py checks the
# registry's scope against accelgrid's per-release prediction for them).
XPU_CALLS = {
    "cdist": ["aten::_cdist_forward.default"],
    "linspace": ["aten::linspace.default"],
    "topk": ["aten::topk.default"],
    "roll": ["aten::roll.default"],
    "upsample_bilinear2d": ["aten::upsample_bilinear2d.default"],
    "upsample_nearest2d": ["aten::upsample_nearest2d.default"],
}
# torch-xpu-ops' XPUFallback.template: "The operator 'aten::<op>[.<overload>] on the XPU
# backend is falling back to run on the CPU." (no closing quote after the op), and the
# once-per-process notice.
FALLBACK = re.compile(r"The operator '(aten::\S+?)'? on the XPU backend is falling back"
                      r"|Aten Op fallback from XPU to CPU happ")


@only_on("xpu", reason="XPU-to-CPU fallback is an xpu matter")
@pytest.mark.parametrize("op", sorted(OPS))
def test_no_cpu_fallback(device: str, op: str) -> None:
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import torch, torch.nn.functional as F\n"
            f"d = 'xpu'\nr = {OPS[op]}\ntorch.xpu.synchronize()\n")
    env = {**os.environ, "PYTORCH_DEBUG_XPU_FALLBACK": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = sorted({m.group(0) for m in FALLBACK.finditer(proc.stdout + proc.stderr)})
    assert not found, f"{op} on xpu: {'; '.join(found)}"
