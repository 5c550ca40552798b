#!/bin/bash
# accelgrid bench offload on one H200 (issue #28): transformer and mlp-gelu (the denormal
# case, offload modes without and with the flush side by side) at SIZES billion params in
# fp32, then fused CPU AdamW alone (--cpu-adamw), then the same models in bf16 if LIMIT
# leaves BF16_NEEDS seconds. The bench writes its JSON/MD only when it ends, so each part
# runs under its own timeout inside LIMIT and its log is kept. Run from the checkout's root
# on the device machine; everything comes back as $OUT/offload.tgz plus the logs.
export PYTHONUNBUFFERED=1
LIMIT=${LIMIT:-480}
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
} 2>&1 | tee $R/facts.txt
left() { echo $((LIMIT - SECONDS)); }
bench() {  # NAME SECONDS ARGS...
  local name=$1 t=$2; shift 2
  echo "== $name: $* (timeout $t s, at $SECONDS s)"
  timeout $t python3 -m accelgrid bench offload --out $R/$name "$@" 2>&1 | tee $R/$name.log
  echo "== $name: rc ${PIPESTATUS[0]} at $SECONDS s"
}
bench bench-fp32 $(( $(left) - 100 )) --device cuda --sizes ${SIZES:-1} \
  --models transformer,mlp-gelu --dtypes fp32
bench bench 90 --cpu-adamw  # 30 s cut the 2026-12-01 run off after 4 of its 6 cases
if [ $(left) -gt ${BF16_NEEDS:-200} ]; then
  bench bench-bf16 $(( $(left) - 10 )) --device cuda --sizes ${SIZES:-1} \
    --models transformer,mlp-gelu --dtypes bf16
else
  echo "== bench-bf16: skipped ($(left) s left, needs ${BF16_NEEDS:-200})"
fi
cat $R/*.log > $OUT/offload.log
tar -C $OUT -czf $OUT/offload.tgz r && rm -rf $R
