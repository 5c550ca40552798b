"""This host's GPUs as the kernel lists them in sysfs, without torch or a vendor tool, and
the Intel GPU families by PCI device id (xpu's hardware families).

Intel GPUs are found and named from sysfs alone (:func:`pci_gpus`, :func:`intel_gpus`):
``/sys/class/drm/renderD*/device/{vendor,device,class}``, with the render node present in
``/dev/dri``. That accepts the supported driver-only setup (no ``sycl-ls`` without oneAPI,
no ``xpu-smi`` on client GPUs), refuses an NVIDIA host that happens to have oneAPI, and
counts only Intel GPUs. Every function takes ``root`` (default ``$ACCELGRID_HOST_ROOT`` or
``/``), so tests run on a fake tree.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import contract

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


def wsl2_line(root: str | Path | None = None) -> str | None:
    """One line for a WSL2 host (``/dev/dxg``, no ``/sys/class/drm``): its GPU is reached
    through the WSL GPU paravirtualization, which sysfs cannot see; else None."""
    base = host_root(root)
    if (base / "dev/dxg").exists() and not (base / "sys/class/drm").is_dir():
        return ("WSL2 host (/dev/dxg, no /sys/class/drm): sysfs cannot see its GPU; an Intel "
                f"GPU is used through WSL's GPU driver: declare {contract.HARDWARE} and run "
                "the xpu cell by name (torch.xpu.is_available() decides in the cell)")
    return None


def vendor_problem(device: str, vendor: int, root: str | Path | None = None,
                   unknown_family: bool = False) -> str | None:
    """matrix.yaml's ``detect.pci_vendor`` rule: None when a usable GPU of ``vendor`` is
    here, else one line saying why ``device`` is not (an Intel display controller of no
    known family counts only with ``unknown_family``)."""
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
