#!/bin/bash
# The int4 weight-only test with its new reference (lowbit_helpers.int4_weight_only_dequantized),
# in the cuda-2.11 cell, and the check against a planted wrong reference (group 64); then
# torch 2.11's FSDP2 reduce on one rank (the divide-factor failure of h200-2026-12-05).
. docs/measured/h200-2026-12-05/scripts/common.sh
timeout 200 python3 -m accelgrid run cuda-2.11 --no-venv -- -k "int4_weight_only or fsdp2" > $OUT/int4-cell.log 2>&1
echo "cell run (-k 'int4_weight_only or fsdp2') rc $?" >> $OUT/facts.txt
python3 - >> $OUT/facts.txt 2>&1 <<'PY'
import sys, torch
sys.path.insert(0, "suites/lowbit")
import lowbit_helpers as h
from torchao.quantization import Int4WeightOnlyConfig, quantize_
from torchao.quantization.quantize_.workflows.int4.int4_packing_format import Int4PackingFormat
for m in (1, 17):
    q = torch.nn.Linear(512, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    right = h.int4_weight_only_dequantized(q.weight, "tile_packed_to_4d", 128)
    planted = h.int4_weight_only_dequantized(q.weight, "tile_packed_to_4d", 64)
    quantize_(q, Int4WeightOnlyConfig(group_size=128, int4_packing_format=Int4PackingFormat("tile_packed_to_4d")))
    x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
    y = q(x)
    print(f"M{m} right reference:", h.gemm_problems(y, x.float().cpu() @ right.T, 0.01) or "within 0.01")
    print(f"M{m} planted (group 64):", h.gemm_problems(y, x.float().cpu() @ planted.T, 0.01))
PY
f=$(python3 -c "import torch.distributed.fsdp._fully_shard._fsdp_collectives as m; print(m.__file__)")
{ echo "== $f: the one-rank branch"; grep -n "world_size > 1\|world_size == 1\|For single GPU\|gradient_divide_factor is not None" -A3 "$f" | head -40; } >> $OUT/facts.txt
grep -E "FAILED|passed|failed|tests:" $OUT/int4-cell.log | tail -8
cat $OUT/facts.txt | tail -60
