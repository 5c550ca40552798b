#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >$OUT/pip.log 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src; B="python3 -m accelgrid bench offload"
(nvidia-smi -L; lscpu | grep -E 'Model name|^CPU\(s\)'; nproc) >$OUT/host.txt 2>&1
timeout 60 $B --cpu-adamw --out $OUT/bench >$OUT/cpu-adamw.log 2>&1; echo cpu-adamw rc=$?; cat $OUT/bench/bench_offload_cpu_adamw.md
timeout 200 $B --device cuda --models transformer,mlp,mlp-gelu --sizes 1 --dtypes bf16 --modes none,offload --flush-denormals both --steps 5 --warmup 1 --no-plot --out $OUT/bench >$OUT/bench.log 2>&1; echo bench rc=$?
timeout 90 $B --device cuda --models mlp-gelu --sizes 1 --dtypes fp32 --modes offload --flush-denormals both --steps 5 --warmup 1 --no-plot --out $OUT/bench-fp32 >$OUT/bench-fp32.log 2>&1; echo bench-fp32 rc=$?
cat $OUT/bench/bench_offload.md $OUT/bench-fp32/bench_offload.md; tail -3 $OUT/bench.log $OUT/bench-fp32.log
