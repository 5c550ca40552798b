#!/bin/bash
# cuda-2.11 on one H200 (--no-venv): the whole cell with the run's own pytest plugins only
# (this tree), then with every plugin the interpreter has (runner.py before that change).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
one() {
  rm -rf results; local s=$(date +%s.%N)
  ACCELGRID_DEVICES=0 timeout 280 python3 -m nox --no-venv -s cuda-2.11 >$OUT/$1.log 2>&1; local rc=$?
  echo "$1 rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
  grep -E "tests: .* passed|wall .* s:" $OUT/$1.log | sed 's/^accelgrid: cuda-2.11: //'
  head -12 results/cuda-2.11/pytest.log | grep -E "^plugins|created" ; mkdir -p $OUT/$1
  cp results/cuda-2.11/summary.json $OUT/$1/
}
cp src/accelgrid/runner.py /tmp/runner-own.py
cp .scratch/runner-before.py src/accelgrid/runner.py
one all-plugins
cp /tmp/runner-own.py src/accelgrid/runner.py
one own-plugins
