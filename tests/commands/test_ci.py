"""`accelgrid ci`: the generated workflow and tox config, linted, checked for drift, and run
(the workflow's scripts locally, tox for real with tox-gh-actions)."""

from __future__ import annotations

import configparser
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
from helpers.workflow_cases import actionlint, dev_tool, matrix_project, run_plan_script

from accelgrid import cli
from accelgrid.base import errors
from accelgrid.commands import ci
from accelgrid.config.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MATRIX = load_matrix(ROOT / "matrix.yaml")
# The cells CI runs: all but those whose torch is a local wheel (run on request only).
CI_CELLS = [c for c in MATRIX.cells if not c.manual]
WORKFLOW_TEXT = (ROOT / ci.WORKFLOW).read_text()
WORKFLOW = yaml.safe_load(WORKFLOW_TEXT)
JOBS = WORKFLOW["jobs"]
CELL_JOBS = {k: v for k, v in JOBS.items() if k.startswith("cells-")}
PR_TEXT = (ROOT / ci.PR_WORKFLOW).read_text()
PR = yaml.safe_load(PR_TEXT)
WORKFLOWS = {ci.WORKFLOW: (WORKFLOW_TEXT, WORKFLOW), ci.PR_WORKFLOW: (PR_TEXT, PR)}


# The jobs whose cells run in their images (they pull them by tag).
CONTAINER_JOBS = {k for k, v in CELL_JOBS.items()
                  if any(s.get("name", "").startswith("accelgrid container run")
                         for s in v["steps"])}

# The jobs holding a sharded cell (they read the history artifact to balance by).
SHARDED_JOBS = {c["job"] for c in json.loads(JOBS["plan"]["steps"][0]["env"]["CELLS"])
                if c["shard"]}


def _triggers(workflow: dict) -> Any:
    """The workflow's `on:` (a mapping, a list or one event name; None without one)."""
    return workflow.get("on", workflow.get(True))  # PyYAML reads a bare `on` as True


def _plan_cells(workflow: dict) -> list[dict]:
    return json.loads(workflow["jobs"]["plan"]["steps"][0]["env"]["CELLS"])


# --- drift -----------------------------------------------------------------------------


def test_committed_files_are_what_the_matrix_renders() -> None:
    assert ci.stale(ci.render(MATRIX), ROOT) == {}, "run `accelgrid ci render`"


def test_check_fails_when_the_matrix_changes_without_rerendering(tmp_path, capsys) -> None:
    text = (ROOT / "matrix.yaml").read_text()
    proj = matrix_project(tmp_path, text)
    # accelgrid's checkout (its workflows install it editable), its committed files
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    for rel in ci.OUTPUTS:
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, proj / rel)
    args = ["--matrix", str(proj / "matrix.yaml"), "ci"]
    assert cli.main([*args, "check"]) == 0

    changed = text.replace("cell_minutes: 60", "cell_minutes: 75", 1)
    assert changed != text
    (proj / "matrix.yaml").write_text(changed)
    capsys.readouterr()
    assert cli.main([*args, "check"]) == errors.EXIT_STALE
    out, err = capsys.readouterr()
    timeout = ci.INSTALL_MINUTES + 75 + ci.MARGIN_MINUTES  # the job time of a 75-minute cell
    assert f'"timeout": {timeout}' in out and f"+++ {ci.WORKFLOW} (rendered)" in out
    assert "run `accelgrid ci render`" in err and len(err.strip().splitlines()) == 1

    assert cli.main([*args, "render"]) == 0
    assert cli.main([*args, "check"]) == 0
    assert f'"timeout": {timeout}' in (proj / ci.WORKFLOW).read_text()


def test_check_reports_a_missing_file(tmp_path, capsys) -> None:
    proj = matrix_project(tmp_path, (ROOT / "tests" / "base_matrix.yaml").read_text())
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "ci", "check"]) == errors.EXIT_STALE
    assert f"--- {ci.TOX_INI} (missing)" in capsys.readouterr().out


def test_cli_passes_its_matrix_option_to_ci(tmp_path, capsys) -> None:
    proj = matrix_project(tmp_path, (ROOT / "tests" / "base_matrix.yaml").read_text())
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "ci", "render"]) == 0
    assert (proj / ci.WORKFLOW).is_file() and (proj / ci.TOX_INI).is_file()
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "ci", "check"]) == 0


# --- linters ---------------------------------------------------------------------------


def test_actionlint_accepts_the_workflows() -> None:
    proc = subprocess.run([dev_tool("actionlint"), "-no-color", "-config-file", ci.ACTIONLINT,
                           ci.WORKFLOW, ci.PR_WORKFLOW], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _zizmor(*paths: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([dev_tool("zizmor"), "--offline", "--persona", "auditor", "--no-progress",
                           "--format", "plain", *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_zizmor_auditor_finds_nothing_but_the_justified_ignores() -> None:
    proc = _zizmor(ci.WORKFLOW, ci.PR_WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr
    # Every ignore names its rule and sits under a comment giving the reason.
    for text in (WORKFLOW_TEXT, PR_TEXT):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "zizmor: ignore" in line:
                assert line.rstrip().endswith("# zizmor: ignore[self-hosted-runner]"), line
                assert lines[i - 2].strip().startswith("# zizmor: the runner is the point")
    ignored = WORKFLOW_TEXT.count("zizmor: ignore[")
    assert ignored == len({c.device for c in MATRIX.cells if not c.hosted})
    assert "zizmor: ignore" not in PR_TEXT


def test_zizmor_really_audits(tmp_path) -> None:
    # Control: the same workflow without the ignores, and with a script that expands an
    # input inside `run:`, is reported.
    bad = tmp_path / "bad.yml"
    bad.write_text(WORKFLOW_TEXT.replace(" # zizmor: ignore[self-hosted-runner]", "").replace(
        'run: nox -s "$CELL"', "run: nox -s ${{ inputs.devices }}"))
    proc = _zizmor(bad)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "self-hosted-runner" in out and "template-injection" in out


def test_actionlint_needs_the_declared_runner_labels(tmp_path) -> None:
    # Control: the same workflow without the label config is an error, so actionlint
    # really checks runs-on (and the config is what makes it pass).
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: []\n")
    proc = subprocess.run([dev_tool("actionlint"), "-no-color", "-config-file", str(config),
                           str(ROOT / ci.WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert 'label "intel-gpu" is unknown' in proc.stdout


def test_check_jsonschema_accepts_the_workflow(tmp_path) -> None:
    tool = dev_tool("check-jsonschema")
    cmd = [tool, "--builtin-schema", "vendor.github-workflows"]
    ok = subprocess.run([*cmd, str(ROOT / ci.WORKFLOW), str(ROOT / ci.PR_WORKFLOW)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"  # control: the schema does reject a bad job
    broken.write_text(WORKFLOW_TEXT.replace("timeout-minutes: 15", "timeout-minutes: soon"))
    bad = subprocess.run([*cmd, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad.stdout


# --- structure -------------------------------------------------------------------------


def test_every_cell_runs_once_on_its_devices_runner_with_its_timeout() -> None:
    plan = _plan_cells(WORKFLOW)
    cells = {c["cell"]: c for c in plan}
    # Every cell but those whose torch is a local wheel (xpu-2.4): CI has no such wheel.
    assert [c.name for c in MATRIX.cells if c.manual] == ["xpu-2.4"]
    # One entry per job: a sharded cell has one per shard.
    assert sorted(c["cell"] for c in plan) == sorted(
        c.name for c in CI_CELLS for _ in range(c.shards))
    for cell in CI_CELLS:
        job = JOBS[cells[cell.name]["job"]]
        labels = [job["runs-on"]] if isinstance(job["runs-on"], str) else job["runs-on"]
        assert labels == list(cell.runner_labels), cell.name
        assert cells[cell.name]["timeout"] == ci.job_minutes(cell)
        assert cells[cell.name]["hosted"] is cell.hosted
    in_image = {c["job"] for c in plan if MATRIX.cell(c["cell"]).ci_container}
    # The GPU devices run in their images, the hosted cpu on the runner (runner.container).
    assert in_image == {"cells-cuda", "cells-xpu"}
    for name, job in CELL_JOBS.items():
        assert job["timeout-minutes"] == "${{ matrix.timeout }}"
        assert job["strategy"]["fail-fast"] is False
        run = [s for s in job["steps"] if s.get("name", "").startswith(
            ("nox -s", "accelgrid container run"))]
        assert len(run) == 1 and run[0]["run"] == ('accelgrid container run "$CELL"'
                                                   if name in in_image else 'nox -s "$CELL"')
        assert run[0]["env"]["CELL"] == "${{ matrix.cell }}"
        assert run[0]["env"]["ACCELGRID_SHARD"] == "${{ matrix.shard }}"
        upload = job["steps"][-1]
        assert upload["uses"].startswith("actions/upload-artifact@")
        assert upload["if"] == "always()"
        assert upload["with"]["name"] == "results-${{ matrix.id }}"   # a shard: its own


def test_no_pull_request_starts_a_workflow_with_a_self_hosted_job() -> None:
    triggers = _triggers(WORKFLOW)
    # repository_dispatch: PyTorch's CI relay (tests/commands/test_relay.py); like schedule, it runs
    # the default branch's workflow, and only the relay's GitHub App can send it.
    assert set(triggers) == {"schedule", "workflow_dispatch", "repository_dispatch"}
    assert set(triggers["workflow_dispatch"]["inputs"]) == {"devices", "torch", "profiles",
                                                            "pull_request"}
    assert triggers["schedule"][0]["cron"]
    assert set(_triggers(PR)) == {"pull_request"}
    hosted = {c.device for c in MATRIX.cells if c.hosted}
    assert hosted == {"cpu"}
    for job_id, job in CELL_JOBS.items():
        cond = " ".join(job["if"].split())
        if job_id.removeprefix("cells-") in hosted:
            assert "event_name" not in cond
        else:  # a second line only; the triggers and runner groups are the guard
            # (after the images job, whatever became of it, for the container cells)
            cond = cond.removeprefix("!cancelled() && needs.plan.result == 'success' && ")
            assert cond.startswith("(github.event_name == 'schedule' || "
                                   "github.event_name == 'workflow_dispatch' || "
                                   "github.event_name == 'repository_dispatch') && ")
    # The pull-request workflow has no self-hosted job and only hosted cells.
    pr_jobs = {k: v for k, v in PR["jobs"].items() if k.startswith("cells-")}
    assert set(pr_jobs) == {f"cells-{d}" for d in hosted}
    assert all(c["hosted"] for c in _plan_cells(PR))
    # ... of released torch: the nightly channel's cells are the scheduled run's.
    assert sorted(c["cell"] for c in _plan_cells(PR)) == sorted(
        c.name for c in MATRIX.cells if c.hosted and c.channel == "release"
        for _ in range(c.shards))
    for job in PR["jobs"].values():
        labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
        assert "self-hosted" not in [str(x).lower() for x in labels]


def test_no_workflow_uses_privileged_triggers() -> None:
    # pull_request_target and workflow_run run with the base repository's rights on a
    # fork's events; none of the generated workflows may use them.
    for path in (ROOT / ".github" / "workflows").glob("*.y*ml"):
        triggers = _triggers(yaml.safe_load(path.read_text()))
        names = set(triggers) if isinstance(triggers, dict) else set(
            [triggers] if isinstance(triggers, str) else triggers)
        assert not names & {"pull_request_target", "workflow_run"}, path


def test_readme_lists_the_settings_the_design_relies_on() -> None:
    text = " ".join((ROOT / "ci" / "README.md").read_text().split())
    for needed in ("Require approval for all outside collaborators", "Runner groups",
                   "Selected workflows",
                   "OWNER/REPO/.github/workflows/accelgrid.yml@refs/heads/main",
                   "refs/pull/N/merge", "--ephemeral", "CODEOWNERS",
                   "Read repository contents and packages permissions"):
        assert needed in text, needed


def test_job_time_is_install_plus_cell_limit_plus_margin() -> None:
    # The runner's own limit (cell_minutes, around pytest only) must fire before GitHub's,
    # with the install before it and finalizing after it.
    assert ci.INSTALL_MINUTES >= 15 and ci.MARGIN_MINUTES >= 5
    for cell in MATRIX.cells:
        assert ci.job_minutes(cell) == ci.INSTALL_MINUTES + cell.cell_minutes + ci.MARGIN_MINUTES
    for planned in _plan_cells(WORKFLOW) + _plan_cells(PR):
        assert planned["timeout"] == ci.job_minutes(MATRIX.cell(planned["cell"]))
    readme = (ROOT / "ci" / "README.md").read_text()
    assert f"`INSTALL_MINUTES` ({ci.INSTALL_MINUTES})" in readme
    assert f"`MARGIN_MINUTES` ({ci.MARGIN_MINUTES})" in readme


def test_a_hosted_cell_over_six_hours_of_job_is_refused(tmp_path, capsys) -> None:
    text = (ROOT / "tests" / "base_matrix.yaml").read_text().replace(
        "  suites: [smoke]", "  suites: [smoke]\n  timeout: {cell_minutes: 340}")
    proj = matrix_project(tmp_path, text)
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "ci", "render"]) == \
        errors.EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert err == (f"accelgrid ci: cell cpu-2.4 would need a job of "
                   f"{ci.INSTALL_MINUTES + 340 + ci.MARGIN_MINUTES} minutes (install "
                   f"{ci.INSTALL_MINUTES} + cell limit 340 + margin {ci.MARGIN_MINUTES}), over "
                   "GitHub-hosted runners' 360: lower its timeout.cell_minutes")


@pytest.mark.parametrize("rel", [ci.WORKFLOW, ci.PR_WORKFLOW])
def test_least_privilege_pinned_actions_and_no_secrets(rel: str) -> None:
    text, workflow = WORKFLOWS[rel]
    jobs = workflow["jobs"]
    assert workflow["permissions"] == {"contents": "read"}
    # The nightly plan reads a dispatched pull request's labels
    # (tests/commands/test_actions.py) and, with a sharded cell in the matrix, which run
    # holds the history (docs/guides/ci.md, "Shards").
    assert jobs["plan"]["permissions"] == ({} if rel == ci.PR_WORKFLOW
                                           else {"pull-requests": "read", "actions": "read"})
    for name, job in jobs.items():
        if name == "grid" and rel == ci.WORKFLOW:
            # Reading the earlier run's history artifact (docs/reference/history.md); nothing more.
            assert job["permissions"] == {"contents": "read", "actions": "read"}
            continue
        if name == "pages" and rel == ci.WORKFLOW:
            # Deploying the site to GitHub Pages (tests/report/test_history_real.py); nothing more.
            assert job["permissions"] == {"pages": "write", "id-token": "write"}
            continue
        if name == "images" and rel == ci.WORKFLOW:
            # Pushing the cells' images: the one job that writes packages.
            assert job["permissions"] == {"contents": "read", "packages": "write"}
            continue
        if name in CONTAINER_JOBS and rel == ci.WORKFLOW:
            assert job["permissions"] == {"contents": "read", "packages": "read"}
            continue
        if name in SHARDED_JOBS and rel == ci.WORKFLOW:
            assert job["permissions"] == {"contents": "read", "actions": "read"}
            continue
        if name in ("relay", "relay-report") and rel == ci.WORKFLOW:
            # The relay callback's OIDC token (tests/commands/test_relay.py); nothing more.
            assert job["permissions"] == {"contents": "read", "id-token": "write"}
            continue
        if name == "status":
            # The verdict as a commit status on the PR's head (tests/commands/test_relay.py).
            assert job["permissions"] == {"contents": "read", "statuses": "write"}
            continue
        assert name == "plan" or job.get("permissions", {}) in ({}, {"contents": "read"})
    assert workflow["concurrency"]["group"]
    uses = re.findall(r"(?m)^\s*(?:- )?uses: (\S+)(.*)", text)
    pages_only = {"actions/upload-pages-artifact", "actions/deploy-pages"}
    relay_action = ci.RELAY_ACTION[0]
    assert {u.split("@")[0] for u, _ in uses} == {
        repo for repo, _, _ in ci.ACTIONS.values()
        if rel == ci.WORKFLOW or repo not in pages_only} | (
        {relay_action} if rel == ci.WORKFLOW else set())
    for ref, comment in uses:
        if ref.startswith(relay_action + "@"):
            # pytorch/test-infra tags no releases: the commit, and the day of its main.
            assert ref == f"{relay_action}@{ci.RELAY_ACTION[1]}"
            assert comment == f" # {ci.RELAY_ACTION[2]}"
            assert re.fullmatch(r"[0-9a-f]{40}", ci.RELAY_ACTION[1])
            continue
        assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), comment
    for step in (s for j in jobs.values() for s in j["steps"] if "checkout" in s.get("uses", "")):
        assert step["with"]["persist-credentials"] is False
    assert "secrets." not in text


def download_index(job: dict) -> int:
    return next(i for i, s in enumerate(job["steps"]) if "download-artifact" in s.get("uses", ""))


def test_grid_job_collects_every_cell_and_gates_on_the_baseline() -> None:
    grid = JOBS["grid"]
    assert set(grid["needs"]) == {"plan", *CELL_JOBS}
    assert grid["if"].startswith("always()")
    download = next(s for s in grid["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"] == {"pattern": "results-*", "merge-multiple": True,
                                "path": "results"}
    assert "--baseline baselines" in grid["steps"][download_index(grid) + 1]["run"]
    assert grid["steps"][-1]["if"] == "always()"
    assert grid["steps"][-1]["with"]["path"] == "grid/"


# --- the workflow's scripts, run here --------------------------------------------------


def _plan_outputs(tmp_path: Path) -> dict[str, str]:
    """The outputs of the last run_plan_script."""
    return json.loads((tmp_path / "plan_outputs.json").read_text())


def test_plan_picks_hosted_cells_for_pull_requests_and_all_nightly(tmp_path) -> None:
    proc, picked = run_plan_script(tmp_path, "pull_request", PR)
    assert proc.returncode == 0, proc.stderr
    assert set(picked) == {k for k in PR["jobs"] if k.startswith("cells-")}
    assert [c for cells in picked.values() for c in cells] == \
        [c.name for c in MATRIX.cells if c.hosted and c.channel == "release"
         for _ in range(c.shards)]
    proc, picked = run_plan_script(tmp_path, "schedule")
    assert sorted(c for cells in picked.values() for c in cells) == \
        sorted(c.name for c in CI_CELLS for _ in range(c.shards))


def test_plan_applies_dispatch_inputs_and_refuses_unknown_values(tmp_path) -> None:
    proc, picked = run_plan_script(tmp_path, "workflow_dispatch", devices="xpu, cuda", torch="2.13")
    assert proc.returncode == 0, proc.stderr
    assert sorted(c for cells in picked.values() for c in cells) == sorted(
        c.name for c in CI_CELLS if c.device in ("xpu", "cuda") and c.torch == "2.13"
        for _ in range(c.shards))
    assert picked["cells-cpu"] == []

    proc, _ = run_plan_script(tmp_path, "workflow_dispatch", devices="tpu\n::warning::injected")
    assert proc.returncode == 1
    assert proc.stdout.startswith("::error::DEVICES: unknown device tpu%0A::warning::injected")
    assert "\n::warning::" not in proc.stdout

    proc, _ = run_plan_script(tmp_path, "workflow_dispatch", devices="cpu",
                              profiles="fp64-emulation")
    assert proc.returncode == 1 and "no cell has all" in proc.stdout


def test_grid_step_passes_every_cell_folder_and_the_baseline(tmp_path) -> None:
    grid = JOBS["grid"]
    script = grid["steps"][download_index(grid) + 1]["run"]
    fake = tmp_path / "bin" / "accelgrid"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "args"}\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}"}
    work = tmp_path / "work"
    work.mkdir()
    empty = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env,
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode == 1 and "::error::no cell uploaded results" in empty.stdout
    for cell in ("cpu-2.13", "xpu-2.5"):
        (work / "results" / cell).mkdir(parents=True)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "args").read_text().split() == [
        "grid", "results/cpu-2.13/", "results/xpu-2.5/", "--out", "grid",
        "--baseline", "baselines"]


# --- GitHub's limits -------------------------------------------------------------------


BIG_MATRIX = """\
schema: 1
defaults: {torch: "2.0", suites: [smoke]}
devices:
  cpu:
    index: default
    detect: {always: true}
    runner: {labels: [ubuntu-24.04], hosted: true}
  xpu:
    index: https://download.pytorch.org/whl/xpu
    detect: {paths_any: ["/dev/dri/renderD*"]}
    runner: {labels: [self-hosted, intel-gpu]}
torch:
%s
profiles:
%s
suites:
  smoke: {path: suites/smoke}
matrix:
  device: [cpu, xpu]
  torch: [%s]
  profile: [%s]
"""


def _big_matrix(tmp_path: Path, series: int = 30, profiles: int = 10) -> Path:
    names = [f"2.{i}" for i in range(series)]
    profs = ["default"] + [f"p{i}" for i in range(1, profiles)]
    text = BIG_MATRIX % (
        "\n".join(f'  "{s}": {{torch: "{s}.0"}}' for s in names),
        "\n".join(f"  {p}: {{devices: [cpu]}}" if p != "default" else "  default: {}"
                  for p in profs),
        ", ".join(f'"{s}"' for s in names), ", ".join(profs))
    return matrix_project(tmp_path, text) / "matrix.yaml"


def test_a_device_over_256_cells_is_split_into_jobs(tmp_path) -> None:
    matrix = load_matrix(_big_matrix(tmp_path))
    assert sum(c.device == "cpu" for c in matrix.cells) == 300
    files = ci.render(matrix)
    workflow = yaml.safe_load(files[ci.WORKFLOW])
    cells = _plan_cells(workflow)
    jobs: dict[str, list[str]] = {}
    for c in cells:
        jobs.setdefault(c["job"], []).append(c["cell"])
    assert {k: len(v) for k, v in jobs.items()} == {"cells-cpu-1": 256, "cells-cpu-2": 44,
                                                    "cells-xpu": 30}
    assert sorted(c["cell"] for c in cells) == sorted(c.name for c in matrix.cells)
    assert set(workflow["jobs"]["grid"]["needs"]) == {"plan", *jobs}
    # the plan script really hands each job at most 256 cells
    proc, picked = run_plan_script(tmp_path, "schedule", workflow)
    assert proc.returncode == 0, proc.stderr
    assert {k: len(v) for k, v in picked.items()} == {k: len(v) for k, v in jobs.items()}
    actionlint(tmp_path, files)


def test_job_groups_respect_the_limit() -> None:
    groups = ci.job_groups(MATRIX.cells, limit=3)
    assert all(len(g.cells) <= 3 for g in groups)
    assert sorted(c.name for g in groups for c in g.cells) == sorted(c.name for c in MATRIX.cells)
    assert len({g.id for g in groups}) == len(groups)


def test_a_workflow_over_githubs_size_limit_is_refused_in_one_line(tmp_path) -> None:
    matrix = load_matrix(_big_matrix(tmp_path))
    with pytest.raises(ci.CIError) as info:
        ci.render(matrix, max_workflow_bytes=50_000)
    assert "over GitHub's limit of 50000" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_profile_named_like_a_device_is_refused(tmp_path, capsys) -> None:
    text = (ROOT / "tests" / "base_matrix.yaml").read_text()
    text = text.replace("  fallback-debug:", "  cpu:").replace("profile: fallback-debug",
                                                              "profile: cpu")
    proj = matrix_project(tmp_path, text)
    assert cli.main(["--matrix", str(proj / "matrix.yaml"), "ci", "render"]) == errors.EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("accelgrid ci: profile 'cpu' has a device's name")
    assert not (proj / ci.WORKFLOW).exists()


# --- tox with tox-gh-actions, for real -------------------------------------------------


def _tox_env(tmp_path: Path, **env: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if k not in ("DEVICE", "TORCH", "PROFILE", "TOXENV", "GITHUB_ACTIONS")
            and not k.startswith("TOX_")}
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    nox = fake_bin / "nox"  # records what tox ran instead of building a cell
    nox.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "nox.log"}\n')
    nox.chmod(0o755)
    return {**keep, "PATH": f"{fake_bin}:{BIN}:{keep['PATH']}", "PYTHONDONTWRITEBYTECODE": "1",
            "GITHUB_ACTIONS": "true", **env}


def _tox(tmp_path: Path, command: str, ini: Path | None = None, **env: str):
    pytest.importorskip("tox_gh_actions")
    from importlib.metadata import version

    assert (version("tox"), version("tox-gh-actions")) == ("4.67.13", "3.5.0")
    if ini is None:
        (tmp_path / "ci").mkdir(exist_ok=True)
        for rel in (ci.TOX_INI, ci.TOXFILE):
            shutil.copy(ROOT / rel, tmp_path / rel)
        ini = tmp_path / ci.TOX_INI
    return subprocess.run(
        [sys.executable, "-m", "tox", "-c", str(ini), "--workdir", str(tmp_path / "w"),
         command], env=_tox_env(tmp_path, **env), cwd=tmp_path, capture_output=True,
        text=True, timeout=300)


def _default_envs(listing: str) -> list[str]:
    block = listing.split("default environments:")[1].split("additional environments:")[0]
    return [line.split()[0] for line in block.strip().splitlines()]


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_tox_runs_exactly_the_selected_cell_through_nox(tmp_path) -> None:
    proc = _tox(tmp_path, "run", DEVICE="cpu", TORCH="2.13", PROFILE="default")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "nox.log").read_text().splitlines() == [
        f"-f {tmp_path / 'ci'}/../noxfile.py -s cpu-2.13 --"]


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_tox_without_profile_selects_exactly_the_default_profile_cell(tmp_path) -> None:
    # DEVICE=cpu TORCH=2.13 is cpu-2.13, not also cpu-2.13-op-capture.
    assert len([c for c in MATRIX.cells if c.device == "cpu" and c.torch == "2.13"]) > 1
    proc = _tox(tmp_path, "run", DEVICE="cpu", TORCH="2.13")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "nox.log").read_text().splitlines() == [
        f"-f {tmp_path / 'ci'}/../noxfile.py -s cpu-2.13 --"]
    listed = _tox(tmp_path, "l", DEVICE="cpu", TORCH="2.13", PROFILE="op-capture")
    assert _default_envs(listed.stdout) == ["cpu-torch2.13-op_capture"]


@pytest.mark.parametrize("env", [{"DEVICE": "tpu"}, {"DEVICE": "tpu", "TORCH": "2.13"}])
def test_tox_fails_on_a_value_without_mapping_instead_of_running_everything(
        tmp_path, env) -> None:
    proc = _tox(tmp_path, "run", **env)
    assert proc.returncode == 254
    assert "DEVICE='tpu' matches no tox env (known: cpu, cuda, xpu, mps)" in proc.stdout
    assert not (tmp_path / "nox.log").exists()


def test_tox_fails_when_the_values_select_no_env(tmp_path) -> None:
    proc = _tox(tmp_path, "run", DEVICE="cpu", PROFILE="fp64-emulation")
    assert proc.returncode == 254 and "selected no env" in proc.stdout
    assert not (tmp_path / "nox.log").exists()


def test_without_fail_on_no_env_tox_gh_actions_silently_runs_more(tmp_path) -> None:
    # Control for the test above: what tox-gh-actions 3.5.0 does on its own.
    (tmp_path / "ci").mkdir()
    ini = tmp_path / ci.TOX_INI
    ini.write_text((ROOT / ci.TOX_INI).read_text().replace("fail_on_no_env = true",
                                                            "fail_on_no_env = false"))
    shutil.copy(ROOT / ci.TOXFILE, tmp_path / ci.TOXFILE)
    proc = _tox(tmp_path, "l", ini, DEVICE="tpu", TORCH="2.13")
    assert proc.returncode == 0, proc.stderr
    # The unmapped DEVICE is dropped: every torch 2.13 env (of the default profile) runs.
    assert _default_envs(proc.stdout) == [
        ci.tox_env_name(c) for c in MATRIX.cells if c.torch == "2.13" and c.profile == "default"]


def test_each_cells_values_select_exactly_its_env(monkeypatch) -> None:
    # tox-gh-actions' own matching, on the committed tox.ini, for every cell.
    plugin = pytest.importorskip("tox_gh_actions.plugin")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / ci.TOX_INI)
    env_list = ini["tox"]["env_list"].split()
    assert env_list == [ci.tox_env_name(c) for c in CI_CELLS]
    config = {"python": {}, "env": {k.upper(): plugin.parse_factors_dict(v)
                                    for k, v in ini["gh-actions:env"].items()}}
    assert ini["gh-actions"]["fail_on_no_env"] == "true"
    for cell in CI_CELLS:
        for var, value in (("DEVICE", cell.device), ("TORCH", cell.torch),
                           ("PROFILE", cell.profile)):
            monkeypatch.setenv(var, value)
        factors = plugin.get_factors(config, versions=[])
        assert plugin.get_envlist_from_factors(env_list, factors) == [ci.tox_env_name(cell)]
        section = ini[f"testenv:{ci.tox_env_name(cell)}"]
        assert f"-s {cell.name} -- {{posargs}}" in section["commands"]


# What ci/README.md's tox table says each setting selects; the test below runs tox for
# every row, and fails when the table and this list differ (so they cannot drift apart).
DOC_ROWS: dict[str, tuple[dict[str, str], list[str] | None]] = {
    "`DEVICE=cpu TORCH=2.13 PROFILE=default`": (
        {"DEVICE": "cpu", "TORCH": "2.13", "PROFILE": "default"}, ["cpu-torch2.13-default"]),
    "`DEVICE=cpu TORCH=2.13`": ({"DEVICE": "cpu", "TORCH": "2.13"}, ["cpu-torch2.13-default"]),
    "`DEVICE=cpu TORCH=2.13 PROFILE=op-capture`": (
        {"DEVICE": "cpu", "TORCH": "2.13", "PROFILE": "op-capture"},
        ["cpu-torch2.13-op_capture"]),
    "`DEVICE= TORCH=2.13`": ({"DEVICE": "", "TORCH": "2.13"}, [
        ci.tox_env_name(c) for c in MATRIX.cells if c.torch == "2.13" and c.profile == "default"]),
    "`DEVICE=xpu PROFILE=fp64-emulation`": ({"DEVICE": "xpu", "PROFILE": "fp64-emulation"},
                                            ["xpu-torch2.5-fp64_emulation"]),
    "`DEVICE=tpu` (no mapping)": ({"DEVICE": "tpu"}, None),
    "none set, or all empty": ({"DEVICE": "", "TORCH": "", "PROFILE": ""}, None),
}


def _readme_tox_rows() -> dict[str, str]:
    text = (ROOT / "ci" / "README.md").read_text()
    table = text.split("| env | selects |\n| --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    rows = [[part.strip() for part in line.strip().strip("|").split(" | ", 1)]
            for line in table.splitlines()]
    return {env: selects for env, selects in rows}


def test_readme_tox_table_is_the_tested_one() -> None:
    rows = _readme_tox_rows()
    assert list(rows) == list(DOC_ROWS)
    for row, (_, envs) in DOC_ROWS.items():
        shown = rows[row]
        if envs is None:
            assert "error, nothing runs" in shown, row
        elif len(envs) == 1:
            assert f"`{envs[0]}`" in shown, row


@pytest.mark.parametrize("row", list(DOC_ROWS))
def test_tox_selects_what_the_readme_says(tmp_path, row: str) -> None:
    env, expected = DOC_ROWS[row]
    proc = _tox(tmp_path, "l", None, **env)
    if expected is None:
        assert proc.returncode == 254, proc.stdout + proc.stderr
        assert len([x for x in proc.stdout.splitlines() if x.strip()]) == 1, proc.stdout
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _default_envs(proc.stdout) == expected


@pytest.mark.slow  # end to end: a whole bench or cell run
def test_tox_empty_dispatch_inputs_run_instead_of_failing(tmp_path) -> None:
    # An empty workflow_dispatch input reaches tox as DEVICE= (set, empty): no filter,
    # as the README says, where it used to exit 254.
    proc = _tox(tmp_path, "run", DEVICE="", TORCH=" 2.13 ", PROFILE="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = (tmp_path / "nox.log").read_text().splitlines()
    assert [line.split(" -s ")[1].split()[0] for line in ran] == [
        c.name for c in MATRIX.cells if c.torch == "2.13" and c.profile == "default"]


def test_runner_container_picks_the_image_or_the_bare_host_per_device(tmp_path) -> None:
    """runner.container: a device's cells run in their images (the default for a device
    with a container family) or on the runner's host; the hosted cpu in its image here, and
    xpu on its host."""
    text = (ROOT / "matrix.yaml").read_text()
    text = text.replace("      hosted: true\n", "      hosted: true\n      container: true\n", 1)
    text = text.replace("      labels: [self-hosted, linux, x64, intel-gpu]\n",
                        "      labels: [self-hosted, linux, x64, intel-gpu]\n"
                        "      container: false\n", 1)
    text = text.replace("      container: false\n", "", 1)   # the cpu's own: now container: true
    proj = matrix_project(tmp_path, text)
    matrix = load_matrix(proj / "matrix.yaml")
    assert matrix.cell("cpu-2.13").ci_container and not matrix.cell("xpu-2.13").ci_container
    assert matrix.cell("cuda-2.11").ci_container          # the default, left as it is
    files = ci.render(matrix)
    for rel in (ci.WORKFLOW, ci.PR_WORKFLOW):
        jobs = yaml.safe_load(files[rel])["jobs"]
        runs = {name: [s["run"] for s in job["steps"] if "$CELL" in s.get("run", "")]
                for name, job in jobs.items() if name.startswith("cells-")}
        want = {"cells-cpu": ['accelgrid container run "$CELL"'],
                "cells-cuda": ['accelgrid container run "$CELL"'],
                "cells-xpu": ['nox -s "$CELL"'], "cells-mps": ['nox -s "$CELL"']}
        assert runs == ({"cells-cpu": want["cells-cpu"]} if rel == ci.PR_WORKFLOW else want)
        (tmp_path / rel.replace("/", "_")).write_text(files[rel])
    actionlint(tmp_path, files)
    proc = _zizmor(*(tmp_path / rel.replace("/", "_") for rel in (ci.WORKFLOW, ci.PR_WORKFLOW)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
