"""The ops HF's own tests hit that the device does not implement or runs on the CPU:
NotImplementedError texts and fallback warnings (XPU, MPS) in each test's report, its
captured output and its warnings, parsed with the op capture's parsers
(:func:`accelgrid.testing.opcapture.parse_messages`), gathered per cell into ``hf_ops.json`` (and a
Markdown table, ``hf_ops.md``) in the results folder, each op with the tests that hit it.
Runs on the xdist controller, which sees every worker's reports and warnings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from accelgrid.base import contract, jsonio
from accelgrid.testing import opcapture

FILE_JSON = "hf_ops.json"
FILE_MD = "hf_ops.md"
PREFIX = "suites/hf_tests/"
KINDS = {"missing": "not implemented", "fallback": "fell back to CPU"}


def add(table: dict[str, dict[str, Any]], nodeid: str, text: str) -> None:
    """Ops named in ``text`` into ``table`` ({op: {"kind", "tests"}}) for ``nodeid``."""
    found = opcapture.parse_messages(text)
    for kind in ("missing", "fallback"):
        for op in found[kind]:
            entry = table.setdefault(op, {"kind": kind, "tests": []})
            if kind == "missing":        # an op seen both ways: not implemented wins
                entry["kind"] = "missing"
            if nodeid not in entry["tests"]:
                entry["tests"].append(nodeid)
    if found["generic_fallback"]:
        entry = table.setdefault("(unnamed: set PYTORCH_DEBUG_XPU_FALLBACK=1)",
                                 {"kind": "fallback", "tests": []})
        if nodeid not in entry["tests"]:
            entry["tests"].append(nodeid)


def markdown(cell: str, table: dict[str, dict[str, Any]]) -> str:
    """The table as Markdown: one row per op, worst kind first."""
    lines = [f"# {cell}: ops HF's own tests hit that did not run natively", ""]
    if not table:
        return "\n".join(lines + ["None: no NotImplementedError or fallback message.", ""])
    lines += ["| op | how | tests |", "|---|---|---|"]
    order = sorted(table.items(), key=lambda kv: (kv[1]["kind"] != "missing", kv[0]))
    for op, entry in order:
        tests = "<br>".join(f"`{t}`" for t in sorted(entry["tests"]))
        lines.append(f"| `{op}` | {KINDS[entry['kind']]} | {tests} |")
    return "\n".join(lines) + "\n"


def merged(old: Any, new: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``new`` ops joined to a table an earlier pass of the run wrote."""
    ops = dict(old.get("ops", {})) if isinstance(old, dict) else {}
    for op, entry in new.items():
        have = ops.setdefault(op, {"kind": entry["kind"], "tests": []})
        if entry["kind"] == "missing":
            have["kind"] = "missing"
        have["tests"] = sorted(set(have["tests"]) | set(entry["tests"]))
    return {"schema": 1, "ops": ops}


class Collector:
    """Gathers the table during the run; writes it at the end (when recording)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.table: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(PREFIX):
            return
        parts = [report.longreprtext or ""] + [text for _, text in report.sections]
        add(self.table, report.nodeid, "\n".join(parts))

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str,
                                location: Any) -> None:
        if nodeid.startswith(PREFIX):
            add(self.table, nodeid, str(getattr(warning_message, "message", warning_message)))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        folder = os.environ.get(contract.RESULTS)
        if not folder:
            return
        path = Path(folder) / FILE_JSON
        data = jsonio.update_json(path, lambda old: merged(old, self.table))
        cell = os.environ.get(contract.CELL, "")
        (Path(folder) / FILE_MD).write_text(markdown(cell, data["ops"]), encoding="utf-8")
