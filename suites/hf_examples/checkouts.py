"""The transformers checkout whose example scripts a cell runs: the one at the installed
transformers' version, found from ``ACCELGRID_TRANSFORMERS_SRC``.

Cells pin different transformers (4.57.5, 5.17.0, 5.24.0), and an example script is only
meant for its own release, so the variable may name:

- a checkout (``.../transformers``): used when it is at the installed version;
- a folder of checkouts named by version (``.../checkouts`` holding ``v5.17.0`` or
  ``5.17.0``): the one of the installed version;
- a path with ``{version}`` (``.../transformers-{version}``): filled in with it.

A cell whose version has no checkout there does not run the scripts (not-run, with the
places looked at): one variable serves a run of many cells.
"""

from __future__ import annotations

from pathlib import Path

from accelgrid.base import contract
from accelgrid.testing import hf_checkouts

PLACEHOLDER = hf_checkouts.PLACEHOLDER
# A checkout whose example scripts can run: examples/pytorch beside src/transformers.
EXAMPLES = hf_checkouts.Project("transformers", contract.TRANSFORMERS_SRC, "examples/pytorch")


def checkout_version(path: Path) -> str | None:
    """The transformers version ``path`` is a checkout of (``__version__`` in
    ``src/transformers/__init__.py``, beside ``examples/pytorch``), or None if it is none."""
    return hf_checkouts.checkout_version(path, EXAMPLES)


def find(value: str, version: str) -> tuple[Path | None, str]:
    """The checkout of transformers ``version`` that ``value`` (the variable) names, and
    how it was found; or None and why there is none, naming every place looked at."""
    return hf_checkouts.find(value, version, EXAMPLES)
