"""Which pytest arguments narrow a run to part of the cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# pytest options that change how a run reports, not which tests run nor how far it gets.
_NEUTRAL_FLAGS = {
    "-v", "--verbose", "-q", "--quiet", "-s", "-l", "--showlocals", "--full-trace",
    "--no-header", "--no-summary", "--strict-markers", "--disable-warnings",
    "--disable-pytest-warnings", "--cache-clear", "-rA",
}
_NEUTRAL_WITH_VALUE = {
    "-n", "--numprocesses", "--maxprocesses", "--dist", "--max-worker-restart", "--tb",
    "-r", "-p", "-W", "--pythonwarnings", "--durations", "--durations-min", "--timeout",
    "--timeout-method", "--color", "--capture", "--log-level", "--log-cli-level",
    # pytest-rerunfailures: reruns change outcomes (to flaky), not which tests run.
    "--reruns", "--reruns-delay", "--only-rerun", "--rerun-except",
}
# Options that narrow the run and take a value (kept with it in the selection).
_SELECTING_WITH_VALUE = {
    "-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--maxfail", "-c",
    "--config-file", "--rootdir", "-o", "--override-ini", "--confcutdir",
    "--last-failed-no-failures", "--lfnf",
}


def selection(args: Sequence[str]) -> list[str]:
    """The pytest arguments that narrow a run to part of the cell: test paths, ``-k``,
    ``-m``, ``-x``, ``--lf``, ``--deselect``, ... (with their values), in order. Only
    options known to change reporting alone (``-v``, ``--tb``, ``-n``, ``-p``, ...) are
    left out: an option this list does not know counts as narrowing, so a partial run
    never passes for the whole cell. [] means the whole cell."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, eq, _ = arg.partition("=")
        if arg in _NEUTRAL_FLAGS or re.fullmatch(r"-[vqsl]+", arg):
            continue
        if name in _NEUTRAL_WITH_VALUE:
            i += 0 if eq else 1  # skip its value too
            continue
        if not arg.startswith("--") and arg[:2] in {"-n", "-r", "-p", "-W"}:
            continue  # a neutral short option with its value attached: -n4, -rA, -pno:x
        out.append(arg)
        if name in _SELECTING_WITH_VALUE and not eq and i < len(args):
            out.append(args[i])
            i += 1
    return out
