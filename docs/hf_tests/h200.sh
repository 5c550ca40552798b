#!/bin/bash
# cuda-2.11 on one H200: suites/hf_tests with the default selection (matrix.yaml), then the
# planted fault (a spec whose MANUAL_SEED_FN does nothing). Run from the worktree clone
# with .whl and the HF trees (.scratch/hf24: tarballs of the assembled trees) carried.
export PYTHONUNBUFFERED=1
H=${HF:-../hf24}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
for m in parameterized httpx; do python3 -c "import $m" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H/*.whl >>$OUT/pip.log 2>&1; done
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p /tmp/hfsrc && for t in $H/*.tgz; do tar xzf $t -C /tmp/hfsrc; done
export ACCELGRID_TRANSFORMERS_SRC=/tmp/hfsrc/transformers ACCELGRID_ACCELERATE_SRC=/tmp/hfsrc/accelerate
echo "commit $(git rev-parse HEAD)"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1; nproc
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)"
cell() {  # name, limit, then nox args
  local name=$1 limit=$2; shift 2
  rm -rf results; local start=$(date +%s.%N)
  timeout $limit python3 -m nox --no-venv -s cuda-2.11 "$@" >$OUT/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$start,1))") s load=$(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E '^accelgrid:' $OUT/$name.log | grep -v "^accelgrid: cuda-2.11: \[" | grep -v 'skipped —' | tail -25
  local F=$(python3 -c "from pathlib import Path; from accelgrid import results; print(results.last_run(Path('results/cuda-2.11'))[1])")
  mkdir -p $OUT/$name && cp $F/summary.json $F/env.json $F/tests.jsonl $F/hf_* $OUT/$name/ 2>/dev/null
}
ACCELGRID_WORKERS=${WORKERS:-14} cell hf ${LIMIT:-330} -- suites/hf_tests
printf 'import torch\nDEVICE_NAME = "cuda"\nMANUAL_SEED_FN = lambda seed: None\nDEVICE_COUNT_FN = torch.cuda.device_count\n' > /tmp/noop_seed_spec.py
TRANSFORMERS_TEST_DEVICE_SPEC=/tmp/noop_seed_spec.py cell planted 90 -- suites/hf_tests/test_device_spec.py --hf-accelerate none
