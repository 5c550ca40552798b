"""pytorch/pytorch#127931: ``_foreach_*`` ops not implemented for XPU (the AdamW foreach
path of the Hugging Face examples). Fixed in 2.5, ``_foreach_mul_.Tensor`` in 2.6.

Each op runs on the cell's device and must match the per-tensor result.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

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
