"""A cell's environment as nox builds it: where it is, its python, and its accelgrid.

Where the running accelgrid is a checkout (its own repository, an editable install:
:func:`runner_checkout`) the env links to that checkout; where it is installed from a
wheel the env installs accelgrid itself, the runner's version (:func:`self_requirement`),
without its dependencies: what runs in a cell needs only torch, pytest and packaging,
which the cell's pins and tools bring.

The link is a ``.pth`` file in the env's site-packages naming the project's ``src``
(written by the cell session at every build, :func:`link_project`), so the env's python
imports accelgrid and its pytest plugin by itself: ``.nox/cpu-2-13/bin/python -m pytest
suites/smoke`` works from the project root. Installing the project into the env (even
editable, without dependencies) would need a build backend from an index and would list
accelgrid among the cell's packages; the ``.pth`` is the line an editable install writes,
without either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

# nox's own naming of a session's env folder (pinned in pyproject.toml): it lowercases,
# turns anything but letters, digits and '-' into '-', and hashes names too long for a
# shebang line, so the rule is not restated here.
from nox.sessions import _normalize_path
from packaging.utils import canonicalize_name

from .. import __version__
from ..base import contract
from ..base.errors import AccelgridError
from ..config.model import Cell

PTH = "accelgrid-src.pth"       # in the env's site-packages: the project's src/


class NotBuilt(AccelgridError):
    """The cell's env does not exist yet (exit 1: nothing found)."""


def env_dir(root: Path, cell: Cell) -> Path:
    """Where ``nox -s CELL`` builds ``cell``'s env (``.nox/cpu-2-13``; under
    ``$ACCELGRID_ENVDIR`` when set, which the noxfile hands nox as its envdir)."""
    # nox names the env from its envdir option as given: the noxfile's ACCELGRID_ENVDIR,
    # else ".nox" in the noxfile's folder, relative (a long name is hashed by that length:
    # from root/.nox, a deep checkout's name would be hashed where nox's is not).
    base = contract.envdir_option()
    # nox logs a hashed name as a warning; outside nox nothing configures its logger, so
    # Python's last-resort handler would print it to stderr on every call.
    log = logging.getLogger("nox")
    disabled, log.disabled = log.disabled, True
    try:
        return root / _normalize_path(base, cell.name)
    finally:
        log.disabled = disabled


def python_in(env: Path) -> Path:
    """The python of the virtual environment ``env``."""
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def built_python(root: Path, cell: Cell) -> Path:
    """The python of ``cell``'s env; :class:`NotBuilt` (one line saying how to build it)
    when there is none."""
    python = python_in(env_dir(root, cell))
    if not python.exists():
        raise NotBuilt(f"{cell.name}: its env {env_dir(root, cell)} is not built yet; "
                       f"build it with: nox -s {cell.name} --install-only")
    return python


def site_packages(python: str | Path) -> Path:
    """``python``'s site-packages (purelib)."""
    proc = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AccelgridError(f"{python} cannot say where its site-packages are: "
                             f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return Path(proc.stdout.strip())


def link_project(python: str | Path, root: Path, site: Path | None = None
                 ) -> tuple[Path, str | None]:
    """Make ``python``'s env import accelgrid from ``root``'s ``src`` (:data:`PTH`);
    ``site``: its site-packages, when the caller knows them. Returns the file and what
    it named before when that was something else (an env copied from another
    checkout), else None."""
    pth = (site if site is not None else site_packages(python)) / PTH
    line = _link_line(root)
    before = _read_link(pth)
    if before != line:
        pth.write_text(line + "\n", encoding="utf-8")
    return pth, before if before not in (None, line) else None


def compile_source(root: Path) -> None:
    """Where this interpreter writes no bytecode (PYTHONDONTWRITEBYTECODE, ``-B``), compile
    ``root``'s ``src/accelgrid`` ahead, as installers compile what they install (uv's
    UV_COMPILE_BYTECODE, pip): else every process that imports it from the checkout (the
    runner, each pytest and xdist worker of a cell linked to it) compiles it again, 0.04 s
    of CPU each here. Only what changed since is compiled; a folder that cannot be written
    is left as it is."""
    if not sys.dont_write_bytecode:
        return   # each import writes what it compiled
    import compileall

    with contextlib.suppress(OSError):
        compileall.compile_dir(root / "src" / "accelgrid", quiet=2)


def linked(site: Path, root: Path) -> bool:
    """Whether the env of ``site`` imports accelgrid from ``root``'s ``src`` already."""
    return _read_link(site / PTH) == _link_line(root)


def _link_line(root: Path) -> str:
    return str((root / "src").absolute())


def _read_link(pth: Path) -> str | None:
    try:
        return pth.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


# accelgrid's own exact pins beside its pyproject.toml, whose dependencies are ranges: its
# workflows install with it (commands/ci.py), its images take their versions from it.
CONSTRAINTS = "constraints.txt"


def is_accelgrid_checkout(root: Path) -> bool:
    """Whether ``root`` is accelgrid's own source (its pyproject.toml names the project
    accelgrid): its cell envs link to it, its CI installs it editable."""
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    name = data.get("project", {}).get("name") if isinstance(data.get("project"), dict) else None
    return isinstance(name, str) and canonicalize_name(name) == "accelgrid"


def runner_checkout() -> Path | None:
    """The accelgrid checkout the running accelgrid is imported from (its own repository,
    an editable install: cell envs link to it), or None (installed from a wheel: cell envs
    install the same version, :func:`self_requirement`)."""
    root = Path(__file__).resolve().parents[3]  # <root>/src/accelgrid/host/venvs.py
    return root if (root / "src" / "accelgrid").is_dir() and is_accelgrid_checkout(root) \
        else None


def self_requirement() -> str:
    """What a cell env outside accelgrid's checkout installs accelgrid from: the wheel
    ``$ACCELGRID_WHEEL`` names (tests, offline hosts), else ``accelgrid==<this version>``
    from the index, the version the runner is."""
    wheel = os.environ.get(contract.WHEEL, "").strip()
    if wheel:
        path = Path(wheel)
        if not path.is_file() or path.suffix != ".whl":
            raise AccelgridError(f"{contract.WHEEL}={wheel}: not a wheel file (*.whl)")
        return str(path.absolute())
    return f"accelgrid=={__version__}"


def installed_accelgrid(python: str | Path) -> str | None:
    """The accelgrid version ``python``'s env has installed (its metadata), or None."""
    proc = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                           "print(m.version('accelgrid'))"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None
