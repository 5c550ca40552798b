"""Suite-local fixtures: the transformers source checkout for the real example scripts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

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
