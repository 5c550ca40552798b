#!/bin/bash
# Call 4 (#28): longest-first order on or off, side by side: U = no earlier run in the folder
# (worksteal in pytest's order), O = ordered by the run just before it. U O U O U O.
export PYTHONUNBUFFERED=1
W=$PWD/.whl
cd .scratch/tree || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl > $OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
echo "commit $(git rev-parse HEAD) $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $OUT/ab.txt
for i in 1 2 3; do
  for mode in U O; do
    [ $mode = U ] && rm -rf results/cuda-2.11
    s=$SECONDS
    timeout 100 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/run-$i$mode.log 2>&1; rc=$?
    echo "$i $mode rc=$rc wall=$((SECONDS - s)) $(grep -h 'wall ' $OUT/run-$i$mode.log | sed 's/accelgrid: cuda-2.11: //') | $(grep -h ' tests: ' $OUT/run-$i$mode.log | sed 's/.*tests: //') load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $OUT/ab.txt
    cp results/cuda-2.11/tests.jsonl $OUT/tests-$i$mode.jsonl
  done
done
rm -f $OUT/run-*.log
