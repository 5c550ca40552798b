"""The package's shape: import layers (import-linter), no import circle, one command tree."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "accelgrid"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(src_parent: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src_parent)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_import_contracts_hold() -> None:
    proc = _lint_imports(ROOT / "src")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize("module, planted, broken", [
    # results is read by the reports; it must never reach up into them.
    ("results/writing.py", "from .. import report  # noqa\n", "Layers"),
    # the matrix model is read by the hosts' planning; it must not reach up into it.
    ("config/matrix.py", "from ..host import install  # noqa\n", "Layers"),
    # run and report are siblings: the run leaves report pages to the session step.
    ("run/cell.py", "from .. import report  # noqa\n", "Layers"),
    # the in-cell plugin runs where only torch, pytest and the stdlib exist.
    ("results/provenance.py", "import yaml  # noqa\n", "In-cell"),
    ("base/text.py", "import jinja2  # noqa\n", "In-cell"),
])
def test_import_contracts_catch_a_planted_violation(tmp_path, module, planted, broken) -> None:
    copy = tmp_path / "src" / "accelgrid"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    text = target.read_text()
    cut = text.index("\nfrom __future__ import annotations\n") + len(
        "\nfrom __future__ import annotations\n")
    target.write_text(text[:cut] + planted + text[cut:])
    proc = _lint_imports(tmp_path / "src")
    assert proc.returncode != 0
    assert f"{broken}" in proc.stdout and "BROKEN" in proc.stdout


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``edges`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_cycle_finder_finds_a_planted_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_circle() -> None:
    graph = grimp.build_graph("accelgrid")  # every import, function-level ones included
    modules = sorted(m for m in graph.modules if m.startswith("accelgrid"))
    # A package's __init__ importing its own submodules is not a circle of concepts.
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m)
                 if d.startswith("accelgrid") and d != m and not d.startswith(m + ".")}
             for m in modules}
    cycle = _cycle(edges)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_only_cli_builds_argument_parsers() -> None:
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "argparse" not in imported, f"{rel} parses a command line; that belongs in cli/"
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "main"
                       for n in tree.body), f"{rel} has a main(); commands live in cli/"


def test_architecture_layout_names_every_module() -> None:
    doc = (ROOT / "docs" / "design" / "architecture.md").read_text()
    table = doc[doc.index("## Layout"):]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `src/accelgrid/")]
    named = " ".join(rows)
    modules = {p.stem for p in SRC.rglob("*.py")
               if not p.stem.startswith("_") and "templates" not in p.parts}
    missing = sorted(m for m in modules if f"`{m}`" not in named)
    assert not missing, f"docs/design/architecture.md's layout table does not name {missing}"


def test_architecture_draws_the_layers_import_linter_checks() -> None:
    """docs/design/architecture.md's drawing names every module of .importlinter's layers, in
    the same order from top to bottom."""
    import configparser
    import re

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = [[m.strip() for m in re.split(r"[|:]", line) if m.strip()]
              for line in cfg["importlinter:contract:layers"]["layers"].split("\n") if line]
    doc = (ROOT / "docs" / "design" / "architecture.md").read_text()
    drawing = doc[doc.index("```"):doc.index("## The data's path")]
    # Each layer's line starts with its first module, in .importlinter's order.
    at = [re.search(rf"^ {re.escape(layer[0])}(?![\w])", drawing, re.M) for layer in layers]
    assert all(at), [layer[0] for layer, m in zip(layers, at, strict=True) if not m]
    starts = [m.start() for m in at if m]
    assert starts == sorted(starts), "the drawing's layers are not in .importlinter's order"


def test_readme_first_screen_counts_are_the_cpu_baselines() -> None:
    """The README's first screen says what a cpu run covers; its counts are the baseline
    CI gates against (update both together)."""
    import json
    import re
    from collections import Counter

    readme = (ROOT / "README.md").read_text()
    said = re.search(r"at this commit: (\d+) passed, (\d+) skipped\s.*?, (\d+) not-run", readme,
                     re.S)
    assert said, "README's first screen lost its counts"
    tests = json.loads((ROOT / "baselines" / "cpu-2.13.json").read_text())["tests"]
    counts = Counter(tests.values())
    assert tuple(map(int, said.groups())) == (
        counts["passed"], counts["skipped"], counts["not-run"])
    assert f"cpu cell covers on a host without a GPU: {len(tests)} tests" in readme


def _in_cell_packages() -> tuple[str, ...]:
    """The in-cell contract's source packages (.importlinter): what runs inside a cell."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    return tuple(cfg["importlinter:contract:in-cell"]["source_modules"].split())


def _inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_in_cell_contract_is_at_most_four_whole_layers() -> None:
    """The in-cell contract names whole packages, each a layer of the layers contract, at
    most four, and they are the bottom of the stack: nothing in-cell sits above a module
    that is not."""
    import configparser
    import re

    packages = _in_cell_packages()
    assert 0 < len(packages) <= 4
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = [m.strip() for line in cfg["importlinter:contract:layers"]["layers"].split("\n")
              for m in re.split(r"[|:]", line) if m.strip()]
    assert {f"accelgrid.{name}" for name in layers[-len(packages):]} == set(packages)
    for package in packages:
        assert (SRC / package.split(".", 1)[1] / "__init__.py").is_file(), package


def test_every_module_a_cell_imports_is_in_the_in_cell_packages() -> None:
    """What runs in a cell (the plugin, the suites' vocabulary, and every accelgrid module
    either reaches, function-level imports included) lies inside the in-cell packages, so
    the in-cell contract covers it."""
    graph = grimp.build_graph("accelgrid")
    packages = _in_cell_packages()
    entry = ["accelgrid.testing.pytest_plugin", "accelgrid.testing"]
    reached = set(entry)
    for module in entry:
        reached |= graph.find_upstream_modules(module)
    outside = sorted(m for m in reached
                     if m.startswith("accelgrid.") and not _inside(m, packages))
    assert not outside, f"in-cell code imports {outside}: move them into {packages}"


def test_the_in_cell_check_sees_a_planted_import(tmp_path: Path) -> None:
    copy = tmp_path / "src" / "accelgrid"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "testing" / "opcapture.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from ..host import detect\n")
    code = ("import grimp, sys; g = grimp.build_graph('accelgrid'); "
            "print('accelgrid.host.detect' in g.find_upstream_modules("
            "'accelgrid.testing.pytest_plugin'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "src")}, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr


def test_suites_import_only_in_cell_modules() -> None:
    # A cell's env has torch and pytest, not accelgrid's own dependencies: a suite that
    # imports e.g. accelgrid.host.detect (-> matrix -> jsonschema) fails to collect there.
    packages = _in_cell_packages()
    bad = []
    for path in (ROOT / "suites").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = ([f"{node.module}.{a.name}" for a in node.names]
                         if node.module == "accelgrid" else [node.module])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("accelgrid.") and not _inside(name, packages):
                    bad.append(f"{path.relative_to(ROOT)}: {name}")
    # seed_coverage is a report tool run with accelgrid installed, not a test module.
    bad = [b for b in bad if not b.startswith("suites/hf_examples/seed_coverage.py")]
    assert not bad, bad


def _written_under(argv: list[str]) -> Path | None:
    """Where ``accelgrid ARGV`` writes its files (its ``--out``; ``ops predict`` without
    one writes beside its one input), or None for a command with no output folder."""
    from accelgrid.cli import parser

    args = parser.parse(argv)
    out = getattr(args, "out", None)
    if out is None and getattr(args, "inputs", None):
        out = Path(args.inputs[0]).parent if len(args.inputs) == 1 else "results"
    return None if out is None else Path(out)


def test_readme_commands_write_only_under_results() -> None:
    """Every `accelgrid` command of the README that writes files writes them under
    results/ (which git ignores), never into a tracked folder such as docs/."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
             for ln in block.splitlines()]
    commands = [shlex.split(ln)[1:] for ln in lines if ln.startswith("accelgrid ")]
    outs = {" ".join(argv): _written_under(argv) for argv in commands}
    assert sum(out is not None for out in outs.values()) >= 3, outs   # grid, ops grid, predict
    assert "/results/" in (ROOT / ".gitignore").read_text().splitlines()
    wrong = {c: str(out) for c, out in outs.items()
             if out is not None and out.parts[0] != "results"}
    assert not wrong, wrong
    # The planted fault: the predict command without its --out writes into docs/cuda/.
    assert _written_under(["ops", "predict", "docs/cuda/ops-cuda-2.11.json"]) == Path("docs/cuda")


def test_no_package_file_is_ignored_by_git() -> None:
    """A new module in a package named like an output folder (src/accelgrid/results/) is
    committed, not silently ignored: .gitignore anchors its output folders at the root."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probes = [str(p.relative_to(ROOT) / "new_module.py")
              for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.stdout == "", f"ignored by .gitignore: {proc.stdout.split()}"


def test_what_the_readme_commands_write_is_ignored_by_git() -> None:
    """results/ (cells, grids) and site/ (`accelgrid publish --out site`, docs/reference/history.md)
    leave the checkout clean."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probes = ["results/cpu-2.13/tests.jsonl", "results/grid.html", "site/index.html"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.stdout.split() == probes
