#!/bin/bash
# Call 2 (#28): the whole cuda-2.11 cell, one worker, then six times the runner's choice, side by side.
export PYTHONUNBUFFERED=1
W=$PWD/.whl
cd .scratch/tree || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl > $OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{ echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"; date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p
  python3 -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  python3 -m pip list 2>/dev/null | grep -i -E "^(transformers|accelerate|torchao|pytest|pytest-xdist|nox|datasets|pyarrow) "
  cat /proc/loadavg; } > $OUT/facts.txt 2>&1
timeout $((${LIMIT:-540} - SECONDS)) python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device ${SWEEP:-1,auto,auto,auto,auto,auto,auto} --out $OUT/cells 2>&1 \
  | grep -v '^accelgrid: cuda-2.11: \[' | tee $OUT/cells.log
echo "rc ${PIPESTATUS[0]} at $SECONDS s" | tee -a $OUT/facts.txt
cd results/cuda-2.11 && tar czf $OUT/last-run.tgz tests.jsonl summary.json env.json last-durations.json 2>/dev/null
