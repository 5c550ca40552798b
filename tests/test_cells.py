"""Cell expansion (include/exclude, names, suites, pins) on the repo's real matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelgrid import cells as cells_mod
from accelgrid.matrix import load_matrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml")


def test_required_torch_series_and_devices(matrix) -> None:
    assert {"2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14"} <= set(matrix.torch)
    assert set(matrix.devices) == {"cpu", "cuda", "xpu", "mps"}
    assert matrix.default_torch == "2.13"


def test_cell_names(matrix) -> None:
    names = {c.name for c in matrix.cells}
    assert {"xpu-2.5", "cpu-2.13", "cuda-2.11", "mps-2.13"} <= names
    assert "xpu-2.5-fp64-emulation" in names and "xpu-2.13-fallback-debug" in names
    assert "xpu-2.4" not in names  # excluded: no prebuilt XPU wheels
    assert len(names) == len(matrix.cells)


def test_old_torch_pins_keep_transformers_4(matrix) -> None:
    for series in ("2.4", "2.5"):
        pins = matrix.torch[series].pins
        assert pins["transformers"].startswith("4.")
        major_minor = tuple(int(x) for x in pins["accelerate"].split(".")[:2])
        assert major_minor < (1, 13)


def test_xpu_cell_installs_from_xpu_index_with_profile_env(matrix) -> None:
    cell = matrix.cell("xpu-2.5-fp64-emulation")
    assert cell.index == "https://download.pytorch.org/whl/xpu"
    assert cell.torch_requirement == "torch==2.5.1+xpu"
    assert cell.env["OverrideDefaultFP64Settings"] == "1"
    assert cell.env["IGC_EnableDPEmulation"] == "1"
    assert "transformers==4.57.5" in cell.packages
    assert cell.tags == ("xpu", "torch-2.5", "fp64-emulation")


def test_profiles_only_cross_their_devices(matrix) -> None:
    for cell in matrix.cells:
        profile = matrix.profiles[cell.profile]
        assert profile.applies_to(cell.device), cell.name


def test_select_filters(matrix) -> None:
    picked = cells_mod.select(matrix.cells, device=["xpu"], torch=["2.13"])
    assert {c.name for c in picked} == {"xpu-2.13", "xpu-2.13-fallback-debug",
                                        "xpu-2.13-cpu-fallback", "xpu-2.13-fallback-survey"}
    assert cells_mod.select(matrix.cells, profile=["mps-fallback"])[0].name == \
        "mps-2.13-mps-fallback"


def test_fallback_survey_cells(matrix) -> None:
    survey = cells_mod.select(matrix.cells, profile=["fallback-survey"])
    assert [c.name for c in survey] == ["xpu-2.5-fallback-survey", "xpu-2.6-fallback-survey",
                                        "xpu-2.13-fallback-survey"]
    for cell in survey:
        assert cell.env["PYTORCH_ENABLE_XPU_FALLBACK"] == "1"
        assert cell.env["PYTORCH_DEBUG_XPU_FALLBACK"] == "1"
        assert cell.env["ACCELGRID_CAPTURE_OPS"] == "1"
    # fallback-debug keeps its meaning: named fallbacks, unimplemented ops still raise.
    debug = matrix.cell("xpu-2.13-fallback-debug").env
    assert "PYTORCH_ENABLE_XPU_FALLBACK" not in debug
    assert debug["PYTORCH_DEBUG_XPU_FALLBACK"] == debug["ACCELGRID_CAPTURE_OPS"] == "1"


def test_include_extras_apply_to_matching_cells(tmp_path: Path) -> None:
    text = (Path(__file__).parent / "base_matrix.yaml").read_text()
    text = text.replace('    - {device: xpu, torch: "2.13", profile: fallback-debug}',
                        '    - {device: xpu, torch: "2.13", profile: fallback-debug}\n'
                        '    - {device: cpu, workers: 3, timeout: {test_seconds: 5}}')
    (tmp_path / "m.yaml").write_text(text)
    matrix = load_matrix(tmp_path / "m.yaml")
    cpu = [c for c in matrix.cells if c.device == "cpu"]
    assert cpu and all(c.workers == 3 and c.test_seconds == 5 for c in cpu)
    assert all(c.workers == 1 for c in matrix.cells if c.device == "xpu")
    # hf is an xpu-only suite; cpu cells do not get it.
    assert all(c.suites == ("smoke",) for c in cpu)
