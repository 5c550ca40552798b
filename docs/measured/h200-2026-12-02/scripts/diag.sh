#!/bin/bash
# Call 1 (#28): why the example inputs fail to pickle; one auto-worker cuda-2.11 run with its records.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -g | sed -n 2p
  python3 -c "import torch, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
  python3 -m pip show datasets pyarrow dill multiprocess pandas transformers accelerate 2>&1 | grep -E "^(Name|Version|Location)"
  cat /proc/loadavg; } > $OUT/facts.txt 2>&1
ACCELGRID_DEVICE=cuda CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -p no:cacheprovider -p no:randomly \
  suites/hf_examples/test_example_scripts.py -k "test_example_inputs and object_detection" --tb=long -rA > $OUT/mdn.log 2>&1
echo "cell from $SECONDS s" >> $OUT/facts.txt
/usr/bin/time -v timeout 300 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/cell.log 2>&1
echo "rc $? at $SECONDS s" >> $OUT/facts.txt
cd results/cuda-2.11 && tar czf $OUT/cell.tgz tests.jsonl summary.json env.json *.log 2>/dev/null; ls >> $OUT/facts.txt
