"""Shard folders as a sharded run writes them, and reading them back."""

from __future__ import annotations

from pathlib import Path

from accelgrid.base import contract
from accelgrid.results import shards

INPUTS = {"torch": "2.13.0+cpu", "torch_local": "cpu", "packages": {"numpy": "2.3.0"},
          "commit": "c1", "dirty": False, "matrix_digest": "m1", "flags": {}}


def shard_folder(root: Path, k: int, n: int, tests: dict[str, str], folder: str | None = None,
           **inputs: object) -> Path:
    """A shard's folder as a run writes it: env.json naming the shard, records, a plan."""
    from helpers.report_cases import write_cell

    from accelgrid.base import jsonio

    cell = write_cell(root / (folder or shards.folder_name(k, n)), "cpu-2.13", tests,
                      env={contract.SHARD: f"{k}/{n}"})
    jsonio.write_json(cell / contract.PLAN_FILE, {
        "run_id": None, "cell": "cpu-2.13", "shard": f"{k}/{n}",
        "inputs": {**INPUTS, **inputs}, "passes": [{"name": "single"}]})
    return cell


def discover_cells(root: Path) -> list[Path]:
    from accelgrid.results import cellresults

    return cellresults.discover([root])[0]


def read(path: Path):
    from accelgrid.results import cellresults

    return cellresults.read_cell(path)
