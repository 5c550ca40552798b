#!/bin/bash
# Issue #28 on one H200: the synchronize check's premise in fresh processes (premise.py, each
# variant with lazy and eager module loading; then the test itself as the device-alone pass
# runs it), then the whole cuda-2.11 cell with one worker and five times with the runner's
# own choice of workers, side by side in one `accelgrid bench devices` call.
# Run from the checkout's root on the device machine; everything comes back under $OUT.
export PYTHONUNBUFFERED=1
LIMIT=${LIMIT:-520}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ${WHEELS:-../../.whl}/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{
  echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p
  python3 -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  cat /proc/loadavg
} 2>&1 | tee $OUT/facts.txt
D=docs/h200-2026-12-01b
for v in old warm spin new; do
  for loading in LAZY EAGER; do
    CUDA_MODULE_LOADING=$loading timeout 60 python3 $D/premise.py $v
  done
done 2>&1 | tee $OUT/premise.log
for i in $(seq ${FRESH:-3}); do
  ACCELGRID_DEVICE=cuda CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m pytest -q -p no:cacheprovider \
    suites/smoke/test_device_api.py -k "synchronize_check_catches or test_synchronize" 2>&1 | tail -1
done | tee $OUT/fresh.log
echo "cells from $SECONDS s"
timeout $((LIMIT - SECONDS)) python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device ${SWEEP:-1,auto,auto,auto,auto,auto} --out $OUT/cells 2>&1 \
  | grep -v '^accelgrid: cuda-2.11: \[' | tee $OUT/cells.log
echo "rc ${PIPESTATUS[0]} at $SECONDS s"
