"""Is a device present on this host? Answered from matrix.yaml's ``detect`` rules,
without importing torch (so it is cheap and works before anything is installed).

Rules (all given ones must hold): ``always``; ``system`` / ``machine`` (platform);
``paths_any`` (any glob matches); ``commands_any`` (any command on PATH that runs
successfully, e.g. ``nvidia-smi``); ``pci_vendor`` (a display-class PCI device of that
vendor behind a DRM render node, e.g. ``"0x8086"`` for Intel GPUs).

Intel GPUs are found and named from sysfs alone (:func:`pci_gpus`, :func:`intel_gpus`):
``/sys/class/drm/renderD*/device/{vendor,device,class}``, with the render node present in
``/dev/dri``. That accepts the supported driver-only setup (no ``sycl-ls`` without oneAPI,
no ``xpu-smi`` on client GPUs), refuses an NVIDIA host that happens to have oneAPI, and
counts only Intel GPUs. ``sycl-ls`` / ``xpu-smi`` only enrich :func:`xpu_inventory` when
present. Every sysfs function takes ``root`` (default ``$ACCELGRID_HOST_ROOT`` or ``/``),
so tests run on a fake tree.

The Deep Learning Essentials check for torch series whose wheels do not bring the SYCL
runtime is :func:`runtime_problem`.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import devices
from ..base import contract
from ..config.matrix import Cell

INTEL = 0x8086
DISPLAY_CLASS = 0x03   # PCI base class "display controller" (class 0x03xxxx)

# Intel GPU families by PCI device id, from the Linux kernel's include/drm/intel/pciids.h
# (torvalds/linux at 0755a4e3e809610a14befc9ad28d35e2e460da68: INTEL_PVC_IDS,
# INTEL_ATS_M_IDS, INTEL_DG2_IDS, INTEL_BMG_IDS, INTEL_LNL_IDS, INTEL_MTL_IDS, INTEL_ARL_IDS,
# INTEL_PTL_IDS). Family keys are the names torch-xpu-ops' CI uses for its runners and
# per-hardware skip lists (pvc, bmg, lnl, arc, mtl); matrix.yaml's devices.xpu.hardware
# and known_issues.yaml's scope.hardware use them (the schema's enum, tests check).
FAMILIES: dict[str, tuple[str, frozenset[int]]] = {
    "pvc": ("Intel Data Center GPU Max (Ponte Vecchio)", frozenset({
        0x0B69, 0x0B6E, 0x0BD4, 0x0BD5, 0x0BD6, 0x0BD7, 0x0BD8, 0x0BD9, 0x0BDA, 0x0BDB,
        0x0BE0, 0x0BE1, 0x0BE5})),
    "ats-m": ("Intel Data Center GPU Flex (ATS-M)", frozenset({0x56C0, 0x56C2, 0x56C1})),
    "arc": ("Intel Arc A-series (Alchemist, DG2)", frozenset({
        0x56A0, 0x56A1, 0x56A2, 0x56BE, 0x56BF, 0x5690, 0x5691, 0x5692,      # G10
        0x56A5, 0x56A6, 0x56B0, 0x56B1, 0x56BA, 0x56BB, 0x56BC, 0x56BD,      # G11
        0x5693, 0x5694, 0x5695,
        0x56A3, 0x56A4, 0x56B2, 0x56B3, 0x5696, 0x5697})),                    # G12
    "bmg": ("Intel Arc B-series (Battlemage)", frozenset({
        0xE202, 0xE209, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE216,
        0xE220, 0xE221, 0xE222, 0xE223})),
    "lnl": ("Intel Core Ultra 200V graphics (Lunar Lake)", frozenset({0x6420, 0x64A0, 0x64B0})),
    "mtl": ("Intel Core Ultra graphics (Meteor Lake)", frozenset({
        0x7D40, 0x7D45, 0x7D55, 0x7D60, 0x7DD5})),
    "arl": ("Intel Core Ultra 200H/U/S graphics (Arrow Lake)", frozenset({
        0x7D51, 0x7DD1, 0x7D41, 0x7D67, 0xB640})),
    "ptl": ("Intel Core Ultra series 3 graphics (Panther Lake)", frozenset({
        0xB080, 0xB081, 0xB082, 0xB083, 0xB084, 0xB085, 0xB086, 0xB087, 0xB08F, 0xB090,
        0xB0A0, 0xB0B0})),
}
_FAMILY_OF = {pci_id: name for name, (_, ids) in FAMILIES.items() for pci_id in ids}
# Discrete cards; the rest (mtl, lnl, arl, ptl, and an Intel display controller of no
# known family: a plain UHD / Xe-LP iGPU) are integrated.
DISCRETE = frozenset({"pvc", "ats-m", "arc", "bmg"})
# From torch 2.7 torch.xpu drops integrated GPUs when a discrete one is present
# (pytorch/pytorch#144378), after Level Zero enumerated them.
DROPS_INTEGRATED_FROM = (2, 7)
FLAT_HIERARCHY = "ZE_FLAT_DEVICE_HIERARCHY"


def family_of(pci_device: int) -> str | None:
    """The Intel GPU family of a PCI device id (``0x56c0`` -> ``"ats-m"``), or None."""
    return _FAMILY_OF.get(pci_device)


def host_root(root: str | Path | None = None) -> Path:
    """The filesystem root holding sys/ and dev/: ``root``, else $ACCELGRID_HOST_ROOT, else /."""
    return Path(root if root is not None else os.environ.get(contract.HOST_ROOT) or "/")


@dataclass(frozen=True)
class PciGpu:
    """A DRM render node and the PCI device behind it."""

    node: str            # "renderD128"
    vendor: int
    device: int
    pci_class: int
    dev_node: bool       # /dev/dri/<node> exists (a container without --device lacks it)
    tiles: int = 1       # stacks (xe: device/tile*; i915: device/drm/card*/gt/gt*)

    @property
    def family(self) -> str | None:
        return family_of(self.device) if self.vendor == INTEL else None

    @property
    def discrete(self) -> bool:
        return self.family in DISCRETE

    @property
    def name(self) -> str:
        if self.family:
            return FAMILIES[self.family][0]
        return f"PCI {self.vendor:#06x}:{self.device:#06x}"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "pci_id": f"{self.vendor:04x}:{self.device:04x}",
                "family": self.family, "name": self.name, "tiles": self.tiles,
                "discrete": self.discrete}


def _hex_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError):
        return None


def _node_number(path: str) -> int:
    m = re.search(r"(\d+)$", path)
    return int(m[1]) if m else 0


def pci_gpus(root: str | Path | None = None) -> list[PciGpu]:
    """Every display-class PCI device behind a DRM render node, in render-node order."""
    base = host_root(root)
    found = []
    for path in sorted(glob.glob(str(base / "sys/class/drm/renderD*")), key=_node_number):
        device = Path(path) / "device"
        vendor, pci_id, pci_class = (_hex_file(device / n) for n in ("vendor", "device", "class"))
        if vendor is None or pci_id is None or pci_class is None:
            continue
        if pci_class >> 16 != DISPLAY_CLASS:
            continue
        node = Path(path).name
        found.append(PciGpu(node, vendor, pci_id, pci_class, (base / "dev/dri" / node).exists(),
                            _tiles(device)))
    return found


def _tiles(device: Path) -> int:
    """The stacks of a card as its kernel driver lists them (xe: ``tile0``, ``tile1`` in
    the PCI device folder; i915: ``drm/card*/gt/gt0``, ``gt1``); 1 where neither says."""
    xe = glob.glob(str(device / "tile[0-9]*"))
    i915 = glob.glob(str(device / "drm/card*/gt/gt[0-9]*"))
    return max(len(xe), len(i915), 1)


def intel_gpus(root: str | Path | None = None, unknown_family: bool = True) -> list[PciGpu]:
    """The Intel GPUs of this host (usable ones: their /dev/dri node exists); without
    ``unknown_family``, only those of a known family (:data:`FAMILIES`)."""
    return [g for g in pci_gpus(root) if g.vendor == INTEL and g.dev_node
            and (unknown_family or g.family)]


@dataclass(frozen=True)
class XpuDevice:
    """One device as Level Zero enumerates it, and whether torch uses it."""

    index: int           # Level Zero's number (ZE_AFFINITY_MASK's)
    gpu: PciGpu
    tile: int | None     # the stack, where FLAT makes each stack a device
    used: bool           # torch.xpu counts it
    why_not: str = ""


def _version_tuple(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m[1]), int(m[2])) if m else None


def xpu_devices(root: str | Path | None = None, env: Mapping[str, str] | None = None,
                torch_version: str | None = None) -> list[XpuDevice]:
    """The devices torch.xpu would see here, from sysfs: with ``ZE_FLAT_DEVICE_HIERARCHY``
    FLAT (Level Zero's default, and matrix.yaml's) each stack of a multi-stack card (a
    2-stack Max 1550) is a device, with COMPOSITE / COMBINED each card is one; from torch
    2.7 (``torch_version``; None: the newest) integrated GPUs are dropped when a discrete
    one is present. In a cell, ``torch.xpu.device_count()`` is the authority: this is what
    the host says before torch is installed."""
    env = os.environ if env is None else env
    flat = (env.get(FLAT_HIERARCHY) or "FLAT").strip().upper() == "FLAT"
    gpus = intel_gpus(root)
    version = _version_tuple(torch_version)
    drop = any(g.discrete for g in gpus) and (version is None or version >= DROPS_INTEGRATED_FROM)
    out: list[XpuDevice] = []
    for g in gpus:
        for tile in (range(g.tiles) if flat and g.tiles > 1 else [None]):
            used = g.discrete or not drop
            why = "" if used else "integrated GPU beside a discrete one (torch >= 2.7)"
            out.append(XpuDevice(len(out), g, tile, used, why))
    return out


def wsl2_line(root: str | Path | None = None) -> str | None:
    """One line for a WSL2 host (``/dev/dxg``, no ``/sys/class/drm``): its GPU is reached
    through the WSL GPU paravirtualization, which sysfs cannot see; else None."""
    base = host_root(root)
    if (base / "dev/dxg").exists() and not (base / "sys/class/drm").is_dir():
        return ("WSL2 host (/dev/dxg, no /sys/class/drm): sysfs cannot see its GPU; an Intel "
                f"GPU is used through WSL's GPU driver: declare {contract.HARDWARE} and run "
                "the xpu cell by name (torch.xpu.is_available() decides in the cell)")
    return None


def _command_works(command: str) -> bool:
    exe = shutil.which(command)
    if not exe:
        return False
    try:
        return subprocess.run([exe], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def absent_reason(device: str, rules: Mapping[str, Any], root: str | Path | None = None
                  ) -> str | None:
    """None when the device is present, else a one-line reason it is not (``root``: see
    :func:`host_root`)."""
    if rules.get("always"):
        return None
    system = rules.get("system")
    if system and platform.system() != system:
        return f"{device} needs a {system} host, this is {platform.system()}"
    machine = rules.get("machine")
    if machine and platform.machine().lower() not in (machine.lower(), _alias(machine)):
        return f"{device} needs a {machine} machine, this is {platform.machine()}"
    paths = rules.get("paths_any") or []
    if paths and not any(glob.glob(p) for p in paths):
        return f"{device} not present: none of {', '.join(paths)} exists"
    commands = rules.get("commands_any") or []
    if commands and not any(_command_works(c) for c in commands):
        return f"{device} not present: none of {', '.join(commands)} is on PATH and working"
    vendor = rules.get("pci_vendor")
    if vendor:
        return _pci_vendor_problem(device, int(str(vendor), 16), root,
                                   bool(rules.get("unknown_family")))
    return None


def _pci_vendor_problem(device: str, vendor: int, root: str | Path | None,
                        unknown_family: bool = False) -> str | None:
    gpus = [g for g in pci_gpus(root) if g.vendor == vendor]
    where = host_root(root) / "sys/class/drm/renderD*"
    if not gpus:
        wsl = wsl2_line(root)
        if wsl:
            return f"{device} not detected: {wsl}"
        return f"{device} not present: no GPU of PCI vendor {vendor:#06x} under {where}"
    if vendor == INTEL and not unknown_family and not any(g.family for g in gpus):
        g = gpus[0]
        return (f"{device} not present: {g.name} at {g.node} is an Intel display controller "
                "of no known GPU family (a UHD / Xe-LP iGPU torch-xpu-ops does not target); "
                "set detect.unknown_family: true in matrix.yaml to count it")
    if not any(g.dev_node for g in gpus):
        return (f"{device} not present: {gpus[0].name} at {gpus[0].node} but "
                f"{host_root(root) / 'dev/dri' / gpus[0].node} is missing "
                "(in a container: pass --device /dev/dri)")
    return None


def _alias(machine: str) -> str:
    return {"arm64": "aarch64", "aarch64": "arm64", "x64": "x86_64"}.get(machine.lower(), "")


def present_devices(devices: dict[str, Any]) -> list[str]:
    """Names of the matrix's devices present here (``devices``: name -> Device)."""
    return [name for name, dev in devices.items() if absent_reason(name, dev.detect) is None]


def _library_on_path(name: str, search_path: str) -> bool:
    return any(d and (Path(d) / name).exists() for d in search_path.split(os.pathsep))


def runtime_problem(cell: Cell, env: Mapping[str, str] | None = None) -> str | None:
    """One line when ``cell``'s torch needs a runtime bundle (``devices.<d>.runtime``) that
    is not sourced in ``env`` (default: this process's environment), else None. Sourced
    means: the check variable is set and the check library is in an LD_LIBRARY_PATH
    folder, as the bundle's env script leaves them. ``ACCELGRID_SKIP_RUNTIME_CHECK=1``
    skips it."""
    rt = cell.runtime
    if rt is None or rt.from_wheels:
        return None
    env = os.environ if env is None else env
    if env.get(contract.SKIP_RUNTIME_CHECK) == "1":
        return None
    why = None
    if rt.check_env and not env.get(rt.check_env):
        why = f"{rt.check_env} is not set"
    elif rt.check_library and not _library_on_path(rt.check_library,
                                                   env.get("LD_LIBRARY_PATH", "")):
        why = f"{rt.check_library} is not on LD_LIBRARY_PATH"
    if why is None:
        return None
    scripts = " && ".join(f"source {script}" for script in rt.env_scripts)
    torch = cell.torch_requirement.removeprefix("torch==")
    return (f"{cell.name}: torch {torch} needs {rt.name} {rt.version} installed and "
            f"sourced: {scripts} ({why}; see docs/xpu.md)")


@dataclass(frozen=True)
class HardwareChoice:
    """Which hardware family and driver stack a cell runs on here, and how that is known."""

    family: str | None = None
    driver: str | None = None
    how: str = ""                        # "declared", "pinned" or "detected" (family)
    detected: tuple[str, ...] = ()       # the families of this host's Intel GPUs
    problem: str | None = None           # one line: a declaration that cannot be right
    note: str = ""                       # e.g. mixed families: none applied

    def env(self, cell: Cell) -> dict[str, str]:
        """The env the family and driver add to ``cell`` (its profile's own values win),
        with ACCELGRID_HARDWARE / ACCELGRID_DRIVER for the records."""
        out: dict[str, str] = {}
        for table, key in ((cell.hardware_env, self.family), (cell.driver_env, self.driver)):
            out.update(table.get(key or "", {}))
        out = {k: v for k, v in out.items() if k not in cell.env}
        if self.family:
            out[contract.HARDWARE] = self.family
        if self.driver:
            out[contract.DRIVER] = self.driver
        return out

    def describe(self) -> str:
        if not self.family and not self.driver:
            return self.note or "hardware not known"
        parts = []
        if self.family:
            parts.append(f"hardware {self.family} ({self.how})")
        if self.driver:
            parts.append(f"driver {self.driver}")
        return ", ".join(parts) + (f"; {self.note}" if self.note else "")


def resolve_hardware(cell: Cell, env: Mapping[str, str] | None = None,
                     root: str | Path | None = None) -> HardwareChoice:
    """The hardware family ``cell`` runs on here: the runner's declaration
    (``ACCELGRID_HARDWARE``), else the cell's pin (an include rule's ``hardware:``), else
    the one family of this host's Intel GPUs; and the driver stack (``ACCELGRID_DRIVER``,
    else the pin). A declaration or pin that is unknown, that contradicts the other, or
    that this host's GPUs contradict is a ``problem``. Devices without hardware families
    (``devices.<d>.hardware``) get an empty choice."""
    if not cell.hardware_env and not cell.driver_env:
        return HardwareChoice()
    env = os.environ if env is None else env
    declared = env.get(contract.HARDWARE) or None
    declared_driver = env.get(contract.DRIVER) or None
    for kind, value, table in (("hardware", declared, cell.hardware_env),
                               ("driver", declared_driver, cell.driver_env)):
        if value and value not in table:
            var = contract.HARDWARE if kind == "hardware" else contract.DRIVER
            return HardwareChoice(problem=(
                f"{cell.name}: {var}={value} is not a {cell.device} {kind} of the matrix "
                f"(known: {', '.join(table) or 'none'})"))
    for kind, value, pin in (("hardware", declared, cell.hardware),
                             ("driver", declared_driver, cell.driver)):
        if value and pin and value != pin:
            return HardwareChoice(problem=(
                f"{cell.name}: the cell is pinned to {kind} {pin}, this runner declares {value}"))
    detected = tuple(dict.fromkeys(g.family for g in intel_gpus(root) if g.family)) \
        if cell.device == "xpu" else ()
    family, how, note = declared or cell.hardware, "declared" if declared else "pinned", ""
    if family and detected and family not in detected:
        return HardwareChoice(detected=detected, problem=(
            f"{cell.name}: hardware {family} ({how}) but this host's Intel GPUs are "
            f"{', '.join(detected)}"))
    discrete = tuple(f for f in detected if f in DISCRETE)
    if not family and len(detected) == 1:
        family, how = detected[0], "detected"
    elif not family and len(discrete) == 1:
        # A dGPU beside an iGPU: torch >= 2.7 drops the iGPU; the dGPU's env applies.
        family, how = discrete[0], "detected"
        note = (f"integrated {', '.join(f for f in detected if f not in DISCRETE)} beside it "
                "not used (torch >= 2.7 drops an integrated GPU when a discrete one is present)")
    elif not family and len(detected) > 1:
        how, note = "", (f"mixed Intel GPU families ({', '.join(detected)}): no family's env "
                         f"applied; declare one with {contract.HARDWARE}")
    return HardwareChoice(family if family in cell.hardware_env else None,
                          declared_driver or cell.driver, how if family else "", detected,
                          None, note)


# How a process is pinned to some of the host's devices (set before torch is imported):
# each device module's visibility_var (accelgrid.devices).
VISIBILITY_VAR = {d.name: d.visibility_var for d in devices.BUILTIN if d.visibility_var}

# What hides every accelerator from a cpu cell's tests (set before torch is imported), so
# code that picks its device from what the host has (torchao's CPUOffloadOptimizer) sees a
# CPU-only host, as the cell claims: each device module's ``hide`` (MPS has none).
HIDE_ACCELERATORS = devices.hidden_accelerators()


def _nvidia_ids() -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _xpu_ids() -> list[str]:
    # Level Zero's numbering (ZE_AFFINITY_MASK's): every stack under FLAT; an integrated
    # GPU beside a discrete one is left out (torch >= 2.7 would not use it).
    return [str(d.index) for d in xpu_devices() if d.used]


def _tool_lines(cmd: list[str], keep: str = "") -> list[str]:
    exe = shutil.which(cmd[0])
    if not exe:
        return []
    try:
        out = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=60,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip() and keep in ln][:32]


def xpu_inventory(root: str | Path | None = None, tools: bool = True) -> dict[str, Any]:
    """What this host has for xpu cells: its Intel GPUs from sysfs (node, PCI id, family,
    name), and, when installed, what ``sycl-ls`` and ``xpu-smi discovery`` say."""
    report: dict[str, Any] = {"gpus": [g.as_dict() for g in intel_gpus(root)]}
    devices = xpu_devices(root)
    report["devices"] = {"count": sum(1 for d in devices if d.used),
                         FLAT_HIERARCHY: os.environ.get(FLAT_HIERARCHY) or "FLAT (default)",
                         "not_used": [f"{d.gpu.node}: {d.why_not}" for d in devices
                                      if not d.used]}
    wsl = wsl2_line(root)
    if wsl:
        report["note"] = wsl
    if tools:
        report["sycl-ls"] = _tool_lines(["sycl-ls"], "level_zero")
        report["xpu-smi"] = _tool_lines(["xpu-smi", "discovery"])
    return report


# device -> how to enumerate its devices on this host without importing torch.
DEVICE_IDS = {"cuda": _nvidia_ids, "xpu": _xpu_ids, "default": lambda: []}

# What the cell's own torch counts, run with the cell's env (its ZE_FLAT_DEVICE_HIERARCHY,
# ONEAPI_DEVICE_SELECTOR...): the authority for how many devices its tests see. A torch
# built without XPU (torch.xpu._is_compiled(), in every series from 2.4) cannot say: it
# prints no number and the next source answers.
TORCH_XPU_COUNT = ("import torch; print(torch.xpu.device_count() if torch.xpu._is_compiled()"
                   " else 'torch built without XPU')")
# One sycl-ls line per device, "[backend:type][backend:N] platform, device version [driver]"
# (e.g. "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Arc(TM) A770
# Graphics 1.3 [1.3.29735]", intel/intel-extension-for-pytorch#702); Level Zero GPUs only,
# as torch enumerates them.
_SYCL_LS_L0_GPU = re.compile(r"^\s*\[(?:ext_oneapi_)?level_zero:gpu[\]:]")


def sycl_ls_gpus(text: str) -> list[str]:
    """The Level Zero GPU lines of ``sycl-ls`` output (OpenCL and CPU lines left out)."""
    return [ln.strip() for ln in text.splitlines() if _SYCL_LS_L0_GPU.match(ln)]


def _run_count(cmd: list[str], env: Mapping[str, str]) -> tuple[int | None, str]:
    """(stdout's last line as an int, or None; why not) of ``cmd`` run with ``env``."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                              env=dict(env), check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{cmd[0]} did not run: {exc}"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines or not lines[-1].strip().isdigit():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        last = lines[-1][:200] if lines and not proc.returncode else last
        return None, f"exit {proc.returncode}: {last}"
    return int(lines[-1]), ""


def cell_xpu_ids(python: str | None, env: Mapping[str, str] | None = None,
                 root: str | Path | None = None, torch_version: str | None = None
                 ) -> tuple[list[str], str]:
    """The xpu device ids a cell's tests will see, and one line saying how that is known:
    ``torch.xpu.device_count()`` run by the cell env's ``python`` with the cell's ``env``;
    else the Level Zero GPUs ``sycl-ls`` lists in that env (less the integrated ones
    torch >= 2.7 drops beside a discrete GPU, :func:`xpu_devices`); else sysfs alone.
    Where the count agrees with sysfs, sysfs's Level Zero numbering is kept (an iGPU's
    index stays skipped); where it differs, the count wins (ids 0..N-1), said so."""
    env = dict(os.environ if env is None else env)
    sysfs = xpu_devices(root, env, torch_version)
    used = [str(d.index) for d in sysfs if d.used]
    count, how = None, ""
    if python:
        count, why = _run_count([str(python), "-c", TORCH_XPU_COUNT], env)
        how = (f"torch.xpu.device_count() in the cell env: {count}" if count is not None
               else f"torch.xpu.device_count() in the cell env: no count ({why})")
    if count is None:
        exe = shutil.which("sycl-ls", path=env.get("PATH"))
        if exe:
            try:
                out = subprocess.run([exe], capture_output=True, text=True, timeout=60,
                                     env=env, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                out = None
            if out is not None:
                dropped = sum(1 for d in sysfs if not d.used)
                count = max(len(sycl_ls_gpus(out)) - dropped, 0)
                how = ((how + "; " if how else "") + f"sycl-ls: {len(sycl_ls_gpus(out))} "
                       "Level Zero GPUs" + (f", {dropped} integrated dropped" if dropped
                                            else ""))
    if count is None:
        return used, ((how + "; " if how else "") + f"sysfs: {len(used)} devices")
    if count == len(used):
        return used, how + " (sysfs agrees)"
    return [str(i) for i in range(count)], how + f" (sysfs sees {len(used)}: the count wins)"


def _nvidia_memory_gib() -> list[float]:
    lines = _tool_lines(["nvidia-smi", "--query-gpu=memory.total",
                         "--format=csv,noheader,nounits"])
    try:
        return [round(float(x) / 1024, 1) for x in lines]  # MiB
    except ValueError:
        return []


# device -> each device's memory in GiB, in device_ids' order, read without importing
# torch; [] where the host cannot say (then the runner shares a device less widely).
DEVICE_MEMORY = {"cuda": _nvidia_memory_gib, "default": lambda: []}


def device_memory_gib(device: str) -> list[float]:
    """The memory of each of ``device``'s devices on this host, in GiB ([] if unknown)."""
    return DEVICE_MEMORY.get(device, DEVICE_MEMORY["default"])()


def device_ids(device: str, env: dict[str, str] | None = None,
               python: str | None = None, torch_version: str | None = None) -> list[str]:
    """The ids of ``device``'s devices usable here (:func:`device_ids_how`)."""
    return device_ids_how(device, env, python, torch_version)[0]


def device_ids_how(device: str, env: dict[str, str] | None = None,
                   python: str | None = None, torch_version: str | None = None
                   ) -> tuple[list[str], str]:
    """The ids of ``device``'s devices usable here, in the numbering its visibility
    variable uses, and how they are known. ``ACCELGRID_DEVICES=0,2`` picks a subset; an
    already-set ``CUDA_VISIBLE_DEVICES`` / ``ZE_AFFINITY_MASK`` limits the choice to
    those. For xpu with the cell env's ``python`` the count comes from that env
    (:func:`cell_xpu_ids`)."""
    env = dict(os.environ if env is None else env)
    chosen = env.get(contract.DEVICES)
    if chosen:
        return [x.strip() for x in chosen.split(",") if x.strip()], f"{contract.DEVICES}"
    var = VISIBILITY_VAR.get(device)
    if var and env.get(var):
        return [x.strip() for x in env[var].split(",") if x.strip()], var
    if device == "xpu" and python:
        return cell_xpu_ids(python, env, torch_version=torch_version)
    return DEVICE_IDS.get(device, DEVICE_IDS["default"])(), "the host's tools"
