"""Validating YAML files against a JSON schema, with errors that name file, line and key.

Used for matrix.yaml and known_issues.yaml (and other strict YAML files): every problem
becomes one line ``FILE:LINE: KEY.PATH: message``, unknown keys get a "did you mean"
suggestion, and the caller prints them instead of a traceback.

The schemas are JSON Schema (draft 2020-12) files shipped in the package,
``accelgrid/schemas/<file>.schema.json`` (:data:`SCHEMA_FILES`): :func:`load_schema` gives
one as a dict, :func:`schema_text` as the file's text (for editors and
``accelgrid schema``). A ``description`` of a string, number or pattern doubles as the
hint in type and pattern errors (``expected string, got a number (a torch series like
"2.13")``); descriptions of mappings and lists are for editors only.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.resources
import importlib.util
import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..base import contract, jsonio, statkey
from ..base.errors import InvalidInput

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.protocols import Validator

KeyPath = tuple[Any, ...]

SCHEMA_FILES = {"matrix": "matrix.schema.json", "known-issues": "known_issues.schema.json"}


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    path: KeyPath
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        key = dotted(self.path)
        return f"{where}: {key}: {self.message}" if key else f"{where}: {self.message}"


class ValidationFailed(InvalidInput):
    """One or more problems in an input file; ``str()`` is ready to print."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + short(part, 80)
    return out


def short(value: Any, limit: int = 60) -> str:
    """``value`` as text, cut to ``limit`` characters (a message stays one short line
    whatever the input holds)."""
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    if not text.isprintable():  # any other control or line-break character: escaped
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass
class SourceMap:
    """Line numbers (1-based) of every key and list item of a YAML document."""

    file: str
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, path: KeyPath) -> int | None:
        # Fall back to the closest enclosing key that has a line.
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return None

    def problem(self, path: KeyPath, message: str) -> Problem:
        return Problem(self.file, self.line(path), tuple(path), message)


def _index(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    # Depth and size were bounded by _check_graph, so the recursion is too.
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = (*path, key_node.value)
            lines[sub] = key_node.start_mark.line + 1
            _index(value_node, sub, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            lines[sub] = item.start_mark.line + 1
            _index(item, sub, lines)


# Bounds on what a YAML input file may be, checked before any work that grows with them
# (a 350-byte file of nested aliases expands to 387 million values).
MAX_YAML_BYTES = 1024 * 1024   # matrix.yaml is ~8 KB, known_issues.yaml ~10 KB
MAX_YAML_DEPTH = 32            # nesting levels; the schemas need 7
MAX_YAML_VALUES = 200_000      # values (keys, items, scalars) with every alias expanded

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TAG_WORD = {"int": "a number", "float": "a number", "bool": "a boolean",
             "null": "null", "timestamp": "a date"}
_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"),
         (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"))

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_Loader):  # type: ignore[misc, valid-type]
    """SafeLoader (libyaml's when available) that refuses duplicate mapping keys (YAML
    silently keeps the last) and turns a value Python cannot build (a 5,000-digit
    integer, February 30th) into an error at its line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *base`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        # (the base loader is untyped: libyaml's or PyYAML's, picked at import)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            what = str(exc).split("\n")[0][:200]
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.value[:40]!r}: {what}"
                if isinstance(node.value, str) else f"cannot read this value: {what}",
                node.start_mark) from None


def _fail(name: str, message: str, line: int | None = None) -> ValidationFailed:
    return ValidationFailed([Problem(name, line, (), message)])


def read_bounded(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_YAML_BYTES (never blocks on a FIFO,
    never reads /dev/zero forever)."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise _fail(name, "file not found") from None
    except IsADirectoryError:
        raise _fail(name, "is a folder, not a file") from None
    except OSError as exc:
        raise _fail(name, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _fail(name, "is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise _fail(name, "not a regular file (a device, pipe or socket)")
        if info.st_size > MAX_YAML_BYTES:
            raise _fail(name, f"too large: {info.st_size} bytes (the limit is "
                              f"{MAX_YAML_BYTES})")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise _fail(name, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_YAML_BYTES:  # grew while being read
        raise _fail(name, f"too large: over {MAX_YAML_BYTES} bytes")
    return data


def _decode(data: bytes, name: str) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise _fail(name, f"encoded as {encoding}: save it as UTF-8")
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise _fail(name, "contains NUL bytes (UTF-16 or a binary file?): save it as UTF-8 "
                          "text", line)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise _fail(name, f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded; "
                          "save it as UTF-8", line) from None


def _check_graph(root: yaml.Node, name: str) -> None:
    """Bound the composed node graph before anything walks it: nesting depth, values with
    aliases expanded (an alias bomb is small as text and huge expanded), an alias inside
    its own anchor (a recursive structure), and mapping keys (strings only)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            size[key], depth[key] = 1, 0
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = list(node.value)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            line = node.start_mark.line + 1
            if depth[key] > MAX_YAML_DEPTH:
                raise _fail(name, f"nested more than {MAX_YAML_DEPTH} levels deep", line)
            if size[key] > MAX_YAML_VALUES:
                raise _fail(name, f"aliases expand this to more than {MAX_YAML_VALUES} values",
                            line)
            continue
        if key in size:
            continue  # an alias of a node already measured
        if key in on_path:
            raise _fail(name, "an alias refers to the structure it is part of (a recursive "
                              "structure)", node.start_mark.line + 1)
        on_path.add(key)
        if len(on_path) > MAX_YAML_DEPTH:
            raise _fail(name, f"nested more than {MAX_YAML_DEPTH} levels deep",
                        node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, _ in node.value:
                _check_key(key_node, name)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise _fail(name, "an alias refers to the structure it is part of (a "
                                  "recursive structure)", child.start_mark.line + 1)
            if id(child) not in size:
                stack.append((child, False))


def _check_key(node: yaml.Node, name: str) -> None:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        if node.tag in (_STR_TAG, _MERGE_TAG):
            return
        word = _TAG_WORD.get(node.tag.rsplit(":", 1)[-1], f"a {node.tag.rsplit(':', 1)[-1]}")
        raise _fail(name, f"key {node.value[:40]!r} is read as {word}: keys must be strings "
                          f"(quote it)", line)
    kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
    raise _fail(name, f"{kind} cannot be a key: keys must be strings", line)


def load_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Parse ``path``; every problem (syntax, encoding, size, depth, aliases, keys)
    becomes a ValidationFailed naming the file (and the line when there is one).

    Bounded before any work that grows with the input: a regular file of at most
    MAX_YAML_BYTES, UTF-8, at most MAX_YAML_DEPTH levels and MAX_YAML_VALUES values with
    aliases expanded, no recursive alias, string keys only."""
    name = str(path)
    text = _decode(read_bounded(Path(path)), name)
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_graph(node, name)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else None
        position = getattr(exc, "position", None)  # a ReaderError's
        if line is None and isinstance(position, int):
            line = text[:position].count("\n") + 1
        what = getattr(exc, "problem", None) or str(exc).split("\n")[0]
        context = getattr(exc, "context", None)
        if context and what.startswith("but "):  # "...a single document, but found another"
            what = f"{context}, {what}"
        elif context and what == "second occurrence":  # an anchor defined twice
            first = getattr(exc, "context_mark", None)
            what = context.split(";")[0].removeprefix("found ") + (
                f" (first on line {first.line + 1})" if first else "")
        raise _fail(name, f"invalid YAML: {what}", line) from None
    except RecursionError:  # not reached within MAX_YAML_DEPTH; a last guard
        raise _fail(name, "nested too deeply") from None
    finally:
        loader.dispose()
    smap = SourceMap(name)
    if node is not None:
        _index(node, (), smap.lines)
    return data, smap


def check_known(kind: str, value: str, known: list[str], smap: SourceMap, path: KeyPath
                ) -> list[Problem]:
    """A one-problem list if ``value`` is not among ``known`` (with a suggestion)."""
    if value in known:
        return []
    return [smap.problem(path, f"unknown {kind} '{value}' (known: {', '.join(known)})"
                               f"{suggest(value, known)}")]


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if value is None:
        return "nothing (null)"
    return type(value).__name__


def suggest(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or empty."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _unknown_keys(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
                  smap: SourceMap) -> list[Problem]:
    """Each key a closed mapping does not know, with the ones it does."""
    if not isinstance(error.instance, dict):
        return []
    if "patternProperties" in schema or schema.get("additionalProperties") is not False:
        return []
    known = sorted(schema.get("properties", {}))
    expected = ", ".join(known)
    return [smap.problem((*path, key), f"unknown key '{short(key)}'; expected one of: "
                                       f"{expected}{suggest(short(key), known)}")
            for key in error.instance if key not in known]


def _required(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
              smap: SourceMap) -> list[Problem]:
    return [smap.problem(path, error.message.replace("is a required property", "is required"))]


def _wrong_type(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
                smap: SourceMap) -> list[Problem]:
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    expected = " or ".join(types)
    # A mapping's or list's description documents the section, it is no format hint.
    hint = "" if {"object", "array"} & set(types) else schema.get("description", "")
    msg = f"expected {expected}, got {_type_name(error.instance)}"
    if isinstance(error.instance, float) and "integer" in types:
        msg = (f"expected integer, got {short(error.instance)} "
               "(a whole number, no decimal point)")
    if isinstance(error.instance, float) and expected == "string":
        msg += f" — quote version numbers (\"{error.instance}\" is read as a number)"
    return [smap.problem(path, msg + (f" ({hint})" if hint else ""))]


def _not_listed(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
                smap: SourceMap) -> list[Problem]:
    choices = [str(c) for c in schema["enum"]]
    return [smap.problem(path, f"'{short(error.instance)}' is not one of: {', '.join(choices)}"
                               f"{suggest(short(error.instance), choices)}")]


def _no_match(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
              smap: SourceMap) -> list[Problem]:
    hint = schema.get("description", f"matching {schema['pattern']}")
    return [smap.problem(path, f"'{short(error.instance)}' is not valid: expected {hint}")]


def _empty(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
           smap: SourceMap) -> list[Problem]:
    return [smap.problem(path, "must not be empty")]


def _too_long(error: jsonschema.ValidationError, schema: Mapping[str, Any], path: KeyPath,
              smap: SourceMap) -> list[Problem]:
    if not isinstance(error.instance, str):
        return []
    return [smap.problem(path, f"too long: {len(error.instance)} characters (at most "
                               f"{schema['maxLength']})")]


def _out_of_bounds(error: jsonschema.ValidationError, schema: Mapping[str, Any],
                   path: KeyPath, smap: SourceMap) -> list[Problem]:
    hint = schema.get("description")
    side = "below the minimum" if error.validator == "minimum" else "above the maximum"
    return [smap.problem(path, f"{short(error.instance)} is {side} of "
                               f"{schema[str(error.validator)]}" + (f" ({hint})" if hint else ""))]


if TYPE_CHECKING:  # (jsonschema is imported when a check needs it: _strict_validator)
    # How a schema keyword's error reads: (error, its schema, the value's path, the map).
    _Describer = Callable[[jsonschema.ValidationError, Mapping[str, Any], KeyPath, SourceMap],
                          list[Problem]]

# A schema keyword -> the problems its error reads as (none: jsonschema's own message).
_DESCRIBERS: dict[str, _Describer] = {
    "additionalProperties": _unknown_keys, "required": _required, "type": _wrong_type,
    "enum": _not_listed, "pattern": _no_match, "minItems": _empty, "minProperties": _empty,
    "minLength": _empty, "maxLength": _too_long, "minimum": _out_of_bounds,
    "maximum": _out_of_bounds,
}


def _describe(error: jsonschema.ValidationError, smap: SourceMap) -> list[Problem]:
    path = tuple(error.absolute_path)
    schema = error.schema
    describer = _DESCRIBERS.get(str(error.validator))
    # A boolean schema (false) has no keyword to explain.
    problems = (describer(error, schema, path, smap)
                if describer is not None and isinstance(schema, Mapping) else [])
    return problems or [smap.problem(path, short(error.message, 300))]


def _name_problem(error: jsonschema.ValidationError, smap: SourceMap) -> Problem:
    """A mapping key rejected by ``propertyNames`` (errors point at the parent mapping)."""
    key = error.instance
    path = (*error.absolute_path, key)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if "enum" in schema:
        known = [str(c) for c in schema["enum"]]
        return smap.problem(path, f"unknown name '{short(key)}'; expected one of: "
                                  f"{', '.join(known)}{suggest(short(key), known)}")
    hint = schema.get("description", "not allowed")
    return smap.problem(path, f"invalid name '{short(key)}': expected {hint}")


def _strict_validator(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` whose ``integer`` is a whole number written as one:
    JSON Schema counts 2.0 as an integer, but ``workers: 2.0`` is a typo (and True is no
    number at all)."""
    import jsonschema  # (here: a memoized check needs none of it, 0.04-0.09 s)

    cls = jsonschema.validators.validator_for(schema)
    checker = cls.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    # types-jsonschema leaves extend() unannotated; it returns a validator class like cls.
    strict: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, type_checker=checker)
    return strict(schema)


MEMO_NAME = ".accelgrid-valid.json"   # in the envs folder: data that passed its schema
MEMO_KEPT = 16


def memo_folder(root: Path) -> Path | None:
    """Where the project at ``root`` keeps :func:`check_schema`'s memo: its envs folder,
    when there is one (a project that ran a cell)."""
    folder = contract.envs_folder(root)
    return folder if folder.is_dir() else None


def check_schema(data: Any, schema: dict[str, Any], smap: SourceMap,
                 memo: Path | None = None) -> list[Problem]:
    """Every schema violation of ``data`` as a Problem, in file order. ``memo``: a folder
    (:func:`memo_folder`) where the digests of data found valid are kept: the same data,
    schema and validator (this module and jsonschema, by their files' stat) are valid
    again without loading jsonschema (0.04-0.09 s of a warm ``accelgrid run`` here).
    Only "no problem" is kept; anything else is checked every time."""
    key = _memo_key(data, schema) if memo is not None else None
    if memo is not None and key is not None and key in _memo(memo):
        return []
    problems = _check_schema(data, schema, smap)
    if memo is not None and key is not None and not problems:
        with contextlib.suppress(OSError):
            kept = [k for k in _memo(memo) if k != key][-(MEMO_KEPT - 1):]
            jsonio.write_json(memo / MEMO_NAME, [*kept, key])
    return problems


def _memo(folder: Path) -> list[str]:
    kept, _ = jsonio.read_json(folder / MEMO_NAME)
    return [k for k in kept if isinstance(k, str)] if isinstance(kept, list) else []


def _memo_key(data: Any, schema: dict[str, Any]) -> str | None:
    """A digest of ``data`` (each value with its type: 1, 1.0, True and "1" differ),
    ``schema`` and the validator's files; None where one cannot be read."""
    spec = importlib.util.find_spec("jsonschema")
    stats = [statkey.key(f) for f in (__file__, spec.origin if spec else None) if f]
    if None in stats:
        return None
    digest = hashlib.sha256(repr((_typed(data), _typed(schema), stats)).encode(
        "utf-8", "surrogateescape"))
    return digest.hexdigest()


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return ("d", sorted(((_typed(k), _typed(v)) for k, v in value.items()), key=repr))
    if isinstance(value, list | tuple):
        return ("l", [_typed(v) for v in value])
    return (type(value).__qualname__, repr(value))


def _check_schema(data: Any, schema: dict[str, Any], smap: SourceMap) -> list[Problem]:
    validator = _strict_validator(schema)
    problems: list[Problem] = []
    mistyped: set[KeyPath] = set()
    for error in validator.iter_errors(data):
        if "propertyNames" in error.schema_path:
            problems.append(_name_problem(error, smap))
            continue
        if error.validator == "type":
            mistyped.add(tuple(error.absolute_path))
        problems.extend(_describe(error, smap))
    # A value of the wrong type says so once (inf is no integer; that it is also above the
    # maximum is noise).
    problems = [p for p in problems if p.path not in mistyped or p.message.startswith("expected")]
    return sorted(set(problems), key=lambda p: (p.line or 0, dotted(p.path), p.message))


def schema_text(name: str) -> str:
    """The JSON Schema file ``name`` (``"matrix"`` or ``"known-issues"``) as shipped in the
    package; InvalidInput for another name."""
    if name not in SCHEMA_FILES:
        raise InvalidInput(f"unknown schema '{name}'; expected one of: "
                           f"{', '.join(SCHEMA_FILES)}{suggest(name, SCHEMA_FILES)}")
    resource = importlib.resources.files("accelgrid") / "schemas" / SCHEMA_FILES[name]
    return resource.read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema ``name`` (see :func:`schema_text`) as a dict."""
    schema: dict[str, Any] = json.loads(schema_text(name))   # a JSON Schema is an object
    return schema
