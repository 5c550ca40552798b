"""PyTorch's Cross-Repository CI Relay (CRCR): what a relayed event asks for, and what the
grid tells the relay back (docs/guides/ci.md, "PyTorch's CI relay").

    accelgrid ci relay resolve EVENT.json   # the torch under test, the cells, run or not
    accelgrid ci relay report GRID_DIR      # the callback's conclusion and test-results

The relay forwards PyTorch's webhook payload verbatim as the ``repository_dispatch``
event's ``client_payload`` (``event_type``, ``delivery_id``, ``payload``: pytorch/test-infra
aws/lambda/cross_repo_ci_relay/webhook/event_handler.py at 61a7757). :func:`resolve`
reads it; :func:`report` turns a grid.json into the callback action's inputs, and into
the one-line verdict a pull request's commit status shows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from ..base import outcomes
from ..base.errors import InvalidInput
from ..base.jsonio import dumps, mapping
from ..config.model import NIGHTLY, Matrix
from ..results.verdict import REGRESSION

# The relay's event types: PyTorch's webhook event names it dispatches (the guide,
# pytorch/pytorch docs/source/accelerator/ci.md at 0ac83ae, "Event Payload").
EVENT_TYPES = ("pull_request", "push")
# pull_request actions the relay forwards (event_handler.py _PULL_REQUEST_ALLOW_ACTIONS);
# "closed" is forwarded so that a downstream can cancel, and runs nothing here.
RUN_ACTIONS = ("opened", "reopened", "synchronize")
# The callback action's self-report event types (action.yml's event-type input, RFC-0056).
SELF_REPORT_EVENTS = {"schedule": "nightly"}
# A commit status description holds at most 140 characters (GitHub REST, "Create a commit
# status": description is "a short description of the status").
STATUS_CHARS = 140
MAX_LISTED = 20  # failures and known issues listed by name in test-results; the rest counted

_SHA = re.compile(r"[0-9a-f]{40}")
_DELIVERY = re.compile(r"[A-Za-z0-9._-]{1,100}")  # X-GitHub-Delivery is a GUID
_URL = re.compile(r"https?://\S+?(?=[)\s]|$)")


class RelayError(InvalidInput):
    """A relayed event or a grid the relay commands cannot use; the message is one line."""


@dataclass(frozen=True)
class Resolved:
    """What a relayed event asks this repository to test."""

    run: bool
    why: str                # one line: what runs, or why nothing does
    event: str              # pull_request or push
    delivery: str           # the relay's delivery id (X-GitHub-Delivery of PyTorch's event)
    sha: str                # the PyTorch commit the event is about
    pr: str = ""            # PyTorch's pull request number, for pull_request events
    base: str = ""          # its base commit
    torch: tuple[str, ...] = ()   # the torch series whose cells run: the nightly channel's
    build: str = "nightly"  # how the torch under test is installed (docs/guides/ci.md)

    def outputs(self) -> dict[str, str]:
        return {"run": "true" if self.run else "false", "why": self.why,
                "event": self.event, "delivery": self.delivery, "sha": self.sha,
                "pr": self.pr, "base": self.base, "torch": ",".join(self.torch),
                "build": self.build}


def _text(value: Any, what: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise RelayError(f"{what}: {str(value)[:60]!r} is not what the relay sends")
    return value


def resolve(event: Mapping[str, Any], matrix: Matrix) -> Resolved:
    """The relayed ``repository_dispatch`` event (GITHUB_EVENT_PATH's content, or its
    ``client_payload`` alone) -> what to test. The torch under test is the nightly
    channel's newest build: the payload names PyTorch's commit, not a wheel of it
    (docs/guides/ci.md says what the other ways cost), so only the matrix's nightly series run."""
    client = mapping(event.get("client_payload")) if "client_payload" in event else event
    kind = client.get("event_type")
    if kind not in EVENT_TYPES:
        raise RelayError(f"event_type: {str(kind)[:40]!r} is none of the relay's "
                         f"({', '.join(EVENT_TYPES)})")
    delivery = _text(client.get("delivery_id"), "delivery_id", _DELIVERY)
    payload = mapping(client.get("payload"))
    series = tuple(dict.fromkeys(c.torch for c in matrix.cells
                                 if c.channel == NIGHTLY and not c.manual))
    if kind == "pull_request":
        pull = mapping(payload.get("pull_request"))
        sha = _text(mapping(pull.get("head")).get("sha"), "pull_request.head.sha", _SHA)
        base = mapping(pull.get("base")).get("sha")
        number = pull.get("number")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise RelayError(f"pull_request.number: {str(number)[:20]!r} is not a number")
        action = payload.get("action")
        found = Resolved(False, "", kind, delivery, sha, str(number),
                         base if isinstance(base, str) and _SHA.fullmatch(base) else "",
                         series)
        if action not in RUN_ACTIONS:
            return _with(found, False, f"pytorch/pytorch#{number} {str(action)[:20]}: "
                         "nothing to test")
        what = f"pytorch/pytorch#{number} at {sha[:12]}"
    else:
        sha = _text(payload.get("after"), "after", _SHA)
        found = Resolved(False, "", kind, delivery, sha, torch=series)
        if set(sha) == {"0"}:  # GitHub's "after" for a deleted ref
            return _with(found, False, f"push of {str(payload.get('ref'))[:60]}: a deleted "
                         "ref, nothing to test")
        what = f"push {str(payload.get('ref'))[:60]} at {sha[:12]}"
    if not series:
        return _with(found, False, f"{what}: the matrix has no cell of a nightly torch "
                     "series (torch.<series>.channel: nightly), so no cell can test it")
    return _with(found, True, f"{what}: the nightly cells of torch {', '.join(series)}")


def _with(found: Resolved, run: bool, why: str) -> Resolved:
    return Resolved(run, why, found.event, found.delivery, found.sha, found.pr, found.base,
                    found.torch, found.build)


@dataclass
class Report:
    """The callback's inputs from a grid, and the commit status's verdict."""

    conclusion: str                    # success or failure (the check run's conclusion)
    verdict: str                       # one line, at most STATUS_CHARS
    test_results: dict[str, Any]
    delivery_id: str = ""              # a self-report's: the PyTorch commit tested
    event_type: str = ""               # a self-report's: nightly
    self_report: bool = False
    problems: list[str] = field(default_factory=list)

    def outputs(self) -> dict[str, str]:
        return {"conclusion": self.conclusion, "verdict": self.verdict,
                "test_results": dumps(self.test_results),
                "delivery_id": self.delivery_id, "event_type": self.event_type,
                "self_report": "true" if self.self_report else "false"}


def _is_nightly(column: Mapping[str, Any]) -> bool:
    """A column whose torch is a nightly build: its channel, or an X.Y.Z.devN version."""
    if column.get("torch_channel") == NIGHTLY:
        return True
    try:
        return Version(str(column.get("torch_version") or "")).is_devrelease
    except InvalidVersion:
        return False


def report(grid: Mapping[str, Any] | None, event: str = "", why_none: str = "") -> Report:
    """The callback's conclusion and test-results from ``grid`` (grid.json; None when the
    grid job wrote none, ``why_none`` saying why). ``success`` only when every planned test
    ran (some tests, no errored or incomplete column, no lost cell or test) and none failed
    unexpectedly (no failed, error, timeout, crashed or xpassed result, no regression
    against the baselines); a known issue's strict xfail is expected. For an ``event``
    that self-reports (schedule: RFC-0056's nightly), only the columns of nightly torch
    count, and delivery_id is the PyTorch commit their torch was built from (env.json's
    torch.git_version)."""
    mode = SELF_REPORT_EVENTS.get(event, "")
    if grid is None:
        why = why_none or "no grid.json"
        return Report("failure", _clip(f"failure: {why}"), {"total": 0, "error": why},
                      problems=[why])
    columns = [c for c in grid.get("columns") or [] if isinstance(c, Mapping)]
    delivery = ""
    if mode:
        columns = [c for c in columns if _is_nightly(c)]
        commit = _nightly_commit(columns)
        if commit is None:
            return Report("skipped", "no cell of nightly torch: nothing to self-report",
                          {"total": 0}, problems=["no cell of nightly torch"])
        delivery = commit
    names = {str(c.get("name")) for c in columns}
    totals, cells, problems = _tally(columns)
    lost = [str(mapping(x).get("cell")) for x in grid.get("lost") or []]
    problems += [f"{cell} lost (no results)" for cell in lost]
    changes = [mapping(c) for c in mapping(grid.get("baseline")).get("changes") or []
               if mapping(c).get("cell") in names]
    regressions = [c for c in changes if c.get("change") == REGRESSION and not c.get("flaky")]
    lost_tests = [c for c in changes if c.get("change") == "lost"]
    failures, known = _failures_and_known(grid, names)
    total = sum(int(c["total"]) for c in cells.values())
    failed = sum(totals[o] for o in outcomes.BAD)
    if total == 0:
        problems.append("no test ran")
    if regressions:
        problems.append(f"{len(regressions)} regression(s) against the baselines")
    if lost_tests:
        problems.append(f"{len(lost_tests)} baseline test(s) with no record")
    ok = not problems and failed == 0
    results = _test_results(totals, total, cells, failures, known)
    if problems:
        results["problems"] = problems
    if delivery:
        results["pytorch_sha"] = delivery
    conclusion = "success" if ok else "failure"
    shown = ", ".join(f"{n} {o}" for o, n in totals.items() if n) or "no tests"
    head = f"{conclusion}: {len(cells)} cell(s), {shown}"
    if failed or problems:
        head += "; " + "; ".join(
            ([f"{failed} failed unexpectedly"] if failed else []) + problems)
    return Report(conclusion, _clip(head), results, delivery, mode, bool(mode), problems)


def _nightly_commit(columns: list[Mapping[str, Any]]) -> str | None:
    """The PyTorch commit the nightly ``columns``' torch was built from; None when there
    is no such column or none names its commit. Columns built from different commits
    are refused: one self-report names one."""
    commits = sorted({str(c.get("torch_git")) for c in columns if c.get("torch_git")})
    if not columns or not commits:
        return None
    if len(commits) > 1 or any(not c.get("torch_git") for c in columns):
        raise RelayError("the nightly cells' torch was built from different commits "
                         f"({', '.join(c[:12] for c in commits)} or none): one "
                         "self-report names one")
    return _text(commits[0], "torch.git_version", _SHA)


def _tally(columns: list[Mapping[str, Any]]
           ) -> tuple[dict[str, int], dict[str, Any], list[str]]:
    """The counts per outcome over ``columns``, each column's counts and status for
    test-results, and the problems of the columns (counts that are not counts, a column
    that is not ok)."""
    totals: dict[str, int] = {o: 0 for o in outcomes.ALL}
    cells: dict[str, Any] = {}
    problems: list[str] = []
    for col in columns:
        raw = {o: _count(mapping(col.get("counts")).get(o, 0)) for o in outcomes.ALL}
        if any(n is None for n in raw.values()) or _count(col.get("total")) is None:
            problems.append(f"{col.get('name')}: counts that are not counts")
        counts = {o: n or 0 for o, n in raw.items()}
        for o, n in counts.items():
            totals[o] += n
        cells[str(col.get("name"))] = {
            **{o: n for o, n in counts.items() if n}, "total": _count(col.get("total")) or 0,
            "status": col.get("status"), "torch": col.get("torch_version"),
            "torch_git": col.get("torch_git")}
        if col.get("status") != "ok":
            problems.append(f"{col.get('name')} {col.get('status')}: "
                            f"{str(col.get('reason') or '')[:80]}")
    return totals, cells, problems


def _failures_and_known(grid: Mapping[str, Any], names: set[str]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The results of the columns ``names`` that failed unexpectedly, and those that
    failed as a known issue said (with the issue's link)."""
    failures, known = [], []
    for row in grid.get("rows") or []:
        for cell, result in mapping(mapping(row).get("cells")).items():
            if cell not in names:
                continue
            outcome = mapping(result).get("outcome")
            if outcome in outcomes.BAD:
                failures.append({"cell": cell, "test": row.get("nodeid"), "outcome": outcome})
            elif outcome == outcomes.XFAILED:
                # The known issue's reason ends with its link: "ID: TITLE (URL)".
                links = _URL.findall(str(mapping(result).get("message") or ""))
                known.append({"cell": cell, "test": row.get("nodeid"),
                              "issue": links[-1] if links else None})
    return failures, known


def _test_results(totals: dict[str, int], total: int, cells: dict[str, Any],
                  failures: list[dict[str, Any]], known: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """The callback's test-results: the counts, the cells, the first failures and known
    issues by name (how many more)."""
    results: dict[str, Any] = {
        "passed": totals[outcomes.PASSED] + totals[outcomes.FLAKY],
        "failed": sum(totals[o] for o in outcomes.BAD),
        "skipped": totals[outcomes.SKIPPED] + totals[outcomes.NOT_RUN],
        "xfailed": totals[outcomes.XFAILED],
        "total": total,
        "cells": cells,
        "failures": failures[:MAX_LISTED],
        "known_issues": known[:MAX_LISTED],
    }
    if len(failures) > MAX_LISTED:
        results["failures_more"] = len(failures) - MAX_LISTED
    if len(known) > MAX_LISTED:
        results["known_issues_more"] = len(known) - MAX_LISTED
    return results


def _count(value: Any) -> int | None:
    """A count from grid.json, or None for anything else (a NaN, a float, a string)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= STATUS_CHARS else text[:STATUS_CHARS - 3] + "..."
