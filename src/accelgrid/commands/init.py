"""``accelgrid init``: accelgrid in an existing repository, its first cell one command away.

Writes matrix.yaml (the devices asked for, from accelgrid's own matrix: their index,
detection, runners, containers; one torch series with the pins accelgrid tests it with),
noxfile.py, an example test under suites/, the CI files ``accelgrid ci render`` writes,
and .gitignore entries. An existing file is never overwritten without ``force``.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from ..base.errors import InvalidInput
from ..config.matrix import load_matrix
from . import ci

MATRIX = "matrix.yaml"
NOXFILE = "noxfile.py"
EXAMPLE = "suites/example/test_example.py"
GITIGNORE = ".gitignore"
IGNORED = ("/results/", "/site/")   # what runs and `publish` write
DEVICES = ("cpu", "cuda", "xpu", "mps")
# accelgrid's own matrix: in a wheel as package data (pyproject's force-include), in
# accelgrid's checkout at its root.
PACKAGED = "data/matrix.yaml"


class ExistingFiles(InvalidInput):
    """init would overwrite files (exit 2); ``--force`` overwrites them."""


@dataclass(frozen=True)
class Written:
    path: Path
    how: str  # written | overwritten | appended


def source_matrix() -> Path:
    """accelgrid's own matrix.yaml: the devices and pins init copies from."""
    packaged = importlib.resources.files("accelgrid") / PACKAGED
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[3] / MATRIX
    if checkout.is_file():
        return checkout
    raise InvalidInput(f"accelgrid's own {MATRIX} is not in this install ({PACKAGED})")


def newest_series(torch: dict[str, dict[str, Any]]) -> str:
    """The newest torch series on PyTorch's release channel."""
    released = [s for s, pins in torch.items() if pins.get("channel", "release") == "release"]
    return max(released, key=Version)


def matrix_text(devices: list[str], series: str | None = None) -> str:
    """The matrix.yaml of a new project: ``devices`` with accelgrid's own settings for
    them, one torch series (default: the newest accelgrid knows) with its pins, the
    example suite."""
    source = yaml.safe_load(source_matrix().read_text(encoding="utf-8"))
    unknown = [d for d in devices if d not in source["devices"]]
    if unknown or not devices:
        raise InvalidInput(f"--devices: {', '.join(unknown) or 'none given'}: expected some "
                           f"of {', '.join(source['devices'])}")
    series = series or newest_series(source["torch"])
    if series not in source["torch"]:
        raise InvalidInput(f"--torch {series}: accelgrid knows the series "
                           f"{', '.join(source['torch'])}")
    defaults = {k: source["defaults"][k] for k in ("python", "timeout", "workers")}
    data = {
        "schema": 1,
        "defaults": {"torch": series, **defaults, "profile": "default", "suites": ["example"]},
        "tools": source["tools"],
        "devices": {d: source["devices"][d] for d in devices},
        "torch": {series: source["torch"][series]},
        "profiles": {"default": source["profiles"]["default"]},
        "suites": {"example": {"path": "suites/example",
                               "description": "the example test accelgrid init wrote"}},
        "matrix": {"device": devices, "torch": [series], "profile": ["default"]},
    }
    header = ("# accelgrid's test matrix (written by `accelgrid init`): devices x torch "
              "series x profiles.\n# `accelgrid validate` checks it (`accelgrid schema`: "
              "every key), `accelgrid cells` lists the\n# cells, `accelgrid plan CELL` "
              "says what one does.\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def _template(name: str) -> str:
    return (importlib.resources.files("accelgrid") / "templates" / "init" / name).read_text(
        encoding="utf-8")


def files(devices: list[str], series: str | None = None) -> dict[str, str]:
    """The files init writes besides the CI files and .gitignore: path -> text."""
    return {MATRIX: matrix_text(devices, series), NOXFILE: _template("noxfile.py"),
            EXAMPLE: _template("test_example.py")}


def init(root: Path, devices: list[str], *, series: str | None = None,
         force: bool = False) -> list[Written]:
    """Write the project's accelgrid files under ``root``; :class:`ExistingFiles` naming
    every one that exists already (nothing written) unless ``force``."""
    own = files(devices, series)
    # The CI files come from the matrix as written (a temporary file would do, but the
    # matrix's folder is what they are rendered against: check first, then write).
    planned = [*own, *ci.OUTPUTS]
    existing = [rel for rel in planned if (root / rel).exists()]
    if existing and not force:
        raise ExistingFiles(f"{root}: would overwrite {', '.join(existing)}; nothing "
                            "written (--force overwrites them)")
    done: list[Written] = []

    def write(files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = root / rel
            how = "overwritten" if path.exists() else "written"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            done.append(Written(path, how))

    write(own)
    write(ci.render(load_matrix(root / MATRIX)))   # rendered from the matrix just written
    added = ignore(root / GITIGNORE)
    if added:
        done.append(Written(root / GITIGNORE, "appended " + " ".join(added)))
    return done


def ignore(path: Path) -> list[str]:
    """Add :data:`IGNORED`'s entries that ``path`` (a .gitignore) lacks; the ones added."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    have = {ln.strip() for ln in text.splitlines()}
    missing = [e for e in IGNORED if e not in have]
    if missing:
        sep = "" if not text or text.endswith("\n") else "\n"
        path.write_text(text + sep + "".join(f"{e}\n" for e in missing), encoding="utf-8")
    return missing
