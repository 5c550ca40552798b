"""Gate for the compile suite: inductor needs a C++ compiler on a cpu cell and Triton on
a GPU one; without it the compiled tests are not-run, naming what is missing (the cell
could compile, given the compiler: a gap in what it covered, not a test that does not
apply)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelgrid.testing import device_type, not_run

# The tests import compile_checks and compile_models from this folder, under every
# --import-mode (importlib mode does not put test folders on sys.path); torch comes with
# them in the fixtures, not here: xdist's controller loads this conftest too.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def inductor(device: str) -> str:
    """The backend the compiled tests use (inductor), once the device can run it."""
    import compile_checks

    kind = device_type(device)
    if kind == "cpu":
        found, tried = compile_checks.cpp_compiler()
        if found is None:
            not_run(f"inductor's CPU backend needs a C++ compiler: none of "
                    f"{', '.join(tried)} is on PATH (set CXX to one)")
    elif kind in ("cuda", "xpu"):
        from torch.utils._triton import has_triton

        if not has_triton():
            not_run(f"inductor on {kind} generates Triton kernels: no usable triton here")
    return "inductor"


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """Each test starts with dynamo's caches empty: nn.Sequential.forward is one code
    object for every model, so a test would otherwise find the last test's graph, fail
    its guards and count a recompile (and eight models in, hit the cache limit and run
    eager). Inductor's compiled code on disk (TORCHINDUCTOR_CACHE_DIR) stays."""
    import torch._dynamo

    torch._dynamo.reset()
