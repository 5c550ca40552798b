"""matrix.yaml validation: the real matrix is valid; each bad matrix gives its exact errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelgrid.matrix import load_matrix
from accelgrid.validation import ValidationFailed

CORPUS = Path(__file__).parent / "bad_matrices"
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())


def test_repo_matrix_is_valid(root: Path) -> None:
    matrix = load_matrix(root / "matrix.yaml")
    assert len(matrix.cells) >= 20


def test_base_matrix_is_valid() -> None:
    matrix = load_matrix(Path(__file__).parent / "base_matrix.yaml")
    assert [c.name for c in matrix.cells] == [
        "cpu-2.4", "cpu-2.13", "xpu-2.4", "xpu-2.13", "xpu-2.13-fallback-debug"]


def test_every_corpus_file_has_expectations() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml")
    assert files == sorted(EXPECTED), "add the expected messages of new bad matrices"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_matrix_exact_messages(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    with pytest.raises(ValidationFailed) as info:
        load_matrix(name)
    assert str(info.value).splitlines() == EXPECTED[name]


@pytest.mark.parametrize("name", ["unknown_key.yaml", "yaml_syntax.yaml"])
def test_cli_prints_errors_without_traceback(name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate", name], cwd=CORPUS,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == EXPECTED[name]


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "validate",
                           str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"
