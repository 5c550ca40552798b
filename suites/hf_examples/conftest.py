"""Suite-local fixtures: the transformers source checkout for the real example scripts;
one intra-op thread for the parity runs."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from .scripts import ENV_SRC


@pytest.fixture(scope="session")
def transformers_src() -> Path:
    """The checkout named by ``ACCELGRID_TRANSFORMERS_SRC``; skips without one, errors on
    one that is not a checkout of the installed version (its scripts would refuse to run
    or test other code)."""
    import transformers

    tag = f"v{transformers.__version__}"
    value = os.environ.get(ENV_SRC)
    if not value:
        pytest.skip(f"set {ENV_SRC} to a transformers checkout at {tag}")
    src = Path(value)
    init = src / "src" / "transformers" / "__init__.py"
    if not (src / "examples" / "pytorch").is_dir() or not init.is_file():
        pytest.fail(f"{ENV_SRC}={value} is not a transformers checkout", pytrace=False)
    found = re.search(r'__version__\s*=\s*"([^"]+)"', init.read_text())
    if not found or found.group(1) != transformers.__version__:
        pytest.fail(
            f"{ENV_SRC} is at {found.group(1) if found else '?'}, installed transformers "
            f"is {transformers.__version__}: check out {tag}",
            pytrace=False,
        )
    return src


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """Torch on one intra-op thread for the test (restored after). The parity runs' models
    are tiny (hidden 32, batch 2), so threads gain nothing, and on a busy host each
    parallel region waits for its slowest thread: three DETR parity runs took 0.17 s of
    CPU on one thread and 2.3-3.8 s on two (2 cores, load 14)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
