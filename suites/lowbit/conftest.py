"""The low-bit suite: torchao's low-bit optimizers and weight-only quantization, FP8 and
grouped GEMMs, int4-packed matmul. Tests that need torchao (the ``lowbit_optim`` and
``torchao_quant`` fixtures) are not-run where it is missing; the checker tests
(test_lowbit_checks.py) need neither torchao nor a device and run in every cell."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelgrid.testing import not_run

# The tests and the resume subprocess import lowbit_helpers from this folder, under every
# --import-mode (importlib mode does not put test folders on sys.path).
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def lowbit_optim(request: pytest.FixtureRequest) -> type:
    """The torchao optimizer class named by the test's ``name`` parameter."""
    import lowbit_helpers

    try:
        return lowbit_helpers.import_optimizer(request.node.callspec.params["name"])
    except lowbit_helpers.LowBitUnavailable as exc:
        not_run(str(exc))
        raise  # not_run raises; this keeps type checkers informed


@pytest.fixture
def torchao_quant() -> object:
    """torchao.quantization (quantize_ and its configs)."""
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        not_run("torchao is not installed")
    import torchao.quantization

    return torchao.quantization
