"""What the renderers share: the Jinja templates."""

from __future__ import annotations

import functools

from jinja2 import Environment, PackageLoader, select_autoescape


@functools.cache
def templates() -> Environment:
    """accelgrid's templates (``accelgrid/templates``), HTML autoescaped."""
    return Environment(loader=PackageLoader("accelgrid", "templates"),
                       autoescape=select_autoescape(["html", "j2"]))
