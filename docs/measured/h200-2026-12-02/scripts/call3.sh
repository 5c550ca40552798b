#!/bin/bash
# Call 3 (#28): the bf16 rows call 2 of 2026-12-01b had no time for (0.5 B offload_grad, 1 B all
# modes), then two cell runs (the second ordered by the first) whose records come back whole.
export PYTHONUNBUFFERED=1
W=$PWD/.whl
cd .scratch/tree || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl > $OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{ echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"; date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p
  python3 -c "import torch, torchao, platform; print('torch', torch.__version__, 'torchao', torchao.__version__, 'python', platform.python_version(), 'threads', torch.get_num_threads())"
} 2>&1 | grep -v -i 'warning' > $OUT/facts.txt
mkdir -p $OUT/off
for spec in "bf16-05b-grad --sizes 0.5 --modes offload_grad" "bf16-1b --sizes 1"; do
  set -- $spec; name=$1; shift
  echo "== $name at $SECONDS s"
  timeout 200 python3 -m accelgrid bench offload --out $OUT/off/$name --steps 6 --warmup 1 --device cuda \
    --models mlp-gelu --dtypes bf16 "$@" 2>&1 | grep -v -i 'SyntaxWarning\|Configuration class'
  echo "== $name: rc ${PIPESTATUS[0]} at $SECONDS s"
done 2>&1 | tee $OUT/off/offload.log
for i in 1 2; do
  /usr/bin/time -f "wall %e s user %U sys %S" timeout 120 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/run$i.log 2>&1
  echo "run $i rc $? at $SECONDS s" >> $OUT/facts.txt
  tar -C results -czf $OUT/cell-run$i.tgz cuda-2.11
done
cat /proc/loadavg >> $OUT/facts.txt
