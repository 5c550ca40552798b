#!/bin/bash
# cuda-2.11 on 1, 2 or 4 x H200: whole cell pinned to GPU 0, then all GPUs (2 or 4), then
# the real example scripts (transformers 5.17.0 composite tree) on one GPU.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .scratch/whl-scripts/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1; nproc
cell() {  # name, then nox args
  local name=$1; shift
  rm -rf results; local start=$(date +%s.%N)
  timeout ${LIMIT:-280} python3 -m nox --no-venv -s cuda-2.11 "$@" >$OUT/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$start,1))") s load=$(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E '^accelgrid:' $OUT/$name.log | grep -v "^accelgrid: cuda-2.11: \[" | tail -8
  grep -E '^(FAILED|ERROR|XPASS)' $OUT/$name.log | head -10
  local F=$(python3 -c "from pathlib import Path; from accelgrid import results; print(results.last_run(Path('results/cuda-2.11'))[1])")
  mkdir -p $OUT/$name && cp $F/summary.json $F/env.json $F/tests.jsonl $F/junit*.xml $OUT/$name/ 2>/dev/null
}
[ -z "$SKIP_CELL" ] && ACCELGRID_DEVICES=0 cell 1gpu
[ "$(nvidia-smi -L | wc -l)" -gt 1 ] && ACCELGRID_DEVICES=0,1 cell 2gpu
[ "$(nvidia-smi -L | wc -l)" -gt 3 ] && ACCELGRID_DEVICES=0,1,2,3 cell 4gpu
[ -z "$SKIP_SCRIPTS" ] && ACCELGRID_DEVICES=0 ACCELGRID_TRANSFORMERS_SRC=$PWD/.scratch/transformers cell scripts -- suites/hf_examples/test_example_scripts.py -n 6
