"""Known upstream issues: ``accelgrid repro`` and ``accelgrid bisect``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..base.errors import InvalidInput
from ..commands import bisect, repro
from ..config import known_issues
from ._common import matrix_of


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "repro", parents=[common],
        help="reproduce a known upstream issue in the cells of its scope",
        description="Run an upstream issue's reproduction (suites/repro/) in every cell of its "
                    "scope whose device is on this host, or in the cells named; print "
                    "'cell → reproduces / fixed / not run (why)'.")
    p.add_argument("issue", nargs="?", help="owner/repo#N as in known_issues.yaml")
    p.add_argument("--registry", help="registry file (default: known_issues.yaml beside it)")
    p.add_argument("--cell", action="append", help="run in this cell (repeatable)")
    p.add_argument("--torch", action="append", help="only cells of this torch series")
    p.add_argument("--list", action="store_true", help="list the registry and its cells")
    _run_options(p)
    p.add_argument("-R", "--reuse", action="store_true",
                   help="reuse existing cell environments without installing (nox -R)")
    p.add_argument("--results", type=Path,
                   help="results folder (default: <results>/repro/<issue>/)")
    p.add_argument("--expect", choices=[repro.REPRODUCES, repro.FIXED],
                   help="exit 1 unless every cell that ran gives this verdict")
    p.add_argument("--dry-run", action="store_true", help="print the nox commands only")
    p.set_defaults(func=_repro)

    p = sub.add_parser(
        "bisect", parents=[common],
        help="find the first torch version where a test's outcome changes",
        description="Run one test across the matrix's torch versions for a device, reusing "
                    "each cell's environment, and report the first version where its outcome "
                    "changes.")
    p.add_argument("test", help="pytest node id, e.g. suites/smoke/test_device_api.py::test_x")
    p.add_argument("--device", required=True, help="cpu, cuda, xpu or mps")
    p.add_argument("--profile", help="env profile (default: the matrix's default profile)")
    p.add_argument("--torch", action="append", help="only these torch series (repeatable)")
    p.add_argument("--all", action="store_true", help="run every version (no bisection)")
    p.add_argument("--raw", action="store_true",
                   help="without known_issues.yaml (bare outcomes instead of xfailed)")
    _run_options(p)
    p.add_argument("--fresh", action="store_true",
                   help="let nox re-install into existing environments (no -R)")
    p.add_argument("--results", type=Path,
                   help="results folder (default: <results>/bisect/<test>/)")
    p.set_defaults(func=_bisect)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--envdir", help="nox --envdir (where cell environments live)")
    p.add_argument("--no-venv", action="store_true",
                   help="run on the current interpreter (its torch must match the cell)")
    p.add_argument("-v", "--verbose", action="store_true", help="show nox's output")
    p.add_argument("--timeout", type=float, help="seconds per cell run")


def _repro(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    registry = known_issues.load_registry(
        args.registry or known_issues.registry_path(matrix.root), matrix)
    if args.list:
        return repro.list_registry(matrix, registry)
    if not args.issue:
        raise InvalidInput("name an issue (owner/repo#N) or use --list")
    return repro.reproduce(
        matrix, registry, args.issue, cells=args.cell, torch=args.torch, envdir=args.envdir,
        reuse=args.reuse, no_venv=args.no_venv, results_dir=args.results, expect=args.expect,
        dry_run=args.dry_run, verbose=args.verbose, timeout=args.timeout)


def _bisect(args: argparse.Namespace) -> int:
    return bisect.bisect(
        matrix_of(args), args.test, args.device, profile=args.profile, torch=args.torch,
        run_all=args.all, raw=args.raw, envdir=args.envdir, fresh=args.fresh,
        no_venv=args.no_venv, results_dir=args.results, verbose=args.verbose,
        timeout=args.timeout)
