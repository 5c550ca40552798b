"""JUnit XML that other tools read: testsuite properties naming the cell run, accelgrid's
outcomes mapped onto JUnit's elements, and one merged file per run.

Two writers share the vocabulary here:

- inside the cell, the pytest plugin adds :func:`suite_properties` to the JUnit file pytest
  writes for each pass (``junit.xml``, ``junit-all-devices.xml``, ...);
- outside it, :func:`merged` builds one ``<testsuites>`` document from cells' records
  (``tests.jsonl``: accelgrid's own outcomes, with their detail) and env.json, one
  ``<testsuite>`` per cell and pass, for dashboards (publish-unit-test-result-action and
  the like) and the grid job's upload. Records survive a crash that loses pytest's file.

Outcomes onto JUnit (the ``type`` attribute keeps accelgrid's word, the ``message`` its
detail, the text the traceback): failed and xpassed -> ``<failure>``; error, timeout and
crashed -> ``<error>``; skipped, not-run and xfailed -> ``<skipped>``, an xfail of a known
issue with ``type="known-issue"`` and the issue's link; flaky -> a pass with a
``<flakyFailure type="flaky">`` (Surefire's element for a test that passed on a rerun).

Every file validates against JUnit's junit-10.xsd (pytest's copy: tests/data/junit-10.xsd),
which Jenkins' xUnit plugin and others check: a ``<testcase>`` holds no properties and
``<testsuites>`` no ``skipped`` count, so a testcase's pass and device are its testsuite's
properties, and its worker and other facts stay in accelgrid's own files (tests.jsonl).

Standard library only: the pytest plugin imports it inside the cell.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import contract, jsonio, outcomes
from . import cellresults

if TYPE_CHECKING:  # annotations only: records needs Python 3.11, a cell may have less
    from .records import TestRecord

MERGED = "junit.xml"      # results/junit.xml: every cell of the run (the grid job's upload)
# testsuite property -> the variable the runner sets in the cell (contract)
_FROM_ENV = (
    ("cell", contract.CELL), ("device", contract.DEVICE), ("torch_series", contract.TORCH),
    ("profile", contract.PROFILE), ("hardware", contract.HARDWARE),
    ("driver", contract.DRIVER), ("commit", contract.COMMIT), ("run_id", contract.RUN_ID),
    ("pass", contract.PASS), ("shard", contract.SHARD),
    ("torch_channel", contract.TORCH_CHANNEL),
)
PROPERTIES = ("cell", "device", "torch", "torch_series", "profile", "hardware", "driver",
              "commit", "run_id", "pass", "shard", "torch_channel")
NOT_KNOWN = "unknown"      # a property the run did not record (a cpu host has no family)

_ELEMENT = {
    outcomes.FAILED: "failure", outcomes.XPASSED: "failure",
    outcomes.ERROR: "error", outcomes.TIMEOUT: "error", outcomes.CRASHED: "error",
    outcomes.SKIPPED: "skipped", outcomes.NOT_RUN: "skipped", outcomes.XFAILED: "skipped",
}
KNOWN_ISSUE = "known-issue"


def suite_properties(env: Mapping[str, str] | None = None, torch: str | None = None,
                     ) -> list[tuple[str, str]]:
    """A pass's testsuite properties from the variables the runner set (``env``, default
    os.environ) and the torch build its test processes ran (``torch``, e.g. 2.13.0+cpu)."""
    env = os.environ if env is None else env
    props = dict((name, env.get(var) or "") for name, var in _FROM_ENV)
    props["torch"] = torch or ""
    if env.get(contract.DIRTY) == "1" and props["commit"]:
        props["commit"] += "-dirty"
    return [(name, props.get(name) or NOT_KNOWN) for name in PROPERTIES]


def _torch_build(env_json: Mapping[str, Any]) -> str | None:
    version = jsonio.mapping(env_json.get("torch")).get("version")
    if isinstance(version, str):
        return version
    torch = jsonio.mapping(env_json.get("packages")).get("torch")
    return torch if isinstance(torch, str) else None


def cell_properties(cell: cellresults.CellResults, pass_name: str) -> list[tuple[str, str]]:
    """:func:`suite_properties` of one pass of a cell read back (env.json's record of the
    variables, its torch build)."""
    env = dict(cell.env.get("env") or {}) if isinstance(cell.env.get("env"), dict) else {}
    env.setdefault(contract.CELL, cell.name)
    project = jsonio.mapping(cell.env.get("project"))
    if project.get("commit"):
        env[contract.COMMIT] = str(project["commit"])
        env[contract.DIRTY] = "1" if project.get("dirty") else ""
    if cell.env.get("run_id"):
        env[contract.RUN_ID] = str(cell.env["run_id"])
    if cell.env.get("device_type"):
        env.setdefault(contract.DEVICE, str(cell.env["device_type"]))
    env[contract.PASS] = pass_name
    return suite_properties(env, _torch_build(cell.env))


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_ATTR_SPECIAL = re.compile('[&<>"\r\n\t]')
_TEXT_SPECIAL = re.compile("[&<>]")
# The file is written as text (not built as an ElementTree and serialized: at a grid's
# 80,000 testcases that was over half the grid's time, docs/measured/bench-history.md), in the
# layout ElementTree gives with ET.indent: one element a line, two spaces a level,
# attributes in the order set, `<x ... />` for an empty leaf. Escaping is XML 1.0's
# (https://www.w3.org/TR/xml/#syntax): &, <, > in text; those and " in attribute values,
# with CR, LF and tab as character references so a reader keeps them
# (https://www.w3.org/TR/xml/#AVNormalize). tests/results/test_junit.py checks the file against
# ElementTree's own serialization of what it parses.


def _attr(text: str) -> str:
    if not _ATTR_SPECIAL.search(text):
        return text
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("\r", "&#13;").replace("\n", "&#10;")
            .replace("\t", "&#09;"))


def _text(text: str) -> str:
    if not _TEXT_SPECIAL.search(text):
        return text
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@functools.lru_cache(maxsize=4096)
def _property(indent: str, name: str, value: str) -> str:
    # Cached: a run's suites share most of their properties.
    return (f'{indent}<property name="{_attr(name)}" '
            f'value="{_attr(jsonio.safe_text(value))}" />\n')


def _properties(props: Iterable[tuple[str, str]], indent: str) -> str:
    inner = indent + "  "
    return (f"{indent}<properties>\n"
            + "".join(_property(inner, name, str(value)) for name, value in props)
            + f"{indent}</properties>\n")


def _clean(text: Any) -> str:
    """Text XML 1.0 can hold (control characters other than tab and newlines go)."""
    return _NOT_XML.sub("", jsonio.safe_text(str(text or "")))


_PLAIN = re.compile('[&<>"\x00-\x1f]')


def _clean_attr(text: str) -> str:
    """``_attr(_clean(text))``; most texts (ASCII, nothing to escape) as they are."""
    if text.isascii() and not _PLAIN.search(text):
        return text
    return _attr(_clean(text))


def _time(value: Any) -> str:
    return (f"{float(value):.3f}" if isinstance(value, int | float) and value == value
            else "0.000")


def testcase(rec: TestRecord, indent: str = "") -> str:
    """One record as a ``<testcase>`` element's lines (classname and name as pytest's
    JUnit has them), each line starting with ``indent``."""
    nodeid = str(rec.get("nodeid", ""))
    path, _, name = nodeid.partition("::")
    classname = path.removesuffix(".py").replace("/", ".")
    if "::" in name:  # a test in a class: pytest puts the class in classname
        klass, _, name = name.rpartition("::")
        classname += "." + klass.replace("::", ".")
    outcome = str(rec.get("outcome") or outcomes.ERROR)
    given = rec.get("issue")
    issue = given if isinstance(given, dict) else None
    inner = indent + "  "
    case = (f'{indent}<testcase classname="{_clean_attr(classname)}" '
            f'name="{_clean_attr(name or nodeid)}" time="{_time(rec.get("duration"))}"')
    lines = [f"{case}>\n"]
    element = _ELEMENT.get(outcome)
    if element is not None:
        kind = KNOWN_ISSUE if issue and outcome in (outcomes.XFAILED,) else outcome
        message = str(rec.get("message") or "")
        if outcome == outcomes.NOT_RUN:
            message = outcomes.NOT_RUN_PREFIX + message
        if issue:
            message = (f"{issue.get('id')}: {issue.get('title', '')} ({issue.get('url')}); "
                       f"{message}")
        head = (f'{inner}<{element} type="{_attr(kind)}" '
                f'message="{_attr(_clean(message)[:2000])}"')
        text = _clean(rec.get("longrepr") or message)
        lines.append(f"{head}>{_text(text)}</{element}>\n" if text else f"{head} />\n")
    elif outcome == outcomes.FLAKY:
        reruns = rec.get("reruns")
        runs = f" after {reruns} failed run(s)" if isinstance(reruns, int) else ""
        lines.append(f'{inner}<flakyFailure type="{outcomes.FLAKY}" message="passed{runs}" />\n')
    else:  # a pass: an empty element, as ElementTree writes it
        return f"{case} />\n"
    lines.append(f"{indent}</testcase>\n")
    return "".join(lines)


def rerun_element(tag: str, message: str, text: str) -> Any:
    """A ``<rerunFailure>`` or ``<flakyFailure>`` (junit-10.xsd's rerunType) of one failed
    attempt, as an ElementTree element for pytest's own JUnit writer."""
    import xml.etree.ElementTree as ET  # only where a test was rerun

    element = ET.Element(tag, type=outcomes.FAILED, message=_clean(message)[:2000])
    element.text = _clean(text) or None
    return element


def cell_suites(cell: cellresults.CellResults, prefix: str = "", indent: str = ""
                ) -> list[tuple[dict[str, int], str, str]]:
    """One ``<testsuite>`` per pass of ``cell``'s run, with its properties, as (counts,
    time attribute, the element's lines); tests that never ran (in collected.json, no
    record) are not-run in the first pass's suite; a cell whose results cannot be read
    is one suite with one error saying why."""
    by_pass: dict[str, list[TestRecord]] = {}
    for rec in cell.tests.values():
        by_pass.setdefault(str(rec.get("pass") or contract.PASS_SINGLE), []).append(rec)
    if not by_pass:
        by_pass[contract.PASS_SINGLE] = [{
            "nodeid": f"{cell.name}::results", "outcome": outcomes.ERROR,
            "message": cell.error or "no test records", "pass": contract.PASS_SINGLE}]
    inner = indent + "  "
    suites = []
    for pass_name, recs in by_pass.items():
        name = _clean(f"{prefix}{cell.name}" + ("" if pass_name == contract.PASS_SINGLE
                                                 else f" [{pass_name}]"))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        total = 0.0
        cases = []
        for rec in sorted(recs, key=lambda r: str(r.get("nodeid"))):
            cases.append(testcase(rec, inner))
            counts["tests"] += 1
            element = _ELEMENT.get(str(rec.get("outcome")))
            if element == "failure":
                counts["failures"] += 1
            elif element == "error":
                counts["errors"] += 1
            elif element == "skipped":
                counts["skipped"] += 1
            d = rec.get("duration")
            total += float(d) if isinstance(d, int | float) and d == d else 0.0
        attrs = "".join(f' {k}="{v}"' for k, v in counts.items()) + f' time="{total:.3f}"'
        if cell.env.get("start"):
            attrs += f' timestamp="{_attr(str(cell.env["start"]))}"'
        suites.append((counts, f"{total:.3f}", (
            f'{indent}<testsuite name="{_attr(name)}"{attrs}>\n'
            + _properties(cell_properties(cell, pass_name), inner) + "".join(cases)
            + f"{indent}</testsuite>\n")))
    return suites


def merged(paths: Iterable[Path], read: Sequence[tuple[Path, cellresults.CellResults]] | None = None
           ) -> tuple[str, list[str]]:
    """One JUnit document (its text) of every cell found under ``paths``
    (:func:`cellresults.discover`), and the notes of what was ignored. ``read``: those cells
    already read, as (folder, cell) pairs (the grid's), so they are not read again."""
    if read is None:
        folders, notes = cellresults.discover(paths)
        read = [(f, cellresults.read_cell(f)) for f in folders]
    else:
        notes = []
    suites = []
    for _folder, cell in sorted(read, key=lambda fc: str(fc[0])):
        notes += [f"{cell.name}: {p}" for p in cell.problems]
        suites += cell_suites(cell, indent="  ")
    # No skipped count: junit-10.xsd's <testsuites> has none (each testsuite has its own).
    totals = "".join(f' {key}="{sum(counts[key] for counts, _, _ in suites)}"'
                     for key in ("tests", "failures", "errors"))
    # The sum of the suites' time attributes as written (3 decimals), as a reader adds them.
    totals += f' time="{sum(float(t) for _, t, _ in suites):.3f}"'
    head = f"<?xml version='1.0' encoding='utf-8'?>\n<testsuites name=\"accelgrid\"{totals}"
    if not suites:
        return head + " />", notes
    # The last line ends without a newline, as ElementTree writes a document.
    return f"{head}>\n" + "".join(s for _, _, s in suites) + "</testsuites>", notes


def write_merged(paths: Iterable[Path], out: Path,
                 read: Sequence[tuple[Path, cellresults.CellResults]] | None = None
                 ) -> tuple[Path, list[str]]:
    """:func:`merged` written to ``out`` (atomically); returns it and the notes."""
    text, notes = merged(paths, read)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    # xmlcharrefreplace: as ElementTree writes, a character UTF-8 cannot hold becomes a
    # character reference (the text is made encodable first: jsonio.safe_text).
    with open(tmp, "w", encoding="utf-8", errors="xmlcharrefreplace", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, out)
    return out, notes
