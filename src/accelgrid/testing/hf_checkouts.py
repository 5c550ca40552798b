"""Source checkouts of a Hugging Face project at the installed version, found from a
variable (``ACCELGRID_TRANSFORMERS_SRC``, ``ACCELGRID_ACCELERATE_SRC``) that may name:

- a checkout: used when it is at the installed version;
- a folder of checkouts named by version (``.../checkouts`` holding ``v5.17.0`` or
  ``5.17.0``): the one of the installed version;
- a path with ``{version}`` (``.../transformers-{version}``): filled in with it.

A checkout's version is the ``__version__`` of ``src/<package>/__init__.py``; a
development tree of the installed release (``1.15.0.dev0`` for ``1.15.0``) counts as at it
only where the caller allows it (accelerate's last reachable tree before a release).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PLACEHOLDER = "{version}"
_VERSION = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


@dataclass(frozen=True)
class Project:
    """What makes a folder a checkout of a project, and the variable that names it."""

    package: str                 # transformers | accelerate
    variable: str                # the environment variable naming the checkout(s)
    marker: str                  # a folder every usable checkout has (examples/pytorch, tests)
    dev_of_release: bool = False  # a X.Y.Z.devN tree serves an installed X.Y.Z


def checkout_version(path: Path, project: Project) -> str | None:
    """The version ``path`` is a checkout of, or None if it is none."""
    init = path / "src" / project.package / "__init__.py"
    if not (path / project.marker).is_dir() or not init.is_file():
        return None
    found = _VERSION.search(init.read_text(encoding="utf-8", errors="replace"))
    return found.group(1) if found else None


def _matches(at: str, version: str, project: Project) -> bool:
    if at == version:
        return True
    if not project.dev_of_release:
        return False
    from packaging.version import InvalidVersion, Version
    try:
        v = Version(at)
        return v.is_devrelease and v.base_version == Version(version).base_version \
            and not Version(version).is_prerelease
    except InvalidVersion:
        return False


def find(value: str, version: str, project: Project) -> tuple[Path | None, str]:
    """The checkout of ``version`` that ``value`` (the variable) names, and how it was
    found; or None and why there is none, naming every place looked at."""
    if PLACEHOLDER in value:
        candidates = [Path(value.replace(PLACEHOLDER, version))]
    else:
        given = Path(value)
        if checkout_version(given, project) is not None:
            candidates = [given]
        else:
            candidates = [given / f"v{version}", given / version]
    looked: list[str] = []
    for path in candidates:
        at = checkout_version(path, project)
        if at is not None and _matches(at, version, project):
            how = f"{path} is at {at}"
            if at != version:
                how += f" (a development tree of {version}, the installed version)"
            return path, how
        if at is not None:
            looked.append(f"{path} (a checkout at {at})")
        elif path.exists():
            looked.append(f"{path} (not a {project.package} checkout: no {project.marker} "
                          f"or src/{project.package}/__init__.py with __version__)")
        else:
            looked.append(f"{path} (does not exist)")
    return None, (f"no {project.package} checkout at {version} (the installed version) "
                  f"from {project.variable}={value}; looked at {'; '.join(looked)} "
                  f"(it names a checkout, a folder of checkouts named v{version} or "
                  f"{version}, or a path with {PLACEHOLDER})")
