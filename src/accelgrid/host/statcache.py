"""What a check of an env found good, kept by stat key beside the env, so that the next
check skips what has not changed since (git's index does the same for a work tree).

A key is a file's or folder's :mod:`~accelgrid.base.statkey`. A key is kept only when its times are
:data:`RACY_S` older than the check (a change within the same tick of a coarse clock would
not show: git's "racily clean" entries). A store that cannot be read is empty; one that
cannot be written is not kept: the checks then do all their work, as without one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..base import jsonio
from ..base.statkey import Key, key

RACY_S = 2.0
VERSION = 1


class Store:
    """Entries (a name: what was found good, with the keys it rests on) read from and
    written to one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.time_ns()
        data, err = jsonio.read_json(path)
        entries = data.get("entries") if isinstance(data, dict) and not err \
            and data.get("version") == VERSION else None
        self.entries: dict[str, Any] = dict(entries) if isinstance(entries, dict) else {}
        self.changed = False

    def fresh(self, found: Key | None) -> bool:
        """Whether ``found`` may be kept: it exists and is not racy."""
        return found is not None and \
            max(found[2], found[3]) < self.started - int(RACY_S * 1e9)

    def put(self, name: str, value: Any) -> None:
        if self.entries.get(name) != value:
            self.entries[name] = value
            self.changed = True

    def drop(self, name: str) -> None:
        if self.entries.pop(name, None) is not None:
            self.changed = True

    def unchanged(self, name: str, record_key: Key | None, part: str, base: str) -> bool:
        """Whether ``name`` is kept with ``record_key`` (its RECORD's key now) and every
        key of its ``part`` (paths under ``base``) is unchanged."""
        kept = self.entries.get(name)
        return isinstance(kept, dict) and record_key is not None \
            and kept.get("record") == list(record_key) and same(kept.get(part), base)

    def keep(self, name: str, record_key: Key | None, part: str,
             keys: dict[str, Key | None]) -> None:
        """Keep ``name`` with its RECORD's key and ``keys`` as its ``part``, unless one of
        them is missing or racy: then it is dropped (checked again next time)."""
        if keys and self.fresh(record_key) and all(self.fresh(k) for k in keys.values()):
            assert record_key is not None
            self.put(name, {"record": list(record_key),
                            part: {rel: list(k) for rel, k in keys.items() if k}})
        else:
            self.drop(name)

    def save(self) -> None:
        if not self.changed:
            return
        try:
            jsonio.write_json(self.path, {"version": VERSION, "entries": self.entries})
        except OSError:
            pass   # a read-only env: the next check does all its work again
        self.changed = False


def same(keys: dict[str, Any] | None, base: str) -> bool:
    """Whether every ``relative path: key`` of ``keys`` (under ``base``) still has that
    key (JSON turns the tuples into lists)."""
    if not isinstance(keys, dict) or not keys:
        return False
    for rel, kept in keys.items():
        found = key(os.path.join(base, rel))
        if found is None or list(found) != kept:
            return False
    return True
