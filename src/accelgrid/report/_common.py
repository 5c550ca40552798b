"""What the renderers share: shortening messages, and the Jinja templates."""

from __future__ import annotations

import functools
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape


def short(text: Any, n: int = 160) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


@functools.cache
def templates() -> Environment:
    """accelgrid's templates (``accelgrid/templates``), HTML autoescaped."""
    return Environment(loader=PackageLoader("accelgrid", "templates"),
                       autoescape=select_autoescape(["html", "j2"]))
