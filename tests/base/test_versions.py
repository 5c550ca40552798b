"""accelgrid.base.versions: PEP 440 versions and ranges (through packaging) for the registry, the
in-cell plugin, compat and sorting: local labels ignored, pre-releases below their
release, series wildcards, clear errors, emptiness, and in-cell imports only."""

from __future__ import annotations

import ast
import random
import re
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from accelgrid.base import versions

SRC = Path(versions.__file__).resolve().parents[1]  # accelgrid/
# The in-cell packages, as .importlinter names them.
IN_CELL = tuple(f"accelgrid.{p}." for p in ("base", "devices", "results", "testing"))


@pytest.mark.parametrize("version,text,inside", [
    # what the hand-written ranges did, unchanged
    ("2.4.1", "<2.5", True), ("2.5.0", "<2.5", False), ("2.5.1+xpu", "<2.5", False),
    ("2.5.1+cu124", ">=2.5,<2.6", True), ("2.6.0", ">=2.5,<2.6", False),
    ("2.5.1", "==2.5.*", True), ("2.50.0", "==2.5.*", False), ("2.5", "==2.5.0", True),
    ("0.18.0", "!=0.18.*", False), ("2.13.0.dev2026", ">2.12", True), ("2.13.0", None, True),
    # local labels are dropped before comparing
    ("2.5.1+xpu", "==2.5.1", True), ("2.5.1+xpu", "==2.5.*", True),
    ("2.5.1+xpu", "!=2.5.1", False), ("2.5.1+xpu", ">2.5.1", False),
    ("2.5.1+xpu", "<=2.5.1", True),
    # pre-releases and nightlies sort below their release (PEP 440), and are not excluded
    ("2.6.0.dev20241001", "==2.6.*", True), ("2.6.0.dev20241001", ">=2.5,<2.7", True),
    ("2.6.0.dev20241001", ">=2.6.0.dev0", True), ("2.6.0.dev20241001", ">=2.6", False),
    ("2.6.0.dev20241001", "<2.6", False), ("2.6.0rc1", "<2.6.0rc2", True),
    ("2.6.0.dev20241001+cpu", ">2.5", True),
    # spaces around clauses
    ("2.5.1", " >= 2.5 , < 2.6 ", True),
])
def test_in_range(version: str, text: str | None, inside: bool) -> None:
    assert versions.in_range(version, text) is inside


@pytest.mark.parametrize("text,error", [
    ("2.5", "'2.5' is not a clause like '>=2.4' or '<2.5' "
            "(operators: ==, !=, >=, <=, >, <)"),
    ("=>0.7", "'=>0.7' is not a clause like '>=2.4' or '<2.5'"),
    (">=2.4,", "'' is not a clause"),
    (">=2.4;<2.5", "'>=2.4;<2.5' is not a clause"),
    (">=2.*", "'>=2.*': '.*' only goes with == or !="),
    ("==2.5.*.*", "'==2.5.*.*' is not a clause"),
    ("", "empty range"),
    ("  ", "empty range"),
    ("~=2.5", "'~=2.5': '~=' is not taken here; spell the bounds out (e.g. '>=2.5,==2.*'"),
    ("===2.5", "'===2.5': '===' compares text, not versions; use =="),
    ("==2.5.1+xpu", "'==2.5.1+xpu': no local version label (+...) in a range"),
    (">=2.5.1+xpu", "'>=2.5.1+xpu' is not a clause"),
])
def test_bad_ranges(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        versions.parse_range(text)


def test_parse_range_includes_prereleases() -> None:
    spec = versions.parse_range(">=2.4,<2.6")
    assert spec.prereleases is True
    assert str(spec) == "<2.6,>=2.4"


@pytest.mark.parametrize("text,empty", [
    (">=2.6,<2.5", True), ("<2.4,>2.5", True), (">2.5,<2.5.1", False), ("==2.5.*,!=2.5.*", True),
    ("<0.1", False), (">=2.5,<=2.5", False), (">2.5,<=2.5", True),
    ("==2.*,!=2.0.*", False), ("<1.3,!=0.*", False), (">3.1,==3.*", False),
    (">=2.6.0.dev0,<2.6.0.dev5", False), (">2.6rc1,<2.6rc2", False),
    (">=2.6.0.dev0,<2.6", True),  # <2.6 admits no pre-release of 2.6 itself
    ("==2.5.*,>=2.6", True), ("!=2.5", False),
])
def test_empty_ranges(text: str, empty: bool) -> None:
    assert versions.range_is_empty(text) is empty


def test_emptiness_agrees_with_brute_force() -> None:
    """range_is_empty's probes against every version of a dense grid, on random ranges."""
    grid = [Version(f"{a}.{b}{c}{s}") for a in range(4) for b in range(4)
            for c in ("", ".0", ".1", ".2", ".0.1")
            for s in ("", ".dev0", ".dev1", ".dev2", "a1", "rc1", "rc2", ".post1", ".post2")]
    rng = random.Random(13)

    def version() -> str:
        release = ".".join(str(rng.randint(0, 3)) for _ in range(rng.randint(1, 3)))
        return release + rng.choice(["", "", ".dev1", "rc1", ".post1"])

    for _ in range(400):
        clauses = []
        for _ in range(rng.randint(1, 3)):
            op = rng.choice(["==", "!=", ">=", "<=", ">", "<", "==*", "!=*"])
            clauses.append(f"{op[:2]}{rng.randint(0, 3)}.{rng.randint(0, 3)}.*" if "*" in op
                           else f"{op}{version()}")
        text = ",".join(clauses)
        spec = versions.parse_range(text)
        if versions.range_is_empty(text):
            assert not [str(v) for v in grid if spec.contains(v)], text


def test_bad_version() -> None:
    with pytest.raises(ValueError):
        versions.in_range("not-a-version", "<2.5")


def test_public_version_and_sort_key() -> None:
    assert versions.public_version("2.5.1+xpu") == Version("2.5.1")
    assert versions.public_version("2.6.0.dev20241001+cpu") == Version("2.6.0.dev20241001")
    assert versions.version_key(None) == versions.version_key("junk") == Version("0")
    series = ["2.13", "2.4", "nightly", "2.11", "2.6.0.dev20241001", "2.5.1+xpu"]
    assert sorted(series, key=versions.version_key) == [
        "nightly", "2.4", "2.5.1+xpu", "2.6.0.dev20241001", "2.11", "2.13"]


def _accelgrid_imports(module: str) -> tuple[set[str], set[str]]:
    """(accelgrid modules, other top-level packages) that ``accelgrid.<module>`` imports."""
    parts = module.split(".")
    tree = ast.parse((SRC.joinpath(*parts[:-1]) / f"{parts[-1]}.py").read_text())
    own, other = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(["accelgrid", *parts[:-1]][: len(parts) - node.level + 1])
            base += f".{node.module}" if node.module else ""
            own |= {base} if node.module else {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            other.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            other |= {a.name.split(".")[0] for a in node.names}
    return own, other - set(sys.stdlib_module_names) - {"__future__"}


def test_in_cell_modules_import_only_in_cell_code() -> None:
    """versions and known_issues_runtime run inside cells: torch, pytest, packaging and the
    standard library, and no dev-side accelgrid module."""
    assert _accelgrid_imports("base.versions") == (set(), {"packaging"})
    own, other = _accelgrid_imports("testing.known_issues_runtime")
    assert all(f"{m}.".startswith(IN_CELL) for m in own) and "accelgrid.base.versions" in own
    assert other <= {"pytest", "packaging", "torch"}
