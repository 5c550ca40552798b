"""Device presence probes (accelgrid.host.detect), without importing torch; Intel GPUs from a
fake sysfs tree (Intel, NVIDIA, AMD, none, mixed, a container without /dev/dri)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from helpers.fake_hosts import fake_gpu

from accelgrid.devices import pci, xpu
from accelgrid.host import detect

XPU_RULE = {"pci_vendor": "0x8086"}


def _fake_command(folder: Path, name: str, rc: int, out: str = "") -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\nprintf '%s' '{out}'\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_detect_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect.absent_reason("cpu", {"always": True}) is None
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]})
    assert reason == "cuda not present: none of nvidia-smi is on PATH and working"
    _fake_command(tmp_path, "nvidia-smi", 9)  # present but broken driver
    assert detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]}) is not None
    _fake_command(tmp_path, "nvidia-smi", 0)
    assert detect.absent_reason("cuda", {"commands_any": ["nvidia-smi"]}) is None
    dri = tmp_path / "dri"
    dri.mkdir()
    rules = {"paths_any": [str(dri / "renderD*")]}
    why = detect.absent_reason("xpu", rules)
    assert why is not None and "none of" in why
    (dri / "renderD128").write_text("")
    assert detect.absent_reason("xpu", rules) is None
    other = "Darwin" if os.uname().sysname != "Darwin" else "Linux"
    why = detect.absent_reason("mps", {"system": other})
    assert why is not None and why.startswith(f"mps needs a {other} host")


# --- Intel GPUs from sysfs ---------------------------------------------------------------
def test_driver_only_intel_host_is_an_xpu_host(tmp_path: Path, monkeypatch) -> None:
    # No sycl-ls (no oneAPI), no xpu-smi (a client Arc): the driver alone is supported.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    fake_gpu(tmp_path, 128, 0x8086, 0x56A0)
    assert detect.absent_reason("xpu", XPU_RULE, root=tmp_path) is None
    [gpu] = pci.intel_gpus(tmp_path)
    assert (gpu.node, gpu.family, gpu.name) == ("renderD128", "arc",
                                                "Intel Arc A-series (Alchemist, DG2)")
    assert gpu.as_dict()["pci_id"] == "8086:56a0"


def test_nvidia_host_with_oneapi_is_not_an_xpu_host(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_command(bin_dir, "sycl-ls", 0, "[opencl:cpu:0] Intel OpenCL")   # oneAPI installed
    monkeypatch.setenv("PATH", str(bin_dir))
    fake_gpu(tmp_path, 128, 0x10DE, 0x2335)   # an NVIDIA H200
    reason = detect.absent_reason("xpu", XPU_RULE, root=tmp_path)
    assert reason == (f"xpu not present: no GPU of PCI vendor 0x8086 under "
                      f"{tmp_path}/sys/class/drm/renderD*")
    assert pci.intel_gpus(tmp_path) == []


def test_amd_and_empty_hosts(tmp_path: Path) -> None:
    amd, empty = tmp_path / "amd", tmp_path / "empty"
    fake_gpu(amd, 128, 0x1002, 0x74A1)
    empty.mkdir()
    for root in (amd, empty):
        why = detect.absent_reason("xpu", XPU_RULE, root=root)
        assert why is not None and "no GPU of PCI vendor 0x8086" in why
        assert pci.intel_gpus(root) == []


def test_mixed_host_counts_and_names_only_intel_gpus(tmp_path: Path, monkeypatch) -> None:
    fake_gpu(tmp_path, 128, 0x10DE, 0x2335)            # NVIDIA
    fake_gpu(tmp_path, 129, 0x8086, 0x56C0)            # Flex 170 (ATS-M)
    fake_gpu(tmp_path, 130, 0x8086, 0x0BD5)            # Max 1550 (PVC)
    fake_gpu(tmp_path, 131, 0x8086, 0xE20B)            # Arc B580 (Battlemage)
    fake_gpu(tmp_path, 132, 0x8086, 0x1234, pci_class=0x048000)   # not a display device
    fake_gpu(tmp_path, 133, 0x8086, 0x9A49)            # an older iGPU: Intel, no family
    gpus = pci.intel_gpus(tmp_path)
    assert [(g.node, g.family) for g in gpus] == [
        ("renderD129", "ats-m"), ("renderD130", "pvc"), ("renderD131", "bmg"),
        ("renderD133", None)]
    assert gpus[-1].name == "PCI 0x8086:0x9a49"
    assert detect.absent_reason("xpu", XPU_RULE, root=tmp_path) is None
    monkeypatch.setenv("ACCELGRID_HOST_ROOT", str(tmp_path))
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    monkeypatch.delenv("ACCELGRID_DEVICES", raising=False)
    # Not the NVIDIA one; the old iGPU (Level Zero's 3) neither: torch >= 2.7 drops an
    # integrated GPU beside discrete ones.
    assert detect.device_ids(xpu.DEVICE) == ["0", "1", "2"]


def test_render_nodes_sort_numerically(tmp_path: Path) -> None:
    for node in (1000, 129, 128):
        fake_gpu(tmp_path, node, 0x8086, 0x64A0)
    assert [g.node for g in pci.intel_gpus(tmp_path)] == [
        "renderD128", "renderD129", "renderD1000"]


def test_container_without_dev_dri_says_so(tmp_path: Path) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x56C1, dev_node=False)   # Flex 140, /dev/dri not passed
    reason = detect.absent_reason("xpu", XPU_RULE, root=tmp_path)
    assert reason == ("xpu not present: Intel Data Center GPU Flex (ATS-M) at renderD128 but "
                      f"{tmp_path}/dev/dri/renderD128 is missing "
                      "(in a container: pass --device /dev/dri)")
    assert pci.intel_gpus(tmp_path) == []


def test_inventory_uses_tools_only_when_present(tmp_path: Path, monkeypatch) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x6420)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("ZE_FLAT_DEVICE_HIERARCHY", raising=False)
    inv = xpu.inventory(tmp_path)
    assert inv == {"gpus": [{"node": "renderD128", "pci_id": "8086:6420", "family": "lnl",
                             "name": "Intel Core Ultra 200V graphics (Lunar Lake)",
                             "tiles": 1, "discrete": False}],
                   "devices": {"count": 1, "ZE_FLAT_DEVICE_HIERARCHY": "FLAT (default)",
                               "not_used": []},
                   "sycl-ls": [], "xpu-smi": []}
    _fake_command(bin_dir, "sycl-ls", 0,
                  "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) 140V")
    assert xpu.inventory(tmp_path)["sycl-ls"] == [
        "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) 140V"]


def test_family_table_has_no_id_twice() -> None:
    seen: dict[int, str] = {}
    for name, (_, ids) in pci.FAMILIES.items():
        for pci_id in ids:
            assert pci_id not in seen, f"{pci_id:#06x} in {seen.get(pci_id)} and {name}"
            seen[pci_id] = name
    assert pci.family_of(0x56C0) == "ats-m" and pci.family_of(0x56C1) == "ats-m"
    assert pci.family_of(0x0BD5) == "pvc" and pci.family_of(0xE20B) == "bmg"


# --- the runtime bundle of torch 2.5 +xpu -------------------------------------------------
def test_runtime_check(tmp_path: Path) -> None:
    from accelgrid.config.matrix import load_matrix

    matrix = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml")
    old, new = matrix.cell("xpu-2.5"), matrix.cell("xpu-2.13")
    assert detect.runtime_problem(new, {}) is None           # the wheels bring it
    assert detect.runtime_problem(matrix.cell("cpu-2.5"), {}) is None
    missing = detect.runtime_problem(old, {})
    assert missing == (
        "xpu-2.5: torch 2.5.1+xpu needs Intel GPU dependencies for PyTorch 2.5 "
        "(intel-for-pytorch-gpu-dev-0.5) 0.5.3 installed and sourced: "
        "source /opt/intel/oneapi/pytorch-gpu-dev-0.5/oneapi-vars.sh && "
        "source /opt/intel/oneapi/pti/0.9/env/vars.sh "
        "(ONEAPI_ROOT is not set; see docs/devices/xpu.md)")
    assert "\n" not in missing
    lib = tmp_path / "compiler/lib"
    lib.mkdir(parents=True)
    env = {"ONEAPI_ROOT": str(tmp_path), "LD_LIBRARY_PATH": f"/nowhere:{lib}"}
    problem = detect.runtime_problem(old, env)
    assert problem is not None and problem.endswith(
        "(libsycl.so.7 is not on LD_LIBRARY_PATH; see docs/devices/xpu.md)")
    (lib / "libsycl.so.8").write_text("")                     # a 2025 runtime is not it
    problem = detect.runtime_problem(old, env)
    assert problem is not None and "libsycl.so.7 is not on" in problem
    (lib / "libsycl.so.7").write_text("")
    assert detect.runtime_problem(old, env) is None
    assert detect.runtime_problem(old, {"ACCELGRID_SKIP_RUNTIME_CHECK": "1"}) is None


# --- hardware family and driver stack of the runner ---------------------------------------
@pytest.fixture(scope="module")
def repo_matrix():
    from accelgrid.config.matrix import load_matrix

    return load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml")


def test_atsm_host_gets_the_fp64_flags_from_its_hardware(tmp_path: Path, repo_matrix) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x56C0)
    cell = repo_matrix.cell("xpu-2.5")                 # the default profile: no flags of its own
    assert "OverrideDefaultFP64Settings" not in cell.env
    choice = detect.resolve_hardware(cell, {}, root=tmp_path)
    assert (choice.family, choice.how, choice.problem) == ("ats-m", "detected", None)
    assert choice.env(cell) == {"OverrideDefaultFP64Settings": "1", "IGC_EnableDPEmulation": "1",
                                "ACCELGRID_HARDWARE": "ats-m"}
    assert choice.describe() == "hardware ats-m (detected)"


def test_other_hardware_gets_no_flags_and_declarations_are_checked(tmp_path: Path,
                                                                   repo_matrix) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x0BD5)            # a Max 1550
    cell = repo_matrix.cell("xpu-2.13")
    choice = detect.resolve_hardware(cell, {"ACCELGRID_DRIVER": "lts"}, root=tmp_path)
    assert (choice.family, choice.driver) == ("pvc", "lts")
    assert choice.env(cell) == {"ACCELGRID_HARDWARE": "pvc", "ACCELGRID_DRIVER": "lts"}
    wrong = detect.resolve_hardware(cell, {"ACCELGRID_HARDWARE": "ats-m"}, root=tmp_path)
    assert wrong.problem == ("xpu-2.13: hardware ats-m (declared) but this host's Intel GPUs "
                             "are pvc")
    unknown = detect.resolve_hardware(cell, {"ACCELGRID_HARDWARE": "atsm"}, root=tmp_path)
    assert unknown.problem is not None
    assert unknown.problem.startswith("xpu-2.13: ACCELGRID_HARDWARE=atsm is not a xpu hardware "
                                      "of the matrix (known: pvc, ats-m,")
    bad_driver = detect.resolve_hardware(cell, {"ACCELGRID_DRIVER": "beta"}, root=tmp_path)
    assert bad_driver.problem is not None
    assert "ACCELGRID_DRIVER=beta is not a xpu driver of the matrix (known: lts, rolling)" \
        in bad_driver.problem


def test_declared_hardware_without_detection_and_mixed_hosts(tmp_path: Path,
                                                             repo_matrix) -> None:
    cell = repo_matrix.cell("xpu-2.13")
    empty = tmp_path / "empty"
    empty.mkdir()
    declared = detect.resolve_hardware(cell, {"ACCELGRID_HARDWARE": "ats-m"}, root=empty)
    assert (declared.family, declared.how) == ("ats-m", "declared")   # e.g. SKIP_DETECT runs
    mixed = tmp_path / "mixed"
    fake_gpu(mixed, 128, 0x8086, 0x56C0)
    fake_gpu(mixed, 129, 0x8086, 0x0BD5)
    choice = detect.resolve_hardware(cell, {}, root=mixed)
    assert choice.family is None and choice.env(cell) == {}
    assert choice.note == ("mixed Intel GPU families (ats-m, pvc): no family's env applied; "
                           "declare one with ACCELGRID_HARDWARE")
    assert detect.resolve_hardware(cell, {"ACCELGRID_HARDWARE": "pvc"}, root=mixed).family == "pvc"
    # Devices without hardware families are not concerned.
    assert detect.resolve_hardware(repo_matrix.cell("cuda-2.11"),
                                   {"ACCELGRID_HARDWARE": "x"}) == detect.HardwareChoice()


def test_a_profile_value_wins_over_the_hardware(tmp_path: Path, repo_matrix) -> None:
    import dataclasses

    fake_gpu(tmp_path, 128, 0x8086, 0x56C1)
    cell = repo_matrix.cell("xpu-2.5")
    cell = dataclasses.replace(cell, env={**cell.env, "IGC_EnableDPEmulation": "0"})
    env = detect.resolve_hardware(cell, {}, root=tmp_path).env(cell)
    assert "IGC_EnableDPEmulation" not in env and env["OverrideDefaultFP64Settings"] == "1"


def test_pinned_cell_takes_the_hardware_label_and_refuses_other_hardware(tmp_path: Path) -> None:
    from accelgrid.config.matrix import load_matrix

    text = (Path(__file__).parents[1] / "base_matrix.yaml").read_text().replace(
        '    - {device: xpu, torch: "2.13", profile: fallback-debug}',
        '    - {device: xpu, torch: "2.13", profile: fallback-debug, hardware: ats-m, driver: lts}')
    (tmp_path / "m.yaml").write_text(text)
    matrix = load_matrix(tmp_path / "m.yaml")
    cell = matrix.cell("xpu-2.13-fallback-debug")
    assert (cell.hardware, cell.driver) == ("ats-m", "lts")
    assert cell.runner_labels == ("self-hosted", "intel-gpu", "intel-gpu-ats-m",
                                  "intel-driver-lts")
    assert matrix.cell("xpu-2.13").runner_labels == ("self-hosted", "intel-gpu")
    host = tmp_path / "host"
    fake_gpu(host, 128, 0x8086, 0x0BD5)
    assert detect.resolve_hardware(cell, {}, root=host).problem == (
        "xpu-2.13-fallback-debug: hardware ats-m (pinned) but this host's Intel GPUs are pvc")
    assert detect.resolve_hardware(cell, {"ACCELGRID_HARDWARE": "pvc"}, root=host).problem == (
        "xpu-2.13-fallback-debug: the cell is pinned to hardware ats-m, this runner declares pvc")
    atsm = tmp_path / "atsm"
    fake_gpu(atsm, 128, 0x8086, 0x56C0)
    choice = detect.resolve_hardware(cell, {}, root=atsm)
    assert (choice.family, choice.how, choice.driver) == ("ats-m", "pinned", "lts")


# --- XPU hosts as torch sees them ---------------------------------------------------------

@pytest.mark.parametrize("driver", ["xe", "i915"])
def test_flat_hierarchy_makes_each_stack_a_device(tmp_path: Path, driver: str) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x0BD5, tiles=2, driver=driver)   # a 2-stack Max 1550
    assert pci.intel_gpus(tmp_path)[0].tiles == 2
    flat = xpu.xpu_devices(tmp_path, {"ZE_FLAT_DEVICE_HIERARCHY": "FLAT"})
    assert [(d.index, d.tile, d.used) for d in flat] == [(0, 0, True), (1, 1, True)]
    assert len(xpu.xpu_devices(tmp_path, {})) == 2          # FLAT is Level Zero's default
    for mode in ("COMPOSITE", "COMBINED"):
        one = xpu.xpu_devices(tmp_path, {"ZE_FLAT_DEVICE_HIERARCHY": mode})
        assert [(d.index, d.tile) for d in one] == [(0, None)]


def test_integrated_gpu_is_dropped_beside_a_discrete_one_from_torch_27(tmp_path: Path) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x7D55)   # Meteor Lake iGPU (enumerated first)
    fake_gpu(tmp_path, 129, 0x8086, 0x56A0)   # Arc A770 (DG2)
    old = xpu.xpu_devices(tmp_path, {}, torch_version="2.6.0+xpu")
    assert [(d.gpu.family, d.used) for d in old] == [("mtl", True), ("arc", True)]
    new = xpu.xpu_devices(tmp_path, {}, torch_version="2.7.0+xpu")
    assert [(d.index, d.gpu.family, d.used) for d in new] == [(0, "mtl", False),
                                                              (1, "arc", True)]
    assert new[0].why_not == "integrated GPU beside a discrete one (torch >= 2.7)"
    # An iGPU alone is used.
    alone = tmp_path / "alone"
    fake_gpu(alone, 128, 0x8086, 0x7D55)
    assert [d.used for d in xpu.xpu_devices(alone, {}, torch_version="2.13")] == [True]
    inv = xpu.inventory(tmp_path, tools=False)
    assert inv["devices"]["count"] == 1
    assert inv["devices"]["not_used"] == [
        "renderD128: integrated GPU beside a discrete one (torch >= 2.7)"]


def test_an_intel_display_controller_of_no_family_is_not_an_xpu_host(tmp_path: Path) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x4680)   # Alder Lake UHD 770: no torch-xpu-ops family
    why = detect.absent_reason("xpu", XPU_RULE, root=tmp_path)
    assert why == ("xpu not present: PCI 0x8086:0x4680 at renderD128 is an Intel display "
                   "controller of no known GPU family (a UHD / Xe-LP iGPU torch-xpu-ops does "
                   "not target); set detect.unknown_family: true in matrix.yaml to count it")
    assert detect.absent_reason("xpu", XPU_RULE | {"unknown_family": True},
                                root=tmp_path) is None
    fake_gpu(tmp_path, 129, 0x8086, 0xE20B)   # plus an Arc B580: present
    assert detect.absent_reason("xpu", XPU_RULE, root=tmp_path) is None


def test_dgpu_and_igpu_host_keeps_the_dgpu_familys_env(tmp_path: Path, repo_matrix) -> None:
    fake_gpu(tmp_path, 128, 0x8086, 0x7D55)   # Meteor Lake iGPU
    fake_gpu(tmp_path, 129, 0x8086, 0x56A0)   # Arc A770: no native fp64
    cell = repo_matrix.cell("xpu-2.13")
    choice = detect.resolve_hardware(cell, {}, root=tmp_path)
    assert (choice.family, choice.how, choice.problem) == ("arc", "detected", None)
    assert choice.env(cell) == {"OverrideDefaultFP64Settings": "1", "IGC_EnableDPEmulation": "1",
                                "ACCELGRID_HARDWARE": "arc"}
    assert choice.note == ("integrated mtl beside it not used (torch >= 2.7 drops an "
                           "integrated GPU when a discrete one is present)")


def test_wsl2_gets_one_clear_line(tmp_path: Path) -> None:
    from helpers.fake_hosts import fake_wsl2

    fake_wsl2(tmp_path)
    why = detect.absent_reason("xpu", XPU_RULE, root=tmp_path)
    assert why is not None
    assert why.startswith("xpu not detected: WSL2 host (/dev/dxg, no /sys/class/drm): sysfs "
                          "cannot see its GPU")
    assert "\n" not in why and "ACCELGRID_HARDWARE" in why
    assert xpu.inventory(tmp_path, tools=False)["note"].startswith("WSL2 host")
    plain = tmp_path / "plain"
    plain.mkdir()
    why = detect.absent_reason("xpu", XPU_RULE, root=plain)
    assert why is not None and "WSL2" not in why
