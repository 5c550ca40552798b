"""The generic validator (accelgrid.validation): YAML with line numbers, schema problems as
``FILE:LINE: key: message`` lines with suggestions, and the schema files shipped in the
package. matrix.yaml's own checks are in test_matrix.py, the registry's in
test_known_issues.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate",
                           str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"
