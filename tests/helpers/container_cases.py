"""A project copy for the container tests, and where hadolint is."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

HADOLINT = shutil.which("hadolint", path=os.pathsep.join(
    [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def project_copy(tmp_path: Path) -> Path:
    """A copy of the project's matrix, templates and pyproject, with tiny suites/src."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "matrix.yaml", proj / "matrix.yaml")
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    shutil.copytree(ROOT / "containers", proj / "containers")
    # Every suite the matrix names (read from it: a suite added there needs no edit here).
    for suite in yaml.safe_load((ROOT / "matrix.yaml").read_text())["suites"].values():
        (proj / suite["path"]).mkdir(parents=True)
        (proj / suite["path"] / "test_x.py").write_text("def test_x():\n    pass\n")
    (proj / "src" / "accelgrid").mkdir(parents=True)
    (proj / "src" / "accelgrid" / "__init__.py").write_text("")
    return proj
