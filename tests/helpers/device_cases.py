"""A fake device in matrix form, for the device tests."""

from __future__ import annotations

FAKE_DEVICE = """devices:
  fakeacc:
    description: a fake accelerator on the CPU's kernels (tests/helpers/fake_device_spec.py)
    spec: fake_device_spec.py
    index: default
    detect: {always: true}
    runner: {labels: [ubuntu-24.04], hosted: true}
"""
