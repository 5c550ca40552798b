"""Test records as readers get them: a ``tests.jsonl`` read back (:func:`read_records`,
those of one run: :func:`run_records`), each record with the types reports rely on and
its texts redacted (:func:`clean_record`), what a test recorded bounded
(:func:`clean_properties`).

Stdlib only: the cell's interpreter reads these through the pytest plugin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..base import contract
from ..base.jsonio import MAX_NOTES, json_kind, read_json, read_jsonl, safe_dumps, safe_text
from ..base.redact import redact_text

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import TestRecord

__all__ = [
    "MAX_NODEID", "MAX_PROPERTIES", "MAX_PROPERTY_ITEMS", "MAX_PROPERTY_NAME",
    "MAX_PROPERTY_TEXT", "clean_properties", "clean_record", "read_records", "run_records",
]


# A record's fields as the reports use them: name -> accepted types (None always is).
_TEXT_FIELDS = ("message", "longrepr", "output", "worker", "device", "cell", "when", "pass")
_FIELD_CHECKS = frozenset((*_TEXT_FIELDS, "duration", "issue", "properties"))
_PLAIN_TEXT = frozenset(_TEXT_FIELDS) - {"message", "longrepr", "output"}  # kept as they are


# What a test records (``properties``) as readers get it: every grid result carries it,
# so a test (untrusted input) cannot make a grid big or unreadable.
MAX_PROPERTIES = 32        # names per test, the last saying how many more were dropped
MAX_PROPERTY_NAME = 64     # characters of a name
MAX_PROPERTY_TEXT = 200    # characters of a text value (a kernel's name, a flag)
MAX_PROPERTY_ITEMS = 16    # items of a list or mapping value (the kernels seen), likewise
_CUT = "…"
_BIG_INT = 2 ** 63  # an int past this is text (JSON readers lose its digits)


def _property_name(name: Any, redact: Callable[[str], str]) -> str:
    key = redact(safe_text(str(name)))
    return key if len(key) <= MAX_PROPERTY_NAME else key[:MAX_PROPERTY_NAME - 1] + _CUT


def _property_scalar(value: Any, redact: Callable[[str], str]) -> Any:
    """A property's scalar as readers get it: text redacted and cut, a non-finite float
    as its text (JSON has no NaN: ``nan`` says more than null), anything else (a nested
    list or mapping) as its compact JSON text."""
    if value is None or isinstance(value, bool) or (
            isinstance(value, int) and -_BIG_INT < value < _BIG_INT):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = redact(value if isinstance(value, str) else
                  safe_dumps(value, separators=(",", ":"), sort_keys=True))
    return text if len(text) <= MAX_PROPERTY_TEXT else text[:MAX_PROPERTY_TEXT - 1] + _CUT


def clean_properties(value: dict[Any, Any], redact: Callable[[str], str] = redact_text
                     ) -> dict[str, Any]:
    """A record's ``properties`` bounded and redacted (names too): at most
    :data:`MAX_PROPERTIES` names of :data:`MAX_PROPERTY_NAME` characters; each value a
    number, a bool, null, a text of :data:`MAX_PROPERTY_TEXT` characters, or a list or
    mapping of :data:`MAX_PROPERTY_ITEMS` of those. Past a count, the last entry (``…``)
    says how many more were not kept; a cut text ends in ``…``. Nothing here makes a
    column partial: the test's result stands, only what it recorded is shortened."""
    out: dict[str, Any] = {}
    for name, item in _at_most(list(value.items()), MAX_PROPERTIES):
        key = _property_name(name, redact)
        if isinstance(item, (list, tuple)):
            out[key] = [_property_scalar(v, redact) for v in
                        _at_most(list(item), MAX_PROPERTY_ITEMS, _CUT)]
        elif isinstance(item, dict):
            out[key] = {_property_name(k, redact): _property_scalar(v, redact)
                        for k, v in _at_most(list(item.items()), MAX_PROPERTY_ITEMS)}
        else:
            out[key] = _property_scalar(item, redact)
    return out


def _at_most(items: list[Any], limit: int, mark: Any = None) -> list[Any]:
    """``items`` when there are ``limit`` or fewer; else the first ``limit - 1`` and one
    saying how many more were dropped (``mark``, default a ``(…, text)`` pair)."""
    if len(items) <= limit:
        return items
    more = f"{len(items) - limit + 1} more not kept"
    return [*items[:limit - 1], f"{mark} {more}" if mark else (_CUT, more)]


MAX_NODEID = 64 * 1024  # a parametrized id may run to thousands of characters


def _cached_redact(redacted: dict[str, str] | None) -> Callable[[str], str]:
    """:func:`redact_text` remembering its results in ``redacted`` (when given): the same
    texts recur across a file's records."""
    if redacted is None:
        return redact_text

    def redact(text: str) -> str:
        done = redacted.get(text)
        return done if done is not None else redacted.setdefault(text, redact_text(text))
    return redact


def clean_record(rec: dict[str, Any], where: str, redacted: dict[str, str] | None = None
                 ) -> tuple[TestRecord | None, list[str]]:
    """A test record with the types reports rely on, and what was wrong with it; None
    when it cannot stand for a test (its nodeid or outcome is not text). Messages and
    tracebacks lose credentials (:func:`accelgrid.base.redact.redact_text`; ``redacted``,
    when given, remembers its results across records). ``rec`` is changed in place
    (read_jsonl's records are fresh)."""
    nodeid, outcome = rec.get("nodeid"), rec.get("outcome")
    if not isinstance(nodeid, str) or not nodeid.strip() or len(nodeid) > MAX_NODEID:
        what = ("empty" if isinstance(nodeid, str) and not nodeid.strip() else
                "too long" if isinstance(nodeid, str) else f"a {json_kind(nodeid)}")
        return None, [f"{where}: nodeid is {what}, not a test id; record skipped"]
    if not isinstance(outcome, str):
        return None, [f"{where}: outcome of {nodeid[:200]} is a {json_kind(outcome)}, not a "
                      "word; record skipped"]
    notes: list[str] = []
    for name, value in list(rec.items()):  # a record has a handful of fields
        if value is None or name not in _FIELD_CHECKS or (
                type(value) is str and name in _PLAIN_TEXT):  # most fields: nothing to do
            continue
        if name == "duration":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value >= 0):
                del rec[name]
                notes.append(f"{where}: duration {str(value)[:40]!r} of {nodeid[:200]} is not "
                             "a number of seconds; dropped")
        elif name == "issue":
            if not isinstance(value, (str, dict)):
                del rec[name]
                notes.append(f"{where}: issue of {nodeid[:200]} is a {json_kind(value)}; dropped")
        elif name == "properties":
            if isinstance(value, dict):
                rec[name] = clean_properties(value, _cached_redact(redacted))
            else:
                del rec[name]
                notes.append(f"{where}: properties of {nodeid[:200]} are a "
                             f"{json_kind(value)}; dropped")
        elif isinstance(value, str):
            if name in ("message", "longrepr", "output"):  # test output may print a token
                if redacted is None:
                    rec[name] = redact_text(value)
                else:  # the same skip reason or traceback recurs across a file's records
                    done = redacted.get(value)
                    rec[name] = done if done is not None else redacted.setdefault(
                        value, redact_text(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            rec[name] = str(value)
        else:
            del rec[name]
            notes.append(f"{where}: {name} of {nodeid[:200]} is a {json_kind(value)}; dropped")
    # The fields a report reads now have their types (an unknown outcome word stays, for
    # cellresults.read_cell to name); JSON's mapping is untyped, hence the cast.
    return cast("TestRecord", rec), notes


def read_records(path: Path) -> tuple[list[TestRecord], list[str]]:
    """Test records of a tests.jsonl, and a note per unusable line or field."""
    raw, problems = read_jsonl(path, ("nodeid", "outcome"))
    records: list[TestRecord] = []
    redacted: dict[str, str] = {}
    name = path.name
    for i, rec in enumerate(raw, 1):
        clean, notes = clean_record(rec, f"{name} record {i}", redacted)
        if len(problems) < MAX_NOTES:
            problems += notes[:MAX_NOTES - len(problems)]
        if clean is not None:
            records.append(clean)
    return records, problems


def run_records(results: Path, run_id: str | None = None
                ) -> tuple[list[TestRecord], list[str]]:
    """The test records of ``results/tests.jsonl`` that belong to run ``run_id`` (default:
    env.json's), and a note per unusable line or record of another run. Records without
    a run id (written before runs had one) belong to any run."""
    records, problems = read_records(results / contract.TESTS_FILE)
    if run_id is None:
        env, _ = read_json(results / contract.ENV_FILE)
        run_id = env.get("run_id") if isinstance(env, dict) else None
    if run_id:
        other = [r for r in records if r.get("run_id") not in (None, run_id)]
        if other:
            problems.append(f"{contract.TESTS_FILE}: {len(other)} record(s) of another run ignored")
            records = [r for r in records if r.get("run_id") in (None, run_id)]
    return records, problems
