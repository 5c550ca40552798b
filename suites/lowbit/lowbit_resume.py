"""Continue a low-bit optimizer's training in a fresh interpreter (run by
test_lowbit_optim.py): ``python lowbit_resume.py NAME CKPT OUT DEVICE``.

CKPT holds ``model``/``optim`` state dicts and the ``inputs`` to continue with; OUT gets
the parameters after those steps.
"""

from __future__ import annotations

import sys

import lowbit_helpers as h
import torch


def main(argv: list[str]) -> int:
    name, ckpt_path, out_path, device = argv
    # Not weights_only: torchao's state tensors are subclasses (OptimState8bit, ...).
    ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
    m = h.model(device)
    m.load_state_dict(ckpt["model"])
    opt = h.import_optimizer(name)(m.parameters(), lr=h.LR)
    opt.load_state_dict(ckpt["optim"])
    h.train(m, opt, [x.to(device) for x in ckpt["inputs"]])
    torch.save(h.snapshot(m), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
