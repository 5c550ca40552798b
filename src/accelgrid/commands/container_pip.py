"""pip's configuration carried into a container image's build (``accelgrid container``,
docs/guides/containers.md "pip's configuration in the build"): the settings that decide which
files get installed go to the build as ``PIP_*`` build args, the local folders and files
they name are mounted at the same path, and what they contribute to the image's hash.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# pip settings that decide which files get installed; passed to the build as PIP_* args.
PIP_PASSTHROUGH = ("index-url", "extra-index-url", "find-links", "constraint", "cert",
                   "trusted-host")
_PIP_URL_LISTS = ("index-url", "extra-index-url", "find-links")
_PIP_PATHS = ("constraint", "cert")
_PIP_NOT_HASHED = ("cert", "trusted-host")   # how to reach an index, not what it serves


@dataclass(frozen=True)
class PipPassthrough:
    """pip's configuration carried into a build."""

    build_args: dict[str, str]          # PIP_* values for --build-arg
    mounts: tuple[str, ...] = ()        # host paths mounted read-only at the same path
    dropped: tuple[str, ...] = ()       # local paths an engine without build mounts loses


def _local_path(item: str) -> str | None:
    if item.startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlparse(item).path)
    if item.startswith("/"):
        return item
    return None


def _mount_for(key: str, path: str) -> str:
    # A local index's pages link to files beside it (simple/ next to files/, as pip's
    # own tooling and most mirrors lay them out): mount the folder holding the index.
    if key in ("index-url", "extra-index-url"):
        parent = os.path.dirname(os.path.normpath(path))
        if parent not in ("", "/"):
            return parent
    return path


def pip_passthrough(settings: Mapping[str, str], can_mount: bool = True) -> PipPassthrough:
    """PIP_* build args from pip's effective ``settings`` (pipconfig.pip_settings()).

    Local folders and files they name (find-links folders, file:// indexes, constraint
    files) are mounted at the same path during the build, so the values stay valid and
    nothing machine-specific is written into the Containerfile or the image. Without build
    mounts (docker) those entries are left out.
    """
    args: dict[str, str] = {}
    mounts: list[str] = []
    dropped: list[str] = []
    for key in PIP_PASSTHROUGH:
        value = settings.get(key)
        if not value:
            continue
        kept = []
        for item in value.split():
            path = _local_path(item) if key in _PIP_URL_LISTS else (
                item if key in _PIP_PATHS else None)
            if path is not None:
                if not can_mount or not os.path.exists(path):
                    dropped.append(item)
                    continue
                mount = _mount_for(key, path)
                if mount not in mounts:
                    mounts.append(mount)
            kept.append(item)
        if kept:
            args["PIP_" + key.upper().replace("-", "_")] = " ".join(kept)
    return PipPassthrough(args, tuple(mounts), tuple(dropped))


def pip_fingerprint(pip: PipPassthrough) -> list:
    """What the pip configuration contributes to the hash: its values, the wheels in local
    find-links folders, the constraint files' text (not the certificates)."""
    skipped = {"PIP_" + k.upper().replace("-", "_") for k in _PIP_NOT_HASHED}
    out: list = [sorted((k, v) for k, v in pip.build_args.items() if k not in skipped)]
    for item in pip.build_args.get("PIP_FIND_LINKS", "").split():
        path = Path(_local_path(item) or "")
        if _local_path(item) and path.is_dir():
            out.append([item, sorted((p.name, p.stat().st_size) for p in path.iterdir()
                                     if p.is_file())])
    for item in pip.build_args.get("PIP_CONSTRAINT", "").split():
        path = Path(_local_path(item) or item)
        if path.is_file():
            out.append([item, path.read_text(encoding="utf-8", errors="replace")])
    return out
