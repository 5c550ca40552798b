# Sourced by each call's script: carried wheels, the clean tree, the machine's facts.
export PYTHONUNBUFFERED=1 ACCELGRID_ACCEPT_INPUTS=1
W=$PWD/.whl
cd .scratch/tree || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl > $OUT/pip.log 2>&1 && rm $OUT/pip.log || { tail $OUT/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src
{ echo "commit $(git rev-parse HEAD)"; date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  echo "nproc $(nproc)"; free -g | sed -n 2p; python3 -V
  python3 -c "import torch, torchao, transformers, accelerate, pytest; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchao', torchao.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'pytest', pytest.__version__)"
  cat /proc/loadavg; } > $OUT/facts.txt 2>&1
per_suite() {  # counts per suite and the new suites' recorded numbers
python3 - "$@" <<'PY'
import json, collections, pathlib, sys
for cell in sys.argv[1:]:
    p = pathlib.Path(f"results/{cell}/tests.jsonl")
    if not p.exists():
        print(cell, "no tests.jsonl"); continue
    recs = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    per = collections.defaultdict(collections.Counter)
    for r in recs:
        per[r["nodeid"].split("/")[1]][r["outcome"]] += 1
    print(cell, {k: dict(v) for k, v in per.items()})
    for r in recs:
        s = r["nodeid"].split("/")[1]
        if s in ("attention", "lowbit", "compile", "distributed") or r["outcome"] not in ("passed", "skipped", "xfailed", "not-run"):
            print(" ", r["nodeid"], r["outcome"], round(r.get("duration") or 0, 2), json.dumps(r.get("properties") or {})[:400], (r.get("message") or "")[:300])
PY
}
