#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >$OUT/pip.log 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src ACCELGRID_RESULTS_DIR=$PWD/results
start=$(date +%s)
timeout 560 python3 -m nox --no-venv -s cuda-2.11 -- -rfE >$OUT/cell.log 2>&1; echo "cell rc=$? in $(( $(date +%s) - start )) s"
grep -E '^(FAILED|ERROR|XPASS)|accelgrid:' $OUT/cell.log | tail -30
python3 -m accelgrid grid results/cuda-2.11 --out $OUT/grid >/dev/null 2>&1; ls $OUT/grid
cp results/cuda-2.11/env.json results/cuda-2.11/summary.json results/cuda-2.11/tests.jsonl $OUT/ 2>/dev/null
