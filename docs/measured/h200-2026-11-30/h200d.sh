#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >$OUT/pip.log 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src ACCELGRID_RESULTS_DIR=$PWD/results
start=$(date +%s)
timeout 500 python3 -m nox --no-venv -s cuda-2.11-op-capture -- suites/hf_examples suites/offload -rfE >$OUT/cell.log 2>&1; echo "cell rc=$? in $(( $(date +%s) - start )) s"
grep -E '^(FAILED|ERROR|XPASS)|accelgrid:' $OUT/cell.log | tail -12
F=$(python3 -c "from pathlib import Path; from accelgrid import results; print(results.last_run(Path('results/cuda-2.11-op-capture'))[1])")
cp $F/ops.json $OUT/ops-cuda-2.11.json; cp $F/env.json $OUT/env-cuda-2.11-op-capture.json; cp $F/summary.json $OUT/summary-cuda-2.11-op-capture.json
python3 suites/hf_examples/seed_coverage.py results/cuda-2.11-op-capture 2>&1 | tail -5
