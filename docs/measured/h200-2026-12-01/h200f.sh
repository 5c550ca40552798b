#!/bin/bash
# Before-change scaling baseline: cuda-2.11 whole cell, 1 GPU (pinned) vs 2 GPUs.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >$OUT/pip.log 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
echo "git: $(git rev-parse HEAD 2>&1 | head -1)"; ls -a | head -30 | tr '\n' ' '; echo
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | sed -n 2p
for run in 1gpu 2gpu; do
  rm -rf results
  if [ $run = 1gpu ]; then export ACCELGRID_DEVICES=0; else unset ACCELGRID_DEVICES; fi
  start=$(date +%s.%N)
  timeout 280 python3 -m nox --no-venv -s cuda-2.11 >$OUT/cell-$run.log 2>&1; rc=$?
  end=$(date +%s.%N)
  echo "$run rc=$rc wall=$(python3 -c "print(round($end-$start,1))") s"
  grep -E 'accelgrid:' $OUT/cell-$run.log | tail -6
  mkdir -p $OUT/$run && cp results/cuda-2.11/{summary.json,env.json,tests.jsonl} $OUT/$run/ 2>/dev/null
done
