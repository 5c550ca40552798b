"""Resume a CPUOffloadOptimizer checkpoint in a fresh interpreter (run by
test_offload_checkpoint.py): ``python offload_resume.py CKPT OUT DEVICE``.

CKPT holds ``model``/``optim`` state dicts and the ``inputs`` of the steps to continue
with; OUT receives the parameters after those steps.
"""

from __future__ import annotations

import sys

import offload_helpers as h
import torch


def main(argv: list[str]) -> int:
    ckpt_path, out_path, device = argv
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    model = h.checkpoint_model(device)
    model.load_state_dict(ckpt["model"])
    optimizer = h.import_cpu_offload()(model.parameters(), torch.optim.AdamW)
    optimizer.load_state_dict(ckpt["optim"])
    inputs = [[x.to(device) for x in micro_batches] for micro_batches in ckpt["inputs"]]
    h.train(model, optimizer, inputs)
    torch.save(h.snapshot(model), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
