"""Suite-local fixtures: the transformers source checkout for the real example scripts;
one intra-op thread for the parity runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# ENV_SRC is scripts.ENV_SRC, not imported from there: scripts imports numpy, and xdist's
# controller loads this conftest too (numpy for nothing before any worker starts).
from accelgrid.base.contract import TRANSFORMERS_SRC as ENV_SRC
from accelgrid.testing import not_run

from . import checkouts


@pytest.fixture(scope="session")
def transformers_src() -> Path:
    """The checkout of the installed transformers that ``ACCELGRID_TRANSFORMERS_SRC``
    names (:mod:`.checkouts`: a checkout, a folder of them by version, or a path with
    ``{version}``). Not-run without the variable (the scripts could run here, given a
    checkout: a gap in what the cell covered, not a test that does not apply), and
    not-run naming what was looked at when it has no checkout at the installed version
    (its scripts would refuse to run or test other code)."""
    import transformers

    value = os.environ.get(ENV_SRC)
    if not value:
        not_run(f"no transformers checkout: set {ENV_SRC} to one at "
                f"v{transformers.__version__} (or a folder of checkouts by version)")
    src, how = checkouts.find(value, transformers.__version__)
    if src is None:
        not_run(how)
    return src


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """Torch on one intra-op thread for the test (restored after). The parity runs' models
    are tiny (hidden 32, batch 2), so threads gain nothing, and on a busy host each
    parallel region waits for its slowest thread: three DETR parity runs took 0.17 s of
    CPU on one thread and 2.3-3.8 s on two (2 cores, load 14)."""
    import torch  # here, not at import: xdist's controller collects without torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
