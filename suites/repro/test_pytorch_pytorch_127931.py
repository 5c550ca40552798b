"""pytorch/pytorch#127931: ``_foreach_*`` ops not implemented for XPU (the AdamW foreach
path of the Hugging Face examples), seen on a nightly from before torch 2.4.

No released torch raises it: from 2.4.0 the foreach slow paths are
``CompositeExplicitAutograd`` kernels (pytorch/pytorch#127412, #127623), which run on any
backend. What is left on 2.4 is their decomposition: per-tensor ``addcdiv_``,
``addcmul_``, ``lerp_`` and ``linalg_vector_norm``, all on release/2.4's CPU-fallback
list. XPU kernels for the foreach ops came in 2.5 (``_foreach_mul_.Tensor`` in 2.6, where
2.5 ran its composite).

Each op runs on the cell's device and must match the per-tensor result
(``test_foreach_matches_per_tensor``: passes on every release); on XPU it also runs in a
fresh interpreter with ``PYTORCH_DEBUG_XPU_FALLBACK=1`` and must not fall back
(``test_foreach_without_cpu_fallback``: fails on 2.4). ``XPU_CALLS`` names the aten ops
each case reaches on XPU (the foreach op, and the per-tensor op its slow path calls, from
PyTorch's ForeachOpsKernels.cpp); tests/ops/test_repro_prediction.py checks the registry's
scope against accelgrid's per-release prediction for them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from accelgrid.testing import only_on

pytestmark = pytest.mark.upstream("pytorch/pytorch#127931")

Lists = tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


def _lists(device: str) -> Lists:
    gen = torch.Generator().manual_seed(0)
    shapes = [(7,), (3, 5), (2, 2, 4)]

    def make() -> list[torch.Tensor]:
        return [torch.rand(s, generator=gen).add_(0.5).to(device) for s in shapes]

    return make(), make(), make()


CASES: dict[str, tuple[Callable, Callable]] = {
    # name: (foreach call on (a, b, c) returning the result list, per-tensor reference)
    "mul_scalar": (lambda a, b, c: (torch._foreach_mul_(a, 2.0), a)[1],
                   lambda a, b, c: [x * 2.0 for x in a]),
    "mul_tensor": (lambda a, b, c: (torch._foreach_mul_(a, torch.tensor(2.0, device=a[0].device)),
                                    a)[1],
                   lambda a, b, c: [x * 2.0 for x in a]),
    "div_scalarlist": (lambda a, b, c: (torch._foreach_div_(a, [2.0, 4.0, 8.0]), a)[1],
                       lambda a, b, c: [x / s for x, s in zip(a, [2.0, 4.0, 8.0], strict=True)]),
    "addcdiv_scalarlist": (
        lambda a, b, c: (torch._foreach_addcdiv_(a, b, c, [0.5, 0.25, 0.125]), a)[1],
        lambda a, b, c: [x + s * y / z for x, y, z, s in zip(a, b, c, [0.5, 0.25, 0.125],
                                                              strict=True)]),
    "addcmul_scalar": (lambda a, b, c: (torch._foreach_addcmul_(a, b, c, 0.5), a)[1],
                       lambda a, b, c: [x + 0.5 * y * z for x, y, z in zip(a, b, c, strict=True)]),
    "lerp_scalar": (lambda a, b, c: (torch._foreach_lerp_(a, b, 0.3), a)[1],
                    lambda a, b, c: [x + 0.3 * (y - x) for x, y in zip(a, b, strict=True)]),
    "sqrt": (lambda a, b, c: torch._foreach_sqrt(a), lambda a, b, c: [x.sqrt() for x in a]),
    "norm": (lambda a, b, c: torch._foreach_norm(a), lambda a, b, c: [x.norm() for x in a]),
}


XPU_CALLS = {
    "mul_scalar": ["aten::_foreach_mul_.Scalar", "aten::mul_.Scalar"],
    "mul_tensor": ["aten::_foreach_mul_.Tensor", "aten::mul_.Tensor"],
    "div_scalarlist": ["aten::_foreach_div_.ScalarList", "aten::div_.Scalar"],
    "addcdiv_scalarlist": ["aten::_foreach_addcdiv_.ScalarList", "aten::addcdiv_.default"],
    "addcmul_scalar": ["aten::_foreach_addcmul_.Scalar", "aten::addcmul_.default"],
    "lerp_scalar": ["aten::_foreach_lerp_.Scalar", "aten::lerp_.Scalar"],
    "sqrt": ["aten::_foreach_sqrt.default", "aten::sqrt.default"],
    "norm": ["aten::_foreach_norm.Scalar", "aten::linalg_vector_norm.default"],
}
# The call of each case in a fresh interpreter, on lists a, b, c of XPU tensors.
SNIPPETS = {
    "mul_scalar": "torch._foreach_mul_(a, 2.0)",
    "mul_tensor": "torch._foreach_mul_(a, torch.tensor(2.0, device=d))",
    "div_scalarlist": "torch._foreach_div_(a, [2.0, 4.0, 8.0])",
    "addcdiv_scalarlist": "torch._foreach_addcdiv_(a, b, c, [0.5, 0.25, 0.125])",
    "addcmul_scalar": "torch._foreach_addcmul_(a, b, c, 0.5)",
    "lerp_scalar": "torch._foreach_lerp_(a, b, 0.3)",
    "sqrt": "torch._foreach_sqrt(a)",
    "norm": "torch._foreach_norm(a)",
}
# torch-xpu-ops' per-call report with PYTORCH_DEBUG_XPU_FALLBACK=1, and its once-per-process
# notice (XPUFallback.template).
FALLBACK = re.compile(r"The operator '(aten::\S+?)'? on the XPU backend is falling back"
                      r"|Aten Op fallback from XPU to CPU happ")


@pytest.mark.parametrize("case", sorted(CASES))
def test_foreach_matches_per_tensor(device: str, case: str) -> None:
    foreach, reference = CASES[case]
    a, b, c = _lists(device)
    want = [t.cpu() for t in reference([x.clone() for x in a], b, c)]
    got = [t.cpu() for t in foreach(a, b, c)]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_adamw_foreach_matches_single_tensor(device: str) -> None:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in [(8, 4), (4,), (3, 3)]]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for group, foreach in ((params, True), (twins, False)):
        opt = torch.optim.AdamW(group, lr=1e-2, foreach=foreach)
        for _ in range(2):
            sum((p * p).sum() for p in group).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for p, q in zip(params, twins, strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu())


@only_on("xpu", reason="XPU-to-CPU fallback is an xpu matter")
@pytest.mark.parametrize("case", sorted(SNIPPETS))
def test_foreach_without_cpu_fallback(device: str, case: str) -> None:
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import torch\nd = 'xpu'\n"
            "a, b, c = ([torch.rand(s, device=d) + 0.5 for s in [(7,), (3, 5)]] "
            "for _ in range(3))\n"
            f"r = {SNIPPETS[case]}\ntorch.xpu.synchronize()\n")
    env = {**os.environ, "PYTORCH_DEBUG_XPU_FALLBACK": "1"}  # read when torch loads
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = sorted({m.group(0) for m in FALLBACK.finditer(proc.stdout + proc.stderr)})
    assert not found, f"{case} on xpu: {'; '.join(found)}"
