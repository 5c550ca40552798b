"""Shared pieces of the low-bit suite, also imported by the resume subprocess: the torchao
imports, the model and its training, the update checker and the state-size measure.

Imports only torch at import time (torchao when asked), so the fresh interpreter of the
cross-process test can use it as-is.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from accelgrid.testing import Unavailable, import_first

# Where torchao's low-bit optimizers live: torchao.optim from 0.10 on, the prototype path
# in 0.5-0.9 (/work/shared/REFERENCE.md section 3; the matrix pins 0.8 on torch 2.4).
IMPORT_PATHS = ("torchao.optim", "torchao.prototype.low_bit_optim")
OPTIMIZERS = ("AdamW8bit", "AdamW4bit", "AdamWFp8")
STEPS, LR, BATCH, SIZES = 5, 1e-3, 64, (256, 512, 256)


class LowBitUnavailable(Unavailable):
    """torchao is absent, or has the optimizer in none of IMPORT_PATHS."""


def import_optimizer(name: str) -> type:
    """torchao's ``name`` optimizer class (a broken install raises on:
    :func:`accelgrid.testing.import_first`)."""
    return import_first(name, IMPORT_PATHS, LowBitUnavailable)


def model(device: str) -> nn.Sequential:
    """Two Linear layers whose weights (131072 elements) torchao quantizes (it keeps
    tensors under 4096 elements, the biases here, in fp32)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(),
                         nn.Linear(SIZES[1], SIZES[2])).to(device)


def inputs(device: str, steps: int = STEPS, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(BATCH, SIZES[0], generator=gen).to(device) for _ in range(steps)]


def train(m: nn.Module, opt: torch.optim.Optimizer, batches: list[torch.Tensor]) -> None:
    for x in batches:
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def snapshot(m: nn.Module) -> list[torch.Tensor]:
    return [p.detach().float().cpu().clone() for p in m.parameters()]


def reference_run(device: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(initial, after STEPS fp32 AdamW steps) on ``device``."""
    m = model(device)
    before = snapshot(m)
    train(m, torch.optim.AdamW(m.parameters(), lr=LR), inputs(device))
    return before, snapshot(m)


def update_errors(before: list[torch.Tensor], actual: list[torch.Tensor],
                  expected: list[torch.Tensor]) -> list[float]:
    """Per tensor: ``|actual update - expected update| / |expected update|`` (2-norms).
    NaN or inf anywhere gives inf."""
    out = []
    for b, a, e in zip(before, actual, expected, strict=True):
        da, de = (a - b).double(), (e - b).double()
        if not torch.isfinite(da).all():
            out.append(math.inf)
            continue
        out.append(float((da - de).norm() / de.norm()))
    return out


# Worst per-tensor relative update error allowed against fp32 AdamW after STEPS steps.
# Measured on the cpu (torch 2.13, torchao 0.18, this model and data; docs/suites/lowbit.md): 8-bit
# 0.0112, 4-bit 0.166, FP8 0.0243. The bounds are ~3x that: the state's quantization error
# is statistical, a device with other rounding lands near it (not yet measured on a GPU).
# An optimizer that does not step scores 1.0, one at twice the learning rate 1.0 too.
UPDATE_BOUND = {"AdamW8bit": 0.04, "AdamW4bit": 0.5, "AdamWFp8": 0.07}


def update_problems(name: str, errors: list[float]) -> list[str]:
    bound = UPDATE_BOUND[name]
    return [f"tensor {i}: update off by {e:.4g} of the fp32 AdamW update (bound {bound})"
            for i, e in enumerate(errors) if not e <= bound]


def state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state tensors; a tensor subclass (torchao's OptimState8bit,
    ...) counted by its inner tensors (``__tensor_flatten__``): codes, scales, maps."""
    total = 0
    for per_param in opt.state.values():
        for value in per_param.values():
            if not isinstance(value, torch.Tensor) or value.ndim == 0:
                continue  # the step counter
            total += tensor_bytes(value)
    return total


def tensor_bytes(t: torch.Tensor) -> int:
    if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


# Largest state size as a share of fp32 AdamW's (8 bytes per element): 8-bit and FP8 keep
# one byte per element per moment plus a scale per block (measured 0.258 and 0.256 on this
# model with its fp32 biases; docs/suites/lowbit.md), 4-bit half a byte plus scales (0.136).
MEMORY_BOUND = {"AdamW8bit": 0.30, "AdamW4bit": 0.17, "AdamWFp8": 0.30}


def memory_problems(name: str, ratio: float) -> list[str]:
    bound = MEMORY_BOUND[name]
    return [] if ratio <= bound else [
        f"{name} state is {ratio:.4g} of fp32 AdamW's (bound {bound})"]


def clone_model(m: nn.Module) -> nn.Module:
    return copy.deepcopy(m)


# --- int4-packed matmul (the op torchao's int4 weight-only path calls) -------------------

@dataclass
class Int4Case:
    a: torch.Tensor          # (M, K) bf16 activations on the CPU
    q: torch.Tensor          # (N, K) int32 values 0..15
    scales_and_zeros: torch.Tensor  # (K / group, N, 2) bf16
    group: int

    def dequantized(self) -> torch.Tensor:
        """(N, K) fp32 weight: (q - 8) * scale + zero per group (tinygemm's convention,
        torch.testing._internal.common_quantization._group_quantize_tensor)."""
        n, k = self.q.shape
        sz = self.scales_and_zeros.float()  # (K/g, N, 2)
        scale = sz[..., 0].T.repeat_interleave(self.group, dim=1)
        zero = sz[..., 1].T.repeat_interleave(self.group, dim=1)
        return (self.q.float() - 8) * scale + zero

    def reference(self) -> torch.Tensor:
        return self.a.float() @ self.dequantized().T


def int4_case(m: int, k: int = 512, n: int = 256, group: int = 128) -> Int4Case:
    """Asymmetric 4-bit group quantization of a (N, K) weight in tinygemm's convention (the
    one torch.testing._internal.common_quantization._group_quantize_tensor uses, written
    here: that module needs expecttest, which a cell does not install): per group
    ``scale = (max - min) / 15``, ``zero = min + 8 * scale``, ``q = round((w - min) / scale)``;
    scales and zeros laid out (K / group, N, 2) in bf16."""
    gen = torch.Generator().manual_seed(m * 1000 + group)
    a = torch.rand(m, k, generator=gen).bfloat16()
    w = (torch.rand(n, k, generator=gen) * torch.rand(n, 1, generator=gen)).bfloat16().float()
    groups = w.reshape(-1, group)
    lo, hi = groups.amin(dim=1, keepdim=True), groups.amax(dim=1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    q = groups.sub(lo).div(scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    zero = lo + 8 * scale
    sz = torch.stack([scale.view(n, -1), zero.view(n, -1)], dim=-1).transpose(0, 1)
    return Int4Case(a, q, sz.contiguous().bfloat16(), group)


def int4_matmul(case: Int4Case, device: str) -> torch.Tensor:
    """The device's int4-packed matmul, packed as each backend wants it (intel/torch-xpu-ops
    test/xpu/test_linalg_xpu.py ``_int4_mm`` at ab84f925a234: cpu
    ``_convert_weight_to_int4pack_for_cpu`` + ``_weight_int4pack_mm_for_cpu``; xpu the
    nibbles packed two per byte viewed as int32; cuda ``_convert_weight_to_int4pack``
    with 2 inner k tiles)."""
    kind = torch.device(device).type
    a, sz = case.a.to(device), case.scales_and_zeros.to(device)
    if kind == "cpu":
        packed = torch._convert_weight_to_int4pack_for_cpu(case.q, 2)
        return torch._weight_int4pack_mm_for_cpu(a, packed, case.group, sz)
    nibbles = (case.q[:, ::2] << 4 | case.q[:, 1::2]).to(torch.uint8).to(device)
    if kind == "xpu":
        packed = nibbles.view(torch.int32)
    else:
        packed = torch._convert_weight_to_int4pack(nibbles, 2)
    return torch._weight_int4pack_mm(a, packed, case.group, sz)


# --- torchao's int4 weight-only (Int4WeightOnlyConfig) ------------------------------------
# Its packed weights have no dequantize (torchao 0.17 and 0.18: Int4TilePackedTo4dTensor
# and Int4PlainInt32Tensor implement linear, slice and select only; on the H200 the test's
# `q.weight.dequantize()` raised NotImplementedError for aten.dequantize), so the reference
# weight is quantized again from the float one with the quantization primitives each
# packing's from_hp calls (torchao/quantization/quantize_/workflows/int4/): what is under
# test is the packing and the device's kernel.

def _tinygemm_dequantized(w: torch.Tensor, group: int) -> torch.Tensor:
    """cuda's tile_packed_to_4d: tinygemm's float zero point (scale and zero in the
    weight's dtype, values 0..15 around 8)."""
    from torchao.quantization import quant_primitives as qp

    block = [1, group]
    scale, zero = qp._choose_qparams_affine_tinygemm(
        w, qp.MappingType.ASYMMETRIC, block, torch.int32, 0, 15,
        scale_dtype=w.dtype, zero_point_dtype=w.dtype)
    q = qp._quantize_affine_tinygemm(w, block, scale, zero, torch.int32, 0, 15)
    return qp._dequantize_affine_tinygemm(q, block, scale, zero, torch.int32, 0, 15,
                                          output_dtype=torch.float32)


def _plain_int32_dequantized(w: torch.Tensor, group: int) -> torch.Tensor:
    """xpu's plain_int32: choose_qparams_affine's integer zero point, eps 1e-6."""
    from torchao.quantization import quant_primitives as qp

    block = [1, group]
    scale, zero = qp.choose_qparams_affine(w, qp.MappingType.ASYMMETRIC, block, torch.int32,
                                           0, 15, 1e-6, None, torch.int32)
    q = qp.quantize_affine(w, block, scale, zero, torch.int32, 0, 15)
    return qp.dequantize_affine(q, block, scale, zero, torch.int32, 0, 15,
                                output_dtype=torch.float32)


# packing format (torchao's Int4PackingFormat value) -> the weight it stores, dequantized
INT4_WEIGHT_ONLY = {"tile_packed_to_4d": _tinygemm_dequantized,
                    "plain_int32": _plain_int32_dequantized}


def int4_weight_only_dequantized(w: torch.Tensor, packing: str, group: int) -> torch.Tensor:
    """The (N, K) fp32 weight Int4WeightOnlyConfig(group_size=group, int4_packing_format=
    packing) makes of the float weight ``w``, on the CPU."""
    return INT4_WEIGHT_ONLY[packing](w.detach().cpu(), group)


def gemm_problems(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> list[str]:
    """A bf16 GEMM result against its fp32 reference: every element within ``rtol`` of the
    reference's largest magnitude (bf16 output rounding is 2**-8 relative); NaN fails."""
    a, e = actual.float().cpu(), expected.float().cpu()
    if a.shape != e.shape:
        return [f"shape {tuple(a.shape)} != {tuple(e.shape)}"]
    err = (a - e).abs().max() / e.abs().max()
    if not torch.isfinite(a).all() or not err <= rtol:
        return [f"max error {float(err):.4g} of the largest reference value (bound {rtol})"]
    return []
