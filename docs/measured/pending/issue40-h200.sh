#!/bin/bash
# Issue #40, not run yet: no H200 was lent in the sessions of 2026-12-04 and 2026-12-05
# (`status`: paused). One call of the device tool, about 8 minutes: the cuda-2.11 cell with
# the new suites (attention, lowbit, FSDP2 in distributed) by `accelgrid bench devices`
# with one worker and the runner's choice, then the compile profile's cell, then the
# records' per-suite numbers (compile times, the attention kernels that ran, the low-bit
# optimizers' state memory) into $OUT. Carry .whl/ (torchao 0.17.0 and nox wheels, as
# docs/measured/h200-2026-12-02/scripts/ did) and a clean checkout under .scratch/tree.
# The H200's preinstalled packages may differ from the cell's pins (pytest, numpy):
# --no-venv refuses that unless ACCELGRID_ACCEPT_INPUTS=1, and the column then says so.
export PYTHONUNBUFFERED=1 ACCELGRID_ACCEPT_INPUTS=1
W=$PWD/.whl
cd .scratch/tree || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl > $OUT/pip.log 2>&1 || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{ echo "commit $(git rev-parse HEAD)"; date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "nproc $(nproc)"; free -g | sed -n 2p
  python3 -c "import torch, torchao; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchao', torchao.__version__)"
  cat /proc/loadavg; } > $OUT/facts.txt 2>&1
timeout 300 python3 -m accelgrid bench devices --cell cuda-2.11 --no-venv \
  --workers-per-device 1,auto,auto --out $OUT/cells 2>&1 | tail -40 | tee $OUT/cells.log
tar -C results -czf $OUT/cuda-2.11.tgz cuda-2.11
timeout 200 python3 -m accelgrid run cuda-2.11-compile --no-venv > $OUT/compile.log 2>&1
echo "compile rc $? at $SECONDS s" >> $OUT/facts.txt
tar -C results -czf $OUT/cuda-2.11-compile.tgz cuda-2.11-compile
# Per suite: counts, wall, and the properties the new suites record (kernel, compile_s, state bytes).
python3 - > $OUT/per-suite.txt <<'PY'
import json, collections, pathlib
for cell in ("cuda-2.11", "cuda-2.11-compile"):
    recs = [json.loads(l) for l in pathlib.Path(f"results/{cell}/tests.jsonl").read_text().splitlines() if l.strip()]
    per = collections.defaultdict(collections.Counter)
    for r in recs:
        per[r["nodeid"].split("/")[1]][r["outcome"]] += 1
    print(cell, dict(per))
    for r in recs:
        if r.get("properties") and r["nodeid"].split("/")[1] in ("attention", "lowbit", "compile"):
            print(" ", r["nodeid"], r["outcome"], json.dumps(r["properties"])[:300])
PY
