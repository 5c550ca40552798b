"""Suite-local fixtures: the transformers source checkout for the real example scripts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# ENV_SRC is scripts.ENV_SRC, not imported from there: scripts imports numpy, and xdist's
# controller loads this conftest too (numpy for nothing before any worker starts).
from accelgrid.contract import TRANSFORMERS_SRC as ENV_SRC
from accelgrid.outcomes import not_run

from . import checkouts


@pytest.fixture(scope="session")
def transformers_src() -> Path:
    """The checkout of the installed transformers that ``ACCELGRID_TRANSFORMERS_SRC``
    names (:mod:`.checkouts`: a checkout, a folder of them by version, or a path with
    ``{version}``). Skips without the variable; not-run, naming what was looked at, when
    it has no checkout at the installed version (its scripts would refuse to run or test
    other code)."""
    import transformers

    value = os.environ.get(ENV_SRC)
    if not value:
        pytest.skip(f"set {ENV_SRC} to a transformers checkout at v{transformers.__version__}"
                    f" (or a folder of checkouts by version)")
    src, how = checkouts.find(value, transformers.__version__)
    if src is None:
        not_run(how)
    return src
