"""In-cell code asks no package installer for the host's configuration.

The in-cell packages (.importlinter's in-cell contract: testing, results, devices, base)
run inside a cell's interpreter. A few of them start processes, and must: base.lifetime
runs a command in a process group of its own, the device modules ask the device tools
(nvidia-smi, sycl-ls, ...) for the driver and device ids env.json records, and
results.provenance asks git for the project's commit. So the rule is not "no subprocess"
but narrower: no in-cell module that starts a process runs pip, uv or conda (``pip config``:
reading pip's configuration to carry it over to uv). That is the host's business before a
cell env exists (accelgrid.host.pipconfig); in a cell it would read the cell env's pip,
not the host's, once for every test process.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "accelgrid"
# The package installers whose configuration is the host's.
INSTALLERS = frozenset({"pip", "pip3", "uv", "conda", "mamba", "micromamba"})
# os functions that start a process (besides the subprocess module and lifetime's run_group).
_OS_STARTERS = re.compile(r"^(system|popen|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?)$")


def _in_cell_folders() -> list[Path]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    packages = cfg["importlinter:contract:in-cell"]["source_modules"].split()
    return [SRC / p.split(".", 1)[1] for p in packages]


def _starts_processes(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
            return True
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "os" and _OS_STARTERS.match(node.attr)):
            return True
        if isinstance(node, (ast.Name, ast.Attribute, ast.alias)) and "run_group" in (
                getattr(node, "id", None), getattr(node, "attr", None),
                getattr(node, "name", None)):
            return True
    return False


def _names_an_installer(text: str) -> bool:
    """Whether ``text`` is (part of) a command running a package installer: its first word
    is one (``pip config list``, ``/usr/bin/uv``) or ``-m`` one follows (``python -m
    pip``); a list's ``"pip"`` is such a text of its own."""
    words = text.split()
    if words and words[0].rsplit("/", 1)[-1] in INSTALLERS:
        return True
    return any(a == "-m" and b in INSTALLERS for a, b in zip(words, words[1:], strict=False))


def host_config_runs(source: str) -> list[str]:
    """The installer commands ``source`` (a module's text) holds, when it also starts
    processes: each as ``line N: 'text'``. Docstrings and other bare strings are prose,
    left out."""
    tree = ast.parse(source)
    if not _starts_processes(tree):
        return []
    prose = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    runs = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in prose and _names_an_installer(n.value)]
    return [f"line {n.lineno}: {n.value!r}" for n in sorted(runs, key=lambda n: n.lineno)]


def test_no_in_cell_module_runs_a_package_installer() -> None:
    found = {str(p.relative_to(SRC)): runs for folder in _in_cell_folders()
             for p in sorted(folder.rglob("*.py"))
             if (runs := host_config_runs(p.read_text(encoding="utf-8")))}
    assert not found, (f"in-cell modules run a package installer {found}: reading the host's "
                       "configuration belongs in accelgrid.host (host/pipconfig.py)")


def test_the_check_sees_a_planted_pip_config() -> None:
    """The planted fault: pip_settings as it stood in results/environment.py."""
    planted = '''
import subprocess, sys

def pip_settings(python=None):
    """pip's configuration, through ``pip config list``."""
    return subprocess.run([python or sys.executable, "-m", "pip", "config", "list"],
                          capture_output=True, text=True).stdout
'''
    assert host_config_runs(planted) == ["line 6: 'pip'"]
    # Written as one command line, through os or lifetime's process group, it is seen too.
    assert host_config_runs("import os\nos.system('uv pip list')\n")
    assert host_config_runs("from ..base import lifetime\n"
                            "lifetime.run_group([exe, '-m', 'pip', 'config', 'debug'])\n")
    assert host_config_runs("import os\nos.popen(f'{sys.executable} -m pip config list')\n")


def test_what_the_check_leaves_alone() -> None:
    # A process that is no installer (git, a device tool), and prose naming pip.
    assert host_config_runs('"""Asks git; pip is the host\'s."""\nimport subprocess\n'
                            'subprocess.run(["git", "rev-parse", "HEAD"])\n') == []
    assert host_config_runs('"""pip config"""\nimport subprocess\n'
                            'subprocess.run(["nvidia-smi", "-L"])\n') == []
    # Naming pip without starting any process (a package's name in a table) is not a run.
    assert host_config_runs('PACKAGES = ("pip", "torch")\n') == []
