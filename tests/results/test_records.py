"""The typed record and its schemas (accelgrid.results.records): a real run's tests.jsonl,
summary.json and env.json and a real grid validate against the shipped JSON Schemas; each
schema rejects bad instances (a schema that accepts anything fails here); each TypedDict's
keys equal its schema's; mypy's strict override is --strict's per-module flags."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any, get_args, is_typeddict

import jsonschema
import pytest
from helpers.mini_projects import run_request
from helpers.report_cases import baseline_case, broken_cells

from accelgrid import cli, report
from accelgrid.base import contract, outcomes
from accelgrid.config.matrix import load_matrix
from accelgrid.results import records
from accelgrid.run.cell import run_cell

ROOT = Path(__file__).resolve().parents[2]
# Each schema's top-level type.
TOP = {"test-record": records.TestRecord, "summary": records.Summary, "env": records.Env,
       "grid": records.Grid, "plan": records.Plan}


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(name: str, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in _validator(records.load_schema(name)).iter_errors(doc)]


# --- each schema rejects what it must ---------------------------------------------------

def _good(name: str) -> dict[str, Any]:
    """The smallest instance of each schema that is valid."""
    counts = {o: 0 for o in outcomes.ALL}
    good: dict[str, dict[str, Any]] = {
        "test-record": {"nodeid": "suites/s/t.py::a", "outcome": "passed"},
        "summary": {"cell": "cpu-2.13", "total": 0, "counts": counts, "problems": []},
        "env": {"cell": "cpu-2.13", "device_type": "cpu", "start": "s", "end": None,
                "status": "running", "torch": {"pending": True}},
        "grid": {"schema": 2, "generated": "g", "outcomes": list(outcomes.ALL), "columns": [],
                 "rows": [{"nodeid": "suites/s/t.py::a", "suite": "s", "workload": "a",
                           "test": "a", "cells": {"cpu-2.13": {"outcome": "passed"}}}],
                 "baseline": None, "notes": []},
        "plan": {"run_id": None, "cell": "cpu-2.13", "shard": None, "passes": [
            {"name": "single"}], "inputs": {
                "torch": "2.13.0+cpu", "torch_local": "cpu", "packages": {"numpy": None},
                "commit": None, "dirty": False, "matrix_digest": None, "flags": {}}},
    }
    return good[name]


def _bad(name: str) -> dict[str, Any]:
    """Instances each schema must reject: an outcome missing, one outside the vocabulary,
    a value of the wrong type (a document itself may be no object: Any)."""
    def edit(change: Any) -> dict[str, Any]:
        doc = copy.deepcopy(_good(name))
        change(doc)
        return doc

    def cell(doc: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = doc["rows"][0]["cells"]["cpu-2.13"]
        return result

    bad: dict[str, Any] = {}
    if name == "test-record":
        bad = {
            "no outcome": edit(lambda d: d.pop("outcome")),
            "outcome outside the vocabulary": edit(lambda d: d.update(outcome="sideways")),
            "no nodeid": edit(lambda d: d.pop("nodeid")),
            "duration a string": edit(lambda d: d.update(duration="1.5")),
            "a negative duration": edit(lambda d: d.update(duration=-1)),
            "not an object": ["suites/s/t.py::a", "passed"],
        }
    elif name == "summary":
        bad = {
            "counts without an outcome": edit(lambda d: d["counts"].pop("passed")),
            "counts of an outcome outside the vocabulary": edit(
                lambda d: d["counts"].update(sideways=1)),
            "total a string": edit(lambda d: d.update(total="0")),
            "no counts": edit(lambda d: d.pop("counts")),
        }
    elif name == "env":
        bad = {
            "no torch": edit(lambda d: d.pop("torch")),
            "a status outside the vocabulary": edit(lambda d: d.update(status="sideways")),
            "cell a number": edit(lambda d: d.update(cell=213)),
            "a flag that is not text": edit(lambda d: d.update(env={"A": 1})),
        }
    elif name == "plan":
        bad = {
            "no inputs": edit(lambda d: d.pop("inputs")),
            "inputs without torch": edit(lambda d: d["inputs"].pop("torch")),
            "a package version a number": edit(
                lambda d: d["inputs"]["packages"].update(numpy=2)),
            "a pass without name": edit(lambda d: d["passes"].append({"collected": 1})),
            "a negative count": edit(lambda d: d["passes"][0].update(collected=-1)),
        }
    else:
        bad = {
            "a result without outcome": edit(lambda d: cell(d).pop("outcome")),
            "a result's outcome outside the vocabulary": edit(
                lambda d: cell(d).update(outcome="sideways")),
            "schema a string": edit(lambda d: d.update(schema="2")),
            "rows not a list": edit(lambda d: d.update(rows={})),
            "a traceback in grid.json": edit(lambda d: cell(d).update(longrepr="Traceback")),
        }
    return bad


def accepted_bad(name: str, schema: dict[str, Any]) -> list[str]:
    """The bad instances of ``name`` that ``schema`` accepts."""
    validator = _validator(schema)
    return [why for why, doc in _bad(name).items() if validator.is_valid(doc)]


@pytest.mark.parametrize("name", sorted(records.SCHEMA_FILES))
def test_each_schema_accepts_a_good_instance_and_rejects_the_bad(name: str) -> None:
    assert _problems(name, _good(name)) == []
    assert accepted_bad(name, records.load_schema(name)) == []


@pytest.mark.parametrize("name", sorted(records.SCHEMA_FILES))
@pytest.mark.parametrize("lax", [{}, {"type": "object"}], ids=["empty", "any-object"])
def test_a_schema_that_accepts_anything_is_caught(name: str, lax: dict[str, Any]) -> None:
    # The check above on a schema replaced by one that accepts anything: it must fail.
    assert accepted_bad(name, lax) != []


def test_the_outcome_type_is_the_vocabulary() -> None:
    assert get_args(records.Outcome) == outcomes.ALL
    for name in ("test-record", "grid"):
        assert records.load_schema(name)["$defs"]["Outcome"]["enum"] == list(outcomes.ALL)
    counts = records.load_schema("summary")["properties"]["counts"]
    assert counts["required"] == list(outcomes.ALL)


def test_the_schemas_ship_in_the_package() -> None:
    for name, file in records.SCHEMA_FILES.items():
        assert (ROOT / "src" / "accelgrid" / "schemas" / file).is_file()
        assert records.load_schema(name)["$id"] == f"urn:accelgrid:schema:{name}"


# --- the TypedDicts and the schemas agree on their keys --------------------------------

def drift(schema: dict[str, Any], top: Any) -> list[str]:
    """Where ``top`` (a TypedDict) and ``schema``'s top level, or a nested TypedDict and
    the ``$defs`` entry of its name, differ in their keys or required keys."""
    out: list[str] = []
    pairs = [(top, schema)] + [(getattr(records, n), d) for n, d in
                               schema.get("$defs", {}).items() if "properties" in d]
    for typed, part in pairs:
        name = typed.__name__
        if not is_typeddict(typed):
            out.append(f"{name}: not a TypedDict of accelgrid.results.records")
            continue
        keys, props = set(typed.__annotations__), set(part.get("properties", {}))
        required, listed = set(typed.__required_keys__), set(part.get("required", []))
        if keys != props:
            out.append(f"{name}: keys only in the type {sorted(keys - props)}, only in the "
                       f"schema {sorted(props - keys)}")
        if required != listed:
            out.append(f"{name}: required only in the type {sorted(required - listed)}, only "
                       f"in the schema {sorted(listed - required)}")
    return out


@pytest.mark.parametrize("name", sorted(records.SCHEMA_FILES))
def test_each_typeddict_has_its_schemas_keys(name: str) -> None:
    assert drift(records.load_schema(name), TOP[name]) == []


def test_every_typeddict_is_in_a_schema() -> None:
    covered = {t.__name__ for t in TOP.values()} | {
        n for name in records.SCHEMA_FILES for n, d in
        records.load_schema(name).get("$defs", {}).items() if "properties" in d}
    typed = {n for n in records.__all__ if is_typeddict(getattr(records, n))}
    assert typed == covered


@pytest.mark.parametrize("plant", ["extra property", "one required less", "nested key"])
def test_a_key_drift_is_caught(plant: str) -> None:
    schema = records.load_schema("grid")
    if plant == "extra property":
        schema["properties"]["renamed"] = {"type": "string"}
    elif plant == "one required less":
        schema["required"].remove("notes")
    else:
        del schema["$defs"]["Column"]["properties"]["torch_git"]
    assert drift(schema, records.Grid) != []


# --- real files ------------------------------------------------------------------------

PAYLOAD = '''
import pytest
from accelgrid.base.outcomes import not_run

def test_pass(record_property):
    record_property("fact", 1)
    record_property("kernels", ["flash_cpu"])

def test_fail():
    assert 1 == 2, "one is not two"

def test_skip():
    pytest.skip("not claimed")

def test_not_run():
    not_run("a package missing")

@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfail():
    raise ValueError
'''


def _validate_run(folder: Path) -> None:
    lines = (folder / contract.TESTS_FILE).read_text().splitlines()
    assert len(lines) == 5
    for line in lines:
        assert _problems("test-record", json.loads(line)) == [], line
    for name, file in (("summary", contract.SUMMARY_FILE), ("env", contract.ENV_FILE),
                       ("plan", contract.PLAN_FILE)):
        assert _problems(name, json.loads((folder / file).read_text())) == [], file


def _validate_grid(out: Path) -> dict[str, Any]:
    grid = json.loads((out / "grid.json").read_text())
    assert _problems("grid", grid) == []
    return grid


def test_a_real_runs_files_and_its_grid_match_the_schemas(mini_project, python,
                                                          tmp_path: Path) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    run_cell(run_request(load_matrix(proj / "matrix.yaml").cell("cpu-2.13"), python, proj,
                         proj / "results"))
    folder = proj / "results" / "cpu-2.13"
    _validate_run(folder)
    # Its grid, against a baseline it regresses from and with a cell expected that never
    # reported: every section of grid.json.
    base = tmp_path / "baselines"
    assert cli.main(["baseline", "update", str(folder), "--dir", str(base)]) == 0
    doc = json.loads((base / "cpu-2.13.json").read_text())
    doc["tests"]["suites/payload/test_payload.py::test_fail"] = "passed"
    (base / "cpu-2.13.json").write_text(json.dumps(doc))
    out = tmp_path / "grid"
    code = cli.main(["grid", str(folder), "--baseline", str(base), "--expect", "cpu-2.6",
                     "--out", str(out)])
    assert code == 3
    grid = _validate_grid(out)
    assert grid["baseline"]["regressions"] == 1 and grid["lost"][0]["cell"] == "cpu-2.6"
    # What the test recorded, in its result (docs/reference/grid-schema.md).
    passed = next(r for r in grid["rows"] if r["test"] == "test_pass")["cells"]["cpu-2.13"]
    assert passed["properties"] == {"fact": 1, "kernels": ["flash_cpu"]}
    assert "| ✅ `flash_cpu` |" in (out / "grid.md").read_text()


def test_grids_of_every_column_state_match_the_schema(tmp_path: Path) -> None:
    # Written as runs leave them (report_cases), errored, partial and with baselines:
    # the grid's shapes a single real run does not reach.
    folders, base = baseline_case(tmp_path)
    out = tmp_path / "grid"
    # The library, not the CLI: the CLI refuses an empty or absent folder before it writes
    # (tests/cli/test_cli_inputs.py); a grid still shows such a folder as an errored column.
    report.grid([*folders, *broken_cells(tmp_path / "broken")], out, baseline_dir=base)
    grid = _validate_grid(out)
    assert {c["status"] for c in grid["columns"]} == {"ok", "partial", "errored"}


# --- mypy's strict layers --------------------------------------------------------------

def test_the_strict_override_is_every_per_module_flag_of_strict() -> None:
    from mypy.main import define_options  # mypy: the dev extras

    _, _, assignments = define_options()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [o for o in config["overrides"] if "accelgrid.results.*" in o["module"]]
    assert len(strict) == 1
    flags = {k: v for k, v in strict[0].items() if k != "module"}
    # warn_redundant_casts is global-only in mypy: set at the top.
    want = {dest: value for dest, value in assignments if dest != "warn_redundant_casts"}
    assert flags == want
    assert config.get("warn_redundant_casts") is True
    assert {"accelgrid.base.*", "accelgrid.report.*", "accelgrid.config.*",
            "accelgrid.testing.*", "accelgrid.devices.*"} <= set(strict[0]["module"])


def test_a_bare_mypy_checks_the_whole_package() -> None:
    """.ci/run runs ``mypy`` without arguments: ``files`` is the package, every layer, then
    every test folder holding Python (and tests/conftest.py), with tests/ on mypy_path as on
    sys.path."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    files = config["files"]
    assert files[0] == "src/accelgrid"
    assert "tests/conftest.py" in files and "tests/helpers" in files
    for path in files[1:]:
        assert path.startswith("tests/") and (ROOT / path).exists(), path
    with_python = {f"tests/{p.name}" for p in (ROOT / "tests").iterdir()
                   if p.is_dir() and any(p.rglob("*.py"))}
    assert with_python <= set(files), sorted(with_python - set(files))
    assert config["mypy_path"] == ["src", "tests"]


# --- env.json read back ------------------------------------------------------------------

def test_env_read_back_has_every_field_optional_and_checked() -> None:
    """cellresults.ReadEnv: every field of records.Env (and a merged cell's shards), none
    required (an old or damaged env.json may lack any); clean_env checks the type of each
    one it reads from the file."""
    from accelgrid.results import cellresults

    read = cellresults.ReadEnv
    assert read.__required_keys__ == frozenset()
    assert set(read.__optional_keys__) == set(records.Env.__annotations__) | {"shards"}
    assert set(cellresults._ENV_TYPES) == set(records.Env.__annotations__)


def test_clean_env_keeps_a_good_env_and_drops_each_field_of_another_type() -> None:
    from accelgrid.results.cellresults import _ENV_TYPES, clean_env

    good: dict[str, Any] = {
        "cell": "cpu-2.13", "device_type": "cpu", "start": "s", "end": None,
        "status": "finished", "end_reason": "r", "exitstatus": 0, "torch": {},
        "python": {}, "packages": {}, "env": {}, "host": {}, "project": {},
        "ci": {}, "run_id": "r1", "pytest_args": [], "selection": [], "passes": []}
    assert set(good) == set(_ENV_TYPES)
    assert clean_env(good) == (good, [])
    for name, value in good.items():
        wrong = 1.5 if not isinstance(value, float) else "x"
        out, notes = clean_env({**good, name: wrong})
        assert name not in out and notes == [f"env.json: {name} is a number; ignored"], name
