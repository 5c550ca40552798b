"""Text accelgrid shows but did not write (a test's message, an upstream error): on one
line, cut to a length. Standard library only."""

from __future__ import annotations

from typing import Any


def one_line(text: Any, limit: int = 160) -> str:
    """``text`` on one line (runs of white space folded), cut to ``limit`` characters with
    an ellipsis."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
