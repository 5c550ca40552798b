#!/bin/bash
# Issue #28 on one H200: mlp-gelu's denormal share at init (the old 15 x 8192 and the new
# shapes), then `accelgrid bench offload` at the bench's sizes: fp32 mlp-gelu (offload modes
# without and with the flush, side by side) and transformer, then bf16 mlp-gelu, then
# --cpu-adamw. The bench writes its JSON/MD after each row, each row in its own process
# (with its peak host RSS); each part runs under its own timeout inside LIMIT.
export PYTHONUNBUFFERED=1
LIMIT=${LIMIT:-520}
STEPS=${STEPS:-6}; WARMUP=${WARMUP:-1}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site ${WHEELS:-../../.whl}/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
R=$OUT/r; mkdir -p $R
{
  echo "commit $(git rev-parse HEAD) dirty=$(git status --porcelain --untracked-files=no | wc -l)"
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p
  python3 -c "import torch, torchao, platform; print('torch', torch.__version__, 'torchao', torchao.__version__, 'python', platform.python_version(), 'threads', torch.get_num_threads())"
} 2>&1 | grep -v -i 'warning\|Configuration class' | tee $R/facts.txt
left() { echo $((LIMIT - SECONDS)); }
D=docs/h200-2026-12-01b
for dt in float32 bfloat16; do
  timeout 60 python3 $D/denormal_probe.py cuda $dt 8192x15 7936x16 5568x16 2496x16
done 2>&1 | tee $R/probe.log
bench() {  # NAME SECONDS ARGS...
  local name=$1 t=$2; shift 2
  [ $t -gt 20 ] || { echo "== $name: skipped ($t s left)"; return; }
  echo "== $name: $* (timeout $t s, at $SECONDS s)"
  timeout $t python3 -m accelgrid bench offload --out $R/$name --steps $STEPS --warmup $WARMUP \
    "$@" 2>&1 | grep -v -i 'SyntaxWarning\|Configuration class' | tee $R/$name.log
  echo "== $name: rc ${PIPESTATUS[0]} at $SECONDS s"
}
bench fp32 $(( $(left) - 200 )) --device cuda --sizes ${SIZES:-0.1,0.5,1} \
  --models mlp-gelu,transformer --dtypes fp32
bench bf16 $(( $(left) - 70 )) --device cuda --sizes ${SIZES:-0.1,0.5,1} --models mlp-gelu \
  --dtypes bf16
bench cpu-adamw $(( $(left) - 5 )) --cpu-adamw
tar -C $OUT -czf $OUT/offload.tgz r && rm -rf $R
