"""The head start (accelgrid.run.headstart: a warm selected run's pytest started before nox
has checked the env) is fenced: every module of src/accelgrid is parsed, and only the
importers named here reach it, both in the cli package. Anything else that wants it goes
through one of them (the cell session is handed it: sessions.HEAD_START)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
FENCED = "accelgrid.run.headstart"
ALLOWED = {
    # The command's first moments, before anything heavy loads: relaunch.early.
    "accelgrid.cli.entry",
    # `accelgrid run`: the run started ahead of its session, around nox (prestart.ahead).
    "accelgrid.cli.run",
}
# The cell session gets it from accelgrid run as sessions.HEAD_START (a protocol), not by import.


def _sources() -> dict[str, tuple[str, bool]]:
    """Every module of src/accelgrid: its name -> (its source, whether it is a package)."""
    found = {}
    for path in sorted((SRC / "accelgrid").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path.read_text(), package)
    return found


@functools.cache   # each module parsed once for all the cases
def _imported(module: str, package: bool, text: str) -> frozenset[str]:
    """What ``module`` imports, anywhere in it (function-level imports too): the modules
    and the names imported from them, absolute; and importlib.import_module's constant
    arguments."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if package else module.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join([*here, *([node.module] if node.module else [])])
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return frozenset(names)


def _inside(name: str) -> bool:
    return name == FENCED or name.startswith(FENCED + ".")


def _importers(sources: dict[str, tuple[str, bool]]) -> set[str]:
    """The modules outside the head start that import it (or a module of it)."""
    return {module for module, (text, package) in sources.items()
            if not _inside(module) and any(map(_inside, _imported(module, package, text)))}


def test_only_the_allowed_importers_reach_the_head_start() -> None:
    sources = _sources()
    assert {m for m in sources if _inside(m)} == {
        FENCED, f"{FENCED}.prestart", f"{FENCED}.relaunch"}
    # Equal, not only within: an importer that no longer needs it leaves the list.
    assert _importers(sources) == ALLOWED


@pytest.mark.parametrize(("module", "planted"), [
    ("accelgrid.run.cell", "from .headstart import prestart\n"),
    ("accelgrid.run.cellenv", "from .headstart.relaunch import early\n"),
    ("accelgrid.commands.repro", "def later():\n    from ..run import headstart\n"),
    ("accelgrid.cli.report",
     "import accelgrid.run.headstart.prestart\n"),
    ("accelgrid.commands.bisect",
     "import importlib\nimportlib.import_module('accelgrid.run.headstart.relaunch')\n"),
])
def test_a_planted_import_of_the_head_start_is_caught(module: str, planted: str) -> None:
    sources = _sources()
    text, package = sources[module]
    sources[module] = (text + "\n" + planted, package)
    assert _importers(sources) == ALLOWED | {module}


def test_its_face_only_introduces() -> None:
    """headstart/__init__.py is a docstring: importing the early launch's module loads
    nothing else of it (prestart brings the run, the matrix and the registry)."""
    text, package = _sources()[FENCED]
    body = ast.parse(text).body
    assert package and len(body) == 1 and isinstance(body[0], ast.Expr)
    assert isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)
