"""torchao's low-bit optimizers (AdamW8bit, AdamW4bit, AdamWFp8; the seed author's "remaining
low-bit optimizers") against fp32 AdamW: updates after a few steps, a state_dict saved and
resumed in a fresh process, and their state's size (recorded as properties)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lowbit_helpers as h
import pytest
import torch

RESUME = Path(__file__).with_name("lowbit_resume.py")


@pytest.mark.parametrize("name", h.OPTIMIZERS)
def test_updates_match_fp32_adamw(lowbit_optim: type, name: str, device: str,
                                  request: pytest.FixtureRequest) -> None:
    before, expected = h.reference_run(device)
    m = h.model(device)
    opt = lowbit_optim(m.parameters(), lr=h.LR)
    h.train(m, opt, h.inputs(device))
    errors = h.update_errors(before, h.snapshot(m), expected)
    request.node.user_properties.append(("worst_update_error", round(max(errors), 5)))
    assert h.update_problems(name, errors) == []


@pytest.mark.parametrize("name", h.OPTIMIZERS)
def test_state_is_smaller_than_adamw(lowbit_optim: type, name: str, device: str,
                                     request: pytest.FixtureRequest) -> None:
    m = h.model(device)
    ref = torch.optim.AdamW(m.parameters(), lr=h.LR)
    h.train(m, ref, h.inputs(device, steps=1))
    m2 = h.model(device)
    opt = lowbit_optim(m2.parameters(), lr=h.LR)
    h.train(m2, opt, h.inputs(device, steps=1))
    low, full = h.state_bytes(opt), h.state_bytes(ref)
    ratio = low / full
    request.node.user_properties += [("state_bytes", low), ("adamw_state_bytes", full),
                                     ("state_ratio", round(ratio, 4))]
    assert h.memory_problems(name, ratio) == []


@pytest.mark.parametrize("name", h.OPTIMIZERS)
def test_resume_in_fresh_process(lowbit_optim: type, name: str, device: str,
                                 tmp_path: Path) -> None:
    """Train, save model + optimizer, continue in a new interpreter: the same parameters as
    the run that never stopped (a state that did not load restarts Adam: its first step is
    a full +-lr on every element)."""
    m = h.model(device)
    opt = lowbit_optim(m.parameters(), lr=h.LR)
    h.train(m, opt, h.inputs(device, steps=2))
    more = h.inputs(device, steps=2, seed=2)
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model": m.state_dict(), "optim": opt.state_dict(),
                "inputs": [x.cpu() for x in more]}, ckpt)
    h.train(m, opt, more)
    out = tmp_path / "resumed.pt"
    proc = subprocess.run([sys.executable, str(RESUME), name, str(ckpt), str(out), device],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = torch.load(out, weights_only=True)
    for got, want in zip(resumed, h.snapshot(m), strict=True):
        # Same device, same kernels, same state: equal up to compiled-kernel reordering.
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
