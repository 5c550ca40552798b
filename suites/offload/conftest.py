"""Gate for the CPU-offload suite: tests of torchao's optimizer (those that use the
``offload_cls`` fixture) skip where torchao's offload cannot run and are not-run where
torchao (or its CPUOffloadOptimizer) is missing. The checker tests
(test_offload_checks.py) need neither and run in every cell."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelgrid import devices
from accelgrid.testing import device_type, not_run

# The tests and the resume subprocess import offload_helpers from this folder; make that
# work under every --import-mode (importlib mode does not put test folders on sys.path).
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
# offload_helpers (and torch with it) is imported by the fixtures, not here: xdist's
# controller loads this conftest and would import torch for nothing before any worker
# starts (seconds on a small host).


@pytest.fixture(autouse=True)
def _offload_gate(request: pytest.FixtureRequest, device: str) -> None:
    """For tests of torchao's optimizer: cpu/mps cells skip with upstream's reason
    (CPUOffloadOptimizer asserts CUDA/XPU, pytorch/ao#958), so the grid shows a skip,
    never a pass; cuda/xpu cells without a usable torchao: not-run with the reason."""
    if "offload_cls" not in request.fixturenames:
        return
    import offload_helpers

    kind = device_type(device)
    if not devices.get(kind).offload:
        pytest.skip(offload_helpers.skip_reason(kind))
    try:
        offload_helpers.import_cpu_offload()
    except offload_helpers.OffloadUnavailable as exc:
        not_run(str(exc))


@pytest.fixture
def offload_cls() -> type:
    """torchao's CPUOffloadOptimizer (the gate has already checked it imports)."""
    import offload_helpers

    return offload_helpers.import_cpu_offload()
