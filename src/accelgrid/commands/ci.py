"""``accelgrid ci``: the GitHub Actions workflow and the tox configuration, from matrix.yaml.

    accelgrid ci render        # write the files in OUTPUTS beside matrix.yaml
    accelgrid ci check         # exit 1 with a diff when the committed files differ

Both the workflow and tox run a cell exactly as a developer does: ``nox -s <cell>``.
ci/README.md explains the workflows' design (plan job, triggers, security, grid, job
time) and the repository settings the self-hosted runners rely on.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

import jinja2

from .. import __version__
from ..base.errors import InvalidInput
from ..base.jsonio import dumps
from ..config.checks import injection_problem
from ..config.model import RELEASE, Cell, Matrix
from ..host import venvs

WORKFLOW = ".github/workflows/accelgrid.yml"        # schedule/dispatch: every cell
PR_WORKFLOW = ".github/workflows/accelgrid-pr.yml"  # pull_request: hosted cells only
ACTIONLINT = ".github/actionlint.yaml"
TOX_INI = "ci/tox.ini"
TOXFILE = "ci/toxfile.py"
OUTPUTS = (WORKFLOW, PR_WORKFLOW, ACTIONLINT, TOX_INI, TOXFILE)

# A cell's job does more than the cell's own time limit (timeout.cell_minutes, enforced by
# the runner around pytest only): checkout, Python, accelgrid, then the cell environment
# with torch (multi-GB wheels for cuda and xpu) before the limit starts, and the results
# finalized and uploaded after it. The job gets all three, so the runner's limit always
# fires first and the results are always finalized (ci/README.md).
INSTALL_MINUTES = 30   # setup and installs, before the cell limit starts
MARGIN_MINUTES = 10    # stopping pytest, finalizing and uploading results
HOSTED_JOB_MINUTES = 360  # GitHub: a job on a GitHub-hosted runner runs at most 6 hours

# Third-party actions, pinned to the commit their release tag points at (tags can move).
ACTIONS = {
    "checkout": ("actions/checkout", "3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "setup-python": ("actions/setup-python", "5fda3b95a4ea91299a34e894583c3862153e4b97",
                     "v7.0.0"),
    "upload-artifact": ("actions/upload-artifact", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f",
                        "v7.0.0"),
    "download-artifact": ("actions/download-artifact",
                          "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "upload-pages-artifact": ("actions/upload-pages-artifact",
                              "fc324d3547104276b827a68afc52ff2a11cc49c9", "v5.0.0"),
    "deploy-pages": ("actions/deploy-pages", "cd2ce8fcbc39b97be8ca5fce6e763baed58fa128",
                     "v5.0.0"),
    # restore and save apart: the combined action saves only when the job succeeds, and a
    # cell job with a failing test still filled its cache.
    "cache-restore": ("actions/cache/restore", "27d5ce7f107fe9357f9df03efb73ab90386fccae",
                      "v5.0.5"),
    "cache-save": ("actions/cache/save", "27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5"),
}

# PyTorch's CI relay callback (docs/guides/ci.md, "PyTorch's CI relay"): a composite action in
# pytorch/test-infra, which tags no releases; pinned to the newest commit read for this
# (2026-08-21), whose action.yml last changed in c0b0155 (#8303, delivery-id/event-type).
RELAY_ACTION = ("pytorch/test-infra/.github/actions/cross-repo-ci-relay-callback",
                "61a77570f45416dc425c17d4a648376541a84732", "main of 2026-08-21")
# The commit status a run for a pull request posts (its context, shown on the PR).
STATUS_CONTEXT = "accelgrid"

MAX_MATRIX_JOBS = 256             # GitHub: one job matrix generates at most 256 jobs
MAX_WORKFLOW_BYTES = 500 * 1024   # GitHub: a workflow file over 500 KB starts no runs
HOSTED_RUNNER = "ubuntu-24.04"    # the plan and grid jobs (no device needed)
# The label on a pull request that lets a maintainer's dispatch run every cell, GPU
# runners included, on its head commit (ci/README.md, "GPU cells for a pull request").
PR_LABEL = "ciflow/gpu"
# Where the images job pushes and the cell jobs pull (docs/guides/ci.md, "Images"): the repository
# variable, else GitHub's registry under the repository's owner.
REGISTRY_VARIABLE = "ACCELGRID_IMAGE_REGISTRY"
DEFAULT_REGISTRY = "ghcr.io"
# The suites that read transformers' / accelerate's own checkouts (testing.hf_checkouts).
HF_SUITES = ("hf_tests", "hf_examples")
HF_REPOSITORIES = {"transformers": "https://github.com/huggingface/transformers",
                   "accelerate": "https://github.com/huggingface/accelerate"}

# Labels actionlint already knows for self-hosted runners; only the others need declaring.
_ACTIONLINT_KNOWN = {"self-hosted", "linux", "macos", "windows", "x64", "x86", "arm", "arm64"}
# A tox env-name factor like these makes tox look for that Python (tox.tox_env.python.api).
_PY_FACTOR = re.compile(r"^((py|pypy|cpython|jython|graalpy|rustpython|ironpython)\d|[23]\.\d)")


class CIError(InvalidInput):
    """The matrix cannot be turned into CI configuration; the message is one line."""


@dataclass(frozen=True)
class JobGroup:
    """One job of the workflow: a dynamic matrix over cells that share a runner."""

    id: str
    device: str
    runner_labels: tuple[str, ...]
    hosted: bool
    cells: tuple[Cell, ...]
    container: bool = False   # its cells run inside their images (runner.container)


def job_groups(cells: Sequence[Cell], limit: int = MAX_MATRIX_JOBS) -> list[JobGroup]:
    """Cells grouped by device (and runner), each group at most ``limit`` cells.

    A device with more cells than GitHub's per-matrix limit is split into numbered jobs
    (``cells-xpu-1``, ``cells-xpu-2``) rather than failing at run time.
    """
    buckets: dict[tuple[str, tuple[str, ...], bool, bool], list[Cell]] = {}
    for cell in cells:
        key = (cell.device, cell.runner_labels, cell.hosted, cell.ci_container)
        buckets.setdefault(key, []).append(cell)
    chunked = [(key, members[i:i + limit]) for key, members in buckets.items()
               for i in range(0, len(members), limit)]
    per_device = {key[0]: sum(k[0] == key[0] for k, _ in chunked) for key, _ in chunked}
    groups: list[JobGroup] = []
    seen: dict[str, int] = {}
    for (device, labels, hosted, container), chunk in chunked:
        seen[device] = seen.get(device, 0) + 1
        job_id = f"cells-{device}" + (f"-{seen[device]}" if per_device[device] > 1 else "")
        groups.append(JobGroup(job_id, device, labels, hosted, tuple(chunk), container))
    return groups


def tox_env_name(cell: Cell) -> str:
    """``<device>-torch<series>-<profile>``, e.g. ``xpu-torch2.13-cpu_fallback``.

    Not the cell name: tox-gh-actions selects envs whose dash-separated factors include
    the mapped ones, so every axis must be exactly one factor (``cpu-fallback`` would also
    match DEVICE=cpu), the default profile needs a factor of its own, and a bare ``2.13``
    factor makes tox look for Python 2.13.
    """
    return f"{cell.device}-torch{cell.torch}-{cell.profile.replace('-', '_')}"


def _tox_factor_problems(matrix: Matrix) -> list[str]:
    problems = []
    devices = {c.device for c in matrix.cells}
    for profile in sorted({c.profile for c in matrix.cells}):
        factor = profile.replace("-", "_")
        if factor in devices:
            problems.append(f"profile '{profile}' has a device's name: tox-gh-actions could "
                            "not tell them apart")
        if _PY_FACTOR.match(factor):
            problems.append(f"profile '{profile}' looks like a Python version to tox")
    return problems


def _unquotable(text: str, what: str) -> str:
    """``text`` when every target can quote it; CIError naming ``what`` otherwise (a
    control character ends a line, GitHub evaluates ${{ }} even in quotes). The matrix
    refuses both already: this holds for a Matrix built any other way."""
    why = injection_problem(text)
    if why:
        raise CIError(f"{what} {text!r} {why}")
    return text


def _runs_on(labels: Sequence[str]) -> str:
    # JSON is valid YAML and quotes whatever needs quoting.
    labels = [_unquotable(label, "runner label") for label in labels]
    return dumps(labels[0]) if len(labels) == 1 else dumps(list(labels))


def _tox_text(text: str) -> str:
    """A value for tox.ini: one line, and tox's ``{...}`` substitution escaped."""
    return _unquotable(text, "tox.ini value").replace("{", "\\{").replace("}", "\\}")


def job_minutes(cell: Cell) -> int:
    """timeout-minutes of ``cell``'s CI job: install allowance + cell limit + margin."""
    return INSTALL_MINUTES + cell.cell_minutes + MARGIN_MINUTES


def _shard_jobs(cell: Cell) -> list[tuple[str, str]]:
    """(job id, ACCELGRID_SHARD) per job of ``cell``: one, or one per shard."""
    if cell.shards <= 1:
        return [(cell.name, "")]
    return [(f"{cell.name}-shard-{k}-of-{cell.shards}", f"{k}/{cell.shards}")
            for k in range(1, cell.shards + 1)]


def pins_digest(cell: Cell) -> str:
    """12 hex of what the cell's env is installed from (Python, pins, packages, index):
    the key of its uv cache, so a changed pin starts a new cache instead of growing one."""
    what = {"python": cell.python, "pins": dict(cell.pins), "packages": list(cell.packages),
            "index": cell.index, "torch": cell.torch_requirement, "channel": cell.channel}
    return hashlib.sha256(dumps(what).encode()).hexdigest()[:12]


def hf_versions(cell: Cell) -> dict[str, str]:
    """The transformers / accelerate versions whose checkouts CI clones for ``cell``: its
    pins, when a suite of it reads checkouts and it runs on the runner's own host (the
    image of a container cell has no mount for them); else empty strings."""
    wanted = not cell.ci_container and any(s in HF_SUITES for s in cell.suites)
    return {p: cell.pins.get(p, "") if wanted else "" for p in HF_REPOSITORIES}


def _plan_cells(groups: Sequence[JobGroup]) -> list[str]:
    return [
        dumps({"cell": c.name, "id": job, "shard": shard, "job": g.id, "device": c.device,
               "torch": c.torch, "profile": c.profile, "hosted": c.hosted,
               "timeout": job_minutes(c), "container": c.ci_container,
               "pins": pins_digest(c), **hf_versions(c)})
        for g in groups for c in g.cells for job, shard in _shard_jobs(c)
    ]


class _Delimiters(TypedDict, total=False):
    """jinja2.Environment's delimiter arguments (a workflow template's own)."""

    variable_start_string: str
    variable_end_string: str
    block_start_string: str
    block_end_string: str
    comment_start_string: str
    comment_end_string: str


def _environment(**delimiters: Unpack[_Delimiters]) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("accelgrid", "templates"),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True, autoescape=False, **delimiters)


def _matrix_label(matrix: Matrix) -> str:
    try:
        return str(matrix.path.resolve().relative_to(matrix.root.resolve()))
    except ValueError:
        return str(matrix.path)


def install_accelgrid(root: Path) -> str:
    """What the workflows' "Install accelgrid" steps hand pip: accelgrid's own checkout
    itself (editable, at the versions it tests with: constraints.txt), any other project the
    accelgrid version that rendered them."""
    if venvs.is_accelgrid_checkout(root):
        return f"--constraint {venvs.CONSTRAINTS} --editable ."
    return f"accelgrid=={__version__}"


def _checked_groups(matrix: Matrix, limit: int) -> list[JobGroup]:
    """The CI jobs of ``matrix``'s cells, after refusing (CIError) a matrix CI cannot run:
    no cells, tox factors that clash, a hosted cell over the runners' time limit, a job
    over GitHub's jobs per matrix."""
    if not matrix.cells:
        raise CIError("the matrix has no cells: nothing to run in CI")
    problems = _tox_factor_problems(matrix)
    if problems:
        raise CIError("; ".join(problems))
    too_long = [c for c in matrix.cells if c.hosted and job_minutes(c) > HOSTED_JOB_MINUTES]
    if too_long:
        cell = too_long[0]
        raise CIError(f"cell {cell.name} would need a job of {job_minutes(cell)} minutes "
                      f"(install {INSTALL_MINUTES} + cell limit {cell.cell_minutes} + margin "
                      f"{MARGIN_MINUTES}), over GitHub-hosted runners' {HOSTED_JOB_MINUTES}: "
                      "lower its timeout.cell_minutes")
    groups = job_groups(matrix.cells, limit)
    for g in groups:
        jobs = sum(len(_shard_jobs(c)) for c in g.cells)
        if jobs > limit:
            raise CIError(f"job {g.id} would have {jobs} jobs with its cells' shards, over "
                          f"GitHub's {limit} per matrix: lower their shards")
    return groups


def _workflow(workflow_env: jinja2.Environment, matrix: Matrix, source: str,
              picked: Sequence[JobGroup], pr: bool, max_workflow_bytes: int) -> str:
    """The nightly workflow (or with ``pr`` the pull requests') running the jobs
    ``picked``; refused (CIError) over GitHub's size limit."""
    text = workflow_env.get_template("workflow.yml.j2").render(
        source=source,
        pr=pr,
        groups=[{"id": g.id, "device": g.device, "hosted": g.hosted,
                 "container": g.container,
                 "runs_on": _runs_on(g.runner_labels), "count": len(g.cells),
                 "jobs": sum(len(_shard_jobs(c)) for c in g.cells),
                 # its shards are balanced by the durations in the nightly history
                 "sharded": not pr and any(c.shards > 1 for c in g.cells)}
                for g in picked],
        sharded=not pr and any(c.shards > 1 for g in picked for c in g.cells),
        plan_cells=_plan_cells(picked),
        actions={k: {"uses": f"{repo}@{sha}", "version": version}
                 for k, (repo, sha, version) in ACTIONS.items()},
        relay_action={"uses": f"{RELAY_ACTION[0]}@{RELAY_ACTION[1]}",
                      "version": RELAY_ACTION[2]},
        status_context=STATUS_CONTEXT,
        python=matrix.default_python,
        install=install_accelgrid(matrix.root),
        runner=HOSTED_RUNNER,
        pr_label=PR_LABEL,
        registry_variable=REGISTRY_VARIABLE,
        default_registry=DEFAULT_REGISTRY,
        images=not pr and any(g.container for g in picked),
        hf_repositories=HF_REPOSITORIES,
        devices=sorted({c.device for c in matrix.cells}, key=list(matrix.devices).index),
        series=sorted({c.torch for c in matrix.cells}, key=list(matrix.torch).index),
        profiles=sorted({c.profile for c in matrix.cells},
                        key=list(matrix.profiles).index),
    )
    size = len(text.encode())
    if size > max_workflow_bytes:
        raise CIError(f"the workflow for {len(matrix.cells)} cells would be {size} bytes, "
                      f"over GitHub's limit of {max_workflow_bytes}: split the matrix")
    return text


def _tox_ini(env: jinja2.Environment, matrix: Matrix, source: str) -> str:
    """tox.ini: an environment per cell, its factors mapped to the cell's axes."""
    return env.get_template("tox.ini.j2").render(
        source=source,
        envs=[{"name": tox_env_name(c), "cell": c.name,
               "what": _tox_text(f"{c.device} / torch {c.pins['torch']} / profile "
                                 f"{c.profile}")}
              for c in matrix.cells],
        mapping={
            "DEVICE": {d: d for d in dict.fromkeys(c.device for c in matrix.cells)},
            "TORCH": {t: f"torch{t}" for t in dict.fromkeys(c.torch for c in matrix.cells)},
            "PROFILE": {p: p.replace("-", "_")
                        for p in dict.fromkeys(c.profile for c in matrix.cells)},
        },
    )


def render(matrix: Matrix, *, limit: int = MAX_MATRIX_JOBS,
           max_workflow_bytes: int = MAX_WORKFLOW_BYTES) -> dict[str, str]:
    """Every generated file (path relative to the matrix's folder -> text). Cells whose torch
    comes from a local wheel run on request only: CI has no such wheel."""
    matrix = dataclasses.replace(matrix, cells=tuple(c for c in matrix.cells if not c.manual))
    groups = _checked_groups(matrix, limit)
    source = _matrix_label(matrix)
    # The workflow is full of GitHub's own ${{ }}: give jinja other delimiters there.
    workflow_env = _environment(variable_start_string="[[", variable_end_string="]]",
                                block_start_string="[%", block_end_string="%]",
                                comment_start_string="[#", comment_end_string="#]")
    # Pull requests run the hosted cells of released torch: a nightly's breakage is the
    # nightly's news (the scheduled run), not a pull request's verdict.
    pr_groups = job_groups([c for c in matrix.cells if c.hosted and c.channel == RELEASE],
                           limit)
    workflows = {rel: _workflow(workflow_env, matrix, source, pr_groups if pr else groups, pr,
                                max_workflow_bytes)
                 for rel, pr in ((WORKFLOW, False), (PR_WORKFLOW, True))}
    custom_labels = sorted({label for g in groups if not g.hosted for label in g.runner_labels
                            if label.lower() not in _ACTIONLINT_KNOWN})
    env = _environment()
    actionlint = env.get_template("actionlint.yaml.j2").render(source=source,
                                                               labels=custom_labels)
    tox_ini = _tox_ini(env, matrix, source)
    assert env.loader is not None
    toxfile = env.loader.get_source(env, "toxfile.py")[0]  # a plain Python file, copied
    return {**workflows, ACTIONLINT: actionlint, TOX_INI: tox_ini, TOXFILE: toxfile}


def write(files: dict[str, str], root: Path) -> list[Path]:
    """Write ``files`` under ``root``; returns the paths whose content changed."""
    changed = []
    for rel, text in files.items():
        path = root / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed.append(path)
    return changed


def stale(files: dict[str, str], root: Path) -> dict[str, str]:
    """The files under ``root`` that differ from ``files``: path -> unified diff."""
    diffs = {}
    for rel, text in files.items():
        path = root / rel
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        diffs[rel] = "".join(difflib.unified_diff(
            (current or "").splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=f"{rel} (committed)" if current is not None else f"{rel} (missing)",
            tofile=f"{rel} (rendered)"))
    return diffs
