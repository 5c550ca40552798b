#!/bin/bash
# The runner's process handling after 62f3cd6 (pytest moved into its cgroup after its exec,
# the end seen on a pidfd) on the GPU host: the cuda-2.11 cell twice, then what is left
# (processes, cgroups). Sourced setup: the carried wheels and tree (h200-2026-12-05).
. docs/measured/h200-2026-12-05/scripts/common.sh
python3 - >> $OUT/facts.txt 2>&1 <<'PY'
import os
from accelgrid.base import lifetime
probe = lifetime.cell_cgroup("probe-" + os.urandom(4).hex())
print("cgroup for a pass:", probe or "none (the subreaper sweep)")
if probe:
    os.rmdir(probe)
print("pidfd_open:", hasattr(os, "pidfd_open"))
print("children lists:", lifetime._listed_children(os.getpid()) is not None)
PY
for n in 1 2; do
  s=$SECONDS
  timeout 200 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/cell-$n.log 2>&1
  echo "cell run $n rc $? in $((SECONDS - s)) s" >> $OUT/facts.txt
done
sleep 1
{ echo "left: processes of the runs:"; ps -eo pid,ppid,args | grep -E "pytest|torchrun|accelgrid" | grep -v grep
  echo "left: cgroups:"; ls -d /sys/fs/cgroup/*/accelgrid-run-* /sys/fs/cgroup/accelgrid-run-* 2>/dev/null
  echo "(end)"; } >> $OUT/facts.txt
python3 -c "import json; s = json.load(open('results/cuda-2.11/last-run.json')); print(json.dumps(s)[:600])" >> $OUT/facts.txt 2>&1
per_suite cuda-2.11 > $OUT/per-suite.txt 2>&1
cat $OUT/facts.txt; tail -12 $OUT/cell-2.log
