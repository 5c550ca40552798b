#!/bin/bash
# cuda-2.11 on one H200 with several xdist workers sharing the GPU (accelgrid bench devices
# --workers-per-device): SWEEP lists the runs' workers per device in order (auto: the
# runner's own choice for this host). Run from the checkout's root on the device machine.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ${WHEELS:-../../.whl}/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__)"
timeout ${LIMIT:-540} python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device ${SWEEP:-16,16,12,12,8} --out $OUT/${NAME:-sweep} 2>&1 \
  | grep -v '^accelgrid: cuda-2.11: \[' | tee $OUT/${NAME:-sweep}.log
