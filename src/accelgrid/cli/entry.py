"""The ``accelgrid`` command's door: :func:`main`.

Its first moments come before anything heavy loads (argparse, accelgrid's layers, nox,
the matrix): a Ctrl-C or SIGTERM while the command starts is one line (exit 130, 143),
and a warm ``accelgrid run CELL -- ARGS`` run again starts its pytest at once (the head
start's early launch, :func:`accelgrid.run.headstart.relaunch.early`; docs/guides/running.md).
Then the parse (:mod:`.parser`), the command's handler, and its exit code. This module
imports only ``os``, ``signal`` and ``sys`` at its top: the rest is loaded by
:func:`main`, after those first moments.
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


def is_the_command() -> bool:
    """Whether this process is the command (the console script, python -m accelgrid): a
    program calling :func:`main` (pytest) keeps its own Ctrl-C and starts no launch.
    (`python -m pytest` runs a __main__.py too: the module's name tells them apart.)"""
    return (getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
            in ("accelgrid", "accelgrid.__main__")
            or os.path.basename(sys.argv[0] if sys.argv else "") == "accelgrid")


_BEGUN: list[bool] = []   # the command's first moments are over (once per process)


def _begin() -> bool:
    """The command's first moments, before anything heavy loads: the starting handlers,
    then a warm run's pytest started (held until its session has checked the env).
    Whether this process is the command."""
    the_command = is_the_command()
    if not the_command or _BEGUN:
        return the_command
    _BEGUN.append(True)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _interrupted_while_starting)
    from ..run.headstart import relaunch

    relaunch.early(sys.argv[1:])
    return True


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (see ``accelgrid --help``)."""
    the_command = _begin()   # first: its pytest starts before the imports below
    import threading

    try:
        code = _run(argv)
        if the_command and _QUICK_EXIT and threading.active_count() == 1:
            _exit_now(code)
        return code
    finally:
        if the_command and threading.current_thread() is threading.main_thread():
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
    import atexit
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _run(argv: list[str] | None) -> int:
    """Parse ``argv`` (default: the command line) and run its handler: its exit code, an
    error's in one line."""
    import threading

    # Loaded once the command's first moments are over (_begin): a Ctrl-C while they
    # load is one line too.
    from ..base.errors import EXIT_INVALID, AccelgridError
    from ..base.jsonio import storage_problem
    from ..base.redact import redact_text
    from ..run.console import tolerant_console
    from . import parser

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
        args = parser.parse(list(sys.argv[1:] if argv is None else argv))
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
