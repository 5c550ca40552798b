#!/bin/bash
# After the busy_work fix: the device_alone test alone in fresh processes (as its pass runs
# it), then whole cuda-2.11 cells with the runner's own choice of workers (SWEEP).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ${WHEELS:-../../.whl}/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"
for i in $(seq ${FRESH:-8}); do
  ACCELGRID_DEVICE=cuda CUDA_VISIBLE_DEVICES=0 python3 -m pytest -q -p no:cacheprovider \
    suites/smoke/test_device_api.py -k "synchronize_check_catches" 2>&1 | tail -1
done | tee $OUT/fresh.log
timeout ${LIMIT:-150} python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device ${SWEEP:-auto,auto} --out $OUT/${NAME:-after} 2>&1 \
  | grep -v '^accelgrid: cuda-2.11: \[' | tee $OUT/${NAME:-after}.log
