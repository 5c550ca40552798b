"""A device spec for accelgrid's own tests: a fake accelerator called ``fakeacc`` that runs
on the CPU's kernels, so a PrivateUse1-style device can be tested on a host without one
(tests/devices/test_devices.py runs the smoke suite with it).

A real backend's spec imports its package (which renames PrivateUse1 and registers its
kernels) and names its torch module's functions; see docs/guides/adding-a-device.md.
"""

import torch

DEVICE_NAME = "fakeacc"
TORCH_DEVICE = "cpu"        # where the tests put tensors: the CPU's kernels

# transformers' hooks (TRANSFORMERS_TEST_DEVICE_SPEC) ...
MANUAL_SEED_FN = torch.manual_seed
DEVICE_COUNT_FN = torch.cpu.device_count
# ... and accelgrid's (one <API>_FN per API of accelgrid.devices.APIS); the rest unclaimed.
SYNCHRONIZE_FN = torch.cpu.synchronize
IS_BF16_SUPPORTED_FN = lambda: True  # noqa: E731 - a spec file names plain values
