"""tools/mutate.py's mutants: each planted fault is one change of the source, of the kinds
docs/design/mutation.md lists, only in the names asked for; and the configured modules exist."""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutate", ROOT / "tools" / "mutate.py")
assert _spec is not None and _spec.loader is not None
mutate = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("mutate", mutate)  # its dataclass looks its module up there
_spec.loader.exec_module(mutate)

SOURCE = '''
"""doc"""
LIMIT = 1e-3


def check(x, seen):
    """doc"""
    if not seen and x < 2:
        return max(x, LIMIT) is None
    return any(seen)


def other(y):
    return y == 3
'''


def test_each_mutant_is_one_fault_of_the_documented_kinds() -> None:
    got = mutate.mutants(SOURCE, ["LIMIT", "check"])
    kinds = sorted(m.what for m, _ in got)
    assert kinds == sorted([
        "0.001 -> 0.01", "0.001 -> 0.0001", "if ...: -> if False:", "and -> or",
        "not x -> x", "< -> <=", "< -> >", "2 -> 20", "max -> min", "is -> is not",
        "any -> all"])
    original = ast.dump(ast.parse(SOURCE))
    texts = [text for _, text in got]
    assert len(set(texts)) == len(texts)
    for text in texts:
        assert ast.dump(ast.parse(text)) != original
        compile(text, "<mutant>", "exec")
    assert all("y != 3" not in t for t in texts)   # `other` was not asked for
    assert any("y != 3" in t for _, t in mutate.mutants(SOURCE, None))


def test_the_configured_modules_and_reviewed_mutants_exist() -> None:
    config = tomllib.loads((ROOT / "tools" / "mutation.toml").read_text())["module"]
    for name, entry in config.items():
        source = (ROOT / entry["path"]).read_text()
        # Counted as mutants() numbers them, without building each mutant's source.
        tree = ast.parse(source)
        count = sum(len(mutate._points(s)) for s in mutate._in_scope(tree, entry.get("names")))
        reviewed = {**entry.get("equivalent", {}), **entry.get("device_only", {})}
        assert all(0 <= int(k) < count for k in reviewed), name
        assert not set(entry.get("equivalent", {})) & set(entry.get("device_only", {})), name
        for test in entry["tests"]:
            if not test.startswith("-") and "/" in test:
                assert (ROOT / test.split("::")[0]).exists(), (name, test)


def test_only_takes_numbers_and_ranges_for_chunks() -> None:
    assert mutate.numbers("3,17, 40-42,") == {3, 17, 40, 41, 42}
    assert mutate.numbers("0-0") == {0}
    for bad in ("x", "4-", "-3", "9-2", "1-2-3"):
        with pytest.raises(ValueError):
            mutate.numbers(bad)
    assert mutate.main(["ops", "--only", "4-"]) == 2
