"""Issue 16, bad YAML: inputs that used to end in a traceback, a hang or gigabytes of
memory, given as matrix.yaml and as known_issues.yaml to every command that loads them.
Each must end in exit 2 and one line naming the file (and the line when there is one).

Found by class: keys that are no strings, encodings, nesting, aliases (recursive, bombs,
merge keys), numbers and dates Python cannot build, things that are no regular file,
sizes, several documents, tags, control characters."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accelgrid import cli
from accelgrid.base import errors
from accelgrid.config import validation

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
BASE = (TESTS / "base_matrix.yaml").read_text()
REGISTRY = """schema: 1
issues:
  "pytorch/pytorch#1":
    title: t
    scope: {devices: [cpu]}
    tests: [suites/smoke]
    expect: failed
"""


def _bomb(levels: int = 9, width: int = 9) -> str:
    names = "abcdefghijklmnop"
    lines = ["schema: 1", f"a: &a [{','.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"{names[i]}: &{names[i]} [{','.join([f'*{names[i - 1]}'] * width)}]")
    return "\n".join(lines) + "\n"


def _nested_flow(depth: int) -> str:
    return "schema: " + "[" * depth + "1" + "]" * depth + "\n"


def _nested_block(depth: int) -> str:
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"


# (id, content or a function making the file at a path, what the one line must say,
#  whether it names a line)
Maker = Callable[[Path], None]
CASES: list[tuple[str, bytes | str | Maker, str, bool]] = [
    # keys that are not strings
    ("list-as-key", "? [a, b]\n: 1\n", "a list cannot be a key: keys must be strings", True),
    ("mapping-as-key", "? {a: 1}\n: 1\n", "a mapping cannot be a key", True),
    ("nested-list-key", "schema: 1\ndevices:\n  ? [cpu]\n  : {}\n", "a list cannot be a key",
     True),
    ("number-key", "schema: 1\n1: x\n", "key '1' is read as a number: keys must be strings",
     True),
    ("float-key", 'schema: 1\ntorch:\n  2.13: {torch: "2.13.0"}\n',
     "key '2.13' is read as a number: keys must be strings (quote it)", True),
    ("bool-key", "schema: 1\nyes: 1\n", "key 'yes' is read as a boolean", True),
    ("null-key", "schema: 1\n~: 1\n", "key '~' is read as null", True),
    ("date-key", "schema: 1\n2024-01-01: x\n", "key '2024-01-01' is read as a date", True),
    # encodings
    ("utf16-le-bom", "schema: 1\n".encode("utf-16"), "encoded as UTF-16: save it as UTF-8",
     False),
    ("utf16-be-bom", b"\xfe\xff" + "schema: 1\n".encode("utf-16-be"), "encoded as UTF-16",
     False),
    ("utf16-no-bom", "schema: 1\n".encode("utf-16-le"), "contains NUL bytes", True),
    ("utf32-bom", "schema: 1\n".encode("utf-32"), "encoded as UTF-32", False),
    ("latin1", "schema: 1\ndefaults: {torch: caf\u00e9}\n".encode("latin-1"),
     "not UTF-8 text: byte 0xe9 cannot be decoded", True),
    ("nul-byte", b"schema: 1\x00\n", "contains NUL bytes", True),
    ("control-char", "schema: 1\ndescription: a\x07b\n", "invalid YAML", True),
    # nesting
    ("deep-flow-1000", _nested_flow(1000), "invalid YAML: exceeded maximum nesting depth",
     True),
    ("deep-block-1000", _nested_block(1000), "invalid YAML: exceeded maximum nesting depth",
     True),
    ("deep-flow-100000", _nested_flow(100000), "invalid YAML", True),
    ("deep-flow-33", _nested_flow(33), "nested more than 32 levels deep", True),
    ("deep-block-40", _nested_block(40), "nested more than 32 levels deep", True),
    ("deep-mixed-500", "a:\n" + "  - " * 1 + "[" * 500 + "]" * 500 + "\n",
     "nested more than 32 levels deep", True),
    # aliases
    ("self-alias-list", "a: &a [1, *a]\n", "an alias refers to the structure it is part of",
     True),
    ("self-alias-map", "a: &a {b: *a}\n", "an alias refers to the structure it is part of",
     True),
    ("self-alias-deep", "a: &a {b: {c: [*a]}}\n", "an alias refers to the structure", True),
    ("alias-bomb", _bomb(), "aliases expand this to more than 200000 values", True),
    ("alias-bomb-wide", _bomb(5, 40), "aliases expand this to more than 200000 values", True),
    ("merge-bomb", "a: &a {x: 1, y: 2}\n" + "".join(
        f"{c}: &{c} {{<<: [{', '.join([f'*{p}'] * 1)}], {c}0: [{', '.join([f'*{p}'] * 12)}]}}\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)),
     "aliases expand this to more than 200000 values", True),
    ("undefined-alias", "schema: *nope\n", "invalid YAML: found undefined alias", True),
    # values Python cannot build
    ("int-5000-digits", "schema: " + "9" * 5000 + "\n", "cannot read '9999", True),
    ("int-5000-digits-nested", "schema: 1\ndefaults: {workers: " + "1" * 5000 + "}\n",
     "cannot read '1111", True),
    ("bad-date", "schema: 1\nnote: 2024-02-30\n", "cannot read '2024-02-30'", True),
    ("python-tag", "schema: !!python/object/apply:os.system [echo hi]\n",
     "invalid YAML: could not determine a constructor", True),
    ("unknown-tag", "schema: !shout 1\n", "invalid YAML: could not determine a constructor",
     True),
    # documents and shapes
    ("two-documents", "schema: 1\n---\nschema: 1\n",
     "invalid YAML: expected a single document in the stream, but found another document",
     True),
    ("empty-file", "", "expected a mapping at the top level", True),
    ("only-comments", "# nothing\n", "expected a mapping at the top level", True),
    ("top-level-list", "- schema\n", "expected a mapping at the top level", True),
    ("top-level-scalar", "hello\n", "expected a mapping at the top level", True),
    ("tab-indent", "schema: 1\ndefaults:\n\ttorch: x\n", "invalid YAML", True),
    ("duplicate-key", "schema: 1\nschema: 1\n", "duplicate key 'schema' (first on line 1)", True),
    ("duplicate-anchor", "a: &x 1\nb: &x [*x]\n",
     "invalid YAML: duplicate anchor (first on line 1)", True),
    # sizes and kinds of file
    ("over-1-mib", "schema: 1\n" + "#" * (validation.MAX_YAML_BYTES + 10) + "\n",
     f"too large: {validation.MAX_YAML_BYTES + 21} bytes (the limit is "
     f"{validation.MAX_YAML_BYTES})", False),
    ("path-5000-chars", lambda p: None, "cannot read: File name too long", False),
    ("dev-zero", lambda p: p.symlink_to("/dev/zero"), "not a regular file", False),
    ("dev-null", lambda p: p.symlink_to("/dev/null"), "not a regular file", False),
    ("fifo", lambda p: os.mkfifo(p), "not a regular file", False),
    ("folder", lambda p: p.mkdir(), "is a folder, not a file", False),
    ("symlink-loop", lambda p: p.symlink_to(p.name), "cannot read: Too many levels of symbolic "
                                                     "links", False),
    ("missing", lambda p: None, "file not found", False),
]
IDS = [c[0] for c in CASES]


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "suites" / "smoke").mkdir(parents=True)
    (proj / "matrix.yaml").write_text(BASE.replace("path: .", "path: suites/smoke"))
    (proj / "known_issues.yaml").write_text(REGISTRY)
    return proj


def _place(proj: Path, name: str, case: str, content) -> Path:
    path = proj / name
    if case == "path-5000-chars":
        return proj / ("m" * 5000 + ".yaml")
    if case == "missing":
        return proj / "nowhere.yaml"
    path.unlink()
    if callable(content):
        content(path)
    else:
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def _one_line(capsys, path: Path, says: str, with_line: bool) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(str(path) + (":" if with_line else ": ")), line
    if with_line:
        assert line[len(str(path)) + 1:].split(":", 1)[0].isdigit(), line
    assert says in line, line
    assert len(line) - len(str(path)) < 300
    return line


@pytest.mark.parametrize("case", IDS)
def test_bad_matrix_yaml_is_one_line_in_every_command(tmp_path, capsys, case: str) -> None:
    _, content, says, with_line = CASES[IDS.index(case)]
    proj = _project(tmp_path)
    path = _place(proj, "matrix.yaml", case, content)
    started = time.monotonic()
    for command in (["validate", str(path)], ["--matrix", str(path), "cells", "--json"],
                    ["--matrix", str(path), "plan", "cpu-2.13"],
                    ["--matrix", str(path), "ci", "render"],
                    ["--matrix", str(path), "repro", "--list"]):
        assert cli.main(command) == errors.EXIT_INVALID, command
        _one_line(capsys, path, says, with_line)
    assert time.monotonic() - started < 30
    assert not (proj / ".github").exists()  # ci render wrote nothing


@pytest.mark.parametrize("case", IDS)
def test_bad_registry_yaml_is_one_line(tmp_path, capsys, case: str) -> None:
    _, content, says, with_line = CASES[IDS.index(case)]
    proj = _project(tmp_path)
    path = _place(proj, "known_issues.yaml", case, content)
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "repro", "--list",
                     "--registry", str(path)]) == errors.EXIT_INVALID
    _one_line(capsys, path, says, with_line)


@pytest.mark.parametrize("case", ["list-as-key", "utf16-le-bom", "deep-flow-1000", "alias-bomb",
                                  "int-5000-digits", "dev-zero", "self-alias-list"])
def test_real_cli_prints_no_traceback(tmp_path, case: str) -> None:
    _, content, says, _ = CASES[IDS.index(case)]
    proj = _project(tmp_path)
    path = _place(proj, "matrix.yaml", case, content)
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", ["list-as-key", "utf16-le-bom", "deep-block-1000",
                                  "self-alias-map", "int-5000-digits", "alias-bomb"])
def test_nox_list_with_a_broken_matrix_prints_the_one_line_error(tmp_path, case: str) -> None:
    _, content, says, _ = CASES[IDS.index(case)]
    proj = _project(tmp_path)
    (proj / "noxfile.py").write_text((ROOT / "noxfile.py").read_text())
    path = _place(proj, "matrix.yaml", case, content)
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"), "-l"],
                          cwd=proj, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:") and says in lines[0], proc.stderr


def test_the_alias_bomb_is_refused_fast_and_small(tmp_path) -> None:
    # 352 bytes that expand to 9**9 = 387 million values: refused in well under a second,
    # before anything walks the expanded structure (it used to run out of memory).
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    assert len(path.read_bytes()) < 400
    code = ("import sys, time, tracemalloc; from accelgrid.config import validation\n"
            "tracemalloc.start(); t = time.time()\n"
            "try: validation.load_yaml(sys.argv[1])\n"
            "except validation.ValidationFailed as e: print(e)\n"
            "print(time.time() - t, tracemalloc.get_traced_memory()[1])")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60)
    message, numbers = proc.stdout.strip().splitlines()
    seconds, peak_bytes = map(float, numbers.split())
    assert "aliases expand this to more than 200000 values" in message
    assert seconds < 1.0 and peak_bytes < 10_000_000


def test_a_valid_file_at_the_size_limit_loads_in_seconds(tmp_path) -> None:
    # Just under 1 MiB of profiles (a 5.5 MB one took 37 s and 370 MB before): loaded and
    # validated quickly.
    proj = _project(tmp_path)
    text = (proj / "matrix.yaml").read_text()
    entries, size, i = [], len(text), 0
    while True:
        entry = (f"  p{i}:\n    description: profile {i}\n    env:\n"
                 + "".join(f"      VAR_{j}: \"value-{j}\"\n" for j in range(8)))
        if size + len(entry) > validation.MAX_YAML_BYTES - 100:
            break
        entries.append(entry)
        size += len(entry)
        i += 1
    text = text.replace("profiles:\n", "profiles:\n" + "".join(entries), 1)
    (proj / "matrix.yaml").write_text(text)
    started = time.monotonic()
    from accelgrid.config.matrix import load_matrix

    matrix = load_matrix(proj / "matrix.yaml")
    assert len(matrix.profiles) > 4000 and len(matrix.cells) == 5
    assert time.monotonic() - started < 20


def test_anchors_aliases_and_merge_keys_within_bounds_still_work(tmp_path) -> None:
    # The bounds refuse alias bombs, not aliases: sharing pins and merging a base is fine.
    from accelgrid.config.matrix import load_matrix

    proj = _project(tmp_path)
    text = (proj / "matrix.yaml").read_text()
    text = text.replace('  "2.4": {torch: "2.4.1", transformers: "4.57.6"}',
                        '  "2.4": &old {torch: "2.4.1", transformers: "4.57.6"}')
    text = text.replace('  "2.13": {torch: "2.13.0", transformers: "5.24.0"}',
                        '  "2.13": {<<: *old, torch: "2.13.0", transformers: "5.24.0"}')
    (proj / "matrix.yaml").write_text(text)
    matrix = load_matrix(proj / "matrix.yaml")
    assert matrix.torch["2.13"].pins == {"torch": "2.13.0", "transformers": "5.24.0"}
    assert matrix.torch["2.4"].pins["torch"] == "2.4.1"
