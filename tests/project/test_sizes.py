"""The house's size limits in src/accelgrid: no module over 600 lines, no function (or
method, nested or not) over 80 lines from its def line to its last. ruff's C901
(pyproject.toml, max-complexity 15) holds the third limit."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "accelgrid"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def oversized(root: Path) -> list[str]:
    """One line per module under ``root`` over MAX_MODULE_LINES and per function over
    MAX_FUNCTION_LINES, with its length."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel}: {lines} lines (module, at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}: {length} lines "
                                 f"(function, at most {MAX_FUNCTION_LINES})")
    return found


def test_no_module_or_function_of_src_is_over_its_limit() -> None:
    assert SRC.is_dir()
    found = oversized(SRC)
    assert not found, "over the house's limits (split them into named steps):\n" + "\n".join(found)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of ``lines`` lines, def line included."""
    return (f"{indent}def {name}() -> None:\n"
            + "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1)))


def test_the_check_catches_a_planted_long_module_and_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "pkg" / "at_limit.py").write_text("x = 1\n" * 600)
    (tmp_path / "funcs.py").write_text(
        _function("long_one", 81) + "\n\n" + _function("at_limit", 80) + "\n\nclass C:\n"
        + _function("long_method", 81, indent="    "))
    assert oversized(tmp_path) == [
        "funcs.py:1 long_one: 81 lines (function, at most 80)",
        "funcs.py:167 long_method: 81 lines (function, at most 80)",
        "pkg/long.py: 601 lines (module, at most 600)",
    ]


def test_an_80_line_function_passes(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(_function("at_limit", 80))
    assert oversized(tmp_path) == []
