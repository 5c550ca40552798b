"""The nightly workflow's images job (built once, pushed under the content-hash tag, pulled
by the cell jobs), the hosted cells' uv cache and transformers / accelerate clones, and the
nightly-channel and sharded cells of the committed matrix (docs/guides/ci.md, #39 items 4-5).
The steps' scripts run here, with git for real and a stand-in docker for the registry
(none is reachable from this machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelgrid import cli
from accelgrid.commands import ci, containers
from accelgrid.config.matrix import load_matrix
from accelgrid.testing import hf_checkouts

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MATRIX = load_matrix(ROOT / "matrix.yaml")
WORKFLOW = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())
PR = yaml.safe_load((ROOT / ci.PR_WORKFLOW).read_text())
JOBS = WORKFLOW["jobs"]
PLAN = json.loads(JOBS["plan"]["steps"][0]["env"]["CELLS"])
CONTAINER_JOBS = {c["job"] for c in PLAN if c["container"]}
BARE_JOBS = {c["job"] for c in PLAN if not c["container"]}


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name", "").startswith(name))


def _index(job: dict, name: str) -> int:
    return next(i for i, s in enumerate(job["steps"]) if s.get("name", "").startswith(name))


def _bash(script: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


# --- images -----------------------------------------------------------------------------


def test_only_the_images_job_writes_packages_and_not_for_a_pull_request() -> None:
    images = JOBS["images"]
    assert images["needs"] == "plan"
    cond = " ".join(images["if"].split())
    # A dispatched pull request's run (ref set) never gets a token that writes packages.
    assert cond == ("needs.plan.outputs.images != '[]' && needs.plan.outputs.registry != '' "
                    "&& needs.plan.outputs.ref == ''")
    assert images["permissions"] == {"contents": "read", "packages": "write"}
    assert images["strategy"]["matrix"]["cell"] == "${{ fromJSON(needs.plan.outputs.images) }}"
    writers = [k for k, j in JOBS.items() if (j.get("permissions") or {}).get("packages")
               == "write"]
    assert writers == ["images"]
    assert "images" not in PR["jobs"]
    assert not any("packages" in (j.get("permissions") or {}) for j in PR["jobs"].values())
    # The tag is looked up before anything is built; build and push only when it is absent.
    order = [_index(images, n) for n in ("Log in", "The image's tag", "Build and push",
                                         "Log out")]
    assert order == sorted(order)
    build = _step(images, "Build and push")
    assert build["if"] == "steps.tag.outputs.exists != 'true'"
    assert build["run"].split("\n")[:3] == [
        'accelgrid container build "$CELL" --engine docker',
        'docker tag "$TAG" "$REGISTRY/$TAG"', 'docker push "$REGISTRY/$TAG"']
    assert _step(images, "Log out")["if"] == "always()"


def test_container_cell_jobs_run_after_the_images_job_and_pull_from_its_registry() -> None:
    assert CONTAINER_JOBS == {"cells-cuda", "cells-xpu"}
    for name in CONTAINER_JOBS:
        job = JOBS[name]
        assert job["needs"] == ["plan", "images"]
        # Also when the images job failed or was skipped: the image is then built there.
        assert " ".join(job["if"].split()).startswith(
            "!cancelled() && needs.plan.result == 'success' && ")
        run = _step(job, "accelgrid container run")
        assert run["env"]["ACCELGRID_IMAGE_REGISTRY"] == "${{ needs.plan.outputs.registry }}"
        assert _index(job, "Log in to the registry") < _index(job, "accelgrid container run") \
            < _index(job, "Log out of the registry")
        assert _step(job, "Log out of the registry")["if"] == "always()"
    for name in BARE_JOBS:
        assert JOBS[name]["needs"] == "plan"


def _run_plan(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    step = JOBS["plan"]["steps"][0]
    output = tmp_path / "github_output"
    output.write_text("")
    full = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), "EVENT": "schedule",
            "CELLS": step["env"]["CELLS"], "JOBS": step["env"]["JOBS"], **env}
    proc = _bash(step["run"], full)
    return proc, _outputs(output)


def test_plan_names_the_registry_and_one_image_per_container_cell(tmp_path) -> None:
    proc, out = _run_plan(tmp_path, OWNER="Some-Org")
    assert proc.returncode == 0, proc.stderr
    assert out["registry"] == "ghcr.io/some-org"   # image names are lower case
    container_cells = [c.name for c in MATRIX.cells if c.ci_container and not c.manual]
    assert sorted(json.loads(out["images"])) == sorted(container_cells)  # one each
    assert len(container_cells) == len(set(container_cells)) > 0

    proc, out = _run_plan(tmp_path, OWNER="Some-Org", REGISTRY="Registry.example:5000/ci/ ")
    assert proc.returncode == 0 and out["registry"] == "registry.example:5000/ci"

    proc, out = _run_plan(tmp_path, OWNER="o", EVENT="workflow_dispatch", DEVICES="cpu")
    assert proc.returncode == 0 and json.loads(out["images"]) == []

    # Neither an owner nor the variable: no registry, the cells build their own images.
    proc, out = _run_plan(tmp_path)
    assert proc.returncode == 0 and out["registry"] == ""

    for bad in ("ghcr.io/a\nimages=[]", "ghcr.io/a b", "ghcr.io/$(id)"):
        proc, out = _run_plan(tmp_path, OWNER="o", REGISTRY=bad)
        assert proc.returncode == 1, bad
        assert proc.stdout.startswith("::error::ACCELGRID_IMAGE_REGISTRY: ")
        assert "registry" not in out and len(proc.stdout.strip().splitlines()) == 1


def _fake_docker(tmp_path: Path, present: set[str]) -> Path:
    """A docker whose registry holds ``present``: ``manifest inspect REF`` answers from it;
    every call is logged (args, then stdin for login)."""
    folder = tmp_path / "fakebin"
    folder.mkdir(exist_ok=True)
    (tmp_path / "registry").write_text("\n".join(sorted(present)) + "\n")
    docker = folder / "docker"
    docker.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path / "docker.log"}
if [ "$1" = login ]; then cat >> {tmp_path / "docker.log"}; echo >> {tmp_path / "docker.log"}; fi
if [ "$1" = manifest ]; then grep -qxF "$3" {tmp_path / "registry"}; exit $?; fi
exit 0
""")
    docker.chmod(0o755)
    return folder


def test_the_tag_step_finds_the_cells_hash_tag_and_skips_a_pushed_one(tmp_path) -> None:
    cell = MATRIX.cell("cuda-2.11")
    script = _step(JOBS["images"], "The image's tag")["run"]
    # The hash covers pip's configuration (docs/guides/containers.md): the step's environment's.
    plain = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    tag = subprocess.run([str(BIN / "accelgrid"), "container", "tag", cell.name], cwd=ROOT,
                         env=plain, capture_output=True, text=True, check=True,
                         timeout=120).stdout.strip()
    assert tag.startswith("accelgrid/cuda-2.11:") and len(tag.split(":")[1]) == 12
    assert tag != containers.spec(MATRIX, MATRIX.cell("cuda-2.13")).tag
    for present, exists in (({f"ghcr.io/o/{tag}"}, "true"), (set(), "false"),
                            ({f"ghcr.io/o/{tag[:-1]}0" if tag[-1] != "0" else "x"}, "false")):
        fake = _fake_docker(tmp_path, present)
        output = tmp_path / "out"
        output.write_text("")
        proc = _bash(script, {"PATH": f"{fake}:{BIN}:{os.environ['PATH']}", "CELL": cell.name,
                              "REGISTRY": "ghcr.io/o", "GITHUB_OUTPUT": str(output),
                              "HOME": str(tmp_path)})
        assert proc.returncode == 0, proc.stderr
        assert _outputs(output) == {"tag": tag, "exists": exists}, present
    assert f"manifest inspect ghcr.io/o/{tag}" in (tmp_path / "docker.log").read_text()


def test_login_gives_the_token_on_stdin_to_ghcr_only(tmp_path) -> None:
    script = _step(JOBS["images"], "Log in")["run"]
    fake = _fake_docker(tmp_path, set())
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "GH_TOKEN": "t0ken", "ACTOR": "someone"}
    proc = _bash(script, {**env, "REGISTRY": "ghcr.io/o"})
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "docker.log").read_text()
    assert log.splitlines()[:2] == ["login ghcr.io -u someone --password-stdin", "t0ken"]
    (tmp_path / "docker.log").unlink()
    proc = _bash(script, {**env, "REGISTRY": "registry.example/ci"})
    assert proc.returncode == 0 and "::notice::registry.example/ci is not ghcr.io" in proc.stdout
    assert not (tmp_path / "docker.log").exists()


# --- uv cache -----------------------------------------------------------------------------


def test_hosted_cells_restore_and_save_a_uv_cache_keyed_on_their_pins() -> None:
    assert BARE_JOBS == {"cells-cpu", "cells-mps"}
    # Only GitHub-hosted runners: a self-hosted one (mps) keeps its own uv cache.
    assert not any(s.get("uses", "").startswith("actions/cache") and "uv" in s["with"]["key"]
                   for s in JOBS["cells-mps"]["steps"])
    assert "UV_CACHE_DIR" not in _step(JOBS["cells-mps"], "nox -s")["env"]
    for wf in (WORKFLOW, PR):
        job = wf["jobs"]["cells-cpu"]
        restore, save = _step(job, "uv's cache"), _step(job, "Save uv's cache")
        nox = _step(job, "nox -s")
        assert _index(job, "uv's cache") < _index(job, "nox -s") < _index(job, "Save uv's cache")
        key = "uv-${{ runner.os }}-${{ matrix.cell }}-${{ matrix.pins }}"
        assert restore["with"]["key"] == save["with"]["key"] == key
        assert restore["uses"].startswith("actions/cache/restore@")
        assert save["uses"].startswith("actions/cache/save@")
        assert restore["with"]["path"] == save["with"]["path"] == nox["env"]["UV_CACHE_DIR"]
        # After failed tests too, and never failing the cell itself.
        assert save["if"].startswith("always()") and save["continue-on-error"] is True
    by_name = {c.name: c for c in MATRIX.cells}
    for entry in PLAN:
        assert entry["pins"] == ci.pins_digest(by_name[entry["cell"]])
    assert not any(s.get("uses", "").startswith("actions/cache") for j in CONTAINER_JOBS
                   for s in JOBS[j]["steps"])


def test_the_pins_digest_changes_with_a_pin_and_only_for_its_cells(tmp_path) -> None:
    text = (ROOT / "matrix.yaml").read_text()
    old = '"2.14": {torch: "2.14.1", torchao: "0.18.0", transformers: "5.24.0"'
    assert old in text
    proj = tmp_path / "proj"
    proj.mkdir()
    for spec in yaml.safe_load(text)["suites"].values():
        (proj / spec["path"]).mkdir(parents=True, exist_ok=True)
    (proj / "matrix.yaml").write_text(text.replace(old, old.replace("5.24.0", "5.24.1")))
    changed = load_matrix(proj / "matrix.yaml")
    digests = {c.name: ci.pins_digest(c) for c in MATRIX.cells}
    for cell in changed.cells:
        same = digests[cell.name] == ci.pins_digest(cell)
        assert same is (cell.torch != "2.14"), cell.name
        assert len(ci.pins_digest(cell)) == 12 and int(ci.pins_digest(cell), 16) >= 0


# --- transformers and accelerate checkouts -------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True, timeout=60).stdout


def _upstream(tmp_path: Path, package: str, version: str) -> Path:
    """A repository of ``package`` whose tag v<version> is one commit before its branch
    head, which is already the next development version."""
    repo = tmp_path / "upstream" / package
    (repo / "src" / package).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_x.py").write_text("")
    _git(repo, "init", "-q", "-b", "main")
    for n, at in enumerate((f"{version}.dev0", version, f"{version}.post1.dev0")):
        (repo / "src" / package / "__init__.py").write_text(f'__version__ = "{at}"\n')
        (repo / f"f{n}").write_text("")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", at)
        if at == version:
            _git(repo, "tag", f"v{version}")
    return repo


def test_the_clone_step_gives_the_suites_checkouts_at_the_cells_versions(tmp_path) -> None:
    job = JOBS["cells-cpu"]
    clone = _step(job, "Shallow clones")
    script = clone["run"]
    versions = {"transformers": "5.24.0", "accelerate": "1.15.0"}
    for package, version in versions.items():
        url = ci.HF_REPOSITORIES[package]
        assert url in script
        script = script.replace(url, _upstream(tmp_path, package, version).as_uri())
    temp = tmp_path / "runner_temp"
    temp.mkdir()
    proc = _bash(script, {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(temp),
                          "TRANSFORMERS": versions["transformers"],
                          "ACCELERATE": versions["accelerate"], "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    nox = _step(job, "nox -s")
    for package, version in versions.items():
        variable = hf_checkouts.Project(package, "", "tests").package
        expr = nox["env"][f"ACCELGRID_{variable.upper()}_SRC"]
        assert expr == (f"${{{{ matrix.{package} != '' && format('{{0}}/hf-src/{package}-"
                        f"{{{{version}}}}', runner.temp) || '' }}}}")
        value = f"{temp}/hf-src/{package}-{{version}}"   # what GitHub evaluates it to
        found, how = hf_checkouts.find(value, version, hf_checkouts.Project(package, "V", "tests"))
        assert found is not None, how
        assert found == temp / "hf-src" / f"{package}-{version}", how
        # The tag, not the branch head (5.24.0.post1.dev0 there), one commit deep.
        assert _git(found, "rev-list", "--count", "HEAD").strip() == "1"
    # The cache holds the clones of exactly these versions.
    restore, save = _step(job, "transformers and accelerate"), _step(job, "Save the clones")
    key = ("hf-src-transformers-${{ matrix.transformers }}-accelerate-${{ matrix.accelerate }}")
    assert restore["with"] == save["with"] == {"path": "${{ runner.temp }}/hf-src", "key": key}
    assert clone["if"] == save["if"] == (
        "matrix.transformers != '' && steps.hf-cache.outputs.cache-hit != 'true'")


def test_the_plan_asks_for_clones_for_bare_host_cells_with_hf_suites() -> None:
    by_name = {c.name: c for c in MATRIX.cells}
    asked = 0
    for entry in PLAN:
        cell = by_name[entry["cell"]]
        wants = not cell.ci_container and bool({"hf_tests", "hf_examples"} & set(cell.suites))
        for package in ("transformers", "accelerate"):
            assert entry[package] == (cell.pins[package] if wants else ""), cell.name
        asked += wants
    assert asked and not by_name["cpu-2.13-compile"].ci_container
    assert next(e for e in PLAN if e["cell"] == "cpu-2.13-compile")["transformers"] == ""
    # The cpu cells' transformers selection is the one sized for CI (matrix.yaml).
    assert {c.env["ACCELGRID_HF_TRANSFORMERS_TESTS"] for c in MATRIX.cells
            if c.device == "cpu" and "hf_tests" in c.suites} == {"vit"}


# --- the nightly-channel and sharded cells ---------------------------------------------


def test_a_nightly_channel_cell_and_a_sharded_cell_run_in_the_nightly_only(capsys) -> None:
    nightly = [c for c in MATRIX.cells if c.channel == "nightly"]
    sharded = [c for c in MATRIX.cells if c.shards > 1]
    assert [c.name for c in nightly] == ["cpu-2.16"]
    assert [(c.name, c.shards) for c in sharded] == [("cpu-2.15", 2)]
    planned = [e["id"] for e in PLAN]
    assert "cpu-2.16" in planned
    assert {"cpu-2.15-shard-1-of-2", "cpu-2.15-shard-2-of-2"} <= set(planned)
    pr = [e["cell"] for e in json.loads(PR["jobs"]["plan"]["steps"][0]["env"]["CELLS"])]
    assert "cpu-2.16" not in pr and "cpu-2.15" in pr
    # .ci/run's cell and its baseline are as they were: one job, a release.
    base = MATRIX.cell("cpu-2.13")
    assert (base.shards, base.channel) == (1, "release")
    assert cli.main(["--matrix", str(ROOT / "matrix.yaml"), "validate"]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("rel", [ci.WORKFLOW, ci.PR_WORKFLOW])
def test_cache_actions_are_pinned_to_v5_0_5(rel: str) -> None:
    text = (ROOT / rel).read_text()
    sha = "27d5ce7f107fe9357f9df03efb73ab90386fccae"   # actions/cache tag v5.0.5
    for sub in ("restore", "save"):
        assert f"uses: actions/cache/{sub}@{sha} # v5.0.5" in text
