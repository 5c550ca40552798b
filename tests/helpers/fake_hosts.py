"""Fake host trees for detection tests: DRM render nodes and the PCI devices behind them,
laid out as the kernel does (``ACCELGRID_HOST_ROOT`` / ``root=`` point detection at one)."""

from __future__ import annotations

from pathlib import Path

INTEL, NVIDIA, AMD = 0x8086, 0x10DE, 0x1002


def fake_gpu(root: Path, node: int, vendor: int, device: int, pci_class: int = 0x030000,
             dev_node: bool = True, tiles: int = 0, driver: str = "xe") -> None:
    """/sys/class/drm/renderD<node>/device -> a PCI device folder with vendor, device and
    class files (hex, newline-terminated), and /dev/dri/renderD<node> unless ``dev_node``
    is False (a container started without --device /dev/dri). ``tiles`` stacks as the
    kernel driver lists them: xe ``device/tile0..``, i915 ``device/drm/cardN/gt/gt0..``."""
    pci = root / "sys/devices/pci0000:00" / f"0000:{node - 100:02x}:00.0"
    pci.mkdir(parents=True)
    (pci / "vendor").write_text(f"{vendor:#06x}\n")
    (pci / "device").write_text(f"{device:#06x}\n")
    (pci / "class").write_text(f"{pci_class:#08x}\n")
    drm = root / "sys/class/drm" / f"renderD{node}"
    drm.mkdir(parents=True)
    (drm / "device").symlink_to(pci)
    if dev_node:
        (root / "dev/dri").mkdir(parents=True, exist_ok=True)
        (root / "dev/dri" / f"renderD{node}").write_text("")
    for t in range(tiles):
        if driver == "xe":
            (pci / f"tile{t}").mkdir()
        else:
            (pci / "drm" / f"card{node - 128}" / "gt" / f"gt{t}").mkdir(parents=True)


def fake_wsl2(root: Path) -> None:
    """A WSL2 guest: the GPU paravirtualization node /dev/dxg, no /sys/class/drm."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev/dxg").write_text("")
    (root / "sys/class").mkdir(parents=True, exist_ok=True)
