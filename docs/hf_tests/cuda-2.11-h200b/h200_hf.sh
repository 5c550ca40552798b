#!/bin/bash
# #24: transformers' and accelerate's own tests in cuda-2.11 on one H200 (datasets carried as ds.tar.xz).
export PYTHONUNBUFFERED=1
cd "${WT:-.scratch/wt24b}"  # a shallow clone of the commit; ../hf24, ../whl24, ../ds.tar.xz carried beside it
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl24/*.whl >$OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
for m in parameterized httpx; do python3 -c "import $m" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../hf24/*.whl >>$OUT/pip.log 2>&1; done
python3 -c "import datasets" 2>/dev/null || tar xJf ../ds.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import datasets, pyarrow, pandas; print('datasets', datasets.__version__, 'pyarrow', pyarrow.__version__, 'pandas', pandas.__version__)"
mkdir -p /tmp/hfsrc && for t in ../hf24/*.tgz; do tar xzf $t -C /tmp/hfsrc; done
# The tarball's src/transformers is trimmed (no models/); tests/pipelines imports the checkout's
# src/transformers directly, so the installed 5.17.0 package (the sdist's src, same version) stands in.
T=/tmp/hfsrc/transformers/v5.17.0; rm -rf $T/src/transformers && cp -r "$(python3 -c 'import transformers, os; print(os.path.dirname(transformers.__file__))')" $T/src/transformers
export ACCELGRID_TRANSFORMERS_SRC=/tmp/hfsrc/transformers ACCELGRID_ACCELERATE_SRC=/tmp/hfsrc/accelerate
echo "commit $(git rev-parse HEAD)"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1; nproc
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)"
rm -rf results; start=$(date +%s.%N)
ACCELGRID_WORKERS=${WORKERS:-14} timeout ${LIMIT:-480} python3 -m nox --no-venv -s cuda-2.11 -- suites/hf_tests >$OUT/hf.log 2>&1; rc=$?
echo "hf rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$start,1))") s load=$(cut -d' ' -f1-3 /proc/loadavg)"
grep -E '^accelgrid:' $OUT/hf.log | grep -v "^accelgrid: cuda-2.11: \[" | grep -v 'skipped —' | tail -30
tar czf $OUT/results.tgz results
ls -la $OUT
