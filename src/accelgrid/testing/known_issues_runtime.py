"""The in-cell half of the known-issue registry: turn in-scope tests into strict xfails.

Runs inside cell environments, so it uses the standard library, pytest and packaging
(through :mod:`accelgrid.base.versions`) only (the registry's YAML is loaded and validated by
:mod:`accelgrid.config.known_issues` in the dev env; the runner hands this module the cell's
entries as JSON through ``ACCELGRID_KNOWN_ISSUES``).

Torch and package ranges (PEP 440, see :mod:`accelgrid.base.versions`) are checked here again
against the versions installed in the cell's interpreter (read from package metadata,
without importing anything), so a ``--no-venv`` run with other versions than the matrix
pins still gets the right entries.

For a test an entry covers:

* it ends the way the entry expects (``failed`` in the call, ``error`` in setup or
  teardown, ``skipped``; and its message matches ``match`` if given): the report becomes
  an xfail whose reason carries the issue id, title and link;
* it passes: the report fails loudly (``[XPASS(strict)]``): the issue looks fixed in this
  version and the entry's scope should be narrowed;
* it ends some other way: the report is left as it is (a different problem), with a
  "known issue" section saying what was expected.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..base import contract
from ..base.versions import in_range, installed_version

ENV_KNOWN_ISSUES = contract.KNOWN_ISSUES
UPSTREAM_MARKER = "upstream"
EXPECTED_OUTCOMES = ("failed", "error", "skipped")
_ENTRY_KEY = pytest.StashKey[dict[str, Any]]()


def test_matches(nodeid: str, pattern: str) -> bool:
    """fnmatch of a node id (``*``, ``?``; ``[...]`` is literal: node ids use it for
    parameters); a pattern without ``::`` also covers every test in its file."""
    literal = pattern.replace("[", "[[]")
    if fnmatch.fnmatchcase(nodeid, literal):
        return True
    return "::" not in pattern and fnmatch.fnmatchcase(nodeid.split("::", 1)[0], literal)


test_matches.__test__ = False  # type: ignore[attr-defined]  # not a test, despite the name


def covers(entry: dict[str, Any], nodeid: str, torch_version: str | None) -> bool:
    """Whether one of ``entry["tests"]`` (``{"test": pattern, "torch": range|None}``) names
    ``nodeid``; a per-test torch range narrows the entry's (e.g. one op fixed a release later).
    """
    for spec in entry["tests"]:
        if not test_matches(nodeid, spec["test"]):
            continue
        if spec.get("torch") is None or (torch_version and _within(torch_version, spec["torch"])):
            return True
    return False


def _within(version: str, text: str) -> bool:
    """in_range, with a version that is not PEP 440 counting as outside."""
    try:
        return in_range(version, text)
    except ValueError:
        return False


# --- the plugin --------------------------------------------------------------------------
def _installed(package: str) -> str | None:
    return installed_version(package)


def out_of_scope_reason(entry: dict[str, Any],
                        versions: dict[str, str | None] | None = None) -> str | None:
    """Why ``entry`` does not apply with the installed versions (None: it applies).

    Device and profile were checked by the runner; here: torch and package ranges.
    """
    ranges = {"torch": entry.get("torch"), **(entry.get("packages") or {})}
    for package, text in ranges.items():
        if text is None:
            continue
        version = (versions or {}).get(package) if versions is not None else _installed(package)
        if version is None:
            return f"{package} is not installed"
        if not _within(version, text):
            return f"{package} {version} is outside {text}"
    return None


def issue_info(entry: dict[str, Any]) -> dict[str, str]:
    return {"id": entry["id"], "url": entry["url"], "title": entry["title"]}


def _reason(entry: dict[str, Any]) -> str:
    return f"{entry['id']}: {entry['title']} ({entry['url']})"


class KnownIssues:
    """Applies the cell's in-scope registry entries to the tests they name."""

    def __init__(self, entries: list[dict[str, Any]], cell: str = "",
                 versions: dict[str, str | None] | None = None):
        self.cell = cell
        self.active = [e for e in entries if out_of_scope_reason(e, versions) is None]
        self.torch = (versions or {}).get("torch") if versions is not None else _installed(
            "torch")

    def pytest_report_header(self, config: pytest.Config) -> str:
        ids = ", ".join(e["id"] for e in self.active) or "none"
        return f"accelgrid known issues in scope: {ids}"

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            for entry in self.active:
                if covers(entry, item.nodeid, self.torch):
                    item.stash[_ENTRY_KEY] = entry
                    break

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        entry = item.stash.get(_ENTRY_KEY, None)
        if entry is not None and not hasattr(report, "wasxfail"):
            self._apply(entry, report, call)
        return report

    def _apply(self, entry: dict[str, Any], report: pytest.TestReport,
               call: pytest.CallInfo[None]) -> None:
        expect = entry["expect"]
        if report.passed:
            if report.when == "call":
                self._looks_fixed(entry, report)
            return
        if report.skipped:
            what, text = "skipped", _skip_reason(report)
        elif report.when == "call":
            what, text = "failed", _failure_text(call)
        else:
            what, text = "error", _failure_text(call)
        pattern = entry.get("match")
        if what == expect and (not pattern or re.search(pattern, text)):
            report.outcome = "skipped"
            report.wasxfail = _reason(entry)
            setattr(report, contract.REPORT_ISSUE, issue_info(entry))
            return
        expected = expect + (f" matching {pattern!r}" if pattern else "")
        note = f"{entry['id']} expects this test to be {expected} here; it was {what}: {text[:500]}"
        # A traceback's (pytest's ExceptionRepr) is shown with it, and recorded.
        addsection = getattr(report.longrepr, "addsection", None)
        if addsection is not None:
            addsection("known issue", note)
        else:
            report.sections.append(("known issue", note))

    def _looks_fixed(self, entry: dict[str, Any], report: pytest.TestReport) -> None:
        where = f"torch {self.torch}" if self.torch else "this version"
        report.outcome = "failed"
        # "[XPASS(strict)]" is what pytest writes for strict xpasses; the recorder and
        # grids key on it. One line: it becomes the record's message.
        report.longrepr = (
            f"[XPASS(strict)] {entry['id']} looks fixed in {where}"
            f"{f' (cell {self.cell})' if self.cell else ''}: {report.nodeid} passed but the "
            f"registry expects it to be {entry['expect']}; narrow the scope of {entry['id']} "
            f"in known_issues.yaml ({entry['url']})")
        setattr(report, contract.REPORT_ISSUE, issue_info(entry))


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def _failure_text(call: pytest.CallInfo[None]) -> str:
    if call.excinfo is None:
        return ""
    return f"{call.excinfo.typename}: {call.excinfo.value}"


def load_entries(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data.get("issues", []))


def configure(config: pytest.Config) -> None:
    """Called from the plugin's pytest_configure: the ``upstream`` marker, and the
    registry when ``ACCELGRID_KNOWN_ISSUES`` names the cell's JSON."""
    config.addinivalue_line(
        "markers", f"{UPSTREAM_MARKER}(issue): reproduces this upstream issue (owner/repo#N)")
    path = os.environ.get(ENV_KNOWN_ISSUES)
    if not path:
        return
    plugin = KnownIssues(load_entries(Path(path)), os.environ.get(contract.CELL, ""))
    config.pluginmanager.register(plugin, "accelgrid-known-issues")
