"""The share of mlp-gelu's squared gradients that are denormal at init (one backward, seed
0), per WIDTHxDEPTH: python3 denormal_probe.py DEVICE DTYPE 8192x15 7936x16 ..."""
import importlib.util
import sys
import time
from pathlib import Path

import torch

spec = importlib.util.spec_from_file_location(
    "h", Path(__file__).resolve().parents[2] / "suites/offload/offload_helpers.py")
h = importlib.util.module_from_spec(spec)
sys.modules["h"] = h
spec.loader.exec_module(h)
dev = sys.argv[1]
dtype = getattr(torch, sys.argv[2])
for item in sys.argv[3:]:
    w, d = map(int, item.split("x"))
    torch.manual_seed(0)
    t0 = time.time()
    m = h.bench_model("mlp-gelu", w, d, dev, dtype)
    x = h.bench_input("mlp-gelu", 64, w, dev, dtype)
    h.bench_loss("mlp-gelu", m(x)).backward()
    gs = [p.grad for p in m.parameters()]
    share = h.denormal_fraction(gs, squared=True)
    per = [h.denormal_fraction([g], squared=True) for g in gs]
    med = [float(g.abs().float().median()) for g in gs]
    zeros = sum(int((g == 0).sum()) for g in gs) / sum(g.numel() for g in gs)
    print(f"{w}x{d} {dtype} params {d * w * w / 1e9:.3f}B share {share:.4f} zeros "
          f"{zeros:.4f} per-layer min {min(per):.3f} max {max(per):.3f} median|g| "
          f"{min(med):.2e}..{max(med):.2e} [{time.time() - t0:.1f}s]", flush=True)
    del m, x, gs
    if dev == "cuda":
        torch.cuda.empty_cache()
