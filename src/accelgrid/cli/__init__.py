"""The ``accelgrid`` command line (also ``python -m accelgrid``): one argparse tree.

Each command group is a module of this package with ``register(sub, common)``, which adds
its subcommands and sets ``func`` (a handler ``(args) -> int``) on each. Handlers call
library functions; library code raises :class:`~accelgrid.base.errors.AccelgridError`, caught
once in :func:`main`, whose ``return_code`` is the exit code.

Arguments after the first ``--`` belong to the chosen command when it declares a
``passthrough`` (``accelgrid run CELL -- -k ops`` hands ``-k ops`` to pytest); they are
never scanned for command words.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 130  # the shell's code for a process ended by SIGINT


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C (or SIGTERM) while the accelgrid command starts (its imports, the parse): one
    line, exit 130 (143), no traceback; nothing has been written yet. :func:`main` hands
    SIGINT back to KeyboardInterrupt and SIGTERM to its default before the command runs;
    a command that writes a set of files (``publish``) handles both itself."""
    if signum == signal.SIGINT:
        print("accelgrid: interrupted", file=sys.stderr)
    else:
        print(f"accelgrid: stopped by {signal.Signals(signum).name}", file=sys.stderr)
    raise SystemExit(128 + signum)


# Only when this process is the command (the console script, python -m accelgrid): a
# program importing accelgrid.cli (pytest) keeps its own Ctrl-C.
# (`python -m pytest` runs a __main__.py too: the module's name tells them apart.)
THE_COMMAND = (
    getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    in ("accelgrid", "accelgrid.__main__")
    or os.path.basename(sys.argv[0] if sys.argv else "") == "accelgrid")
if THE_COMMAND and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted_while_starting)

if THE_COMMAND:
    # A warm `accelgrid run CELL -- ARGS` run again starts its pytest now, before
    # accelgrid and the matrix load (held until its session has checked the env).
    from ..run import relaunch

    relaunch.early(sys.argv[1:])

# Imported after the handler above: a Ctrl-C while they load is one line too.
import argparse  # noqa: E402
import atexit  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import threading  # noqa: E402

from .. import __version__  # noqa: E402
from ..base.errors import EXIT_INVALID, AccelgridError  # noqa: E402
from ..base.jsonio import storage_problem  # noqa: E402
from ..base.redact import redact_text  # noqa: E402
from ..run.console import tolerant_console  # noqa: E402
from ._common import DEFAULT_MATRIX, common_parser  # noqa: E402

# Command groups, in the order `accelgrid --help` lists them, with the commands each adds.
# Parsing a known command imports only its group (as pip's command table does): `accelgrid
# run` then loads no report, container or bench code (~0.1 s of a warm partial run). A
# test checks this table against what each group registers.
GROUPS: dict[str, tuple[str, ...]] = {
    "init": ("init",),
    "matrix": ("validate", "cells", "plan", "schema"),
    "run": ("run", "prune"),
    "shell": ("env", "shell"),
    "report": ("grid", "baseline", "ops", "hf-tests"),
    "history": ("history", "publish"),
    "issues": ("repro", "bisect"),
    "ci": ("ci",),
    "container": ("container",),
    "bench": ("bench",),
}

DESCRIPTION = """\
accelgrid: a reproducible test matrix for PyTorch device backends.

matrix.yaml declares devices (cpu, cuda, xpu, mps), torch versions with their package
pins, env-flag profiles and include/exclude rules; each combination is a cell
(`cpu-2.13`, `xpu-2.5-fallback-debug`). Cells run as nox sessions (`nox -s cpu-2.13`)
and leave results under results/<cell>/, which `accelgrid grid` turns into grids.
"""

EPILOG = """\
examples:
  accelgrid init --devices cpu,xpu       accelgrid in this repository: matrix, noxfile, CI
  accelgrid validate                     check matrix.yaml
  accelgrid cells --device xpu           list the xpu cells
  accelgrid plan xpu-2.5                 what that cell installs, sets and runs
  accelgrid run cpu-2.13 -- -k smoke     run a cell (via nox), pytest args after --
  accelgrid shell cpu-2.13 -- python -m pytest suites/smoke -k matmul
                                         one test inside the cell's env (env: its variables)
  accelgrid grid results/*               grids from results folders
  accelgrid hf-tests results/*           HF's own tests: per file, failures beside cuda/cpu

exit codes: 0 ok, 1 failed run / stale generated files / nothing found,
            2 invalid input, 3 regression against a baseline
"""


def command_word(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not a global option or its
    value), or None; None too when help is asked for first (``accelgrid -h run``)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word == "--matrix":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command tree: every group's commands, or only the group adding ``command``
    when a group does (help and errors for anything else list every command)."""
    parser = argparse.ArgumentParser(prog="accelgrid", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"accelgrid {__version__}")
    parser.add_argument("--matrix", default=DEFAULT_MATRIX,
                        help="the matrix file (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    groups = [g for g, commands in GROUPS.items() if command in commands] or list(GROUPS)
    for group in groups:
        importlib.import_module(f"{__name__}.{group}").register(sub, common)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; what follows the first ``--`` goes to the command's passthrough."""
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser(command_word(argv[:cut]))
    args = parser.parse_args(argv[:cut])
    passthrough = getattr(args, "passthrough", None)
    if cut < len(argv):
        if passthrough is None:
            parser.error(f"`--` arguments are not taken by `accelgrid {args.command}`")
        setattr(args, passthrough, argv[cut + 1:])
    elif passthrough is not None and getattr(args, passthrough, None) is None:
        setattr(args, passthrough, [])
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (see ``accelgrid --help``)."""
    try:
        code = _main(argv)
        if THE_COMMAND and _QUICK_EXIT and threading.active_count() == 1:
            _exit_now(code)
        return code
    finally:
        if THE_COMMAND and threading.current_thread() is threading.main_thread():
            # The command is over (its files written or not, its line said): a stop now
            # would land in the interpreter's shutdown, which has put the default handlers
            # back, and kill the process by the signal (-15, no line) instead of its exit
            # code. Held, it is never delivered: the process exits with the command's code.
            signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))


_QUICK_EXIT: list[bool] = []   # the command asked for it (_common.quick_exit)


def _exit_now(code: int) -> None:
    """End the process with ``code`` now: the exit handlers run (logging's flush, a launch
    nobody claimed, coverage), the output is flushed, the interpreter's teardown (every
    module's objects freed one by one) is skipped. Only once the command's files are
    written and closed, and no other thread runs."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    tolerant_console()
    # Signal handlers belong to the main thread (a caller's thread keeps Python's default).
    own = threading.current_thread() is threading.main_thread()
    if own:
        signal.signal(signal.SIGINT, _interrupted_while_starting)  # the parse, a group's import
        term = signal.getsignal(signal.SIGTERM)
        if term in (signal.SIG_DFL, _interrupted_while_starting):
            signal.signal(signal.SIGTERM, _interrupted_while_starting)
    args = None
    try:
        args = parse(list(sys.argv[1:] if argv is None else argv))
    finally:
        # A command that handles stops itself (_common.writes_a_set) keeps the starting
        # handlers until its own replace them: no moment where SIGTERM kills it outright.
        if own and not getattr(getattr(args, "func", None), "handles_stops", False):
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if term in (signal.SIG_DFL, _interrupted_while_starting):
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if getattr(args.func, "quick_exit", False):
        _QUICK_EXIT.append(True)
    try:
        return int(args.func(args) or 0)
    except AccelgridError as exc:
        if str(exc):
            # Validation errors start with FILE:LINE already; others get the command's name.
            located = hasattr(exc, "problems")
            text = str(exc) if located else f"accelgrid {args.command}: {exc}"
            print(redact_text(text), file=sys.stderr)  # an error never shows a credential
        return exc.return_code
    except BrokenPipeError:
        # `accelgrid cells | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        problem = storage_problem(exc)  # a full disk or read-only folder: one line
        if problem is None:
            raise
        print(redact_text(f"accelgrid {args.command}: {problem}"), file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print(f"accelgrid {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
