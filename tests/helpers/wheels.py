"""Tiny fake torch wheels, a local simple index and a local "PyPI", and a nox install of a
one-cell project against them."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path


def fake_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal valid wheel of ``name`` ``version`` (a module saying which build it is)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n"
                                                         for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                   "true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    whl = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return whl


def simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 index (file://) holding ``wheels``."""
    for whl in wheels:
        project = root / whl.name.split("-")[0].replace("_", "-")
        project.mkdir(parents=True, exist_ok=True)
        (project / whl.name).write_bytes(whl.read_bytes())
        links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in project.glob("*.whl"))
        (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def nox_install_only(proj: Path, pypi: Path, cell: str = "cpu-2.4") -> subprocess.CompletedProcess:
    # The "PyPI" of this test: find-links with a CUDA build of torch 2.4.1 (and its
    # NVIDIA dependency) before the host's own configuration (the test tooling's wheels).
    env = {**os.environ, "ACCELGRID_RESULTS_DIR": str(proj / "results"),
           "PIP_FIND_LINKS": " ".join(filter(None, (str(pypi),
                                                    os.environ.get("PIP_FIND_LINKS"))))}
    env.pop("ACCELGRID_TORCH_INDEX", None)
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"),
                           "-s", cell, "--install-only"], cwd=proj, capture_output=True,
                          text=True, timeout=600, env=env)


def installed_torch(proj: Path, cell: str = "cpu-2.4") -> list[str]:
    site = next((proj / ".nox" / cell.replace(".", "-")).glob("lib/python*/site-packages"))
    return sorted(p.name for p in site.glob("torch-*.dist-info")) + sorted(
        p.name for p in site.glob("nvidia*.dist-info"))


def fake_pypi(folder: Path) -> Path:
    """A local "PyPI" holding only a CUDA build of torch 2.4.1 and its NVIDIA dependency."""
    fake_wheel(folder, "torch", "2.4.1", ("nvidia-fake-cu12==12.1",))
    fake_wheel(folder, "nvidia-fake-cu12", "12.1")
    return folder
