"""The real ``examples/pytorch`` scripts of the installed transformers, run offline as
subprocesses on the cell's device (needs ``ACCELGRID_TRANSFORMERS_SRC``), and a check
that the inputs they are given load offline (runs everywhere)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from accelgrid.testing import not_run

from .scripts import ENV_SRC, MAX_STEPS, SCRIPTS, load_inputs, missing_modules, prepare
from .workloads import MissingModelClass

SCRIPT_TIMEOUT_S = 480
TAIL_LINES = 60


def _ready(script: str, *, loading_only: bool = False) -> None:
    spec = SCRIPTS[script]
    if spec.blocker and not loading_only:
        not_run(spec.blocker)
    if missing := missing_modules(spec, loading_only=loading_only):
        not_run(f"{script} needs {', '.join(missing)} (not installed)")


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_example_inputs(script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint folder and data files load offline as the script loads them."""
    _ready(script, loading_only=True)
    try:
        argv, _ = prepare(SCRIPTS[script], tmp_path, "cpu", tmp_path / "no-checkout")
        sizes = load_inputs(SCRIPTS[script], argv, tmp_path / "datasets-cache")
    except MissingModelClass as exc:
        not_run(str(exc))
    assert sizes.get("train", 0) > 0, sizes
    assert sizes.get("validation", 1) > 0, sizes


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_example_script(script: str, device: str, transformers_src: Path, tmp_path: Path) -> None:
    spec = SCRIPTS[script]
    if not (transformers_src / "examples" / "pytorch" / spec.path).is_file():
        not_run(f"{spec.path} is not in this transformers checkout")
    _ready(script)
    try:
        argv, env = prepare(spec, tmp_path, device, transformers_src)
    except MissingModelClass as exc:
        not_run(str(exc))
    try:
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=SCRIPT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
        tail = "\n".join(out.splitlines()[-TAIL_LINES:])
        pytest.fail(f"{script} ran past {SCRIPT_TIMEOUT_S}s\n{tail}", pytrace=False)
    tail = "\n".join(proc.stdout.splitlines()[-TAIL_LINES:])
    if proc.returncode != 0:
        pytest.fail(f"{script} exited {proc.returncode}\n{tail}", pytrace=False)
    out = tmp_path / "out"
    if spec.trainer:
        # Trainer scripts save their train metrics and state: a finite loss after exactly
        # MAX_STEPS optimizer steps, the memory metrics (--skip_memory_metrics False), and
        # the final evaluation's metrics file.
        assert (out / "train_results.json").is_file(), f"no train results\n{tail}"
        train = json.loads((out / "train_results.json").read_text())
        assert math.isfinite(train["train_loss"]), train
        assert "train_mem_cpu_alloc_delta" in train, train
        if device in ("cuda", "xpu"):
            assert "train_mem_gpu_alloc_delta" in train, train
        state = json.loads((out / "trainer_state.json").read_text())
        assert state["global_step"] == MAX_STEPS, state["global_step"]
        assert (out / spec.eval_file).is_file(), f"no {spec.eval_file}\n{tail}"
    else:
        assert (out / "config.json").is_file(), f"no model saved\n{tail}"


def test_script_command_uses_the_found_checkout(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """ACCELGRID_TRANSFORMERS_SRC may name a folder of checkouts: the command runs the
    script of the checkout found for the installed version, not a path under the folder
    (seen on an H200: every script of a folder-of-checkouts run 'can't open file')."""
    monkeypatch.setenv(ENV_SRC, str(tmp_path / "checkouts"))
    found = tmp_path / "checkouts" / "5.17.0"
    argv, _ = prepare(SCRIPTS["run_glue"], tmp_path / "run", "cpu", found)
    assert argv[1] == str(found / "examples" / "pytorch" / SCRIPTS["run_glue"].path)
