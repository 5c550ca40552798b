"""PyTorch's CI relay in the generated workflow (#39 items 1-3): the relayed event resolved
by the workflow's own step, the callback's inputs from real grids, the purpose-keyed
concurrency, history written by scheduled runs only, and the verdict on the PR's head.

The workflows' conditions are evaluated here per event by a small evaluator of GitHub's
expression syntax (the subset the templates use: ==, !=, &&, ||, !, strings, contexts,
format(), always(), hashFiles()), so each test says what a run of that event does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.channel_cases import with_channels
from helpers.workflow_cases import matrix_project, run_plan_script

from accelgrid import cli
from accelgrid.base import errors
from accelgrid.commands import ci, relay
from accelgrid.config.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DATA = ROOT / "tests" / "data" / "relay"
MEASURED = ROOT / "docs" / "measured"
CUDA_RUN = MEASURED / "h200-2026-11-30"                     # 98 passed, 5 xfailed
CPU_FAILING = MEASURED / "hf-examples-2026-12-01" / "cpu-2.11"  # 7 failed, a selection
WORKFLOW = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())
PR = yaml.safe_load((ROOT / ci.PR_WORKFLOW).read_text())
JOBS, PR_JOBS = WORKFLOW["jobs"], PR["jobs"]


# --- a GitHub expression evaluator (the templates' subset) ------------------------------


def _lookup(ctx: dict[str, Any], path: str) -> Any:
    value: Any = ctx
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def gh(expr: str, ctx: dict[str, Any]) -> Any:
    """``expr`` (with or without ${{ }}) evaluated like GitHub: && and || return operands,
    a missing property is null, '' and null are falsy."""
    expr = expr.strip()
    if expr.startswith("${{") and expr.endswith("}}") and expr.count("${{") == 1:
        expr = expr[3:-2]
    elif "${{" in expr:  # a string with interpolations
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(gh(m.group(1), ctx) or ""), expr,
                      flags=re.S)
    names: dict[str, Any] = {}

    def context(m: re.Match[str]) -> str:
        key = f"_v{len(names)}"
        names[key] = _lookup(ctx, m.group(0))
        return key

    strings: list[str] = []

    def string(m: re.Match[str]) -> str:
        strings.append(m.group(1))
        return f"_s{len(strings) - 1}"

    py = re.sub(r"'([^']*)'", string, " ".join(expr.split()))
    py = re.sub(r"\b(github|inputs|needs|steps|vars|matrix|runner|job)\.[\w.-]+", context, py)
    py = py.replace("&&", " and ").replace("||", " or ").replace("!=", " <> ")
    py = re.sub(r"!(?!=)", " not ", py).replace(" <> ", " != ")
    env = {**names, **{f"_s{i}": s for i, s in enumerate(strings)},
           "always": lambda: True, "cancelled": lambda: False,
           "format": lambda f, *a: re.sub(r"\{(\d+)\}", lambda m: str(a[int(m.group(1))]), f),
           "hashFiles": lambda *a: ctx.get("hashFiles", "")}
    return eval(py, {"__builtins__": {}}, env)  # noqa: S307 (the committed workflow's text)


def value(text: str, ctx: dict[str, Any]) -> Any:
    """A `with:` or `env:` value: literal text, or its ${{ }} evaluated."""
    return gh(text, ctx) if "${{" in text else text


def _event(name: str, **extra: Any) -> dict[str, Any]:
    """A context for a run of event ``name`` in OWNER/accelgrid."""
    github: dict[str, Any] = {
        "event_name": name, "workflow": "accelgrid", "run_id": "4242", "token": "tok",
        "repository": "OWNER/accelgrid", "server_url": "https://github.com",
        "ref": "refs/heads/main", "event": {"repository": {"default_branch": "main"}}}
    if name == "repository_dispatch":
        github["event"]["client_payload"] = json.loads(
            (DATA / "pull_request.json").read_text())["client_payload"]
    ctx: dict[str, Any] = {"github": github, "inputs": {}, "needs": {}, "steps": {},
                           "vars": {}}
    for key, value in extra.items():
        ctx[key] = {**ctx.get(key, {}), **value} if isinstance(value, dict) else value
    return ctx


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name or s.get("id") == name)


# --- the relayed event, resolved -------------------------------------------------------


@pytest.fixture
def nightly_project(tmp_path: Path) -> Path:
    """The base matrix with a nightly-channel cell (cpu-2.16) and a test-channel one."""
    base = (ROOT / "tests" / "base_matrix.yaml").read_text()
    return matrix_project(tmp_path, with_channels(base))


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_the_workflow_takes_the_relays_event_types() -> None:
    triggers = WORKFLOW.get("on", WORKFLOW.get(True))
    assert triggers["repository_dispatch"] == {"types": list(relay.EVENT_TYPES)}
    assert list(relay.EVENT_TYPES) == ["pull_request", "push"]   # the guide's two


def test_resolve_step_reads_a_recorded_pull_request_event(nightly_project: Path,
                                                          tmp_path: Path) -> None:
    # The rendered step, run as GitHub runs it (bash, GITHUB_EVENT_PATH, GITHUB_OUTPUT), in
    # a checkout whose matrix has a nightly cell; its torch output then narrows the plan.
    files = ci.render(load_matrix(nightly_project / "matrix.yaml"))
    workflow = yaml.safe_load(files[ci.WORKFLOW])
    step = _step(workflow["jobs"]["relay"], "resolve")
    assert gh(step["if"], _event("repository_dispatch")) is True
    assert gh(step["if"], _event("schedule")) is False
    out = tmp_path / "out"
    out.write_text("")
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "GITHUB_OUTPUT": str(out),
           "GITHUB_EVENT_PATH": str(DATA / "pull_request.json")}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], cwd=nightly_project, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = _outputs(out)
    assert got == {"run": "true", "event": "pull_request",
                   "delivery": "8f3b2c10-9a4e-11f0-8c1d-6e2a5b7c9d01",
                   "sha": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", "pr": "171234",
                   "base": "0a9b8c7d6e5f40312a3b4c5d6e7f8091a2b3c4d5", "torch": "2.16",
                   "build": "nightly",
                   "why": "pytorch/pytorch#171234 at a1b2c3d4e5f6: the nightly cells of "
                          "torch 2.16"}
    relay_job = workflow["jobs"]["relay"]
    ctx = _event("repository_dispatch", steps={"resolve": {"outputs": got}})
    outputs = {k: gh(v, ctx) for k, v in relay_job["outputs"].items()}
    assert outputs == {"run": "true", "torch": "2.16"}
    plan = workflow["jobs"]["plan"]
    ctx = _event("repository_dispatch", needs={"relay": {"outputs": outputs}})
    assert gh(plan["if"], ctx) is True
    torch = gh(plan["steps"][0]["env"]["TORCH"], ctx)
    proc, picked = run_plan_script(tmp_path, "repository_dispatch", workflow, torch=torch)
    assert proc.returncode == 0, proc.stderr
    assert [c for cells in picked.values() for c in cells] == ["cpu-2.16"]
    # The in_progress callback goes out once resolve says run, before any cell.
    started = _step(relay_job, "Tell the relay the run started")
    assert started["with"] == {"status": "in_progress", "job-name": "accelgrid"}
    assert gh(started["if"], _event("repository_dispatch",
                                    steps={"resolve": {"outputs": got}})) is True
    assert gh(started["if"], _event("schedule")) is False


def _resolve(matrix: Path, tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "out"
    out.write_text("")
    os.environ["GITHUB_OUTPUT"] = str(out)
    try:
        assert cli.main(["--matrix", str(matrix), "ci", "relay", "resolve",
                         str(DATA / "pull_request.json")]) == 0
    finally:
        del os.environ["GITHUB_OUTPUT"]
    return _outputs(out)


def test_resolve_on_the_committed_matrix_picks_its_nightly_series(tmp_path: Path) -> None:
    nightly = sorted({c.torch for c in load_matrix(ROOT / "matrix.yaml").cells
                      if c.channel == "nightly" and not c.manual})
    assert nightly, "the committed matrix has a nightly-channel cell (#39 item 5)"
    got = _resolve(ROOT / "matrix.yaml", tmp_path)
    assert got["run"] == "true" and got["torch"] == ",".join(nightly)


def test_a_matrix_without_a_nightly_series_runs_nothing_and_says_why(tmp_path: Path) -> None:
    proj = matrix_project(tmp_path, (ROOT / "tests" / "base_matrix.yaml").read_text())
    got = _resolve(proj / "matrix.yaml", tmp_path)
    assert got["run"] == "false" and got["torch"] == ""
    assert "no cell of a nightly torch series" in got["why"]
    # ... and the plan job, so no cell, does not run.
    ctx = _event("repository_dispatch", needs={"relay": {"outputs": {"run": "false"}}})
    assert gh(JOBS["plan"]["if"], ctx) is False
    for event in ("schedule", "workflow_dispatch"):
        assert gh(JOBS["plan"]["if"], _event(event)) is True


def _client(**payload: Any) -> dict[str, Any]:
    event = json.loads((DATA / "pull_request.json").read_text())
    event["client_payload"]["payload"].update(payload)
    return event


@pytest.mark.parametrize(("action", "run"), [("opened", True), ("synchronize", True),
                                             ("reopened", True), ("closed", False),
                                             ("labeled", False)])
def test_resolve_runs_for_the_actions_that_change_the_code(nightly_project, action,
                                                           run) -> None:
    matrix = load_matrix(nightly_project / "matrix.yaml")
    got = relay.resolve(_client(action=action), matrix)
    assert got.run is run and got.pr == "171234"
    assert (f"{action}: nothing to test" in got.why) is (not run)


def test_resolve_reads_a_push_and_refuses_a_deleted_ref(nightly_project) -> None:
    matrix = load_matrix(nightly_project / "matrix.yaml")
    event = json.loads((DATA / "push.json").read_text())
    got = relay.resolve(event, matrix)
    assert (got.run, got.event, got.sha, got.pr) == (
        True, "push", "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", "")
    assert got.delivery == "c47d1e20-9a51-11f0-9b7e-2f6d4a8b1c03"
    # The client_payload alone reads the same.
    assert relay.resolve(event["client_payload"], matrix) == got
    event["client_payload"]["payload"]["after"] = "0" * 40
    assert not relay.resolve(event, matrix).run


@pytest.mark.parametrize(("field", "value", "message"), [
    ("event_type", "workflow_run", "is none of the relay's"),
    ("delivery_id", "x\n::warning::injected", "delivery_id"),
    ("delivery_id", None, "delivery_id"),
])
def test_resolve_refuses_what_the_relay_does_not_send(nightly_project, field, value,
                                                      message) -> None:
    event = _client()
    event["client_payload"][field] = value
    with pytest.raises(relay.RelayError, match=message):
        relay.resolve(event, load_matrix(nightly_project / "matrix.yaml"))


@pytest.mark.parametrize("sha", ["a1b2c3d", "A1B2C3D4E5F60718293A4B5C6D7E8F9012345678",
                                 "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678 ; rm"])
def test_resolve_refuses_a_head_that_is_not_a_full_sha(nightly_project, tmp_path,
                                                       capsys, sha) -> None:
    event = _client()
    event["client_payload"]["payload"]["pull_request"]["head"]["sha"] = sha
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    assert cli.main(["--matrix", str(nightly_project / "matrix.yaml"), "ci", "relay",
                     "resolve", str(path)]) == errors.EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert "pull_request.head.sha" in err and len(err.splitlines()) == 1


# --- the callback's inputs from real grids ----------------------------------------------


def _grid(tmp_path: Path, *runs: Path, name: str = "grid") -> Path:
    out = tmp_path / name
    cli.main(["grid", *map(str, runs), "--out", str(out)])
    assert (out / "grid.json").is_file()
    return out


def _report_step(tmp_path: Path, grid: Path, event: str) -> dict[str, str]:
    """relay-report's `report` step as rendered, run in a job folder holding ``grid``."""
    job = JOBS["relay-report"]
    step = _step(job, "report")
    work = tmp_path / f"job-{event}"
    work.mkdir()
    if grid.exists():
        shutil.copytree(grid, work / "grid")
    out = tmp_path / f"out-{event}"
    out.write_text("")
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "GITHUB_OUTPUT": str(out),
           **{k: value(v, _event(event)) for k, v in step.get("env", {}).items()}}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return _outputs(out)


def _callback(name: str, event: str, outputs: dict[str, str]) -> dict[str, Any]:
    """The callback step ``name``'s `with:` as GitHub would pass it, and whether it runs."""
    step = _step(JOBS["relay-report"], name)
    ctx = _event(event, steps={"report": {"outputs": outputs}})
    assert step["uses"] == f"{ci.RELAY_ACTION[0]}@{ci.RELAY_ACTION[1]}"
    return {"runs": gh(step["if"], ctx), **{k: value(str(v), ctx)
                                           for k, v in step["with"].items()}}


def test_callback_inputs_for_a_real_passing_run(tmp_path: Path) -> None:
    outputs = _report_step(tmp_path, _grid(tmp_path, CUDA_RUN), "repository_dispatch")
    sent = _callback("Report the run to the relay", "repository_dispatch", outputs)
    results = json.loads(sent.pop("test-results"))
    assert sent == {"runs": True, "status": "completed", "conclusion": "success",
                    "artifact-url": "https://github.com/OWNER/accelgrid/actions/runs/4242",
                    "job-name": "accelgrid"}
    assert {k: results[k] for k in ("passed", "failed", "skipped", "xfailed", "total")} == {
        "passed": 98, "failed": 0, "skipped": 15, "xfailed": 5, "total": 118}
    assert results["cells"]["cuda-2.11"]["torch_git"] == \
        "70d99e998b4955e0049d13a98d77ae1b14db1f45"   # env.json's torch.git_version
    assert results["failures"] == [] and len(results["known_issues"]) == 5
    assert all(k["issue"].startswith("https://github.com/pytorch/ao/")
               for k in results["known_issues"])
    assert outputs["verdict"] == "success: 1 cell(s), 98 passed, 14 skipped, 5 xfailed, " \
                                 "1 not-run"
    # Not a self-report: the action reads delivery_id and event_type from the payload.
    assert not _callback("Self-report the nightly to the relay", "repository_dispatch",
                         outputs)["runs"]


def test_callback_inputs_for_a_real_failing_run(tmp_path: Path) -> None:
    outputs = _report_step(tmp_path, _grid(tmp_path, CPU_FAILING), "repository_dispatch")
    sent = _callback("Report the run to the relay", "repository_dispatch", outputs)
    results = json.loads(sent["test-results"])
    assert sent["conclusion"] == "failure" and results["failed"] == 7
    assert {f["outcome"] for f in results["failures"]} == {"failed"}
    assert len(results["failures"]) == 7
    assert results["known_issues"][0]["issue"].startswith(
        "https://github.com/huggingface/transformers/")
    assert outputs["verdict"].startswith("failure: 1 cell(s), 30 passed, 7 failed")
    assert len(outputs["verdict"]) <= relay.STATUS_CHARS


def test_callback_says_failure_when_the_grid_job_wrote_no_grid(tmp_path: Path) -> None:
    outputs = _report_step(tmp_path, tmp_path / "none", "repository_dispatch")
    sent = _callback("Report the run to the relay", "repository_dispatch", outputs)
    assert sent["conclusion"] == "failure"
    assert json.loads(sent["test-results"])["total"] == 0
    # The job runs after a failed grid job too (always()), once the relay said run.
    ctx = _event("repository_dispatch", needs={"relay": {"outputs": {"run": "true"}}})
    assert gh(JOBS["relay-report"]["if"], ctx) is True
    ctx = _event("repository_dispatch", needs={"relay": {"outputs": {"run": "false"}}})
    assert gh(JOBS["relay-report"]["if"], ctx) is False


def _as_nightly(run: Path, dest: Path, version: str, git: str) -> Path:
    """A copy of the real run ``run`` whose env.json says its torch is nightly ``version``
    built from ``git`` (what a nightly-channel cell records)."""
    shutil.copytree(run, dest)
    env = json.loads((dest / "env.json").read_text())
    env["torch"]["version"], env["torch"]["git_version"] = version, git
    env["env"]["ACCELGRID_TORCH_CHANNEL"] = "nightly"
    (dest / "env.json").write_text(json.dumps(env))
    return dest


def test_the_nightly_self_reports_the_commit_its_torch_was_built_from(tmp_path) -> None:
    sha = "5e0c8f4b1a2d3c4e5f60718293a4b5c6d7e8f901"
    nightly = _as_nightly(CUDA_RUN, tmp_path / "runs" / "cuda-2.14", "2.14.0.dev20261204+cu130",
                          sha)
    grid = _grid(tmp_path, nightly, CPU_FAILING)   # with a release cell, left out
    outputs = _report_step(tmp_path, grid, "schedule")
    ctx = {"vars": {"ACCELGRID_RELAY_NIGHTLY": "true"}}
    assert gh(JOBS["relay-report"]["if"], _event("schedule", **ctx)) is True
    assert gh(JOBS["relay-report"]["if"], _event("schedule")) is False     # opt-in
    sent = _callback("Self-report the nightly to the relay", "schedule", outputs)
    results = json.loads(sent.pop("test-results"))
    assert sent["runs"] is True
    assert (sent["delivery-id"], sent["event-type"], sent["conclusion"]) == (
        sha, "nightly", "success")
    assert list(results["cells"]) == ["cuda-2.11"] and results["pytorch_sha"] == sha
    assert not _callback("Report the run to the relay", "schedule", outputs)["runs"]
    # A grid with no nightly torch: no self-report.
    outputs = relay.report(json.loads((_grid(tmp_path, CUDA_RUN, name="g2") / "grid.json"
                                       ).read_text()), "schedule").outputs()
    assert outputs["self_report"] == "false"
    assert not _callback("Self-report the nightly to the relay", "schedule", outputs)["runs"]


def test_nightly_cells_of_two_commits_cannot_self_report_one(tmp_path) -> None:
    a = _as_nightly(CUDA_RUN, tmp_path / "r" / "a", "2.14.0.dev20261204+cu130", "a" * 40)
    b = _as_nightly(CPU_FAILING, tmp_path / "r" / "b", "2.14.0.dev20261205+cpu", "b" * 40)
    grid = json.loads((_grid(tmp_path, a, b) / "grid.json").read_text())
    with pytest.raises(relay.RelayError, match="different commits"):
        relay.report(grid, "schedule")


# --- the verdict's bounds, planted ------------------------------------------------------


def _column(name: str = "cpu-2.16", total: Any = 1, status: str = "ok",
            **counts: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "reason": None, "total": total,
            "torch_version": "2.16.0", "torch_git": "c" * 40,
            "counts": {"passed": total if not counts else 0, **counts}}


def _verdict(*columns: dict[str, Any], **grid: Any) -> relay.Report:
    return relay.report({"columns": list(columns), "rows": [], **grid})


def test_success_needs_at_least_one_test() -> None:
    assert _verdict(_column(total=1)).conclusion == "success"       # just inside
    bad = _verdict(_column(total=0))                                 # just past
    assert bad.conclusion == "failure" and "no test ran" in bad.verdict
    assert _verdict().conclusion == "failure"                        # no column at all


@pytest.mark.parametrize("outcome", ["failed", "error", "timeout", "crashed", "xpassed"])
def test_one_unexpected_failure_fails(outcome: str) -> None:
    none: dict[str, Any] = {outcome: 0}
    one: dict[str, Any] = {outcome: 1}
    ok = _verdict(_column(total=2, passed=2, **none))
    assert ok.conclusion == "success"
    bad = _verdict(_column(total=2, passed=1, **one))
    assert bad.conclusion == "failure" and "1 failed unexpectedly" in bad.verdict


def test_expected_failures_and_not_run_tests_do_not_fail() -> None:
    not_run: dict[str, Any] = {"not-run": 1}
    assert _verdict(_column(total=3, passed=1, xfailed=1, **not_run)).conclusion == "success"


@pytest.mark.parametrize("bad", [float("nan"), 1.5, -1, "3", True])
def test_a_count_that_is_not_a_count_fails(bad: Any) -> None:
    got = _verdict(_column(total=2, passed=2, failed=bad))
    assert got.conclusion == "failure" and "counts that are not counts" in got.verdict
    got = _verdict(_column(total=bad, passed=2))
    assert got.conclusion == "failure"


@pytest.mark.parametrize("status", ["partial", "errored"])
def test_an_incomplete_or_errored_column_fails(status: str) -> None:
    got = _verdict(_column(status=status))
    assert got.conclusion == "failure" and f"cpu-2.16 {status}" in got.verdict


def test_a_lost_cell_or_test_or_a_regression_fails_but_a_flaky_one_does_not() -> None:
    assert _verdict(_column(), lost=[{"cell": "xpu-2.16", "why": "no results"}]
                    ).conclusion == "failure"
    change = {"cell": "cpu-2.16", "nodeid": "t", "change": "regression"}
    assert _verdict(_column(), baseline={"changes": [change]}).conclusion == "failure"
    assert _verdict(_column(), baseline={"changes": [{**change, "flaky": True}]}
                    ).conclusion == "success"
    assert _verdict(_column(), baseline={"changes": [{**change, "change": "lost"}]}
                    ).conclusion == "failure"


def test_the_verdict_fits_a_commit_status() -> None:
    inside = "x" * relay.STATUS_CHARS
    assert relay._clip(inside) == inside
    past = relay._clip(inside + "y")
    assert len(past) == relay.STATUS_CHARS and past.endswith("...")
    many = _verdict(*(_column(name=f"cell-{i}", status="partial") for i in range(30)))
    assert len(many.verdict) <= relay.STATUS_CHARS and "\n" not in many.verdict


# --- concurrency and history, per event -------------------------------------------------


def test_concurrency_is_keyed_on_what_the_run_is_for() -> None:
    group = WORKFLOW["concurrency"]["group"]
    assert WORKFLOW["concurrency"]["cancel-in-progress"] is False
    groups = {
        "schedule": gh(group, _event("schedule")),
        "relay": gh(group, _event("repository_dispatch")),
        "pr": gh(group, _event("workflow_dispatch", inputs={"pull_request": "12"})),
        "manual": gh(group, _event("workflow_dispatch", inputs={"pull_request": ""})),
    }
    assert groups == {"schedule": "accelgrid-schedule",
                      "relay": "accelgrid-relay-8f3b2c10-9a4e-11f0-8c1d-6e2a5b7c9d01",
                      "pr": "accelgrid-pr-12", "manual": "accelgrid-run-4242"}
    other = _event("repository_dispatch")
    other["github"]["event"]["client_payload"] = {"delivery_id": "another"}
    assert gh(group, other) == "accelgrid-relay-another"
    pr_group = PR["concurrency"]["group"]
    ctx = _event("pull_request")
    ctx["github"]["event"]["pull_request"] = {"number": 7}
    assert gh(pr_group, ctx) == "accelgrid-pr-7" and PR["concurrency"]["cancel-in-progress"]


@pytest.mark.parametrize("event", ["schedule", "workflow_dispatch", "repository_dispatch"])
def test_only_scheduled_runs_restore_add_to_and_upload_the_history(event: str) -> None:
    grid = JOBS["grid"]
    ctx = _event(event, hashFiles="abc", inputs={"pull_request": ""})
    nightly = event == "schedule"
    restore = next(s for s in grid["steps"] if s.get("name", "").startswith("Restore"))
    assert gh(restore["if"], ctx) is nightly
    assert "--event schedule" in restore["run"]   # and only a scheduled run's artifact
    assert gh(_step(grid, "Upload the history")["if"], ctx) is nightly
    assert (gh(grid["env"]["ACCELGRID_HISTORY"], ctx) or "") == (
        "history/history.sqlite" if nightly else "")
    assert bool(gh(_step(grid, "Upload the site for GitHub Pages")["if"], ctx)) is nightly
    # Reading it (the shards' balance) stays for every run: plan's history step has no if.
    assert "history" not in PR_JOBS["grid"].get("env", {}).get("ACCELGRID_HISTORY", "")


def test_a_relayed_run_reaches_the_self_hosted_cells() -> None:
    for name, job in JOBS.items():
        if not name.startswith("cells-") or "self-hosted" not in str(job["runs-on"]):
            continue
        for event, runs in (("repository_dispatch", True), ("schedule", True),
                            ("pull_request", False)):
            ctx = _event(event, needs={"plan": {"result": "success",
                                                "outputs": {name: '[{"cell": "x"}]'}}})
            assert gh(job["if"], ctx) is runs, (name, event)


# --- the verdict on the pull request ---------------------------------------------------


def _permissions(workflow: dict) -> dict[str, dict]:
    return {name: job.get("permissions") or {} for name, job in workflow["jobs"].items()}


def test_only_the_status_job_writes_statuses_and_only_relay_jobs_and_pages_mint_tokens(
        ) -> None:
    for workflow in (WORKFLOW, PR):
        perms = _permissions(workflow)
        assert [n for n, p in perms.items() if "statuses" in p] == ["status"]
        assert perms["status"] == {"contents": "read", "statuses": "write"}
        # Beside it: OIDC tokens (relay, pages), Pages, and the images job's packages.
        assert not any(v == "write" for n, p in perms.items() if n != "status"
                       for k, v in p.items() if k not in ("id-token", "pages", "packages"))
    perms = _permissions(WORKFLOW)
    assert sorted(n for n, p in perms.items() if "id-token" in p) == [
        "pages", "relay", "relay-report"]
    assert not any("id-token" in p for p in _permissions(PR).values())
    assert "cross-repo-ci-relay-callback" not in (ROOT / ci.PR_WORKFLOW).read_text()


def test_a_dispatched_pull_request_gets_its_verdict_on_its_head(tmp_path: Path) -> None:
    job = JOBS["status"]
    head = "d" * 40
    ran = _event("workflow_dispatch", needs={"plan": {"result": "success",
                                                      "outputs": {"ref": head}}})
    assert gh(job["if"], ran) is True
    assert gh(job["if"], _event("workflow_dispatch", needs={"plan": {
        "result": "success", "outputs": {"ref": ""}}})) is False    # not for a PR
    assert gh(job["if"], _event("schedule", needs={"plan": {"result": "success",
                                                           "outputs": {"ref": ""}}})) is False
    post = _step(job, "Post the verdict as a commit status")
    outputs = relay.report(json.loads((_grid(tmp_path, CPU_FAILING) / "grid.json"
                                       ).read_text())).outputs()
    ctx = _event("workflow_dispatch", needs=ran["needs"], steps={"report": {"outputs": outputs}})
    env = {k: value(v, ctx) for k, v in post["env"].items()}
    assert env["SHA"] == head and env["STATE"] == "failure"
    assert env["DESCRIPTION"] == outputs["verdict"]
    assert env["RUN_URL"] == "https://github.com/OWNER/accelgrid/actions/runs/4242"
    # The script, run with a gh that records what it was asked.
    fake = tmp_path / "bin" / "gh"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "gh-args"}\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", "-e", "-c", post["run"]], capture_output=True, text=True,
                          env={**env, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "gh-args").read_text().splitlines() == [
        "api", "--method", "POST", f"repos/OWNER/accelgrid/statuses/{head}",
        "-f", "state=failure", "-f", f"context={ci.STATUS_CONTEXT}",
        "-f", f"description={outputs['verdict']}",
        "-f", "target_url=https://github.com/OWNER/accelgrid/actions/runs/4242"]


def test_a_pull_requests_own_run_posts_on_its_head_unless_from_a_fork() -> None:
    job = PR_JOBS["status"]
    ctx = _event("pull_request", needs={"plan": {"outputs": {"any": "true"}}})
    ctx["github"]["event"]["pull_request"] = {
        "head": {"sha": "e" * 40, "repo": {"full_name": "OWNER/accelgrid"}}}
    assert gh(job["if"], ctx) is True
    assert gh(_step(job, "Post the verdict as a commit status")["env"]["SHA"], ctx) == "e" * 40
    ctx["github"]["event"]["pull_request"]["head"]["repo"]["full_name"] = "fork/accelgrid"
    assert gh(job["if"], ctx) is False
