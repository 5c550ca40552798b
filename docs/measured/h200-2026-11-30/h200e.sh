#!/bin/bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD/src ACCELGRID_RESULTS_DIR=$PWD/results
timeout 200 python3 -m nox --no-venv -s cuda-2.11 -- suites/distributed -rA 2>&1 | grep -E "accelgrid:|world|passed|failed|Error" | tail -12
