"""The generated workflows' scripts and linters run here, for the CI files' tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelgrid.commands import ci

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKFLOW = yaml.safe_load((ROOT / ci.WORKFLOW).read_text())


def dev_tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN))
    if path is None:
        pytest.skip(f"{name} is not installed in {BIN}")
    return path


def actionlint(tmp_path: Path, files: dict[str, str]) -> None:
    """The rendered nightly workflow passes actionlint with the rendered runner labels;
    ``tmp_path / "wf.yml"`` holds it afterwards."""
    (tmp_path / "wf.yml").write_text(files[ci.WORKFLOW])
    (tmp_path / "al.yaml").write_text(files[ci.ACTIONLINT])
    lint = subprocess.run([dev_tool("actionlint"), "-no-color", "-config-file",
                           str(tmp_path / "al.yaml"), str(tmp_path / "wf.yml")],
                          capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout


def matrix_project(tmp_path: Path, matrix_text: str) -> Path:
    """A folder holding ``matrix_text`` as matrix.yaml, with its suite folders."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "matrix.yaml").write_text(matrix_text)
    for spec in yaml.safe_load(matrix_text)["suites"].values():
        (proj / spec["path"]).mkdir(parents=True, exist_ok=True)
    return proj


def run_plan_script(tmp_path: Path, event: str, workflow: dict = WORKFLOW, **inputs: str):
    step = workflow["jobs"]["plan"]["steps"][0]
    assert "shell" not in step  # the workflow's default, bash, as GitHub runs it
    output = tmp_path / "github_output"
    output.write_text("")
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), "EVENT": event,
           "CELLS": step["env"]["CELLS"], "JOBS": step["env"]["JOBS"],
           "DEVICES": inputs.get("devices", ""), "TORCH": inputs.get("torch", ""),
           "PROFILES": inputs.get("profiles", ""), "OWNER": inputs.get("owner", "Owner"),
           "REGISTRY": inputs.get("registry", "")}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], env=env, capture_output=True, text=True, timeout=60)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    picked = {job: [m["cell"] for m in json.loads(v)] for job, v in outputs.items()
              if job.startswith("cells-")}
    (tmp_path / "plan_outputs.json").write_text(json.dumps(outputs))
    return proc, picked
