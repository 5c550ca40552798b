"""``accelgrid run``: a cell through its nox session, nox inside this process (or inside its
container image); a selected run's pytest started ahead of the session
(the head start: :mod:`~accelgrid.run.headstart.prestart`)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ..base import contract
from ..base.errors import EXIT_INVALID
from ._common import matrix_of, quick_exit

if TYPE_CHECKING:
    from ..config.model import Cell, Matrix


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run", parents=[common], help="run a cell through its nox session",
        epilog="Arguments after -- go to pytest: accelgrid run cpu-2.13 --no-venv -- -x")
    p.add_argument("cell")
    p.add_argument("--no-venv", action="store_true",
                   help="use the current interpreter and its installed torch; install nothing")
    p.add_argument("--container", action="store_true",
                   help="run the cell inside its container image (accelgrid container run)")
    p.add_argument("--shard", metavar="K/N",
                   help="run shard K of N of the cell's tests (balanced by recorded "
                        "durations; results in results/shard-K-of-N/<cell>/, merged by the "
                        f"grid); the same as {contract.SHARD}=K/N nox -s CELL")
    p.set_defaults(func=_run, passthrough="pytest_args")
    p = sub.add_parser(
        "prune", parents=[common],
        help="remove all but the newest N selected runs under results/<cell>/runs/",
        description="Selected runs (nox -s CELL -- -k ...) each leave results/<cell>/runs/"
                    "<run-id>/; a cell keeps its newest 20 by itself. prune removes all but "
                    "the newest N (by modification time) of each cell given, never the run "
                    "last-run.json names (the latest), nor the cell's whole run. It removes "
                    "at once; --dry-run only lists.")
    p.add_argument("results", nargs="*",
                   help="results/<cell>/ folders, or folders holding them (default: results/ "
                        f"or ${contract.RESULTS_DIR}); plain files are passed over")
    p.add_argument("--keep", type=int, required=True, metavar="N",
                   help="selected runs to keep per cell, the newest (0: only the latest)")
    p.add_argument("--dry-run", action="store_true",
                   help="list what would be removed, remove nothing")
    p.set_defaults(func=_prune)


def _prune(args: argparse.Namespace) -> int:
    from .. import results
    from ..base.errors import InvalidInput

    if args.keep < 0:
        raise InvalidInput(f"--keep {args.keep}: a number of runs, 0 or more")
    paths = [Path(p) for p in args.results] or [results.results_root(Path.cwd())]
    cells: list[Path] = []
    for path in paths:
        if not path.exists():
            raise InvalidInput(f"{path}: no such folder")
        if (path / contract.RUNS_DIR).is_dir():
            cells.append(path)
        elif path.is_dir():
            cells += sorted(p for p in path.iterdir() if (p / contract.RUNS_DIR).is_dir())
    verb = "would remove" if args.dry_run else "removed"
    for cell in cells:
        total = len(results.selected_runs(cell))
        gone = results.prune_runs(cell, args.keep, dry_run=args.dry_run)
        print(f"{cell}: {verb} {len(gone)} of {total} selected runs")
        for run in gone:
            print(f"  {run}")
    if not cells:
        print("no selected runs under " + " ".join(map(str, paths)))
    return 0


@quick_exit
def _run(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    if args.shard is not None:
        from ..base import contract
        from ..base.errors import InvalidInput
        from ..results import shards

        try:
            shards.parse(args.shard)
        except shards.ShardError as exc:
            raise InvalidInput(f"--shard: {exc}") from None
        os.environ[contract.SHARD] = args.shard.strip()
    if args.container:
        from ..commands import containers

        return containers.run_named(matrix, args.cell, args.pytest_args)
    cell = matrix.cell(args.cell)
    argv = ["-f", str(matrix.root / "noxfile.py"), "-s", cell.name]
    if args.no_venv:
        argv.append("--no-venv")
    if args.pytest_args:
        argv += ["--", *args.pytest_args]
    ahead = None
    if not args.no_venv:
        # A selected run's pytest starts first, held at its gate while the session (in
        # this process) checks the env: its start-up overlaps nox's (the head start).
        ahead = functools.partial(_head_start, matrix, cell, tuple(args.pytest_args))
    return exit_code(nox(argv, matrix.root, matrix.nox_env, ahead=ahead))


@contextlib.contextmanager
def _head_start(matrix: Matrix, cell: Cell, pytest_args: tuple[str, ...]) -> Iterator[object]:
    """The run started ahead of the in-process nox (prestart.ahead), and its session told
    where it is (sessions.HEAD_START): the head start's only way into a session. The
    session's module is loaded once pytest has started (nox's noxfile loads it anyway)."""
    from ..run.headstart import prestart

    with prestart.ahead(matrix, cell, pytest_args) as why:
        from ..commands import sessions

        sessions.HEAD_START = prestart
        try:
            yield why
        finally:
            sessions.HEAD_START = None


# nox's own exit codes (nox.tasks) that are not a failed session: 2, the noxfile did not
# load; 3, no such session or the selection is invalid. Both are bad input to accelgrid
# (exit 2); 3 would otherwise read as a regression (accelgrid.base.errors).
NOX_INPUT_ERRORS = (2, 3)


def exit_code(nox_code: int) -> int:
    """accelgrid's exit code for a nox exit code: 0 and 1 (a session failed) as they are,
    nox's input errors as :data:`~accelgrid.base.errors.EXIT_INVALID`."""
    return EXIT_INVALID if nox_code in NOX_INPUT_ERRORS else nox_code


def nox(argv: list[str], root: Path, env: dict[str, str] | None = None,
        ahead: Callable[[], AbstractContextManager[object]] | None = None) -> int:
    """nox with ``argv``, in ``root``, with ``env`` added to the environment; nox's exit
    code. In this process (:func:`in_process`), inside ``ahead()`` when given (the run
    started ahead of the session), else in a process of its own."""
    if not in_process(root):
        return subprocess.call([sys.executable, "-m", "nox", *argv], cwd=root,
                               env={**os.environ, **(env or {})})
    with _environment(root, env), (ahead() if ahead else contextlib.nullcontext()):
        return _nox_main(argv)


def in_process(root: Path) -> bool:
    """Whether nox runs in this process for the project at ``root``: unless ``root`` is
    another checkout of accelgrid, whose noxfile imports its own ``src/accelgrid`` (here
    the one already loaded would answer). In this process, a warm selected run starts
    one interpreter less, loads accelgrid and the matrix once, and can start its pytest
    ahead of nox (docs/guides/running.md)."""
    own = root / "src" / "accelgrid"
    return not own.is_dir() or own.resolve() == Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _environment(root: Path, env: dict[str, str] | None) -> Iterator[None]:
    """``root`` the working folder and ``env`` added to the environment, both put back
    afterwards (with ``sys.argv``, which nox parses)."""
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    os.environ.update(env or {})
    try:
        os.chdir(root)
        yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _nox_main(argv: list[str]) -> int:
    """nox's own ``main`` with ``argv``, here; its exit code."""
    import nox as nox_module

    sys.argv = ["nox", *argv]
    try:
        nox_module.main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)   # sys.exit("message"): the noxfile's own one line
    return 1
