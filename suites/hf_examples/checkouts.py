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

import re
from pathlib import Path

from accelgrid import contract

PLACEHOLDER = "{version}"
_VERSION = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


def checkout_version(path: Path) -> str | None:
    """The transformers version ``path`` is a checkout of (``__version__`` in
    ``src/transformers/__init__.py``, beside ``examples/pytorch``), or None if it is none."""
    init = path / "src" / "transformers" / "__init__.py"
    if not (path / "examples" / "pytorch").is_dir() or not init.is_file():
        return None
    found = _VERSION.search(init.read_text(encoding="utf-8", errors="replace"))
    return found.group(1) if found else None


def find(value: str, version: str) -> tuple[Path | None, str]:
    """The checkout of transformers ``version`` that ``value`` (the variable) names, and
    how it was found; or None and why there is none, naming every place looked at."""
    if PLACEHOLDER in value:
        candidates = [Path(value.replace(PLACEHOLDER, version))]
    else:
        given = Path(value)
        if checkout_version(given) is not None:
            candidates = [given]
        else:
            candidates = [given / f"v{version}", given / version]
    looked: list[str] = []
    for path in candidates:
        at = checkout_version(path)
        if at == version:
            return path, f"{path} is at {version}"
        if at is not None:
            looked.append(f"{path} (a checkout at {at})")
        elif path.exists():
            looked.append(f"{path} (not a transformers checkout: no examples/pytorch "
                          "or src/transformers/__init__.py with __version__)")
        else:
            looked.append(f"{path} (does not exist)")
    return None, (f"no transformers checkout at {version} (the installed version) from "
                  f"{contract.TRANSFORMERS_SRC}={value}; looked at {'; '.join(looked)} "
                  f"(it names a checkout, a folder of checkouts named v{version} or "
                  f"{version}, or a path with {PLACEHOLDER})")
