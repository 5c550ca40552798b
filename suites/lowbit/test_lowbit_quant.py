"""Low-precision GEMMs on the device: torchao's int8 / int4 weight-only quantization against
the dequantized matmul (M=1 included: decoding), the int4-packed matmul itself, FP8
``_scaled_mm``, ``_grouped_mm`` (MoE), and torchao.float8 training where the device has FP8."""

from __future__ import annotations

import copy

import lowbit_helpers as h
import pytest
import torch

from accelgrid.testing import only_on, skip_on

# bf16 output of an fp32-accumulated GEMM: each element rounded once (2**-8 = 0.0039
# relative to itself, less of the largest); 0.01 of the largest value leaves room for a
# kernel that accumulates in bf16 steps of 64 or more. A wrong scale or group is off by
# 10% or more (intel/torch-xpu-ops#4765: 96-98% of the elements wrong).
GEMM_RTOL = 0.01

M_CASES = [1, 17]


@pytest.mark.parametrize("m", M_CASES, ids=lambda m: f"M{m}")
def test_int8_weight_only_matches_dequantized(torchao_quant, device: str, m: int) -> None:
    lin = torch.nn.Linear(512, 256, bias=False, device=device, dtype=torch.bfloat16)
    q = copy.deepcopy(lin)
    torchao_quant.quantize_(q, torchao_quant.Int8WeightOnlyConfig())
    x = torch.randn(m, 512, device=device, dtype=torch.bfloat16)
    y = q(x)
    ref = x.float() @ q.weight.dequantize().float().T
    assert h.gemm_problems(y, ref, GEMM_RTOL) == []
    # And the quantization itself: int8 per-row scales keep the weight within 1 %.
    assert h.gemm_problems(q.weight.dequantize(), lin.weight.detach(), 0.01) == []


# torchao 0.18's Int4WeightOnlyConfig packing formats: PLAIN and PRESHUFFLED need mslk
# (a CUDA kernel library), PLAIN_INT32 is XPU's, TILE_PACKED_TO_4D CUDA's tinygemm; none is
# for the CPU (run on cpu-2.13: "Requires mslk >= 1.0.0", "Int4PlainInt32Tensor does not
# support device 'cpu' yet", "Torch not compiled with CUDA enabled").
INT4_FORMAT = {"cuda": "tile_packed_to_4d", "xpu": "plain_int32"}


@only_on("cuda", "xpu", reason="torchao 0.18 has no int4 weight-only packing for this "
         "device (cpu: PLAIN needs mslk, PLAIN_INT32 is xpu-only, TILE_PACKED_TO_4D "
         "cuda-only); the int4-packed matmul itself is tested below")
@pytest.mark.parametrize("m", M_CASES, ids=lambda m: f"M{m}")
def test_int4_weight_only_matches_dequantized(torchao_quant, device: str, m: int) -> None:
    from torchao.quantization.quantize_.workflows.int4.int4_packing_format import (
        Int4PackingFormat,
    )

    packing = INT4_FORMAT[torch.device(device).type]
    q = torch.nn.Linear(512, 256, bias=False, device=device, dtype=torch.bfloat16)
    # The packed weight has no dequantize: the reference quantizes the float one the same way.
    weight = h.int4_weight_only_dequantized(q.weight, packing, group=128)
    torchao_quant.quantize_(q, torchao_quant.Int4WeightOnlyConfig(
        group_size=128, int4_packing_format=Int4PackingFormat(packing)))
    x = torch.randn(m, 512, device=device, dtype=torch.bfloat16)
    assert h.gemm_problems(q(x), x.float().cpu() @ weight.T, GEMM_RTOL) == []


@skip_on("mps", reason="no int4-packed matmul kernel for mps in these tests")
@pytest.mark.parametrize("group", [32, 128], ids=lambda g: f"g{g}")
@pytest.mark.parametrize("m", M_CASES, ids=lambda m: f"M{m}")
def test_int4pack_mm_matches_dequantized(device: str, m: int, group: int) -> None:
    """``_weight_int4pack_mm`` (``_for_cpu`` on the cpu) against the dequantized weight in
    fp32. On xpu, M=1 with a group over 32 is intel/torch-xpu-ops#4765 (known_issues.yaml)."""
    case = h.int4_case(m, group=group)
    assert h.gemm_problems(h.int4_matmul(case, device), case.reference(), GEMM_RTOL) == []


def _fp8_capable(device: str) -> str | None:
    kind = torch.device(device).type
    if kind == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        major, minor = torch.cuda.get_device_capability(device)
        return f"FP8 GEMMs need cuda sm89+, this is sm{major}{minor}"
    return None


@skip_on("mps", reason="no float8 types on mps")
@pytest.mark.parametrize("m", M_CASES, ids=lambda m: f"M{m}")
def test_scaled_mm_matches_dequantized(device: str, m: int) -> None:
    """``torch._scaled_mm`` (FP8 e4m3 tensor-wise scales, bf16 out) against the fp32 matmul
    of the dequantized inputs. On XPU: a kernel from 2.10, listed to fall back before
    (accelgrid ops predict)."""
    why = _fp8_capable(device)
    if why:
        pytest.skip(why)
    gen = torch.Generator().manual_seed(m)
    a = torch.randn(m, 64, generator=gen)
    b = torch.randn(32, 64, generator=gen)  # (N, K): b.T is column-major, as cuBLAS wants
    sa, sb = a.abs().max() / 448, b.abs().max() / 448
    a8, b8 = (a / sa).to(torch.float8_e4m3fn), (b / sb).to(torch.float8_e4m3fn)
    ref = (a8.float() * sa) @ (b8.float() * sb).T
    y = torch._scaled_mm(a8.to(device), b8.to(device).T, scale_a=sa.to(device),
                         scale_b=sb.to(device), out_dtype=torch.bfloat16)
    assert h.gemm_problems(y, ref, GEMM_RTOL) == []


@skip_on("mps", reason="_grouped_mm has no mps kernel")
def test_grouped_mm_matches_per_group_matmuls(device: str) -> None:
    """``torch._grouped_mm`` (the MoE GEMM: 2-D tokens x 3-D experts with group offsets)
    against one fp32 matmul per group. torch >= 2.9 has a composite kernel for it; XPU's
    own is intel/torch-xpu-ops#1574."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(48, 64, generator=gen).bfloat16()
    w = torch.randn(3, 64, 32, generator=gen).bfloat16()
    offs = torch.tensor([16, 24, 48], dtype=torch.int32)
    y = torch._grouped_mm(x.to(device), w.to(device), offs=offs.to(device))
    start, parts = 0, []
    for g, end in enumerate(offs.tolist()):
        parts.append(x[start:end].float() @ w[g].float())
        start = end
    assert h.gemm_problems(y, torch.cat(parts), GEMM_RTOL) == []


@only_on("cuda", reason="torchao.float8 training needs FP8 tensor cores (cuda sm89+; "
         "torchao/float8/README.md)")
def test_float8_training_tracks_bf16(torchao_quant, device: str) -> None:
    """convert_to_float8_training on a small MLP: 3 SGD steps' loss within 5 % of the bf16
    model's (FP8 e4m3 forward: 2**-4 relative per element, averaged over the batch)."""
    why = _fp8_capable(device)
    if why:
        pytest.skip(why)
    from torchao.float8 import convert_to_float8_training

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 256)).to(device, torch.bfloat16)
    f8 = copy.deepcopy(ref)
    convert_to_float8_training(f8)
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16)
    losses = []
    for model in (ref, f8):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(x).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(float(loss))
    assert abs(losses[1] - losses[0]) <= 0.05 * abs(losses[0]), losses
