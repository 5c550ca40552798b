"""The files a run leaves and a grid is made of, as types: one line of ``tests.jsonl``
(:data:`TestRecord`), ``summary.json`` (:class:`Summary`), ``env.json`` (:class:`Env`) and
``grid.json`` (:class:`Grid`).

Each has a JSON Schema shipped beside the package's others
(``accelgrid/schemas/<name>.schema.json``, :data:`SCHEMA_FILES`, :func:`load_schema`),
for dashboards and other readers; ``tests/results/test_records.py`` validates a real run's files
and a real grid against them and keeps each TypedDict's keys equal to its schema's
``properties`` and ``required`` (a nested one is the schema's ``$defs`` entry of the same
name). docs/reference/results.md and docs/reference/grid-schema.md say what each field means.

The modules that run inside a cell import this one for their annotations only (under
``TYPE_CHECKING``): ``Required`` needs Python 3.11, and a cell's interpreter may be older.
"""

import importlib.resources
import json
from typing import Any, Literal, Required, TypedDict

from ..base.outcomes import Outcome

__all__ = [
    "SCHEMA_FILES", "Baseline", "Change", "Column", "ColumnBaseline", "Env", "Grid",
    "IssueRef", "LostCell", "Outcome", "PassEntry", "PassTiming", "Plan", "PlanInputs",
    "PlanPass", "PropertyScalar",
    "PropertyValue", "Reason", "Result", "Row",
    "Summary", "TestRecord", "TorchFacts", "load_schema",
]

# --- tests.jsonl ----------------------------------------------------------------------


class IssueRef(TypedDict, total=False):
    """A known upstream issue (known_issues.yaml's entry, or a grid's normalised one)."""

    id: Required[str]
    url: Required[str]
    title: str


# One line of tests.jsonl (the recorder's, :class:`accelgrid.testing.recorder.Recorder`,
# or finalize's for a test that crashed or never ran). ``pass`` is a keyword, hence the
# functional form. Only ``nodeid`` and ``outcome`` are always there.
TestRecord = TypedDict("TestRecord", {
    "nodeid": Required[str],
    "outcome": Required[Outcome],
    "duration": float | None,     # seconds (setup + call + teardown)
    "message": str,               # one line: assertion, skip or xfail reason
    "longrepr": str,              # the traceback (8,000 characters kept, full_text has all)
    "output": str,                # a failure's captured output (as longrepr)
    "phase": str,                 # where it went wrong: collect, setup, call, teardown
    "worker": str | None,         # xdist worker (gw0)
    "device": str,                # cpu, cuda:1, xpu:all
    "start": float | None,        # epoch seconds
    "finished": float,            # epoch seconds the record was written
    "cpu_s": float,               # CPU time of the test process over the test
    "cell": str,
    "pass": str,                  # the run's pass (single, pinned, all-devices, ...)
    "run_id": str,
    "issue": IssueRef | str,      # a known issue (dict), or ``owner/repo#N``
    "properties": dict[str, Any],  # what the test recorded (record_property)
    "reruns": int,                # failed attempts before the last (flaky)
    "full_text": dict[str, str],  # field -> file under full-text/ holding it whole
}, total=False)


# --- summary.json ---------------------------------------------------------------------


class PassTiming(TypedDict, total=False):
    """One pass's timing in summary.json (:func:`accelgrid.results.pass_times`)."""

    name: Required[str]
    beside: Required[str | None]
    workers: Required[int | None]
    start: Required[str]
    wall_s: Required[float]
    rc: Required[int | None]
    tests: Required[int]
    first_test_s: Required[float | None]
    workers_first_test_s: Required[dict[str, float]]
    waited_s: float
    ahead_s: float   # started ahead of the env's checks: its gate opened this much later
    launched: bool   # its pytest started with the command, from the last launch (relaunch)


class Summary(TypedDict, total=False):
    """summary.json (:func:`accelgrid.results.finalize`)."""

    cell: Required[str]
    total: Required[int]
    counts: Required[dict[str, int]]   # every outcome, 0 when none
    problems: Required[list[str]]
    partial: bool                      # a selected run
    # Set when the run recorded less than it collected (the tests with no record, the
    # first of them) or never recorded its collection: the run is not ok (issue 36).
    incomplete: str
    wall_s: float
    passes: list[PassTiming]
    run_id: str | None
    pytest_args: list[str]
    selection: list[str]


# --- env.json -------------------------------------------------------------------------


class TorchFacts(TypedDict, total=False):
    """env.json's ``torch``: the build and the devices the test processes saw
    (:func:`accelgrid.results.provenance.merge_torch_reports`); ``pending`` until merged."""

    version: str
    git_version: str | None
    cuda_runtime: str | None
    xpu_runtime: str | None
    debug: bool | None
    imported: bool
    device_count: int
    devices: list[dict[str, Any]]   # per device: index, name and what its module adds
    driver: str | None
    error: str
    device_error: str
    pending: bool


class PassEntry(TypedDict, total=False):
    """One pass of the run in env.json's ``passes``."""

    name: Required[str]
    start: Required[str]
    end: Required[str | None]
    exitstatus: int


class Env(TypedDict, total=False):
    """env.json (:func:`accelgrid.results.provenance.collect`, then the recorder and
    :func:`accelgrid.results.finalize`)."""

    cell: Required[str]
    device_type: Required[str]
    start: Required[str]
    end: Required[str | None]
    status: Required[Literal["running", "finished", "ended"]]
    end_reason: str
    exitstatus: int
    torch: Required[TorchFacts]
    python: dict[str, str]            # version, implementation, executable
    packages: dict[str, str]
    env: dict[str, str]               # recorded variables: values set by the cell, else <redacted>
    host: dict[str, Any]              # name, system, release, machine, cpus
    project: dict[str, Any]           # commit, dirty
    ci: dict[str, str]                # the CI run's variables (provenance.CI_RUN_VARS)
    run_id: str | None
    pytest_args: list[str]
    selection: list[str]
    passes: list[PassEntry]


# --- plan.json ------------------------------------------------------------------------


class PlanInputs(TypedDict):
    """What a pass ran on, as its interpreter saw it before its tests started
    (:func:`accelgrid.results.plan.inputs`)."""

    torch: str | None                 # the installed version, e.g. 2.13.0+cpu
    torch_local: str | None           # its local build tag: cpu, cu130, xpu
    packages: dict[str, str | None]   # each pinned package as installed (None: absent)
    commit: str | None                # the project's HEAD (None: not a git checkout)
    dirty: bool
    matrix_digest: str | None         # digest of the cell's matrix entry (Cell.as_dict)
    flags: dict[str, str | None]      # the cell's env flags as set


class PlanPass(TypedDict, total=False):
    """One pass in plan.json: its own inputs where they differ from the run's, and
    pytest's own counts when it ended."""

    name: Required[str]
    inputs: PlanInputs
    collected: int | None             # pytest's session.testscollected
    reported: int                     # tests pytest reported an outcome for
    outcomes: dict[str, int]          # pytest's terminal summary counts
    exitstatus: int


class Plan(TypedDict):
    """plan.json (:mod:`accelgrid.results.plan`), written before a pass's tests start."""

    run_id: str | None
    cell: str
    shard: str | None                 # K/N of a shard run
    inputs: PlanInputs
    passes: list[PlanPass]


# --- grid.json (docs/reference/grid-schema.md) ----------------------------------------------------


class Reason(TypedDict):
    """Why tests of a suite were skipped or not run (:func:`accelgrid.results.reasons.group`)."""

    suite: str
    outcome: Outcome
    reason: str
    count: int


class ColumnBaseline(TypedDict, total=False):
    """A column against its baseline (:func:`accelgrid.report.compare.mark`)."""

    file: Required[str]
    counts: Required[dict[str, int]]
    outside_selection: int
    compared: int


class Column(TypedDict, total=False):
    """One cell of a grid (:func:`accelgrid.report.model.from_folders`)."""

    name: Required[str]
    cell: Required[str]
    device: Required[str]
    torch_series: Required[str]
    profile: Required[str]
    torch_version: Required[str | None]
    torch_build: Required[str]
    torch_channel: Required[str]
    torch_git: Required[str | None]
    device_name: Required[str | None]
    device_count: Required[int | None]
    driver: Required[str | None]
    host: Required[str | None]
    python: Required[str | None]
    commit: Required[str | None]
    start: Required[str | None]
    end: Required[str | None]
    packages: Required[dict[str, str]]
    env_flags: Required[dict[str, str]]
    counts: Required[dict[str, int]]
    total: Required[int]
    reasons: Required[list[Reason]]
    status: Required[Literal["ok", "partial", "errored", "lost"]]
    error: Required[str | None]
    problems: Required[list[str]]
    reason: Required[str | None]
    selection: Required[list[str]]
    path: Required[str]
    baseline: Required[ColumnBaseline | None]
    ops_vs_predicted: Required[dict[str, Any] | None]
    expected: bool                 # with --expect
    lost: str                      # with --expect: why an expected column counts as lost
    history: dict[str, Any]        # with --history (docs/reference/history.md)


# A recorded property's value in a grid (:func:`accelgrid.results.clean_properties`):
# a number, a bool, null, a short text, or a short list or mapping of those.
PropertyScalar = str | int | float | bool | None
PropertyValue = PropertyScalar | list[PropertyScalar] | dict[str, PropertyScalar]


class Result(TypedDict, total=False):
    """One test in one column (``rows[].cells[column]``)."""

    outcome: Required[Outcome]
    message: str
    duration: float
    worker: str
    device: str
    issue: IssueRef
    longrepr: str                  # in the model for grid.html; never in grid.json
    properties: dict[str, PropertyValue]  # what the test recorded, bounded
    change: str
    expected: str
    history: str
    flaky: dict[str, Any]
    failing_since: dict[str, Any]
    last_passed: dict[str, Any] | None


class Row(TypedDict, total=False):
    """One test across the columns."""

    nodeid: Required[str]
    suite: Required[str]
    workload: Required[str]
    test: Required[str]
    cells: Required[dict[str, Result]]
    lost: dict[str, str]           # column -> the baseline's outcome of a test it lacks


class Change(TypedDict, total=False):
    """A result that is not unchanged against its baseline."""

    nodeid: Required[str]
    cell: Required[str]
    change: Required[str]
    expected: Required[str | None]
    outcome: Required[Outcome | None]
    message: Required[str | None]
    flaky: dict[str, Any]          # with --history, a flaky test's figures


class Baseline(TypedDict):
    """grid.json's comparison with baselines."""

    dir: str
    cells: list[str]
    counts: dict[str, int]
    regressions: int
    changes: list[Change]
    nothing_compared: list[str]


class LostCell(TypedDict):
    cell: str
    why: str


class Grid(TypedDict, total=False):
    """grid.json, schema 2 (and the model the grid's renderers share)."""

    schema: Required[int]
    generated: Required[str]
    outcomes: Required[list[str]]
    columns: Required[list[Column]]
    rows: Required[list[Row]]
    baseline: Required[Baseline | None]
    notes: Required[list[str]]
    history: dict[str, Any]        # with --history (docs/reference/history.md)
    lost: list[LostCell]           # with --expect


# --- the schemas ----------------------------------------------------------------------

SCHEMA_FILES = {"test-record": "test_record.schema.json", "summary": "summary.schema.json",
                "env": "env.schema.json", "grid": "grid.schema.json",
                "plan": "plan.schema.json"}


def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of :data:`SCHEMA_FILES` ``name`` as shipped in the package."""
    resource = importlib.resources.files("accelgrid") / "schemas" / SCHEMA_FILES[name]
    schema: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return schema
