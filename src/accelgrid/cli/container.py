"""``accelgrid container render|tag|build|run``: a cell's image, and the cell inside it."""

from __future__ import annotations

import argparse
import os
import sys

import jinja2

from ..base import contract
from ..base.errors import InvalidInput
from ..commands import containers
from ._common import matrix_of

ACTIONS = {
    "render": "print the cell's Containerfile",
    "tag": "print the image tag (accelgrid/<cell>:<hash12>)",
    "build": "build the cell's image (nothing to do when up to date)",
    "run": "build if needed, then run the cell in its image (pytest args after --)",
}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("container", parents=[common], help="build a cell's container image",
                           description="Build a cell's container image and run the cell "
                                       "inside it.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in ACTIONS.items():
        p = actions.add_parser(action, parents=[common], help=text)
        p.add_argument("cell")
        # Defaults from the environment so nox sessions and CI can set them once.
        p.add_argument("--base", metavar="IMAGE",
                       default=os.environ.get(contract.CONTAINER_BASE) or None,
                       help="build on IMAGE instead of the matrix's digest-pinned base "
                            f"(offline: a local image; default ${contract.CONTAINER_BASE})")
        if action in ("build", "run"):
            p.add_argument("--engine", choices=containers.ENGINES,
                           default=os.environ.get(contract.CONTAINER_ENGINE) or None,
                           help=f"use this engine (default: ${contract.CONTAINER_ENGINE}, else "
                                "the first of docker, podman, buildah that answers)")
            p.add_argument("--isolation", choices=("chroot", "oci", "rootless"),
                           default=os.environ.get("BUILDAH_ISOLATION") or None,
                           help="podman/buildah build isolation (default: $BUILDAH_ISOLATION "
                                "or the engine's)")
        p.set_defaults(func=_container)
        if action == "run":
            p.set_defaults(passthrough="pytest_args")


def _container(args: argparse.Namespace) -> int:
    try:
        matrix = matrix_of(args)
        cell = containers.cell_for(matrix, args.cell)
        if args.action == "render":
            sys.stdout.write(containers.spec(matrix, cell, base=args.base).containerfile)
            return 0
        if args.action == "tag":
            print(containers.spec(matrix, cell, base=args.base).tag)
            return 0
        if args.action == "run":
            return containers.run_named(matrix, cell.name, args.pytest_args, engine=args.engine,
                                        isolation=args.isolation, base=args.base)
        engine = containers.probe_engine(args.engine, isolation=args.isolation)
        containers.build_image(matrix, cell, engine, base=args.base)
        return 0
    except (jinja2.TemplateError, OSError) as exc:
        raise InvalidInput(str(exc)) from exc
