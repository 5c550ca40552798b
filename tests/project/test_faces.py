"""A package's ``__init__.py`` is its face: it introduces the package (a docstring) and
names what callers import from it (imports, ``__all__``), in at most
:data:`MAX_FACE_LINES` lines. The code lives in named modules beside it, so a reader finds
a concept by its file name. ``accelgrid.testing``'s face is the exception: it is the
vocabulary the suites import (docs/guides/writing-a-test.md), defined where they read it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "accelgrid"
MAX_FACE_LINES = 60
EXEMPT = frozenset({"testing/__init__.py"})   # the suites' vocabulary


def faces(package: Path, exempt: frozenset[str] = EXEMPT) -> list[Path]:
    """Every ``__init__.py`` under ``package`` (itself included), but the ``exempt`` ones
    (paths relative to ``package``)."""
    return sorted(p for p in package.rglob("__init__.py")
                  if p.relative_to(package).as_posix() not in exempt)


def _introduces(node: ast.stmt) -> bool:
    """Whether a top-level statement only introduces: an import, an assignment of a
    dunder name (``__all__``, ``__version__``) or the imports for annotations only."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id.startswith("__") and t.id.endswith("__")
                   for t in targets)
    if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING", "typing.TYPE_CHECKING"):
        return not node.orelse and all(isinstance(n, ast.Import | ast.ImportFrom)
                                       for n in node.body)
    return False


def long_faces(package: Path, exempt: frozenset[str] = EXEMPT) -> list[str]:
    """One line per face under ``package`` longer than :data:`MAX_FACE_LINES`."""
    out = []
    for path in faces(package, exempt):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FACE_LINES:
            out.append(f"{path.relative_to(package).as_posix()}: {lines} lines (a face has at "
                       f"most {MAX_FACE_LINES}): move the code into a named module")
    return out


def faces_with_code(package: Path, exempt: frozenset[str] = EXEMPT) -> list[str]:
    """One line per statement of a face under ``package`` that is not its docstring, an
    import or ``__all__`` (a function, a class, a table, code), as :mod:`ast` parses it."""
    out = []
    for path in faces(package, exempt):
        body = ast.parse(path.read_text(encoding="utf-8"), str(path)).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]   # the docstring
        for node in body:
            if not _introduces(node):
                what = (f"{type(node).__name__.removesuffix('Def').lower()} {node.name}"
                        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                      | ast.ClassDef) else type(node).__name__)
                out.append(f"{path.relative_to(package).as_posix()}:{node.lineno}: {what} "
                           "(a face only imports and re-exports: define it in a named module)")
    return out


def face_problems(package: Path, exempt: frozenset[str] = EXEMPT) -> list[str]:
    """Both checks: :func:`long_faces` and :func:`faces_with_code`."""
    return long_faces(package, exempt) + faces_with_code(package, exempt)


def test_every_face_is_at_most_60_lines() -> None:
    assert len(faces(SRC)) >= 10   # every layer's package is looked at
    assert long_faces(SRC) == []


def test_a_face_holds_no_definition_only_imports_and_all() -> None:
    assert faces_with_code(SRC) == []


FACE = '"""A package."""\n\nfrom .mod import name\n\n__all__ = ["name"]\n'


@pytest.mark.parametrize("planted, found", [
    ("def helper() -> None:\n    pass\n", "pkg/__init__.py:6: function helper"),
    ("class Thing:\n    pass\n", "pkg/__init__.py:6: class Thing"),
    ("TABLE = {}\n", "pkg/__init__.py:6: Assign"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    x = 1\n", "pkg/__init__.py:7: If"),
    ("\n" * (MAX_FACE_LINES - 4), "pkg/__init__.py: 61 lines"),
])
def test_a_face_with_code_or_past_its_lines_is_caught(tmp_path: Path, planted: str,
                                                      found: str) -> None:
    top = tmp_path / "accelgrid"
    (top / "pkg").mkdir(parents=True)
    (top / "__init__.py").write_text('"""Top."""\n\n__version__ = "0"\n')
    (top / "pkg" / "__init__.py").write_text(FACE)
    (top / "testing").mkdir()
    (top / "testing" / "__init__.py").write_text("def only_on() -> None:\n    pass\n")
    assert face_problems(top) == []   # dunders, imports, __all__; testing is exempt
    (top / "pkg" / "__init__.py").write_text(FACE + "\n" * (MAX_FACE_LINES - 5))
    assert face_problems(top) == []   # 60 lines
    (top / "pkg" / "__init__.py").write_text(FACE + planted)
    problems = face_problems(top)
    assert len(problems) == 1 and problems[0].startswith(found), problems
    assert "testing" in " ".join(face_problems(top, frozenset()))  # exempt by its path
