"""Which suites pytest gets for a run's arguments: none when they name test paths or node
ids (pytest runs those), else every suite of the cell.

A run selected by ``-k`` used to get only the suites the expression could select from,
decided by a three-valued reading of pytest's ``-k`` grammar over each suite's files. It
was measured side by side and removed: on the cpu-2.13 cell (2-core box) it saved 0.1 to
0.4 s of CPU per collecting process (``pytest --co -k smoke`` of one suite against all
five: 2.6 s against 2.9 s), within the noise of a 15 s ``-k smoke`` run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# Options of pytest 9.2, pytest-xdist 3.8 and pytest-timeout 2.4 that take a value (the
# next argument unless given as --opt=value / -kVALUE): their value is never a test path,
# even when it names one (`-k suites`, `--deselect suites/smoke`). pytest parses with
# allow_abbrev=False, so these are the only spellings.
OPTIONS_WITH_VALUE = frozenset({
    "--assert", "--basetemp", "--cache-show", "--capture", "--code-highlight", "--color",
    "--confcutdir", "--config-file", "--debug", "--deselect", "--dist", "--doctest-glob",
    "--doctest-report", "--durations", "--durations-min", "--ignore", "--ignore-glob",
    "--import-mode", "--junit-prefix", "--junit-xml", "--junitprefix", "--junitxml",
    "--last-failed-no-failures", "--lfnf", "--log-auto-indent", "--log-cli-date-format",
    "--log-cli-format", "--log-cli-level", "--log-date-format", "--log-disable", "--log-file",
    "--log-file-date-format", "--log-file-format", "--log-file-level", "--log-file-mode",
    "--log-format", "--log-level", "--max-warnings", "--max-worker-restart", "--maxfail",
    "--maxprocesses", "--maxschedchunk", "--numprocesses", "--override-ini", "--pastebin",
    "--pdbcls", "--px", "--pythonwarnings", "--report-chars", "--rootdir", "--rsyncdir",
    "--rsyncignore", "--session-timeout", "--show-capture", "--tb", "--testrunuid",
    "--timeout", "--timeout-method", "--timeout_method", "--tx", "--verbosity",
    "-W", "-c", "-k", "-m", "-n", "-o", "-p", "-r",
})


def _positional(args: Sequence[str]) -> list[int]:
    """Indices of the arguments that are neither options nor an option's value."""
    positional: list[int] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional += range(i, len(args))
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(i - 1)
        elif arg.startswith("--"):
            if arg in OPTIONS_WITH_VALUE:   # --opt value (not --opt=value)
                i += 1
        else:
            # A cluster of short options: -vx, -xk smoke, -ksmoke, -n4: the first one that
            # takes a value takes the rest of the cluster, or else the next argument.
            for j, ch in enumerate(arg[1:], start=1):
                if "-" + ch in OPTIONS_WITH_VALUE:
                    i += 0 if arg[j + 1:] else 1
                    break
    return positional


def named_paths(args: Sequence[str], root: Path) -> list[int]:
    """Indices of the arguments that are test paths or node ids (``path::test``) under
    ``root``: option values (``-k suites``) never are."""
    return [i for i in _positional(args)
            if args[i] and (root / args[i].split("::", 1)[0]).exists()]


def suite_paths(suites: Sequence[str], args: Sequence[str], root: Path) -> list[str]:
    """The suite paths pytest gets for ``args``: none when the arguments name test paths,
    else all of ``suites``."""
    return [] if named_paths(args, root) else list(suites)
