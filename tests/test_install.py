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
