"""The attention suite's tests import sdpa_checks from this folder, under every
--import-mode (importlib mode does not put test folders on sys.path); torch comes with it
in the test modules, not here: xdist's controller loads this conftest too."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
