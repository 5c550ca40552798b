#!/bin/bash
# Device batch A (2 x H200): issue 15 (ao#958 in a cpu cell on a CUDA host), issue 16
# (device subset), issue 17 (smoke + offload suites on cuda). Writes to $OUT.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >$OUT/pip.log 2>&1 || { echo pip failed; tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src ACCELGRID_RESULTS_DIR=$PWD/results
(nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1; nproc; git log -1 --format=%H 2>/dev/null; python3 -c "import torch,torchao,transformers;print(torch.__version__,torchao.__version__,transformers.__version__,torch.cuda.device_count())") >$OUT/host.txt 2>&1; cat $OUT/host.txt
echo "=== 1. pytorch/ao#958 in the cpu cell (cpu-2.11) on this CUDA host"
timeout 120 python3 -m accelgrid repro pytorch/ao#958 --cell cpu-2.11 --no-venv --expect reproduces; echo "repro rc=$?"
grep -ho '"CUDA_VISIBLE_DEVICES": "[^"]*"\|"ONEAPI_DEVICE_SELECTOR": "[^"]*"' results/repro/pytorch-ao-958/cpu-2.11/env.json results/repro/pytorch-ao-958/cpu-2.11/runs/*/env.json 2>/dev/null | sort -u
CUDA_VISIBLE_DEVICES= ONEAPI_DEVICE_SELECTOR='!level_zero:gpu' python3 -c "import torch; print('hidden:', torch.cuda.is_available(), torch.cuda.device_count())"
echo "=== 2. device subset: ACCELGRID_DEVICES=1 (smoke + distributed), then both GPUs"
ACCELGRID_DEVICES=1 timeout 150 python3 -m nox --no-venv -s cuda-2.11 -- suites/smoke suites/distributed 2>&1 | grep -E "accelgrid:|world" | tail -12
timeout 150 python3 -m nox --no-venv -s cuda-2.11 -- suites/distributed 2>&1 | grep -E "accelgrid:|world" | tail -8
echo "=== 3. smoke + offload suites in cuda-2.11"
timeout 300 python3 -m nox --no-venv -s cuda-2.11 -- suites/smoke suites/offload -rfE >$OUT/suites.log 2>&1; echo "suites rc=$?"
grep -E '^(FAILED|ERROR|XPASS)|accelgrid:' $OUT/suites.log | tail -30
tar czf $OUT/results.tgz results
