"""Real nox runs of the repo's noxfile: listing, a real cpu cell end to end (real env with
uv, real torch, real pytest), --no-venv checks, and the grid session."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract

ROOT = Path(__file__).resolve().parents[2]


def nox(*args: str, env: dict[str, str] | None = None, timeout: int = 900
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_list_has_a_session_per_cell() -> None:
    from accelgrid.config.matrix import load_matrix

    cells = load_matrix(ROOT / "matrix.yaml").cells
    proc = nox("-l")
    assert proc.returncode == 0, proc.stderr
    listed = {}
    for line in proc.stdout.splitlines():
        if line[:2] in ("* ", "- "):
            name, _, desc = line[2:].partition(" -> ")
            listed[name.split(" [")[0].strip()] = (line[0] == "*", desc)
    containers = {f"container-{c.name}" for c in cells if c.container_family}
    assert set(listed) == {c.name for c in cells} | {"grid"} | containers
    # A plain `nox` here: the cpu cell at the default torch, then the grid.
    assert {n for n, (selected, _) in listed.items() if selected} == {"cpu-2.13", "grid"}
    assert listed["xpu-2.5"][1].startswith("xpu / torch 2.5.1 / profile default")


def test_tags_select_by_device() -> None:
    proc = nox("-l", "--json", "-t", "xpu")
    sessions = json.loads(proc.stdout)
    # Each xpu cell, and its container-<cell> session.
    assert sessions and all(s["name"].removeprefix("container-").startswith("xpu-")
                            for s in sessions)
    assert all("xpu" in s["tags"] for s in sessions)


def test_absent_device_fails_in_one_line(tmp_path: Path) -> None:
    proc = nox("--no-venv", "-s", "xpu-2.5", env={"ACCELGRID_RESULTS_DIR": str(tmp_path)})
    assert proc.returncode != 0
    assert ("xpu-2.5: xpu not present: no GPU of PCI vendor 0x8086 under "
            "/sys/class/drm/renderD*") in proc.stderr
    assert not (tmp_path / "xpu-2.5").exists()  # nothing ran


def test_no_venv_refuses_other_torch(tmp_path: Path) -> None:
    proc = nox("--no-venv", "-s", "cpu-2.11", env={"ACCELGRID_RESULTS_DIR": str(tmp_path)})
    assert proc.returncode != 0
    import torch

    from accelgrid.config.matrix import load_matrix
    from accelgrid.host import inputs, install

    cell = load_matrix(ROOT / "matrix.yaml").cell("cpu-2.11")
    # One line, torch's difference first (then the other pins this interpreter lacks).
    [line] = [ln for ln in proc.stderr.splitlines() if "inputs are not" in ln]
    assert (f"cpu-2.11: the env's inputs are not the matrix's: torch: wanted "
            f"{install.torch_requirement(cell)}, found {torch.__version__}"
            ) in line and line.endswith(f"{inputs.ACCEPT}=1 runs on it anyway, and the "
                                        "results say so).")
    assert not (tmp_path / "cpu-2.11").exists()


@pytest.mark.slow
def test_real_cpu_cell_end_to_end(tmp_path: Path, outside_envdir: Path) -> None:
    out = tmp_path / "results"
    proc = nox("-s", "cpu-2.13", "--", "suites/smoke", env={"ACCELGRID_RESULTS_DIR": str(out)},
               timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = results.last_run(out / "cpu-2.13")[1]  # a selected run: runs/<run-id>/
    assert folder.parent.name == "runs"
    env = json.loads((folder / "env.json").read_text())
    assert env["selection"] == ["suites/smoke"]
    assert env["torch"]["version"].startswith("2.13.0")
    assert env["python"]["executable"].startswith(str(outside_envdir))  # the cell's own env
    assert not (ROOT / ".nox" / "cpu-2-13").exists() or outside_envdir == ROOT / ".nox"
    assert env["packages"]["transformers"] == "5.24.0"
    lines = [json.loads(x) for x in (folder / "tests.jsonl").read_text().splitlines()]
    outcomes = {r["nodeid"].split("::")[-1]: r["outcome"] for r in lines}
    assert outcomes["test_allocation_and_matmul_match_cpu"] == "passed"
    assert outcomes["test_memory_stats"] == "skipped"  # cpu claims no device memory API
    assert (folder / "junit.xml").exists()
    # The console: each env step with what it installs and its seconds (or skipped: the
    # env's stamp says it holds the pins, when a run before this one built it), a line per
    # suite, why tests did not run; pytest's own report (-rA passes) in pytest.log only.
    skipped = "skipped, the env holds the cell's pins (.accelgrid-pins.json matches)\n"
    # torch's CPU build from PyTorch's CPU index, or (this host, CI: unreachable) from
    # pip's configuration, said in one line before.
    torch_from = (r"(torch from https://download\.pytorch\.org/whl/cpu|torch's CPU build from "
                  r"pip's configuration \(https://download\.pytorch\.org/whl/cpu cannot be "
                  r"reached\))")
    assert re.search(rf"nox > cpu-2\.13: \[2/3\] installing {torch_from}: torch==2\.13\.0"
                     rf"(\+cpu)?\n", proc.stderr) or re.search(
        rf"\[2/3\] {torch_from}: {re.escape(skipped)}", proc.stderr), proc.stderr[-3000:]
    assert re.search(r"nox > cpu-2\.13: \[3/3\] .+ \[\d+\.\d s\]\n", proc.stderr) or (
        f"[3/3] test tooling and suite packages: {skipped}" in proc.stderr)
    assert re.search(r"accelgrid: cpu-2\.13: smoke \d+/\d+ done: \d+ passed, \d+ skipped "
                     r"\[\d+ s\]\n", proc.stdout), proc.stdout
    assert "accelgrid: cpu-2.13:   smoke: 2 skipped — cpu does not claim Stream\n" in proc.stdout
    assert "PASSES" not in proc.stdout + proc.stderr
    assert "= PASSES =" in (folder / contract.PYTEST_LOG_FILE).read_text()
    grid = nox("-s", "grid", env={"ACCELGRID_RESULTS_DIR": str(out)})
    assert grid.returncode == 0, grid.stderr
    md = (out / "grid.md").read_text()
    assert "| cpu-2.13 | 2.13.0+cpu |" in md
    assert json.loads((out / "grid.json").read_text())["columns"][0]["name"] == "cpu-2.13"


@pytest.mark.slow
def test_no_venv_runs_on_current_interpreter(tmp_path: Path) -> None:
    """--no-venv: this interpreter, which holds torch 2.13 but not the cell's other pins
    (numpy, transformers, ...): refused in one line before any test, then run when told
    to accept them, and env.json says it ran on other inputs (issue 36)."""
    refused = nox("--no-venv", "-s", "cpu-2.13", "--", "suites/smoke", "-k", "matmul",
                  env={"ACCELGRID_RESULTS_DIR": str(tmp_path)})
    assert refused.returncode == 1
    assert re.search(r"cpu-2\.13: the env's inputs are not the matrix's: .*found nothing "
                     r"installed.*\(--no-venv runs on the current interpreter", refused.stderr)
    assert not (tmp_path / "cpu-2.13").exists()
    proc = nox("--no-venv", "-s", "cpu-2.13", "--", "suites/smoke", "-k", "matmul",
               env={"ACCELGRID_RESULTS_DIR": str(tmp_path), "ACCELGRID_ACCEPT_INPUTS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = results.last_run(tmp_path / "cpu-2.13")[1]
    env = json.loads((folder / "env.json").read_text())
    assert env["python"]["executable"] == sys.executable
    assert env["inputs"]["accepted_by"] == "ACCELGRID_ACCEPT_INPUTS=1"
    assert any(d.startswith("numpy: wanted numpy==") for d in env["inputs"]["accepted_mismatch"])
    recs = (folder / "tests.jsonl").read_text().splitlines()
    assert len(recs) == 1 and json.loads(recs[0])["outcome"] == "passed"


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_unreachable_torch_index_fails_in_one_line_before_installing(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    index = f"http://127.0.0.1:{port}/whl/cpu"
    proc = nox("-s", "cpu-2.13", "--envdir", str(tmp_path / "envs"),
               env={"ACCELGRID_TORCH_INDEX": index, "ACCELGRID_RESULTS_DIR": str(tmp_path)})
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "cannot be reached" in ln]
    assert len(lines) == 1 and f"cpu-2.13: package index {index} cannot be reached" in lines[0]
    assert "uv pip install" not in proc.stderr  # nothing was installed


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_an_absent_device_is_refused_before_any_environment_is_made(tmp_path: Path) -> None:
    # nox used to build the cell's venv (.nox/mps-2-13) and only then refuse.
    default_env = ROOT / ".nox" / "mps-2-13"
    existed = default_env.exists()
    for extra in ([], ["--envdir", str(tmp_path / "envs")]):
        proc = nox(*extra, "-s", "mps-2.13", env={"ACCELGRID_RESULTS_DIR": str(tmp_path)})
        assert proc.returncode != 0
        assert "mps-2.13: mps needs a Darwin host" in proc.stderr
        assert "Creating virtual environment" not in proc.stderr
    if not existed:  # (a checkout with one from before cannot tell)
        assert not default_env.exists()
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir())
    assert not (tmp_path / "mps-2.13").exists()
    # It is still listed, tagged, with its description.
    listed = nox("-l", "--json", "-t", "mps")
    sessions = {s["name"]: s for s in json.loads(listed.stdout)}
    assert sessions["mps-2.13"]["description"].startswith("mps / torch 2.13.0 / profile default")


# --- the runtime bundle check (torch 2.5 +xpu), on a fake Intel GPU host ------------------
def _intel_host(tmp_path: Path) -> dict[str, str]:
    from helpers.fake_hosts import INTEL, fake_gpu

    host = tmp_path / "host"
    fake_gpu(host, 128, INTEL, 0x56C0)   # a Flex 170: the device is "present"
    results = tmp_path / "results"
    (results / "xpu-2.5").mkdir(parents=True)
    (results / "xpu-2.5" / "tests.jsonl").write_text("earlier run\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEAPI_ROOT", "LD_LIBRARY_PATH", "ACCELGRID_SKIP_RUNTIME_CHECK")}
    return {**env, "ACCELGRID_HOST_ROOT": str(host), "ACCELGRID_RESULTS_DIR": str(results)}


@pytest.mark.parametrize("no_venv", [False, True])
def test_missing_runtime_is_one_line_and_creates_nothing(tmp_path: Path, no_venv: bool) -> None:
    env = _intel_host(tmp_path)
    envdir = tmp_path / "envs"
    args = ["-s", "xpu-2.5", "--envdir", str(envdir)] + (["--no-venv"] if no_venv else [])
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "needs Intel GPU dependencies" in ln]
    assert len(lines) == 1, proc.stderr
    assert ("xpu-2.5: torch 2.5.1+xpu needs Intel GPU dependencies for PyTorch 2.5 "
            "(intel-for-pytorch-gpu-dev-0.5) 0.5.3 installed and sourced: "
            "source /opt/intel/oneapi/pytorch-gpu-dev-0.5/oneapi-vars.sh") in lines[0]
    assert not envdir.exists()                                  # no env created
    results = Path(env["ACCELGRID_RESULTS_DIR"]) / "xpu-2.5"
    assert [p.name for p in results.iterdir()] == ["tests.jsonl"]  # nothing touched
    assert (results / "tests.jsonl").read_text() == "earlier run\n"


def test_sourced_runtime_passes_the_check_under_no_venv(tmp_path: Path) -> None:
    env = _intel_host(tmp_path)
    lib = tmp_path / "oneapi/lib"
    lib.mkdir(parents=True)
    (lib / "libsycl.so.7").write_text("")
    env.update(ONEAPI_ROOT=str(tmp_path / "oneapi"), LD_LIBRARY_PATH=str(lib))
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"),
                           "--no-venv", "-s", "xpu-2.5"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode != 0
    assert "needs Intel GPU dependencies" not in proc.stderr
    # Past the runtime check, the preinstalled torch is checked: this one is 2.13.
    assert "xpu-2.5: the env's inputs are not the matrix's: torch: wanted torch==2.5.1+xpu, " \
        "found 2." in proc.stderr


def _project_with_the_real_noxfile(proj: Path) -> Path:
    """A mini project (one payload suite) run by a copy of the repo's own noxfile."""
    from helpers.mini_projects import make_project

    make_project(proj)
    (proj / "suites" / "payload" / "test_payload.py").write_text(
        "def test_one():\n    assert 1 + 1 == 3\n")
    shutil.copy(ROOT / "noxfile.py", proj / "noxfile.py")
    (proj / "src").symlink_to(ROOT / "src")   # the noxfile imports accelgrid from ./src
    return proj


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_matrix_option_reaches_the_noxfile_and_the_registry(tmp_path: Path) -> None:
    # `accelgrid --matrix alt.yaml run CELL`: the cell exists only in alt.yaml (the project's
    # matrix.yaml has no cpu device), and the registry validates against alt.yaml (its
    # entry names the cpu device) and applies: the failing test is a strict xfail. Before,
    # nox loaded matrix.yaml: "Sessions not found", exit 3.
    proj = _project_with_the_real_noxfile(tmp_path / "p")
    (proj / "matrix.yaml").rename(proj / "alt.yaml")
    text = (proj / "alt.yaml").read_text()
    (proj / "matrix.yaml").write_text(
        text.replace("  device: [cpu, xpu]", "  device: [xpu]"))
    (proj / "known_issues.yaml").write_text(
        "schema: 1\nissues:\n  acme/widgets#1:\n    title: planted\n    scope: {devices: [cpu]}\n"
        "    tests: [suites/payload/test_payload.py::test_one]\n    expect: failed\n")
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "accelgrid", "--matrix", "alt.yaml", "run", "cpu-2.13",
         "--no-venv"], cwd=proj, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ACCELGRID_RESULTS_DIR": str(out)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    folder = results.last_run(out / "cpu-2.13")[1]
    recs = [json.loads(line) for line in (folder / "tests.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in recs] == ["xfailed"]
    env = json.loads((folder / "env.json").read_text())
    assert env["env"]["ACCELGRID_MATRIX"] == str((proj / "alt.yaml").resolve())


def test_nox_input_errors_are_accelgrid_input_errors(tmp_path: Path) -> None:
    # nox itself: 3 for a session it does not have, 2 for a noxfile it cannot load.
    from accelgrid.cli import run as run_cli

    proj = _project_with_the_real_noxfile(tmp_path / "p")
    missing = run_cli.nox(["-f", str(proj / "noxfile.py"), "-s", "cpu-9.99"], proj)
    unloadable = run_cli.nox(["-f", str(proj / "nofile.py"), "-s", "cpu-2.13"], proj)
    assert (missing, unloadable) == (3, 2)
    assert run_cli.exit_code(missing) == run_cli.exit_code(unloadable) == 2
    assert run_cli.exit_code(1) == 1 and run_cli.exit_code(0) == 0
