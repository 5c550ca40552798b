"""Commands that write a set of files into a folder (``grid --out``, ``ops predict --out``,
``baseline update``, ``publish``): each leaves the old set or the new one whatever moment a
signal comes, replaces only files it listed in its manifest (``.accelgrid-<kind>.json``
beside them) and refuses to overwrite a file someone else put there.

The manifest is also the folder's kind: a folder of an ``ops predict`` holds
``.accelgrid-ops-predicted.json``, one of a bisection ``.accelgrid-bisect.json``; the grid
reads it (:mod:`accelgrid.results.cellresults`) and passes such folders over.

Standard library only (the results layer reads the kinds).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from .errors import InvalidInput
from .jsonio import naming_path, read_json, refuse_symlink, write_json
from .lifetime import signals_held

PREFIX = ".accelgrid-"  # a manifest's (a kind marker's) file name: PREFIX + kind + ".json"
_NEW = "accelgrid-new"  # a file or folder being written, beside its target

# What a file of the set is: its text, its bytes, or a writer of the given (new) path.
Content = str | bytes | Callable[[Path], None]


def manifest_name(kind: str) -> str:
    return f"{PREFIX}{kind}.json"


def kinds(folder: Path) -> list[str]:
    """The kinds of the manifests (and kind markers) ``folder`` holds, sorted."""
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return []
    return sorted(n[len(PREFIX):-len(".json")] for n in names
                  if n.startswith(PREFIX) and n.endswith(".json") and len(n) > len(PREFIX) + 5)


def mark(folder: Path, kind: str, **facts: object) -> None:
    """Say what ``folder`` holds (a bisection's runs, a reproduction's) for the grid."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / manifest_name(kind), {"kind": kind, **facts})


def listed(path: Path, command: str) -> set[str]:
    """The files an earlier ``command`` listed in the manifest ``path``; none when there
    is none. One that is not a manifest (not a list of plain relative paths) is refused:
    deleting what it names could delete anything."""
    if not os.path.lexists(path):
        return set()
    data, err = read_json(path)
    files = data.get("files") if isinstance(data, dict) else None
    if err or not isinstance(files, list) or not all(
            isinstance(f, str) and f and not PurePosixPath(f).is_absolute()
            and ".." not in PurePosixPath(f).parts for f in files):
        why = err or "its files are not a list of relative paths"
        raise InvalidInput(f"{path}: not a manifest {command} wrote ({why})")
    return set(files)


def record(folder: Path, kind: str, command: str, files: set[str]) -> None:
    write_json(folder / manifest_name(kind), {"written_by": command, "kind": kind,
                                              "files": sorted(files)})


def _ours(folder: Path, files: Mapping[str, Content], kind: str, command: str,
          own_folder: bool) -> set[str]:
    """The files an earlier write listed in ``folder``'s manifest (none with
    ``own_folder``). Refuses (InvalidInput) a symlink where a file or the manifest goes,
    and a file where this write goes that no earlier write listed."""
    manifest = folder / manifest_name(kind)
    for name in (*files, manifest.name):
        refuse_symlink(folder / name)
    ours = set() if own_folder else listed(manifest, command)
    if not own_folder:
        for name in sorted(files):
            if name not in ours and os.path.lexists(folder / name):
                raise InvalidInput(f"{folder / name}: a file {command} did not write (not in "
                                   f"{manifest.name}): not replacing it; move it away or "
                                   "name another folder")
    return ours


def _write_beside(folder: Path, name: str, content: Content, new: dict[str, Path]) -> None:
    """Write ``content`` into a new file beside ``folder / name``, entered in ``new``
    (name -> its path) as soon as it exists, so that the caller deletes it if not used."""
    with signals_held():  # a stop between the two would leave the file unknown
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.{_NEW}-")
        new[name] = Path(tmp)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            if isinstance(content, str):
                fh.write(content.encode("utf-8"))
            elif isinstance(content, bytes):
                fh.write(content)
        if callable(content):
            content(new[name])
    except OSError as exc:  # a full disk: the one line names the file
        raise naming_path(exc, folder / name) from exc


def replace_files(folder: Path, files: Mapping[str, Content], kind: str, command: str,
                  own_folder: bool = False) -> dict[str, Path]:
    """Write ``files`` (name -> content) into ``folder`` as one set: each written beside
    its target first, then all renamed into place with SIGTERM/SIGINT held, so a stop
    leaves the old set or the new one (a SIGKILL between two renames can mix them). Files
    an earlier write listed in the manifest and this one does not write are deleted; a
    file where this one writes that no earlier write listed is refused (InvalidInput,
    before anything is written). With ``own_folder`` (a folder only accelgrid writes: a
    cell's results, baselines/, where one update writes some cells' files) there is no
    manifest: the files are replaced by name and no other is deleted. Returns the paths
    written."""
    folder = Path(folder)
    ours = _ours(folder, files, kind, command, own_folder)
    folder.mkdir(parents=True, exist_ok=True)
    new: dict[str, Path] = {}
    try:
        for name, content in files.items():
            _write_beside(folder, name, content, new)
        with signals_held():
            if not own_folder:  # listed before they land: a kill leaves none unlisted
                record(folder, kind, command, ours | set(files))
            for name, made in new.items():
                os.replace(made, folder / name)
            for old in sorted(ours - set(files)):  # only what an earlier write listed
                stale = folder / old
                if stale.is_file() and not stale.is_symlink():
                    stale.unlink()
            if not own_folder:
                record(folder, kind, command, set(files))
    finally:
        for made in new.values():
            if os.path.lexists(made):
                os.unlink(made)
    return {name: folder / name for name in files}


def is_leftover(name: str) -> bool:
    """Whether ``name`` is a file :func:`replace_files` was writing (a SIGKILL leaves it)."""
    return name.startswith(".") and f".{_NEW}-" in name

