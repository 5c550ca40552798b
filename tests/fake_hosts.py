"""Fake host trees for detection tests: DRM render nodes and the PCI devices behind them,
laid out as the kernel does (``ACCELGRID_HOST_ROOT`` / ``root=`` point detection at one)."""

from __future__ import annotations

from pathlib import Path

INTEL, NVIDIA, AMD = 0x8086, 0x10DE, 0x1002


def fake_gpu(root: Path, node: int, vendor: int, device: int, pci_class: int = 0x030000,
             dev_node: bool = True) -> None:
    """/sys/class/drm/renderD<node>/device -> a PCI device folder with vendor, device and
    class files (hex, newline-terminated), and /dev/dri/renderD<node> unless ``dev_node``
    is False (a container started without --device /dev/dri)."""
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
