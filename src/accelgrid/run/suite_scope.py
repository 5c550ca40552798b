"""Which of a cell's suites a run's pytest arguments can select tests from.

A selected run (``accelgrid run cpu-2.13 -- -k smoke``) used to hand pytest every suite
and let ``-k`` deselect most of them: the xdist controller loaded every suite's
conftest.py (the offload suite's imports torch) and each worker imported every test
module, before running a few tests. Now pytest gets only the suites the selection can
touch. It is conservative: a suite is left out only when it provably holds no selected
test; anything this module does not understand keeps every suite.

- Test paths or node ids among the arguments: pytest gets those and no suite
  (:func:`named_paths`; an option's value is never taken for a path).
- ``-k EXPR``: evaluated once per suite in three-valued logic (pytest's grammar, see
  ``_pytest/mark/expression.py``). A name is *true* in a suite when it is part of one of
  the suite's folder names (pytest's ``-k`` matches every test's parent folders); *false*
  when it is part of a suite's folder name (it names a suite), yet occurs nowhere in this
  suite: not in its files' names or text, not in the conftest.py files above it; else
  *unknown*. A suite is left out when the expression is false there. Only names that
  name a suite are ever false: a test id built at run time (``f"{name}-adamw-{impl}"``)
  can hold words that appear in no file, a suite's name does not.
- Anything else (``-m``, no ``-k``, ``-p``, ``--lf``, ``--rootdir``, an unknown option, an
  ini file inside a suite, a suite's conftest.py with hooks beyond its folder unless it
  declares ``ACCELGRID_SUITE_LOCAL = True``, ...): every suite.

What it cannot see: a test id that spells another suite's name only at run time (glued
from pieces, or read from outside its suite), e.g. ``f"{'smo'}{'ke'}"``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..base import contract

# Options of pytest 9.2, pytest-xdist 3.8 and pytest-timeout 2.4 that take a value (the
# next argument unless given as --opt=value / -kVALUE). pytest parses with
# allow_abbrev=False, so these are the only spellings.
OPTIONS_WITH_VALUE = frozenset({
    "--assert", "--basetemp", "--cache-show", "--capture", "--code-highlight", "--color",
    "--confcutdir", "--config-file", "--debug", "--deselect", "--dist", "--doctest-glob",
    "--doctest-report", "--durations", "--durations-min", "--ignore", "--ignore-glob",
    "--import-mode", "--junit-prefix", "--junit-xml", "--junitprefix", "--junitxml",
    "--last-failed-no-failures", "--lfnf", "--log-auto-indent", "--log-cli-date-format",
    "--log-cli-format", "--log-cli-level", "--log-date-format", "--log-disable", "--log-file",
    "--log-file-date-format", "--log-file-format", "--log-file-level", "--log-file-mode",
    "--log-format", "--log-level", "--max-warnings", "--max-worker-restart", "--maxfail",
    "--maxprocesses", "--maxschedchunk", "--numprocesses", "--override-ini", "--pastebin",
    "--pdbcls", "--px", "--pythonwarnings", "--report-chars", "--rootdir", "--rsyncdir",
    "--rsyncignore", "--session-timeout", "--show-capture", "--tb", "--testrunuid",
    "--timeout", "--timeout-method", "--timeout_method", "--tx", "--verbosity",
    "-W", "-c", "-k", "-m", "-n", "-o", "-p", "-r",
})
# Options without a value that change neither which files are collected nor the names
# ``-k`` matches (reporting, running, doctest collection of the same files).
SAFE_FLAGS = frozenset({
    "--cache-clear", "--co", "--collect-only", "--collectonly", "--continue-on-collection-errors",
    "--disable-pytest-warnings", "--disable-warnings", "--doctest-continue-on-failure",
    "--doctest-ignore-import-errors", "--doctest-modules", "--exitfirst",
    "--force-short-summary", "--full-trace", "--fulltrace", "--no-fold-skipped", "--no-header",
    "--no-showlocals", "--no-summary", "--noconftest", "--pdb", "--quiet", "--runxfail",
    "--setup-only", "--setup-plan", "--setup-show", "--setuponly", "--setupplan",
    "--setupshow", "--showlocals", "--strict", "--strict-config", "--strict-markers",
    "--timeout-disable-debugger-detection", "--trace", "--verbose", "--xfail-tb",
    "--loadscope-reorder", "--no-loadscope-reorder", "-d", "-l", "-q", "-s", "-v", "-x",
})
# Options with a value that leave the collected names as they are.
SAFE_WITH_VALUE = OPTIONS_WITH_VALUE - {
    "-p",                      # a plugin may add keywords or markers to any test
    "-c", "--config-file", "--rootdir", "--confcutdir",   # other folders, other names
    "--cache-show", "--debug",  # optional value: the next argument may not be theirs
    "--lfnf", "--last-failed-no-failures",
}
# Files that make a folder pytest's rootdir (its tests' names would then start there).
_INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
# The files that hold a pytest configuration (with the section that says so).
_PYTEST_CONFIGS = (("pytest.ini", None), (".pytest.ini", None),
                   ("pyproject.toml", "[tool.pytest"), ("tox.ini", "[pytest]"),
                   ("setup.cfg", "[tool:pytest]"))
# conftest.py hooks pytest calls only for the conftest's own folder; any other hook in a
# suite's conftest.py (pytest_collection_modifyitems, pytest_configure, ...) may select or
# mark tests of other suites: then every suite is collected.
_HOOK = re.compile(r"^\s*(?:async\s+)?def\s+pytest_(\w+)", re.M)
# A suite author's promise that the conftest's other hooks (options, markers, env defaults,
# plugins that act only on this suite's tests) leave every other suite's tests alone:
# a module-level ``ACCELGRID_SUITE_LOCAL = True`` in that conftest.py.
_SUITE_LOCAL = re.compile(rf"^{contract.SUITE_LOCAL}\s*=\s*True\b", re.M)
_LOCAL_HOOKS = frozenset({
    "generate_tests", "make_parametrize_id", "collect_file", "collect_directory",
    "ignore_collect", "pycollect_makeitem", "pycollect_makemodule", "itemcollected",
    "runtest_setup", "runtest_call", "runtest_teardown", "runtest_makereport",
})
_IDENT = re.compile(r"(:?\w|:|\+|-|\.|\[|\]|\\|/)+")   # pytest's -k identifier
_LIMIT_BYTES = 32 << 20   # a suite larger than this is never scanned: kept


def _walk(args: Sequence[str]) -> tuple[list[int], dict[str, str], bool]:
    """Parse pytest arguments: the indices of the positional ones, the last value of each
    option (``-k``...), and whether every option is one this module knows to be safe."""
    positional: list[int] = []
    values: dict[str, str] = {}
    safe = True
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional += range(i, len(args))
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(i - 1)
            continue
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in OPTIONS_WITH_VALUE:
                if not eq and i < len(args):
                    value = args[i]
                    i += 1
                values[name] = value
                safe = safe and _safe_value(name, value)
            else:
                safe = safe and name in SAFE_FLAGS and not eq
            continue
        # A cluster of short options: -vx, -xk smoke, -ksmoke, -n4.
        for j, ch in enumerate(arg[1:], start=1):
            name = "-" + ch
            if name in OPTIONS_WITH_VALUE:
                value = arg[j + 1:]
                if not value and i < len(args):
                    value = args[i]
                    i += 1
                values[name] = value
                safe = safe and _safe_value(name, value)
                break
            safe = safe and name in SAFE_FLAGS
    return positional, values, safe


def _safe_value(name: str, value: str) -> bool:
    # -p no:NAME only takes a plugin away: the names of the tests stay as they are.
    return name in SAFE_WITH_VALUE or (name == "-p" and value.startswith("no:"))


def named_paths(args: Sequence[str], root: Path) -> list[int]:
    """Indices of the arguments that are test paths or node ids (``path::test``) under
    ``root``: option values (``-k suites``) never are."""
    return [i for i in _walk(args)[0]
            if args[i] and (root / args[i].split("::", 1)[0]).exists()]


def suite_paths(suites: Sequence[str], args: Sequence[str], root: Path,
                env: dict[str, str] | None = None) -> list[str]:
    """The suite paths pytest gets for ``args``: none when the arguments name test paths,
    the suites a ``-k`` expression can select from, else all of ``suites``."""
    if named_paths(args, root):
        return []
    env = os.environ if env is None else env
    positional, values, safe = _walk(args)
    expr = values.get("-k", "").strip(" \t")
    if (not expr or positional or not safe or env.get("PYTEST_ADDOPTS")
            or env.get("PYTEST_PLUGINS") or not _own_rootdir(suites, root)):
        return list(suites)
    try:
        tree = _parse(expr)
    except SyntaxError:
        return list(suites)   # pytest says what is wrong with it
    texts = {suite: _text(root, suite) for suite in suites}
    if None in texts.values():
        return list(suites)
    folders = {s: [p.lower() for p in Path(s).parts] for s in suites}
    names = {part for parts in folders.values() for part in parts}
    kept = []
    for suite in suites:

        def truth(ident: str, _suite: str = suite) -> bool | None:
            ident = ident.lower()
            if any(ident in part for part in folders[_suite]):
                return True   # a folder every test of the suite sits in
            if any(ident in n for n in names) and ident not in texts[_suite]:
                return False  # names a suite, and nothing in this one holds it
            return None

        if _evaluate(tree, truth) is not False:
            kept.append(suite)
    return kept or list(suites)   # nothing selectable: let pytest say so, as before


def _own_rootdir(suites: Sequence[str], root: Path) -> bool:
    """Whether pytest's rootdir is ``root`` for any subset of ``suites``: a pytest
    configuration at ``root``, no ini file between it and a suite, every suite a folder
    inside ``root`` and none inside another (their tests' names then do not depend on
    which suites pytest gets)."""
    if not any(section is None or section in _read(root / f)
               for f, section in _PYTEST_CONFIGS if (root / f).is_file()):
        return False
    parts = [Path(s).parts for s in suites]
    for suite, p in zip(suites, parts, strict=True):
        if not p or ".." in p or Path(suite).is_absolute() or not (root / suite).is_dir():
            return False
        if any(q != p and q[:len(p)] == p for q in parts):
            return False
        for n in range(1, len(p) + 1):
            if any((root.joinpath(*p[:n]) / f).is_file() for f in _INI_FILES):
                return False
    return True


def _text(root: Path, suite: str) -> str | None:
    """Lowercased names and text of every file of ``suite`` and of the conftest.py files
    above it; None when it cannot be relied on: the suite is too large or unreadable, or
    a conftest.py in it has hooks that reach beyond its folder (they could add a marker to
    any test)."""
    chunks: list[str] = []
    parts = Path(suite).parts
    for n in range(len(parts)):  # conftest.py files above the suite reach it
        conftest = root.joinpath(*parts[:n]) / "conftest.py"
        if conftest.is_file():
            chunks.append(conftest.read_text(encoding="utf-8", errors="replace"))
    total = 0
    for folder, dirs, files in os.walk(root / suite):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = Path(folder) / name
            try:
                data = path.read_bytes()
            except OSError:
                return None
            total += len(data)
            if total > _LIMIT_BYTES:
                return None
            text = data.decode("utf-8", errors="replace")
            if (name == "conftest.py" and set(_HOOK.findall(text)) - _LOCAL_HOOKS
                    and not _SUITE_LOCAL.search(text)):
                return None
            chunks += [str(path.relative_to(root / suite)), text]
    return "\n".join(chunks).lower()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# --- -k expressions: pytest's grammar, three-valued evaluation ----------------------------
# expr: and_expr ('or' and_expr)*; and_expr: not_expr ('and' not_expr)*;
# not_expr: 'not' not_expr | '(' expr ')' | ident

Tree = tuple  # ("or"|"and", a, b) | ("not", a) | ("ident", name)


def _tokens(expr: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(expr):
        ch = expr[pos]
        if ch in " \t":
            pos += 1
        elif ch in "()":
            out.append(ch)
            pos += 1
        elif m := _IDENT.match(expr, pos):
            out.append(m.group(0))
            pos = m.end()
        else:  # '=', ',', quotes: call syntax, which -k refuses; or a stray character
            raise SyntaxError(f"unexpected {ch!r}")
    return out


def _parse(expr: str) -> Tree:
    tokens = _tokens(expr)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok != expected):
            raise SyntaxError(f"expected {expected or 'more'}")
        pos += 1
        return tok

    def or_expr() -> Tree:
        node = and_expr()
        while peek() == "or":
            take()
            node = ("or", node, and_expr())
        return node

    def and_expr() -> Tree:
        node = not_expr()
        while peek() == "and":
            take()
            node = ("and", node, not_expr())
        return node

    def not_expr() -> Tree:
        tok = take()
        if tok == "not":
            return ("not", not_expr())
        if tok == "(":
            node = or_expr()
            take(")")
            return node
        if tok in (")", "or", "and"):
            raise SyntaxError(f"unexpected {tok!r}")
        if peek() == "(":
            raise SyntaxError("-k takes no call parameters")
        return ("ident", tok)

    tree = or_expr()
    if peek() is not None:
        raise SyntaxError(f"unexpected {peek()!r}")
    return tree


def _evaluate(tree: Tree, truth) -> bool | None:
    """Kleene's three-valued logic: None is unknown."""
    op = tree[0]
    if op == "ident":
        return truth(tree[1])
    if op == "not":
        value = _evaluate(tree[1], truth)
        return None if value is None else not value
    a, b = _evaluate(tree[1], truth), _evaluate(tree[2], truth)
    if op == "and":
        return False if False in (a, b) else (None if None in (a, b) else True)
    return True if True in (a, b) else (None if None in (a, b) else False)
