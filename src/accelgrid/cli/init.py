"""``accelgrid init``: matrix.yaml, noxfile.py, an example test and CI files in a repository."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..commands import ci, init


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "init", help="set up accelgrid in this repository (matrix, noxfile, example, CI)",
        description="Write matrix.yaml (the devices asked for, the newest torch series "
                    "accelgrid knows and its pins), noxfile.py, an example test "
                    f"({init.EXAMPLE}), the CI files ({', '.join(ci.OUTPUTS)}) and "
                    f".gitignore entries ({' '.join(init.IGNORED)}). Refuses (exit 2, "
                    "naming them) when any of these files exists, unless --force.")
    p.add_argument("--devices", default="cpu",
                   help=f"comma-separated, some of {','.join(init.DEVICES)} "
                        "(default: %(default)s)")
    p.add_argument("--torch", metavar="SERIES",
                   help="the torch series (default: the newest accelgrid knows)")
    p.add_argument("--root", type=Path, default=Path("."),
                   help="the repository (default: the current folder)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=_init)


def _init(args: argparse.Namespace) -> int:
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    for written in init.init(args.root, devices, series=args.torch, force=args.force):
        print(f"{written.path}: {written.how}")
    print("next: nox -l (the cells), then nox -s CELL or accelgrid run CELL")
    return 0
