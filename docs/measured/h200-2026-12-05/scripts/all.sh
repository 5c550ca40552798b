#!/bin/bash
# One call (device starts were scarce): the cuda-2.11 cell with the new suites (attention,
# lowbit, FSDP2 in distributed) by `accelgrid bench devices`, one worker then the runner's
# choice; then the compile profile's cell, cold then warm if time is left.
. docs/measured/h200-2026-12-05/scripts/common.sh
timeout 300 python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device 1,auto --out $OUT/cells > $OUT/cells.log 2>&1
echo "bench rc $? at $SECONDS s" >> $OUT/facts.txt
tail -25 $OUT/cells.log
# The bench keeps its cells' folders to itself: one more run (the runner's workers) leaves
# results/cuda-2.11, whose records hold the attention kernels and the low-bit memory.
timeout 120 python3 -m accelgrid run cuda-2.11 --no-venv > $OUT/cell.log 2>&1
echo "cell rc $? at $SECONDS s" >> $OUT/facts.txt
per_suite cuda-2.11 > $OUT/per-suite.txt 2>&1   # at most 8 files come back: one per-suite file, one compile log
for pass in cold warm; do
  left=$((520 - SECONDS)); [ $left -lt 40 ] && break
  s=$SECONDS; timeout $((left - 25)) python3 -m accelgrid run cuda-2.11-compile --no-venv > >(sed "s/^/[$pass] /" >> $OUT/compile.log) 2>&1
  echo "compile $pass rc $? in $((SECONDS - s)) s" >> $OUT/facts.txt
  { echo "== compile $pass"; per_suite cuda-2.11-compile; } >> $OUT/per-suite.txt 2>&1
done
tar -C results -czf $OUT/results.tgz cuda-2.11 cuda-2.11-compile
cat $OUT/facts.txt
