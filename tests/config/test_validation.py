"""The generic validator (accelgrid.config.validation): YAML with line numbers, schema problems as
``FILE:LINE: key: message`` lines with suggestions, and the schema files shipped in the
package. matrix.yaml's own checks are in test_matrix.py, the registry's in
test_known_issues.py."""

from __future__ import annotations

import importlib.resources
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from accelgrid.base.errors import EXIT_INVALID, InvalidInput
from accelgrid.config.validation import (
    SCHEMA_FILES,
    ValidationFailed,
    check_schema,
    load_schema,
    load_yaml,
    schema_text,
)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate",
                           str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"


def test_duplicate_keys_name_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("a: 1\nb:\n  c: 2\n  c: 3\n")
    with pytest.raises(ValidationFailed) as info:
        load_yaml(path)
    assert str(info.value) == f"{path}:4: invalid YAML: duplicate key 'c' (first on line 3)"


SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "series": {"type": "string", "pattern": r"^\d+\.\d+$",
                   "description": 'a series like "2.13"'},
        "section": {"type": "object", "description": "documents the section only",
                    "propertyNames": {"enum": ["cpu", "xpu"]}},
        "items": {"type": "array", "description": "documents the list only"},
    },
}


def _problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    data, smap = load_yaml(path)
    return [str(p).removeprefix(f"{path}:") for p in check_schema(data, SCHEMA, smap)]


def test_schema_problems_name_line_key_and_suggestion(tmp_path: Path) -> None:
    assert _problems(tmp_path, "serie: x\nsection: {xpuu: 1}\nseries: '2.x'\n") == [
        "1: serie: unknown key 'serie'; expected one of: items, section, series; "
        "did you mean 'series'?",
        "2: section.xpuu: unknown name 'xpuu'; expected one of: cpu, xpu; did you mean 'xpu'?",
        "3: series: '2.x' is not valid: expected a series like \"2.13\"",
    ]


def test_descriptions_hint_formats_not_sections(tmp_path: Path) -> None:
    assert _problems(tmp_path, "series: 2.5\nsection: [1]\nitems: {}\n") == [
        '1: series: expected string, got a number — quote version numbers ("2.5" is read as '
        'a number) (a series like "2.13")',
        "2: section: expected object, got a list",
        "3: items: expected array, got a mapping",
    ]


# --- the shipped schema files --------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_schema_files_are_json_schema_2020_12(name: str) -> None:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    assert cls is jsonschema.Draft202012Validator
    assert schema["$id"] and schema["title"] and schema["description"]
    # Every mapping section documents itself for editors.
    for key, sub in schema["properties"].items():
        assert "title" in sub, key


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_schema_text_is_the_packaged_file(name: str) -> None:
    packaged = importlib.resources.files("accelgrid") / "schemas" / SCHEMA_FILES[name]
    assert schema_text(name) == packaged.read_text(encoding="utf-8")
    assert json.loads(schema_text(name)) == load_schema(name)


def test_unknown_schema_name() -> None:
    with pytest.raises(InvalidInput) as info:
        schema_text("matrx")
    assert str(info.value) == ("unknown schema 'matrx'; expected one of: matrix, known-issues; "
                               "did you mean 'matrix'?")
    assert info.value.return_code == EXIT_INVALID


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_wheel_ships_the_schema_files(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(tmp_path), str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("accelgrid-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        for name, file in SCHEMA_FILES.items():
            assert zf.read(f"accelgrid/schemas/{file}").decode() == schema_text(name)


def test_data_found_valid_is_valid_again_without_jsonschema(tmp_path: Path) -> None:
    """check_schema's memo (the envs folder): the same data, schema and validator pass
    again without loading jsonschema; each changed value, a type alone included, is
    checked again; only "valid" is kept; an unreadable memo is no memo."""
    from accelgrid.config import validation

    memo = tmp_path / ".nox"
    memo.mkdir()
    schema = load_schema("matrix")
    text = (Path(__file__).parents[1] / "base_matrix.yaml").read_text()
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    data, smap = validation.load_yaml(path)
    assert validation.check_schema(data, schema, smap, memo=memo) == []
    assert len(json.loads((memo / validation.MEMO_NAME).read_text())) == 1
    code = ("import sys; from pathlib import Path; from accelgrid.config import validation as v; "
            f"d, m = v.load_yaml(Path({str(path)!r})); "
            f"print(v.check_schema(d, v.load_schema('matrix'), m, memo=Path({str(memo)!r})), "
            "'jsonschema' in sys.modules)")
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert again.stdout.split() == ["[]", "False"]
    # Another value, or the same value as another type: checked, and found wrong.
    for old, new in (("schema: 1", "schema: 2"), ('  torch: "2.13"', "  torch: 2.13")):
        assert old in text
        path.write_text(text.replace(old, new, 1))
        data, smap = validation.load_yaml(path)
        assert validation.check_schema(data, schema, smap, memo=memo) != []
    assert len(json.loads((memo / validation.MEMO_NAME).read_text())) == 1
    (memo / validation.MEMO_NAME).write_text("{not json")
    path.write_text(text)
    data, smap = validation.load_yaml(path)
    assert validation.check_schema(data, schema, smap, memo=memo) == []
