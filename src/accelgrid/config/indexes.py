"""Package index URLs as a user writes them (matrix.yaml's ``devices.<d>.index`` and
``channels``, ``$ACCELGRID_TORCH_INDEX``): which are indexes at all, and where credentials
may stand."""

from __future__ import annotations

import urllib.parse

from ..base import contract
from ..base.redact import redact_url


def index_url_problem(url: str, *, allow_credentials: bool = False) -> str | None:
    """Why ``url`` cannot be a package index (``default``, an http(s) URL with a host,
    or a file:// URL with a path), or None. Credentials are refused unless
    ``allow_credentials`` (a URL from the environment may carry them; a committed file
    must not)."""
    if url == "default":
        return None
    shown = redact_url(url)
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return f"'{shown}' is not a URL: it holds spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port if parts.scheme in ("http", "https") else None
    except ValueError as exc:
        return f"'{shown}' is not a valid URL: {exc}"
    del port
    if parts.scheme in ("http", "https"):
        if not parts.hostname:
            return f"'{shown}' has no host"
        if (parts.username or parts.password) and not allow_credentials:
            return (f"'{shown}' carries credentials: keep them out of committed files "
                    f"(set {contract.TORCH_INDEX}, or use ~/.netrc)")
        return None
    if parts.scheme == "file":
        return None if parts.path not in ("", "/") else f"'{shown}' names no folder"
    return f"'{shown}' is not an http(s):// or file:// URL"
