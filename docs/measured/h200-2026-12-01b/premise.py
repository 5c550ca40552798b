"""The synchronize check's premise, as the first CUDA work of a fresh process (how the
device-alone pass runs it): is a device->host copy issued behind ~50 ms of busy work still
pending when the host looks? One line per run. Variants:

  old    the check before this fix: matmuls sized by timing, then torch.full and the copy
  warm   the same, with the fill and the copy done once (and waited for) before the busy work
  spin   torch.cuda._sleep for the busy work, no warm-up
  new    the check as committed: warm-up, then torch.cuda._sleep

Run with CUDA_MODULE_LOADING=EAGER or LAZY to see whether lazy kernel loading is the cause.
"""

import math
import os
import sys
import time

import torch

variant = sys.argv[1]
host = torch.zeros(1 << 20, pin_memory=True)
sync = torch.cuda.synchronize
if variant in ("warm", "new"):
    src = torch.empty(1 << 20, device="cuda")
    src.fill_(0.0)
    host.copy_(src, non_blocking=True)
    torch.cuda.Event().record()
    sync()
began = torch.cuda.Event(enable_timing=True)
began.record()
if variant in ("spin", "new"):
    torch.cuda._sleep(int(0.05 * 3e9))
else:
    x = torch.randn(2048, 2048, device="cuda")
    x @ x
    sync()
    one = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        x @ x
        sync()
        one = min(one, time.perf_counter() - t0)
    for _ in range(max(1, math.ceil(0.05 / max(one, 1e-6)))):
        x = (x @ x) * 1e-3
if variant in ("warm", "new"):
    src.fill_(7.0)
else:
    src = torch.full((1 << 20,), 7.0, device="cuda")
host.copy_(src, non_blocking=True)
done = torch.cuda.Event(enable_timing=True)
done.record()
pending = not done.query()
sync()
print(f"{variant:5s} CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', '(unset)'):7s} "
      f"premise {'held' if pending else 'FAILED'}; busy work + copy "
      f"{began.elapsed_time(done):.1f} ms on the device; landed {bool((host == 7.0).all())}",
      flush=True)
