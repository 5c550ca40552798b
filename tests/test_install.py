"""Install plans (accelgrid.install): the torch index, then the rest with torch pinned."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from accelgrid import install
from accelgrid.matrix import load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml")


def test_xpu_plan_takes_torch_from_its_index_then_pins_it(matrix) -> None:
    plan = install.plan(matrix.cell("xpu-2.5"), uv_env={})
    first, second = plan.steps
    assert first.args == ("--extra-index-url", "https://download.pytorch.org/whl/xpu",
                          "torch==2.5.1+xpu")
    assert second.args[0] == "torch==2.5.1+xpu"  # step 2 can never swap the torch build
    assert "--extra-index-url" not in second.args
    assert {"torchao==0.11.0", "transformers==4.57.5", "accelerate==1.12.0"} <= set(second.args)


def test_cpu_plan_uses_only_the_default_index(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.13"), uv_env={})
    assert plan.index == "default"
    assert all("--extra-index-url" not in s.args and "--index-url" not in s.args
               for s in plan.steps)


def test_torch_index_override(matrix) -> None:
    plan = install.plan(matrix.cell("cpu-2.13"), torch_index="https://download.pytorch.org/whl/cpu",
                        uv_env={})
    assert plan.steps[0].args[:2] == ("--extra-index-url", "https://download.pytorch.org/whl/cpu")


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
        "2.4 from source and put its wheel there: docs/xpu.md)")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "torch-2.5.1+xpu-cp311-cp311-linux_x86_64.whl").write_text("")
    assert install.local_wheel(cell)[1] == (
        f"xpu-2.4: no torch 2.4 wheel in {tmp_path}/w (build torch 2.4 from source and put "
        "its wheel there: docs/xpu.md)")
    built = tmp_path / "w" / "torch-2.4.0a0+git1234abc-cp311-cp311-linux_x86_64.whl"
    built.write_text("")
    assert install.local_wheel(cell) == (str(built), None)
    plan = install.plan(cell, uv_env={})
    assert plan.steps[0].args == (str(built),)
    assert plan.steps[1].args[0] == str(built)   # the second step cannot swap it either
    assert plan.steps[0].description == f"torch from the local wheel {built}"
    (tmp_path / "w" / "torch-2.4.1-cp311-cp311-linux_x86_64.whl").write_text("")
    assert install.local_wheel(cell)[1].startswith(f"xpu-2.4: 2 torch 2.4 wheels in {tmp_path}/w")


def test_local_wheel_file(matrix, tmp_path: Path) -> None:
    (tmp_path / "torch-2.4.1+xpu-cp311-cp311-linux_x86_64.whl").write_text("")
    cell = _local_cell(matrix, tmp_path, "torch-2.4.1+xpu-cp311-cp311-linux_x86_64.whl")
    assert install.local_wheel(cell) == (cell.torch_wheel, None)
    assert install.local_wheel(matrix.cell("xpu-2.5")) == (None, None)
