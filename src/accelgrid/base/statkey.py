"""A file's or folder's stat key: what changes when it is written, renamed over or
replaced (git's index idea; host.statcache keeps checks by it).

A key is (inode, size, mtime_ns, ctime_ns). Writing a file changes its mtime and ctime; a
folder's entries changing changes the folder's; ctime cannot be set back (setting the
times sets it to now), and a file replaced by another has another inode.
"""

from __future__ import annotations

import os
from pathlib import Path

Key = tuple[int, int, int, int]


def key(path: str | Path) -> Key | None:
    """``path``'s stat key, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
