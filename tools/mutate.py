"""Mutation testing of the checker and op modules: plant one realistic fault at a time in a
module and run the tests that exercise it; a fault no test notices (a survivor) is a
check that could break silently.

    python tools/mutate.py --list                    # the configured modules
    python tools/mutate.py ops                       # every mutant of one module
    python tools/mutate.py ops --only 12,40 -v       # some mutants, with the tests' output
    python tools/mutate.py xpu_rules --only 0-49   # a long module in chunks
    python tools/mutate.py ops --show                # the mutants, without running them

Modules, the parts of them mutated and the tests run for each: tools/mutation.toml. The
faults are the ones that mislead a user when they slip in: comparisons flipped or made
inclusive (``<`` -> ``<=``, ``>``, ...), ``and``/``or`` swapped, a ``not`` dropped (``bool(x)``), an
``if`` whose branch never runs, numbers scaled 10x up and down (every tolerance), ``max``
/ ``min`` and ``any`` / ``all`` swapped (best-of instead of worst-of), True/False swapped.

Why not mutmut or cosmic-ray: both run each mutant in a fresh interpreter, and here each
fresh interpreter pays torch's import (3-6 s on a shared 2-core host) before the first
test; cosmic-ray also mutates the working tree in place, under every other test run of the
checkout. This harness copies the tracked files once, imports torch once, and forks one
child per mutant that writes the mutant into the copy and runs pytest in-process there
(the module under test is imported fresh in each child: the parent never imports it).

Writes ``results/mutation/<module>.json`` (every mutant and its outcome) and prints the
survivors; the kill figures and the reviewed survivors live in docs/design/mutation.md.
Exit 0 when every mutant not marked equivalent in tools/mutation.toml was killed, 1 if
some survived, 2 on bad arguments. A mutant marked ``device_only`` (its code runs only on
an accelerator: a GPU cell's tests kill it) that survives on this host is reported as such
and left out of the figure, not counted as killed.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tools" / "mutation.toml"

_COMPARE_SWAPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.LtE), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,),
    ast.In: (ast.NotIn,), ast.NotIn: (ast.In,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
}
_NAME_SWAPS = {"max": "min", "min": "max", "any": "all", "all": "any",
               "amax": "amin", "amin": "amax", "argmax": "argmin", "argmin": "argmax"}
_OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
            ast.IsNot: "is not"}


@dataclass(frozen=True)
class Mutant:
    index: int
    line: int
    what: str


def _in_scope(tree: ast.Module, names: list[str] | None) -> list[ast.AST]:
    """The top-level statements to mutate: those defining ``names`` (functions, classes,
    assignments), or all but imports and the docstring."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if names is None:
            out.append(node)
            continue
        defined = set()
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            defined = {node.name}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined = {t.id for t in targets if isinstance(t, ast.Name)}
        if defined & set(names):
            out.append(node)
    return out


def _points(node: ast.AST) -> list[tuple[ast.AST, str, Any]]:
    """(node, description, how to mutate it) for every mutation point under ``node``."""
    found: list[tuple[ast.AST, str, Any]] = []
    docstrings = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef, ast.Module)):
            body = n.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for n in ast.walk(node):
        if isinstance(n, ast.Compare):
            for i, op in enumerate(n.ops):
                for new in _COMPARE_SWAPS.get(type(op), ()):
                    found.append((n, f"{_OP_TEXT[type(op)]} -> {_OP_TEXT[new]}",
                                  ("compare", i, new)))
        elif isinstance(n, ast.BoolOp):
            other = "or" if isinstance(n.op, ast.And) else "and"
            found.append((n, f"{'and' if other == 'or' else 'or'} -> {other}", ("boolop",)))
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            found.append((n, "not x -> x", ("not",)))
        elif isinstance(n, ast.If):
            found.append((n, "if ...: -> if False:", ("if",)))
        elif isinstance(n, ast.Constant) and id(n) not in docstrings:
            v = n.value
            if isinstance(v, bool):
                found.append((n, f"{v} -> {not v}", ("const", not v)))
            elif isinstance(v, float) and v not in (0.0, 1.0):
                found.append((n, f"{v!r} -> {v * 10!r}", ("const", v * 10)))
                found.append((n, f"{v!r} -> {v / 10!r}", ("const", v / 10)))
            elif isinstance(v, int) and v >= 2:
                found.append((n, f"{v} -> {v * 10}", ("const", v * 10)))
        elif isinstance(n, ast.Name) and n.id in _NAME_SWAPS:
            found.append((n, f"{n.id} -> {_NAME_SWAPS[n.id]}", ("name", _NAME_SWAPS[n.id])))
        elif isinstance(n, ast.Attribute) and n.attr in _NAME_SWAPS:
            found.append((n, f".{n.attr} -> .{_NAME_SWAPS[n.attr]}",
                          ("attr", _NAME_SWAPS[n.attr])))
    return found


def _apply(n: ast.AST, how: tuple) -> None:
    kind = how[0]
    if kind == "compare":
        n.ops[how[1]] = how[2]()
    elif kind == "boolop":
        n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
    elif kind == "not":  # "not x" -> "bool(x)": the same node, now a call
        operand = n.operand
        n.__class__ = ast.Call
        n.func, n.args, n.keywords = ast.Name("bool", ast.Load()), [operand], []
    elif kind == "if":
        n.test = ast.Constant(False)
    elif kind == "const":
        n.value = how[1]
    elif kind == "name":
        n.id = how[1]
    elif kind == "attr":
        n.attr = how[1]


def mutants(source: str, names: list[str] | None) -> list[tuple[Mutant, str]]:
    """Every mutant of ``source``, with the mutated source."""
    tree = ast.parse(source)
    count = sum(len(_points(s)) for s in _in_scope(tree, names))
    out = []
    for k in range(count):
        t = copy.deepcopy(tree)
        points = [p for s in _in_scope(t, names) for p in _points(s)]
        node, what, how = points[k]
        _apply(node, how)
        ast.fix_missing_locations(t)
        text = ast.unparse(t)
        out.append((Mutant(k, getattr(node, "lineno", 0), what), text))
    return out


def numbers(text: str) -> set[int]:
    """``--only``'s mutant numbers: ``3,17,40-66`` (a range includes both ends), so a long
    module can be run in chunks. ValueError for anything else."""
    out: set[int] = set()
    for part in filter(None, (x.strip() for x in text.split(","))):
        first, dash, last = part.partition("-")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(part)
        out.update(range(lo, hi + 1))
    return out


def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when the harness dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _run_child(copy_root: Path, rel: str, text: str, tests: list[str], timeout: float,
               verbose: bool) -> str:
    """Fork; the child writes the mutant and runs pytest on ``tests`` there. Returns
    ``killed``, ``survived`` or ``timeout`` (counted as killed)."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            _die_with_parent()
            (copy_root / rel).write_text(text, encoding="utf-8")
            os.chdir(copy_root)
            sys.path.insert(0, str(copy_root / "src"))
            if not verbose:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            import pytest

            # no:xdist: in this process (a plain pytest of tests/ starts a worker per core,
            # each importing torch again: 60 s a mutant instead of 10 here).
            rc = pytest.main(["-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                              "-p", "no:xdist", "-W", "ignore", *tests])
            os._exit(int(rc))
        except BaseException:  # noqa: BLE001  (any crash of the mutant kills it)
            os._exit(3)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["module"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Modules: " + ", ".join(config))
    parser.add_argument("module", nargs="?", help="a module name of tools/mutation.toml")
    parser.add_argument("--list", action="store_true", help="list the configured modules")
    parser.add_argument("--show", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--only", help="comma-separated mutant numbers to run")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    parser.add_argument("--out", default=str(ROOT / "results" / "mutation"),
                        help="where <module>.json goes (default: results/mutation)")
    args = parser.parse_args(argv)
    if args.list or not args.module:
        for name, entry in config.items():
            print(f"{name:12} {entry['path']}  tests: {' '.join(entry['tests'])}")
        return 0 if args.list else 2
    if args.module not in config:
        print(f"mutate: no module {args.module!r} (known: {', '.join(config)})", file=sys.stderr)
        return 2
    entry = config[args.module]
    rel = entry["path"]
    source = (ROOT / rel).read_text(encoding="utf-8")
    all_mutants = mutants(source, entry.get("names"))
    equivalent = {int(k): why for k, why in entry.get("equivalent", {}).items()}
    device_only = {int(k): why for k, why in entry.get("device_only", {}).items()}
    if args.show:
        for m, _ in all_mutants:
            mark = ("  (equivalent)" if m.index in equivalent else
                    "  (device only)" if m.index in device_only else "")
            print(f"{m.index:4} line {m.line:4}: {m.what}{mark}")
        return 0
    chosen = all_mutants
    if args.only:
        try:
            wanted = numbers(args.only)
        except ValueError:
            print(f"mutate: --only {args.only!r}: numbers or ranges (40-66), comma-separated",
                  file=sys.stderr)
            return 2
        chosen = [(m, t) for m, t in all_mutants if m.index in wanted]
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    import signal

    # SIGTERM: leave through the finally blocks (the copy of the tree is removed).
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    import torch  # noqa: F401  (imported once here, inherited by every child)

    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="accelgrid-mutate-") as tmp:
        copy_root = Path(tmp)
        _copy_tree(copy_root)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(copy_root / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
        t0 = time.monotonic()
        baseline = _run_child(copy_root, rel, source, entry["tests"], 1800, args.verbose)
        base_s = time.monotonic() - t0
        if baseline != "survived":
            print(f"mutate: the tests fail without any mutant ({baseline}); fix them first",
                  file=sys.stderr)
            return 1
        print(f"{args.module}: {len(chosen)} mutants of {rel}; the tests take {base_s:.1f} s "
              f"unmutated (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
        for m, text in chosen:
            t0 = time.monotonic()
            outcome = _run_child(copy_root, rel, text, entry["tests"],
                                 max(60.0, 5 * base_s), args.verbose)
            results.append({"index": m.index, "line": m.line, "mutation": m.what,
                            "outcome": outcome, "equivalent": equivalent.get(m.index),
                            "device_only": device_only.get(m.index),
                            "seconds": round(time.monotonic() - t0, 1)})
            flag = "" if outcome != "survived" else (
                "  equivalent" if m.index in equivalent else
                "  device only" if m.index in device_only else "  SURVIVED")
            print(f"{m.index:4} line {m.line:4}: {m.what:28} {outcome}{flag}", file=sys.stderr)
        (copy_root / rel).write_text(source, encoding="utf-8")
    left = [r for r in results if r["outcome"] == "survived" and r["equivalent"] is None
            and r["device_only"] is not None]
    survivors = [r for r in results if r["outcome"] == "survived" and r["equivalent"] is None
                 and r["device_only"] is None]
    scored = [r for r in results if r["equivalent"] is None and r not in left]
    killed = len(scored) - len(survivors)
    figure = 100.0 * killed / len(scored) if scored else 100.0
    summary = {"module": args.module, "path": rel, "mutants": len(results),
               "equivalent": len(results) - len(scored) - len(left), "killed": killed,
               "device_only_survived": len(left),
               "survived": len(survivors), "kill_percent": round(figure, 1),
               "seconds": round(time.monotonic() - started, 1),
               "load_average": round(os.getloadavg()[0], 1), "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.module}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.module}: {killed} of {len(scored)} non-equivalent mutants killed "
          f"({figure:.1f} %), {len(results) - len(scored) - len(left)} equivalent, "
          f"{len(left)} device-only left for a GPU cell, in "
          f"{summary['seconds']:.0f} s; {out / (args.module + '.json')}")
    for r in survivors:
        print(f"  survived {r['index']:4} line {r['line']}: {r['mutation']}")
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
