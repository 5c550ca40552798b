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

import difflib
import importlib.resources
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import InvalidInput

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
            out += ("." if out else "") + str(part)
    return out


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


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Parse ``path``; syntax errors become a ValidationFailed with the line."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationFailed([Problem(name, None, (), "file not found")]) from None
    except OSError as exc:
        raise ValidationFailed([Problem(name, None, (), f"cannot read: {exc}")]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        what = getattr(exc, "problem", None) or str(exc)
        raise ValidationFailed([Problem(name, line, (), f"invalid YAML: {what}")]) from None
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


def _describe(error: jsonschema.ValidationError, smap: SourceMap) -> list[Problem]:
    path = tuple(error.absolute_path)
    schema = error.schema
    validator = error.validator
    if validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(schema.get("properties", {}))
        problems = []
        for key in error.instance:
            if key in known:
                continue
            if "patternProperties" in schema or schema.get("additionalProperties") is not False:
                continue
            expected = ", ".join(known)
            problems.append(
                smap.problem(
                    (*path, key),
                    f"unknown key '{key}'; expected one of: {expected}{suggest(key, known)}",
                )
            )
        if problems:
            return problems
    if validator == "required":
        return [smap.problem(path, error.message.replace("is a required property", "is required"))]
    if validator == "type":
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        expected = " or ".join(types)
        # A mapping's or list's description documents the section, it is no format hint.
        hint = "" if {"object", "array"} & set(types) else schema.get("description", "")
        msg = f"expected {expected}, got {_type_name(error.instance)}"
        if isinstance(error.instance, float) and expected == "string":
            msg += f" — quote version numbers (\"{error.instance}\" is read as a number)"
        return [smap.problem(path, msg + (f" ({hint})" if hint else ""))]
    if validator == "enum":
        choices = [str(c) for c in schema["enum"]]
        return [
            smap.problem(
                path,
                f"'{error.instance}' is not one of: {', '.join(choices)}"
                f"{suggest(error.instance, choices)}",
            )
        ]
    if validator == "pattern":
        hint = schema.get("description", f"matching {schema['pattern']}")
        return [smap.problem(path, f"'{error.instance}' is not valid: expected {hint}")]
    if validator in ("minItems", "minProperties"):
        return [smap.problem(path, "must not be empty")]
    return [smap.problem(path, error.message)]


def _name_problem(error: jsonschema.ValidationError, smap: SourceMap) -> Problem:
    """A mapping key rejected by ``propertyNames`` (errors point at the parent mapping)."""
    key = error.instance
    path = (*error.absolute_path, key)
    if "enum" in error.schema:
        known = [str(c) for c in error.schema["enum"]]
        return smap.problem(path, f"unknown name '{key}'; expected one of: {', '.join(known)}"
                                  f"{suggest(key, known)}")
    hint = error.schema.get("description", "not allowed")
    return smap.problem(path, f"invalid name '{key}': expected {hint}")


def check_schema(data: Any, schema: dict, smap: SourceMap) -> list[Problem]:
    """Every schema violation of ``data`` as a Problem, in file order."""
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema)
    problems: list[Problem] = []
    for error in validator.iter_errors(data):
        if "propertyNames" in error.schema_path:
            problems.append(_name_problem(error, smap))
            continue
        problems.extend(_describe(error, smap))
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
    return json.loads(schema_text(name))
