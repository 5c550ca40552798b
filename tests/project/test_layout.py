"""The tests' own layout: they mirror the packages of src/accelgrid (tests/<package>/), with
tests/e2e for real-cell runs, tests/helpers for what tests share, tests/suites for the
payload suites' checks, tests/tools for tools/ and tests/project for the repository as a
whole; no test module imports another (what two need lives in tests/helpers)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "src" / "accelgrid"
EXTRA = {"e2e", "helpers", "project", "suites", "tools"}
DATA = {"data", "bad_matrices", "bad_known_issues"}   # inputs, not tests


def layout_problems(tests: Path, package: Path) -> list[str]:
    """What breaks the layout under ``tests``: a test module at the top, a folder that is
    neither a package of ``package`` nor an extra, a module importing a test module."""
    packages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    problems = [f"{p.name}: a test module outside a folder" for p in tests.glob("test_*.py")]
    for folder in sorted(p for p in tests.iterdir() if p.is_dir()):
        if folder.name.startswith((".", "__")) or folder.name in DATA:
            continue
        if folder.name not in packages | EXTRA:
            problems.append(f"{folder.name}/: no package accelgrid.{folder.name}")
    for module in sorted(tests.rglob("*.py")):
        if any(part in DATA for part in module.relative_to(tests).parts):
            continue
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            problems += [f"{module.relative_to(tests)}: imports {n}" for n in names
                         if n.split(".")[-1].startswith("test_")]
    return problems


def test_the_tests_mirror_the_packages_and_import_no_test_module() -> None:
    assert layout_problems(TESTS, PACKAGE) == []


def test_every_package_has_its_tests_folder() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(p for p in packages if not (TESTS / p).is_dir()) == []


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    package = tmp_path / "src" / "accelgrid"
    (package / "results").mkdir(parents=True)
    (package / "results" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    (tests / "results").mkdir(parents=True)
    (tests / "results" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "helpers").mkdir()
    (tests / "helpers" / "cases.py").write_text("X = 1\n")
    return tests, package


def test_the_check_takes_a_mirrored_tree(tmp_path: Path) -> None:
    assert layout_problems(*_tree(tmp_path)) == []


def test_the_check_catches_each_planted_fault(tmp_path: Path) -> None:
    tests, package = _tree(tmp_path)
    (tests / "test_flat.py").write_text("")
    (tests / "reports").mkdir()                     # no package accelgrid.reports
    (tests / "results" / "test_b.py").write_text("from test_a import X\n")
    (tests / "helpers" / "more.py").write_text("import results.test_a\n")
    assert layout_problems(tests, package) == [
        "test_flat.py: a test module outside a folder",
        "reports/: no package accelgrid.reports",
        "helpers/more.py: imports results.test_a",
        "results/test_b.py: imports test_a",
    ]
