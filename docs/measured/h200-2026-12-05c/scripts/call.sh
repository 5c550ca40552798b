#!/bin/bash
# At ba834d8: the cuda-2.11 cell whole (the int4 weight-only reference of 81c3f9f and the
# FSDP2 divide factor set on every fully_shard module, both failing at f8ecda7), its time,
# then the int4 check against a planted wrong reference (group 64) on the GPU.
. docs/measured/h200-2026-12-05/scripts/common.sh
s=$SECONDS
timeout 240 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/cell.log 2>&1
echo "cell run rc $? in $((SECONDS - s)) s" >> $OUT/facts.txt
per_suite cuda-2.11 > $OUT/per-suite.txt 2>&1
python3 - >> $OUT/facts.txt 2>&1 <<'PY'
import sys, torch
sys.path.insert(0, "suites/lowbit")
import lowbit_helpers as h
from torchao.quantization import Int4WeightOnlyConfig, quantize_
from torchao.quantization.quantize_.workflows.int4.int4_packing_format import Int4PackingFormat
for m in (1, 17):
    torch.manual_seed(m)
    q = torch.nn.Linear(512, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    right = h.int4_weight_only_dequantized(q.weight, "tile_packed_to_4d", 128)
    planted = h.int4_weight_only_dequantized(q.weight, "tile_packed_to_4d", 64)
    quantize_(q, Int4WeightOnlyConfig(group_size=128, int4_packing_format=Int4PackingFormat("tile_packed_to_4d")))
    x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
    y = q(x)
    print(f"int4 M{m} right reference:", h.gemm_problems(y, x.float().cpu() @ right.T, 0.01) or "within 0.01")
    print(f"int4 M{m} planted (group 64):", h.gemm_problems(y, x.float().cpu() @ planted.T, 0.01))
PY
cat $OUT/facts.txt; grep -E "tests:|FAILED|wall" $OUT/cell.log | tail -12
