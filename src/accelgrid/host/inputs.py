"""The inputs a cell runs on, checked against the matrix before any test.

Two checks, both on what is installed (not on a stamp of it):

* :func:`differences`: torch's version and local build tag (``+cpu``, ``+xpu``: the tag of
  the requirement the cell's plan installs torch with) and every exact pin of the cell
  (``name==version`` among its packages and tools) against the distributions the env's
  Python finds first on its path;
* :func:`altered_files`: the files of torch and of each pinned distribution whose bytes are
  not those their RECORD's sha256 names (the wheel spec's urlsafe base64, no padding): on
  every run the top-level Python files (``torch/*.py``: tens of files, milliseconds), with
  ``ACCELGRID_VERIFY=full`` every file a RECORD hashes (but .pyc: Python rewrites them).

The nox session (:mod:`accelgrid.commands.sessions`) refuses a difference in one line and
repairs an altered file (``uv pip install --reinstall-package NAME``).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..base import contract, statkey
from ..config.model import Cell
from . import statcache

# ACCELGRID_VERIFY=full: every file each RECORD hashes, not only the top-level .py files.
VERIFY = contract.VERIFY
# ACCELGRID_ACCEPT_INPUTS=1: a --no-venv run goes on past differences, recorded in env.json.
ACCEPT = contract.ACCEPT_INPUTS


@dataclass(frozen=True)
class Pin:
    """One input the matrix fixes: a distribution, the requirement it must meet, and the
    local build tag torch must carry ("" for none, None where the requirement names no
    build: then any build of the version is taken)."""

    name: str              # canonical (packaging.utils.canonicalize_name)
    requirement: str       # as the plan installs it: torch==2.13.0+cpu, pytest==9.2.0
    local: str | None = None

    @property
    def wanted(self) -> str:
        return self.requirement.split(";", 1)[0].strip()


@dataclass(frozen=True)
class Installed:
    version: str
    dist_info: Path        # the .dist-info folder the env's Python finds first


@dataclass(frozen=True)
class Difference:
    name: str
    wanted: str
    found: str | None      # None: not installed

    def __str__(self) -> str:
        return f"{self.name}: wanted {self.wanted}, found {self.found or 'nothing installed'}"


def pins(cell: Cell, torch_requirement: str) -> list[Pin]:
    """The exact inputs of ``cell``: torch as its plan installs it (``torch_requirement``:
    the pin with its build tag, a nightly range, or a local wheel's path) and each of its
    packages pinned with ``==``."""
    out = [_torch_pin(torch_requirement)]
    seen = {"torch"}
    for text in cell.packages:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        specs = list(req.specifier)
        name = canonicalize_name(req.name)
        if name in seen or len(specs) != 1 or specs[0].operator != "==" or \
                specs[0].version.endswith(".*"):
            continue   # a range or a wildcard pins nothing exactly
        seen.add(name)
        out.append(Pin(name, text))
    return out


def _torch_pin(requirement: str) -> Pin:
    if requirement.endswith(".whl"):   # a local wheel: its file name is the exact build
        from packaging.utils import parse_wheel_filename

        version = parse_wheel_filename(Path(requirement).name)[1]
        return Pin("torch", f"torch=={version}", version.local or "")
    req = Requirement(requirement)
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and not specs[0].version.endswith(".*"):
        local = Version(specs[0].version).local
        # A pin without a build tag (torch from PyPI, whose files carry none) names no
        # build: a CUDA build is told apart by install.cuda_build for cpu cells.
        return Pin("torch", requirement, local)
    return Pin("torch", requirement)   # a nightly range: its build is resolved at run time


# The env's Python prints its path in order (the first distribution of a name wins, as
# importlib.metadata finds it).
def search_path(python: str) -> list[str]:
    """``python``'s import path (one subprocess, tens of milliseconds)."""
    return interpreter(python)[0]


# And where its env installs (sysconfig's purelib): a warm run asks both in one process.
_INTERPRETER_QUERY = ("import json, sys, sysconfig; "
                      "print(json.dumps([sys.path, sysconfig.get_path('purelib')]))")


def interpreter(python: str) -> tuple[list[str], Path]:
    """``python``'s import path and its site-packages (purelib), from one subprocess."""
    done = subprocess.run([python, "-c", _INTERPRETER_QUERY], capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise OSError(f"{python} could not run: {(done.stderr.strip() or 'no output')[-300:]}")
    path, purelib = json.loads(done.stdout)
    return [p for p in path if isinstance(p, str)], Path(purelib)


def installed(path: Sequence[str], names: Iterable[str]) -> dict[str, Installed]:
    """The distributions named (canonical names) as found first along ``path``."""
    wanted = set(names)
    found: dict[str, Installed] = {}
    for folder in path:
        try:
            entries = sorted(os.listdir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info"):
                continue
            stem = entry.removesuffix(".dist-info")
            name = canonicalize_name(stem.rsplit("-", 1)[0]) if "-" in stem else None
            if name not in wanted or name in found:
                continue
            info = Path(folder or ".") / entry
            version = _metadata_version(info)
            if version is not None:
                found[name] = Installed(version, info)
    return found


def _metadata_version(info: Path) -> str | None:
    try:
        with open(info / "METADATA", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break   # the headers end here
    except OSError:
        return None
    return None


def differences(wanted: Sequence[Pin], found: Mapping[str, Installed]) -> list[Difference]:
    """Each pin ``found`` does not meet: another version, another build, or none."""
    out = []
    for pin in wanted:
        have = found.get(pin.name)
        if have is None:
            out.append(Difference(pin.name, pin.wanted, None))
            continue
        try:
            version = Version(have.version)
        except InvalidVersion:
            out.append(Difference(pin.name, pin.wanted, have.version))
            continue
        spec = Requirement(pin.wanted).specifier
        if not spec.contains(version, prereleases=True) or \
                (pin.local is not None and (version.local or "") != pin.local):
            out.append(Difference(pin.name, pin.wanted, have.version))
    return out


def one_line(cell: str, diffs: Sequence[Difference]) -> str:
    """The line a run stops with: every difference, package, wanted and found."""
    return f"{cell}: the env's inputs are not the matrix's: " + "; ".join(map(str, diffs))


# --- integrity from RECORD hashes -------------------------------------------------------

@dataclass(frozen=True)
class Altered:
    name: str            # the distribution (canonical)
    path: str            # as its RECORD names it
    why: str             # "differs" or "missing"

    def __str__(self) -> str:
        return f"{self.path} of {self.name} {self.why}"


def full_check(env: Mapping[str, str] | None = None) -> bool:
    """Whether every hashed file is checked (``ACCELGRID_VERIFY=full``)."""
    return (os.environ if env is None else env).get(VERIFY, "").strip().lower() == "full"


def _top_level_python(path: str) -> bool:
    """A module at the top of the distribution or of one of its packages
    (``six.py``, ``torch/functional.py``): what an import reads first."""
    return path.endswith(".py") and path.count("/") <= 1 and ".dist-info/" not in path \
        and not path.startswith("../")


HASHED_STORE = ".accelgrid-hashed.json"   # statcache: distributions whose files matched


def altered_files(found: Mapping[str, Installed], *, full: bool = False,
                  limit: int | None = None, store: statcache.Store | None = None
                  ) -> list[Altered]:
    """The files of the ``found`` distributions whose sha256 is not their RECORD's (or
    that are gone): top-level Python files, or with ``full`` every hashed file. Stops after
    ``limit`` (None: every one). ``store`` (not with ``full``): a distribution whose
    checked files all matched is kept there with the stat keys of its RECORD and of those
    files; while none changed, they are not read again."""
    out: list[Altered] = []
    kept = None if full else store   # stat keys only where they are kept
    for name, dist in sorted(found.items()):
        site = dist.dist_info.parent
        entry = str(dist.dist_info)
        record_key = statkey.key(dist.dist_info / "RECORD") if kept else None
        if kept is not None and kept.unchanged(entry, record_key, "files", str(site)):
            continue
        try:
            with open(dist.dist_info / "RECORD", encoding="utf-8", errors="replace",
                      newline="") as fh:
                rows = [row for row in csv.reader(fh) if len(row) >= 2 and row[1]]
        except OSError:
            continue   # an installer that writes no RECORD: nothing to compare with
        matched: dict[str, statkey.Key | None] = {}
        before = len(out)
        for row in rows:
            path, hashed = row[0], row[1]
            algorithm, _, expected = hashed.partition("=")
            # A .pyc a wheel ships is Python's to rewrite (its source's time changed).
            if algorithm != "sha256" or path.endswith(".pyc") or \
                    not (full or _top_level_python(path)):
                continue
            # The key before the bytes: a write between the two changes the key kept.
            file_key = statkey.key(site / path) if kept else None
            got = _sha256(site / path)
            if got != expected:
                out.append(Altered(name, path, "missing" if got is None else "differs"))
                if limit is not None and len(out) >= limit:
                    return out
            else:
                matched[path] = file_key
        if kept is not None:
            if len(out) == before:
                kept.keep(entry, record_key, "files", matched)
            else:
                kept.drop(entry)
    return out


def _sha256(path: Path) -> str | None:
    """The file's sha256 as a RECORD writes it (urlsafe base64 without padding)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def altered_line(cell: str, altered: Sequence[Altered]) -> str:
    """One line: which file of which package differs (the first), and how many do."""
    names = sorted({a.name for a in altered})
    more = f" and {len(altered) - 1} more file(s)" if len(altered) > 1 else ""
    return (f"{cell}: {altered[0]} from its RECORD hash{more} "
            f"({', '.join(names)})")


def accepted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the run was told to go on past differing inputs (``ACCELGRID_ACCEPT_INPUTS=1``)."""
    return (os.environ if env is None else env).get(ACCEPT, "").strip() in ("1", "yes", "true")


def after_run(env_json: Mapping[str, object], wanted: Sequence[Pin],
              accepted_diffs: Sequence[Difference] = ()) -> list[Difference]:
    """What a finished run's env.json says it ran on, against the pins: torch's version as
    the test processes saw it and the packages it records (others are not in env.json).
    Differences accepted before the run are expected there."""
    torch = env_json.get("torch")
    packages = env_json.get("packages")
    seen: dict[str, str] = {}
    if isinstance(packages, dict):
        seen.update({canonicalize_name(str(k)): str(v) for k, v in packages.items()})
    if isinstance(torch, dict) and isinstance(torch.get("version"), str):
        seen["torch"] = torch["version"]
    found = {n: Installed(v, Path()) for n, v in seen.items()}
    expected = {d.name: d.found for d in accepted_diffs}
    out = []
    for diff in differences([p for p in wanted if p.name in seen], found):
        if expected.get(diff.name, "\0") != diff.found:
            out.append(diff)
    return out


@dataclass(frozen=True)
class Checked:
    """An env's inputs against its cell's pins, before any test."""

    pins: list[Pin]
    differences: list[Difference]
    altered: list[Altered]

    @property
    def ok(self) -> bool:
        return not self.differences and not self.altered


def check(cell: Cell, torch_requirement: str, python: str, *, full: bool | None = None,
          path: Sequence[str] | None = None, store: Path | None = None) -> Checked:
    """``python``'s env against ``cell``'s pins (:func:`differences`) and the pinned
    distributions' files against their RECORDs (:func:`altered_files`; ``full``: every
    hashed file, default :func:`full_check`). ``path``: its import path, when the caller
    asked it already (:func:`interpreter`). ``store``: the file that keeps what matched
    (:data:`HASHED_STORE` in the env), so an unchanged file is not hashed again."""
    wanted = pins(cell, torch_requirement)
    found = installed(search_path(python) if path is None else path,
                      [p.name for p in wanted])
    kept = statcache.Store(store) if store is not None else None
    try:
        return Checked(wanted, differences(wanted, found),
                       altered_files(found, full=full_check() if full is None else full,
                                     store=kept))
    finally:
        if kept is not None:
            kept.save()


# --- repair ---------------------------------------------------------------------------

def reinstall(uv: str, python: str, names: Sequence[str],
              steps: Sequence[tuple[Sequence[str], Mapping[str, str]]],
              env: Mapping[str, str] | None = None, *, clean_cache: bool = False
              ) -> str | None:
    """``uv pip install --reinstall-package NAME`` for ``names`` through each install step
    (its arguments and variables: torch's index is in its own step), straight with uv (nox
    -R skips session.install). ``clean_cache``: first ``uv cache clean NAME``, so the
    files come from the wheels again, not from uv's unpacked copies (which an in-place
    edit of an env linked to them changed too). None, or uv's last lines when it failed."""
    base = dict(os.environ if env is None else env)
    commands = [([uv, "cache", "clean", *names], base)] if clean_cache else []
    again = [a for n in names for a in ("--reinstall-package", n)]
    commands += [([uv, "pip", "install", "--python", python, *again, *args],
                  {**base, **step_env}) for args, step_env in steps]
    for command, command_env in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              env=command_env)
        if done.returncode != 0:
            tail = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()][-20:]
            return "\n".join(tail)
    return None
