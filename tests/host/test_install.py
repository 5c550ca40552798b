"""Install plans (accelgrid.host.install): the torch index, then the rest with torch pinned."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from accelgrid.config.matrix import load_matrix
from accelgrid.host import install
from accelgrid.host import stamp as install_stamp


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml")


def test_xpu_plan_takes_torch_from_its_index_then_pins_it(matrix) -> None:
    plan = install.plan(matrix.cell("xpu-2.5"), uv_env={})
    first, second = plan.steps
    assert first.args == ("--extra-index-url", "https://download.pytorch.org/whl/xpu",
                          "torch==2.5.1+xpu")
    assert second.args[0] == "torch==2.5.1+xpu"  # step 2 can never swap the torch build
    assert "--extra-index-url" not in second.args
    assert {"torchao==0.11.0", "transformers==4.57.5", "accelerate==1.12.0"} <= set(second.args)


def test_cpu_plan_takes_the_cpu_build_from_pytorchs_cpu_index(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.4"), uv_env={})
    tag = install.cpu_build_tag()
    want = "torch==2.4.1" + (f"+{tag}" if tag else "")
    assert plan.index == "https://download.pytorch.org/whl/cpu"
    assert plan.steps[0].args == ("--extra-index-url", plan.index, want)
    assert plan.steps[1].args[0] == want and "--extra-index-url" not in plan.steps[1].args
    # Unreachable: from pip's configuration alone, still the CPU build.
    offline = install.plan(matrix.cell("cpu-2.4"), uv_env={}, cpu_fallback=True)
    assert offline.index == "default" and offline.steps[0].args == (want,)
    assert "cannot be reached" in offline.steps[0].description


def test_the_cpu_build_tag_per_platform(matrix) -> None:
    assert install.cpu_build_tag("Linux", "x86_64") == "cpu"
    assert install.cpu_build_tag("Windows", "AMD64") == "cpu"
    assert install.cpu_build_tag("Darwin", "arm64") is None
    assert install.cpu_build_tag("Linux", "aarch64") is None
    cell = matrix.cell("cpu-2.13")
    assert install.torch_requirement(cell, tag="cpu") == "torch==2.13.0+cpu"
    assert install.torch_requirement(cell, tag="") == "torch==2.13.0"
    # Other devices keep their own requirement.
    assert install.torch_requirement(matrix.cell("xpu-2.5"), tag="cpu") == "torch==2.5.1+xpu"
    assert install.torch_requirement(matrix.cell("cuda-2.11"), tag="cpu") == "torch==2.11.0"


def test_torch_index_override(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.13"), torch_index="https://example.org/whl/cpu",
                        uv_env={})
    assert plan.steps[0].args[:2] == ("--extra-index-url", "https://example.org/whl/cpu")
    # default: pip's configuration alone; a named index never falls back.
    assert install.plan(matrix.cell("cpu-2.13"), torch_index="default", uv_env={}).index \
        == "default"
    assert install.can_fall_back(matrix.cell("cpu-2.13"))
    assert not install.can_fall_back(matrix.cell("cpu-2.13"), "https://example.org/whl/cpu")
    assert not install.can_fall_back(matrix.cell("xpu-2.13"))
    fallback = install.plan(matrix.cell("cpu-2.13"), torch_index="https://example.org/whl/cpu",
                            uv_env={}, cpu_fallback=True)
    assert fallback.index == "https://example.org/whl/cpu"


def test_a_gpu_build_of_torch_is_told_from_a_cpu_build(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    meta = site / "torch-2.4.1.dist-info" / "METADATA"
    meta.parent.mkdir(parents=True)
    assert install.cuda_build(tmp_path) is None          # no torch at all
    meta.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n"
                    "Requires-Dist: filelock\nRequires-Dist: nvidia-cublas-cu12==12.1.3.1 ; "
                    "platform_system == \"Linux\"\n")
    assert install.cuda_build(tmp_path) == ("torch 2.4.1 is a GPU build (requires "
                                            "nvidia-cublas-cu12), not a CPU build")
    meta.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1+cu121\n")
    build = install.cuda_build(tmp_path)
    assert build is not None and "tagged +cu121" in build
    meta.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1+cpu\n"
                    "Requires-Dist: filelock\n")
    assert install.cuda_build(tmp_path) is None


def test_plan_names_the_download_size_of_a_local_wheel(matrix, tmp_path: Path) -> None:
    cell = matrix.cell("cpu-2.4")
    wheel = tmp_path / "torch-2.4.1+cpu-py3-none-any.whl"
    wheel.write_bytes(b"x" * 2_500_000)
    (tmp_path / "torch-2.4.1+cpu-cp39-cp39-win32.whl").write_bytes(b"x" * 9_000_000)
    (tmp_path / "torch-2.5.1+cpu-py3-none-any.whl").write_bytes(b"x" * 9_000_000)
    plan = install.plan(cell, uv_env={"UV_FIND_LINKS": str(tmp_path)}, cpu_fallback=True)
    assert install.expected_download(plan, "torch==2.4.1+cpu", "3.11") == f"2 MB ({wheel})"
    assert install.expected_download(plan, "torch==2.6.0+cpu", "3.11") is None
    assert install.expected_download(install.plan(cell, uv_env={}), "torch==2.4.1+cpu",
                                     "3.11") is None


def test_unreachable_index_is_one_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    msg = install.index_problem(f"http://127.0.0.1:{port}/whl/xpu", timeout=5)
    assert msg is not None and "\n" not in msg
    assert msg.startswith(f"package index http://127.0.0.1:{port}/whl/xpu cannot be reached")
    assert install.index_problem("default") is None


# --- torch from a local wheel (xpu-2.4: a source build) --------------------------------------
def _local_cell(matrix, tmp_path: Path, wheel: str):
    import dataclasses

    return dataclasses.replace(matrix.cell("xpu-2.4"), torch_wheel=str(tmp_path / wheel))


def test_xpu_24_takes_torch_from_a_local_wheel(matrix) -> None:
    cell = matrix.cell("xpu-2.4")
    assert cell.manual and cell.torch_wheel.endswith("/wheels/xpu-2.4")
    assert cell.tags == ("local-wheel",) and cell.container_family is None


def test_local_wheel_folder(matrix, tmp_path: Path) -> None:
    cell = _local_cell(matrix, tmp_path, "w")
    wheel, problem = install.local_wheel(cell)
    assert wheel is None and problem == (
        f"xpu-2.4: torch comes from a local wheel and {tmp_path}/w does not exist (build torch "
        "2.4 from source and put its wheel there: docs/devices/xpu.md)")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "torch-2.5.1+xpu-cp311-cp311-linux_x86_64.whl").write_text("")
    assert install.local_wheel(cell)[1] == (
        f"xpu-2.4: no torch 2.4 wheel in {tmp_path}/w (build torch 2.4 from source and put "
        "its wheel there: docs/devices/xpu.md)")
    built = tmp_path / "w" / "torch-2.4.0a0+git1234abc-cp311-cp311-linux_x86_64.whl"
    built.write_text("")
    assert install.local_wheel(cell) == (str(built), None)
    plan = install.plan(cell, uv_env={})
    assert plan.steps[0].args == (str(built),)
    assert plan.steps[1].args[0] == str(built)   # the second step cannot swap it either
    assert plan.steps[0].description == f"torch from the local wheel {built}"
    (tmp_path / "w" / "torch-2.4.1-cp311-cp311-linux_x86_64.whl").write_text("")
    why = install.local_wheel(cell)[1]
    assert why is not None and why.startswith(f"xpu-2.4: 2 torch 2.4 wheels in {tmp_path}/w")


def test_local_wheel_file(matrix, tmp_path: Path) -> None:
    (tmp_path / "torch-2.4.1+xpu-cp311-cp311-linux_x86_64.whl").write_text("")
    cell = _local_cell(matrix, tmp_path, "torch-2.4.1+xpu-cp311-cp311-linux_x86_64.whl")
    assert install.local_wheel(cell) == (cell.torch_wheel, None)
    assert install.local_wheel(matrix.cell("xpu-2.5")) == (None, None)


# --- the stamp: a warm env installs nothing -------------------------------------------------
def _nox(proj: Path, *args: str) -> str:
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"),
                           "-s", "cpu-2.13", "--install-only", *args], cwd=proj,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ACCELGRID_RESULTS_DIR": str(proj / "results")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _installs(output: str) -> list[str]:
    """What the session's install lines asked uv for (none when it installed nothing)."""
    return [line.split(": ", 2)[-1] for line in output.splitlines()
            if "] installing " in line]


@pytest.mark.slow
def test_a_warm_env_installs_nothing_until_its_pins_change(mini_project) -> None:
    """Real nox sessions of a one-cell project (torch from the local wheels: seconds)."""
    import shutil

    proj = mini_project(noxfile=True)
    envdir = proj / ".nox" / "cpu-2-13"
    stamp = envdir / install_stamp.STAMP

    first = _installs(_nox(proj))
    assert first[0] == install.torch_requirement(load_matrix(proj / "matrix.yaml").cell(
        "cpu-2.13")) and len(first) == 2 and stamp.is_file()
    second = _nox(proj)
    assert _installs(second) == []
    assert f"skipped, the env holds the cell's pins ({install_stamp.STAMP} matches)" in second

    # A new pin: installed, and stamped again.
    matrix = proj / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace(
        "  smoke: {path: suites/payload}", "  smoke: {path: suites/payload, packages: "
        "[six==1.17.0]}"))
    assert _installs(_nox(proj))[-1].endswith(" six==1.17.0")
    assert any(envdir.glob("lib/python*/site-packages/six-1.17.0.dist-info"))
    assert _installs(_nox(proj)) == []

    # A stamp cut short: installed again (and whole afterwards).
    stamp.write_text(stamp.read_text()[:100])
    assert _installs(_nox(proj))[-1].endswith(" six==1.17.0")
    assert install_stamp.env_holds(envdir, json.loads(stamp.read_text()))

    # The env changed behind the stamp's back (six removed): installed again.
    for dist in envdir.glob("lib/python*/site-packages/six*"):
        shutil.rmtree(dist) if dist.is_dir() else dist.unlink()
    assert _installs(_nox(proj))[-1].endswith(" six==1.17.0")
    assert any(envdir.glob("lib/python*/site-packages/six-1.17.0.dist-info"))

    # --no-install on a reused env installs nothing, so it stamps nothing.
    stamp.unlink()
    assert "-R / --no-install" in _nox(proj, "--no-install")
    assert not stamp.exists()


def test_a_broken_or_foreign_stamp_holds_nothing(matrix, tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "lib" / "python3.11" / "site-packages" / "six-1.17.0.dist-info").mkdir(
        parents=True)
    wanted = install_stamp.pins(install.plan(matrix.cell("cpu-2.13"), uv_env={}), env, env={})
    assert not install_stamp.env_holds(env, wanted)          # no stamp
    install_stamp.write_stamp(env, wanted)
    assert install_stamp.env_holds(env, wanted)
    text = (env / install_stamp.STAMP).read_text()
    for broken in (text[:-3], "", "{}", "[]", "not json", text.replace(wanted["digest"], "0")):
        (env / install_stamp.STAMP).write_text(broken)
        assert not install_stamp.env_holds(env, wanted), broken
    install_stamp.write_stamp(env, wanted)
    (env / "lib" / "python3.11" / "site-packages" / "six-1.18.0.dist-info").mkdir()
    assert not install_stamp.env_holds(env, wanted)          # another distribution since
    install_stamp.forget(env)
    assert not (env / install_stamp.STAMP).exists()


def test_the_stamp_changes_with_every_input_of_the_install(matrix, tmp_path: Path) -> None:
    import dataclasses

    env = tmp_path / "env"
    (env / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.11.7\nuv = 0.13.9\n")
    cell = matrix.cell("cpu-2.13")
    base = install.plan(cell, uv_env={})
    digest = install_stamp.pins(base, env, env={})["digest"]
    assert install_stamp.pins(base, env, env={"PATH": "/x"})["digest"] == digest
    changed = {
        "a pin": install.plan(dataclasses.replace(
            cell, packages=tuple(p.replace("transformers==5.24.0", "transformers==5.25.0")
                                 for p in cell.packages)), uv_env={}),
        "an extra package": install.plan(dataclasses.replace(
            cell, packages=(*cell.packages, "six==1.17.0")), uv_env={}),
        "the torch index": install.plan(cell, torch_index="https://example.org/whl",
                                        uv_env={}),
        "pip's find-links": install.plan(cell, uv_env={"UV_FIND_LINKS": "/wheels"}),
    }
    for what, plan in changed.items():
        assert install_stamp.pins(plan, env, env={})["digest"] != digest, what
    assert install_stamp.pins(base, env, env={"UV_INDEX_URL": "https://x/simple"})["digest"] \
        != digest
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.11.9\nuv = 0.13.9\n")
    assert install_stamp.pins(base, env, env={})["digest"] != digest
    # Credentials in an index reach the digest, never the stamp's text.
    secret = install_stamp.pins(install.plan(cell, torch_index="https://u:s3cret@example.org/whl",
                                       uv_env={}), env, env={})
    install_stamp.write_stamp(env, secret)
    assert "s3cret" not in (env / install_stamp.STAMP).read_text()
    assert install_stamp.env_holds(env, secret)


@pytest.mark.slow  # end to end: a real cell, session or torch process (docs/design/testing.md)
def test_pips_configuration_is_remembered_until_a_file_or_variable_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real `pip config` runs; a remembered answer asks pip nothing."""
    from accelgrid.host import pipconfig

    env = tmp_path / "env"
    env.mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nconstraint = /c/one.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    assert install.uv_env(env)["UV_CONSTRAINT"] == "/c/one.txt"
    assert (env / install.PIP_CONFIG).is_file()
    asked: list[str] = []
    real = pipconfig.pip_settings

    def pip_settings(*a: Any) -> Any:
        asked.append("pip")
        return real(*a)

    monkeypatch.setattr(pipconfig, "pip_settings", pip_settings)
    assert install.uv_env(env)["UV_CONSTRAINT"] == "/c/one.txt" and asked == []
    # The file pip reads changed: pip is asked again.
    conf.write_text("[global]\nconstraint = /c/two-two.txt\n")
    assert install.uv_env(env)["UV_CONSTRAINT"] == "/c/two-two.txt" and asked == ["pip"]
    assert install.uv_env(env)["UV_CONSTRAINT"] == "/c/two-two.txt" and asked == ["pip"]
    # A variable that steers pip changed: asked again.
    monkeypatch.setenv("PIP_CONSTRAINT", "/c/three.txt")
    assert install.uv_env(env)["UV_CONSTRAINT"] == "/c/three.txt" and len(asked) == 2
    # A credential is never written down.
    monkeypatch.delenv("PIP_CONSTRAINT")
    conf.write_text("[global]\nextra-index-url = https://me:s3cret@example.org/simple\n")
    (env / install.PIP_CONFIG).unlink()
    assert "s3cret" in install.uv_env(env)["UV_EXTRA_INDEX_URL"]
    assert not (env / install.PIP_CONFIG).exists()
