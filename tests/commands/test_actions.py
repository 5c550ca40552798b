"""GitHub Actions' language (accelgrid.commands.actions) and the workflow's shard jobs: step
summaries, capped ::error annotations, ::group:: blocks only inside Actions; a cell with
shards: N becomes N jobs the generated workflow runs and actionlint/zizmor accept."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.workflow_cases import actionlint, dev_tool

from accelgrid import cli, results
from accelgrid.base import contract, jsonio, outcomes
from accelgrid.commands import actions, ci
from accelgrid.config.matrix import load_matrix
from accelgrid.results import cellresults

ROOT = Path(__file__).resolve().parents[2]
ACTIONS_ENV = {"GITHUB_ACTIONS": "true"}


def _cell(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    jsonio.write_json(folder / contract.ENV_FILE, {"cell": folder.name, "run_id": "r",
                                              "torch": {"version": "2.13.0+cpu"},
                                              "env": {}})
    for rec in records:
        results.append_record(folder / contract.TESTS_FILE, {"run_id": "r", **rec})
    return folder


def _bad(n: int) -> list[dict]:
    return [{"nodeid": f"suites/smoke/test_a.py::test_{i:02d}", "outcome": outcomes.FAILED,
             "message": f"assert {i} == 0\n100% sure, a:b",
             "longrepr": f"def test_{i:02d}():\n>       assert {i} == 0\nE   assert\n\n"
                         f"suites/smoke/test_a.py:{10 + i}: AssertionError"}
            for i in range(n)]


def test_annotations_name_file_and_line_escape_text_and_are_capped() -> None:
    recs = _bad(12) + [{"nodeid": "suites/x/test_b.py::test_ok", "outcome": outcomes.PASSED},
                       {"nodeid": "suites/x/test_b.py::test_hang", "outcome": outcomes.TIMEOUT,
                        "message": "timed out"}]
    lines = actions.annotations("cpu-2.13", recs)
    assert len(lines) == actions.MAX_ANNOTATIONS + 1
    assert lines[0] == ("::error file=suites/smoke/test_a.py,line=10,title=cpu-2.13%3A failed"
                        "%3A suites/smoke/test_a.py%3A%3Atest_00::assert 0 == 0%0A100%25 sure,"
                        " a:b")
    assert lines[-1] == ("::error title=cpu-2.13::3 more tests went wrong: see the step "
                         "summary and the results artifact")
    # No traceback line in the test's file: the file alone.
    (only,) = actions.annotations("c", [recs[-1]])
    assert only.startswith("::error file=suites/x/test_b.py,title=")
    # A message cannot start a command of its own.
    (evil,) = actions.annotations("c", [{"nodeid": "t.py::t", "outcome": outcomes.ERROR,
                                         "message": "x\n::add-mask::y"}])
    assert "\n" not in evil and evil.endswith("::x%0A::add-mask::y")


def test_a_step_summary_says_counts_what_went_wrong_and_why_tests_did_not_run(
        tmp_path: Path) -> None:
    _cell(tmp_path / "cpu-2.13", _bad(2) + [
        {"nodeid": "suites/offload/test_o.py::test_gpu", "outcome": outcomes.SKIPPED,
         "message": "needs CUDA or XPU"},
        {"nodeid": "suites/hf/test_h.py::test_script", "outcome": outcomes.NOT_RUN,
         "message": "no transformers checkout"},
        {"nodeid": "suites/smoke/test_a.py::test_ok", "outcome": outcomes.PASSED}])
    summary_file = tmp_path / "summary.md"
    out = io.StringIO()
    wrong = actions.report([tmp_path], out=out,
                           env={**ACTIONS_ENV, "GITHUB_STEP_SUMMARY": str(summary_file)})
    assert wrong == 2
    text = summary_file.read_text()
    assert text.startswith("### accelgrid: cpu-2.13\n\ntorch 2.13.0+cpu\n")
    assert "**5 tests:** 1 passed, 2 failed, 1 skipped, 1 not-run" in text
    assert "| `suites/smoke/test_a.py::test_01` | failed | assert 1 == 0 |" in text
    assert "- offload: 1 skipped — needs CUDA or XPU" in text
    assert "- hf: 1 not-run — no transformers checkout" in text
    assert out.getvalue().count("::error ") == 2
    # Outside Actions: the summary on stdout, no workflow commands, no file written.
    out = io.StringIO()
    other = tmp_path / "other.md"
    actions.report([tmp_path], out=out, env={"GITHUB_STEP_SUMMARY": str(other)})
    assert "**5 tests:**" in out.getvalue() and "::error" not in out.getvalue()
    assert not other.exists()
    # No results at all (the cell stopped before pytest): said so.
    missing = actions.summary(cellresults.read_cell(tmp_path / "nothing"))
    assert "**No results:** results folder" in missing


def test_groups_only_inside_actions() -> None:
    out = io.StringIO()
    with actions.group("cpu-2.13: [2/3] uv's output", out=out, env=ACTIONS_ENV):
        out.write("+ torch==2.13.0\n")
    assert out.getvalue() == "::group::cpu-2.13: [2/3] uv's output\n+ torch==2.13.0\n" \
                             "::endgroup::\n"
    out = io.StringIO()
    with actions.group("x", out=out, env={}):
        pass
    assert out.getvalue() == ""


def test_ci_summary_command(tmp_path: Path, capsys, monkeypatch) -> None:
    _cell(tmp_path / "cpu-2.13", _bad(1))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert cli.main(["ci", "summary", str(tmp_path)]) == 0
    assert "### accelgrid: cpu-2.13" in capsys.readouterr().out


SHARDED = (ROOT / "tests" / "base_matrix.yaml").read_text().replace(
    "    - {device: xpu, torch: \"2.13\", profile: fallback-debug}",
    "    - {device: xpu, torch: \"2.13\", profile: fallback-debug}\n"
    "    - {device: cpu, torch: \"2.13\", shards: 3}")


def test_a_sharded_cell_becomes_one_job_per_shard(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "matrix.yaml").write_text(SHARDED)
    matrix = load_matrix(proj / "matrix.yaml")
    assert matrix.cell("cpu-2.13").shards == 3 and matrix.cell("cpu-2.4").shards == 1
    files = ci.render(matrix)
    workflow = yaml.safe_load(files[ci.WORKFLOW])
    step = workflow["jobs"]["plan"]["steps"][0]
    cells = json.loads(step["env"]["CELLS"])
    cpu = [(c["id"], c["shard"]) for c in cells if c["cell"].startswith("cpu-")]
    assert cpu == [("cpu-2.4", ""), ("cpu-2.13-shard-1-of-3", "1/3"),
                   ("cpu-2.13-shard-2-of-3", "2/3"), ("cpu-2.13-shard-3-of-3", "3/3")]
    # The plan script hands the jobs their shards.
    output = tmp_path / "out"
    output.write_text("")
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), "EVENT": "schedule",
           "CELLS": step["env"]["CELLS"], "JOBS": step["env"]["JOBS"]}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split("=", 1) for line in output.read_text().splitlines())
    mine = json.loads(got["cells-cpu"])
    assert [(m["id"], m["shard"]) for m in mine] == cpu
    job = workflow["jobs"]["cells-cpu"]
    assert job["name"] == "${{ matrix.id }}"
    nox_step = next(s for s in job["steps"] if s.get("name", "").startswith("nox -s"))
    assert nox_step["env"]["ACCELGRID_SHARD"] == "${{ matrix.shard }}"
    names = [s.get("name") for s in job["steps"]]
    assert names.index("Step summary and annotations") == names.index(nox_step["name"]) + 1
    summary = job["steps"][names.index("Step summary and annotations")]
    assert summary["if"] == "always()"
    assert summary["run"] == 'accelgrid ci summary "$ACCELGRID_RESULTS_DIR"'
    actionlint(tmp_path, files)
    audit = subprocess.run([dev_tool("zizmor"), "--offline", "--persona", "auditor",
                            "--no-progress", str(tmp_path / "wf.yml")],
                           capture_output=True, text=True, timeout=120)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # Too many shards for one job matrix: refused in one line.
    with pytest.raises(ci.CIError, match="lower their shards"):
        ci.render(matrix, limit=3)


def test_an_arc_scale_set_name_is_the_jobs_only_label(tmp_path: Path) -> None:
    """actions-runner-controller scale sets get no default labels: the documented way
    (ci/README.md) is the scale set's name as the device's only label."""
    text = (ROOT / "tests" / "base_matrix.yaml").read_text().replace(
        "runner: {labels: [self-hosted, intel-gpu]}", "runner: {labels: [arc-intel-gpu]}")
    assert "arc-intel-gpu" in text
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "matrix.yaml").write_text(text)
    files = ci.render(load_matrix(proj / "matrix.yaml"))
    job = yaml.safe_load(files[ci.WORKFLOW])["jobs"]["cells-xpu"]
    assert job["runs-on"] == "arc-intel-gpu"
    assert "arc-intel-gpu" in yaml.safe_load(files[ci.ACTIONLINT])["self-hosted-runner"][
        "labels"]
    actionlint(tmp_path, files)


# --- GPU cells for a pull request: a maintainer's dispatch of a labelled PR -------------

def _serve(pulls: dict[str, dict]):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = pulls.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(json.dumps(body or {"message": "Not Found"}).encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _dispatch(tmp_path: Path, api: str, number: str) -> tuple[subprocess.CompletedProcess,
                                                               dict[str, str]]:
    workflow = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())
    step = workflow["jobs"]["plan"]["steps"][0]
    assert step["env"]["PR_LABEL"] == ci.PR_LABEL
    assert step["env"]["PULL_REQUEST"] == "${{ inputs.pull_request }}"
    output = tmp_path / "out"
    output.write_text("")
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output),
           "EVENT": "workflow_dispatch", "CELLS": step["env"]["CELLS"],
           "JOBS": step["env"]["JOBS"], "PULL_REQUEST": number, "PR_LABEL": ci.PR_LABEL,
           "REPOSITORY": "acme/accelgrid", "GH_TOKEN": "t", "GITHUB_API_URL": api}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], env=env, capture_output=True, text=True, timeout=60)
    return proc, dict(line.split("=", 1) for line in output.read_text().splitlines())


def test_gpu_cells_run_a_pull_requests_head_only_when_labelled(tmp_path: Path) -> None:
    sha = "a" * 40
    server = _serve({
        "/repos/acme/accelgrid/pulls/7": {"state": "open", "head": {"sha": sha},
                                          "labels": [{"name": ci.PR_LABEL}]},
        "/repos/acme/accelgrid/pulls/8": {"state": "open", "head": {"sha": "b" * 40},
                                          "labels": [{"name": "bug"}]},
        "/repos/acme/accelgrid/pulls/9": {"state": "closed", "head": {"sha": "c" * 40},
                                          "labels": [{"name": ci.PR_LABEL}]},
    })
    api = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        proc, out = _dispatch(tmp_path, api, "7")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert out["ref"] == sha and json.loads(out["any"]) is True
        for number in ("8", "9"):
            proc, out = _dispatch(tmp_path, api, number)
            assert proc.returncode == 1 and "ref" not in out
            assert f"::error::pull request #{number} is not open with the label " \
                   f"{ci.PR_LABEL}" in proc.stdout
        proc, out = _dispatch(tmp_path, api, "7; rm -rf /")
        assert proc.returncode == 1 and "is not a number" in proc.stdout
        proc, out = _dispatch(tmp_path, api, "")
        assert proc.returncode == 0 and out["ref"] == ""
    finally:
        server.shutdown()
    workflow = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())
    for job_id, job in workflow["jobs"].items():
        if job_id.startswith("cells-"):
            checkout = job["steps"][0]
            assert checkout["with"]["ref"] == "${{ needs.plan.outputs.ref }}"
            assert checkout["with"]["persist-credentials"] is False
    # The fork-proof guard holds: no pull request event starts this workflow, and the
    # pull-request workflow neither reads a pull request nor checks one out by ref.
    triggers = workflow.get("on", workflow.get(True))
    # (repository_dispatch: PyTorch's relay; its event names a PyTorch commit, and no
    # cell checks out a ref from it: tests/commands/test_relay.py.)
    assert set(triggers) == {"schedule", "workflow_dispatch", "repository_dispatch"}
    pr_text = (ROOT / ci.PR_WORKFLOW).read_text()
    pr_plan = yaml.safe_load(pr_text)["jobs"]["plan"]
    assert pr_plan["permissions"] == {}
    assert not {"PULL_REQUEST", "GH_TOKEN"} & set(pr_plan["steps"][0]["env"])
    assert "inputs.pull_request" not in pr_text and "needs.plan.outputs.ref" not in pr_text


def test_shard_jobs_balance_by_the_latest_nightly_history(tmp_path: Path) -> None:
    """The plan finds the latest unexpired history artifact (the API, a local stand-in
    here); each shard job downloads it and names it as its durations; jobs without shards
    get neither the step nor the permission."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "matrix.yaml").write_text(SHARDED)
    files = ci.render(load_matrix(proj / "matrix.yaml"))
    jobs = yaml.safe_load(files[ci.WORKFLOW])["jobs"]
    assert jobs["plan"]["permissions"] == {"pull-requests": "read", "actions": "read"}
    assert jobs["plan"]["outputs"]["history_run"] == "${{ steps.history.outputs.run }}"
    step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "history")
    query = "/repos/acme/accelgrid/actions/artifacts?name=history&per_page=5"
    listing: dict = {"artifacts": [{"expired": True, "workflow_run": {"id": 41}},
                                   {"expired": False, "workflow_run": {"id": 42}}]}
    server = _serve({query: listing})
    api = f"http://127.0.0.1:{server.server_address[1]}"

    def run(url: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
        output = tmp_path / "out"
        output.write_text("")
        env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), "GH_TOKEN": "t",
               "REPOSITORY": "acme/accelgrid", "GITHUB_API_URL": url}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                               step["run"]], env=env, capture_output=True, text=True,
                              timeout=60)
        return proc, dict(line.split("=", 1) for line in output.read_text().splitlines())

    try:
        proc, out = run(api)
        assert proc.returncode == 0 and out == {"run": "42"}, proc.stderr
        listing["artifacts"] = []
        assert run(api)[1] == {"run": ""}
    finally:
        server.shutdown()
    proc, out = run(api)   # the API out of reach: equal counts, not a failed run
    assert proc.returncode == 0 and out == {"run": ""}
    assert "::notice::no history artifact to balance the shards by" in proc.stdout
    cpu = jobs["cells-cpu"]
    assert cpu["permissions"] == {"contents": "read", "actions": "read"}
    get = next(s for s in cpu["steps"] if s.get("name") == "The history to balance the shards by")
    assert get["uses"].startswith("actions/download-artifact@")
    assert get["with"]["run-id"] == "${{ needs.plan.outputs.history_run }}"
    assert get["with"]["path"] == "${{ runner.temp }}/accelgrid-history"
    assert "matrix.shard != ''" in get["if"] and get["continue-on-error"] is True
    nox_step = next(s for s in cpu["steps"] if s.get("name", "").startswith("nox -s"))
    assert nox_step["env"]["ACCELGRID_SHARD_DURATIONS"] == (
        "${{ runner.temp }}/accelgrid-history/history.sqlite")
    xpu = jobs["cells-xpu"]    # no shards
    assert "permissions" not in xpu
    assert not [s for s in xpu["steps"] if "history" in s.get("name", "")]
    pr = yaml.safe_load(files[ci.PR_WORKFLOW])["jobs"]
    assert pr["plan"]["permissions"] == {} and "permissions" not in pr["cells-cpu"]


def test_a_scale_set_key_is_the_jobs_only_label(tmp_path: Path) -> None:
    """runner.scale_set: the same runs-on as labels [NAME], said as what it is."""
    text = (ROOT / "tests" / "base_matrix.yaml").read_text().replace(
        "runner: {labels: [self-hosted, intel-gpu]}", "runner: {scale_set: arc-intel-gpu}")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "matrix.yaml").write_text(text)
    matrix = load_matrix(proj / "matrix.yaml")
    assert matrix.cell("xpu-2.13").runner_labels == ("arc-intel-gpu",)
    files = ci.render(matrix)
    jobs = yaml.safe_load(files[ci.WORKFLOW])["jobs"]
    assert jobs["cells-xpu"]["runs-on"] == "arc-intel-gpu"
    assert yaml.safe_load(files[ci.ACTIONLINT])["self-hosted-runner"]["labels"] == [
        "arc-intel-gpu"]
    actionlint(tmp_path, files)
