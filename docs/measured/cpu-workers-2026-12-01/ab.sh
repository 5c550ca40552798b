#!/bin/bash
# cpu-2.13 with 1, then 2 xdist workers (ACCELGRID_WORKERS), one after the other, the cell
# env built once beforehand (`ACCELGRID_ENVDIR=$ENVS nox -s cpu-2.13 --install-only`) and
# reused. Run from the checkout's root; each run's results go to $RES/res-N.
ENVS=${ENVS:-${TMPDIR:-/tmp}/accelgrid-cpu-ab/envs}; RES=${RES:-${TMPDIR:-/tmp}/accelgrid-cpu-ab}
export ACCELGRID_ENVDIR=$ENVS
for w in ${ORDER:-1 2}; do
  rm -rf "$RES/res-$w"
  echo "== workers $w start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  s=$(date +%s.%N)
  ACCELGRID_WORKERS=$w ACCELGRID_RESULTS_DIR="$RES/res-$w" .venv/bin/nox -r -s cpu-2.13 \
    > "$RES/cpu-w$w.log" 2>&1
  echo "== workers $w rc $? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
