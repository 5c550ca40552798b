"""``accelgrid bisect TEST --device D``: the first torch version where a test's outcome changes.

    accelgrid bisect suites/repro/test_pytorch_pytorch_127929.py::test_xpu_memory_api_exists \\
        --device cpu --torch 2.4 --torch 2.5 --torch 2.6
    accelgrid bisect NODEID --device xpu --all      # run every version, not a bisection

The test runs in the cells ``<device>-<series>[-<profile>]`` of the matrix's torch series,
oldest first, each through its nox session with ``-R`` (reuse the cell's environment,
install nothing once it exists), so a second bisect costs only the test runs. By default
it bisects: it runs the oldest and newest version, then halves the range until the two
neighbours that differ are found (one change assumed; ``--all`` checks every version).
Outcomes are the recorded ones, with the registry applied (``xfailed`` where a known issue
is in scope; ``--raw`` shows the bare outcomes). Prints a table version → outcome and the
verdict; results go to ``<results>/bisect/<test>/<cell>/``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..base import contract, outputs
from ..base.errors import AccelgridError, InvalidInput
from ..base.text import one_line
from ..base.versions import version_key
from ..config import known_issues
from ..config.model import Cell, Matrix
from ..host import detect
from ..results.records import TestRecord
from .repro import ARROW, run_in_nox


@dataclass(frozen=True)
class Outcome:
    outcome: str            # "passed", "xfailed", "2 passed, 1 failed", "not run"
    message: str = ""
    ran: bool = True        # False: the session ran no test (the version is unknown)
    seconds: float | None = None


def recorded_outcome(records: Mapping[str, TestRecord], nodeid: str) -> tuple[str, str]:
    """The outcome of ``nodeid`` (a test, or a file/parametrized set) from a run's records."""
    if nodeid in records:
        rec = records[nodeid]
        return rec["outcome"], rec.get("message") or ""
    picked = [r for n, r in records.items() if n.startswith(nodeid)]
    if not picked:
        picked = list(records.values())
    counts = Counter(r["outcome"] for r in picked)
    if len(counts) == 1 and len(picked) == 1:
        return picked[0]["outcome"], picked[0].get("message") or ""
    text = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    return text, next((r.get("message") or "" for r in picked if r.get("message")), "")


def search(cells: list[Cell], outcome_of: Callable[[Cell], Outcome], run_all: bool = False
           ) -> tuple[dict[str, Outcome], str, Cell | None]:
    """Run ``outcome_of`` over ``cells`` (oldest first): every one (``run_all``) or a
    bisection. Returns outcomes by cell name, the verdict line and the first changed cell."""
    seen: dict[str, Outcome] = {}

    def get(i: int) -> Outcome:
        if cells[i].name not in seen:
            seen[cells[i].name] = outcome_of(cells[i])
        return seen[cells[i].name]

    if run_all or len(cells) <= 2:
        for i in range(len(cells)):
            get(i)
        ran = [c for c in cells if seen[c.name].ran]
        changes = [(a, b) for a, b in zip(ran, ran[1:], strict=False)
                   if seen[a.name].outcome != seen[b.name].outcome]
        if not ran:
            return seen, "no version ran the test", None
        if not changes:
            return seen, (f"no change: {seen[ran[0].name].outcome} on every version that ran "
                          f"({len(ran)} of {len(cells)})"), None
        a, b = changes[0]
        more = f"; {len(changes) - 1} later change(s), see the table" if len(changes) > 1 else ""
        return seen, _changed(a, b, seen) + more, b
    lo, hi = 0, len(cells) - 1
    if not get(lo).ran or not get(hi).ran:
        bad = lo if not get(lo).ran else hi
        return seen, f"cannot bisect: {cells[bad].name} ran no test ({get(bad).message})", None
    if get(lo).outcome == get(hi).outcome:
        return seen, (f"no change between torch {_v(cells[lo])} and {_v(cells[hi])}: "
                      f"{get(lo).outcome} at both ends (a bisection assumes one change; "
                      "--all runs every version)"), None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if not get(mid).ran:
            return seen, f"cannot bisect: {cells[mid].name} ran no test ({get(mid).message})", None
        if get(mid).outcome == get(lo).outcome:
            lo = mid
        else:
            hi = mid
    return seen, _changed(cells[lo], cells[hi], seen), cells[hi]


def _v(cell: Cell) -> str:
    return cell.pins["torch"]


def _changed(a: Cell, b: Cell, seen: dict[str, Outcome]) -> str:
    return (f"the outcome changes at torch {_v(b)} ({b.name}): {seen[a.name].outcome} on "
            f"{_v(a)} {ARROW} {seen[b.name].outcome} on {_v(b)}")


def table(cells: list[Cell], seen: dict[str, Outcome]) -> list[str]:
    rows = [("torch", "cell", "outcome", "time", "message")]
    for cell in cells:
        o = seen.get(cell.name)
        if o is None:
            rows.append((_v(cell), cell.name, "-", "", "not run (bisection skipped it)"))
        else:
            took = f"{o.seconds:.0f} s" if o.seconds is not None else ""
            rows.append((_v(cell), cell.name, o.outcome if o.ran else "not run", took,
                         one_line(o.message, 90)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  ".join(f"{r[i]:<{widths[i]}}" for i in range(4)) + "  " + r[4] for r in rows]


def bisect(matrix: Matrix, test: str, device: str, *, profile: str | None = None,
           torch: Sequence[str] | None = None, run_all: bool = False, raw: bool = False,
           envdir: str | None = None, fresh: bool = False, no_venv: bool = False,
           results_dir: Path | None = None, verbose: bool = False,
           timeout: float | None = None) -> int:
    """Run ``test`` over ``device``'s torch series (bisecting unless ``run_all``); print
    version → outcome and the verdict; 0 when every version it needed ran."""
    if device not in matrix.devices:
        raise InvalidInput(f"unknown device '{device}' (known: {', '.join(matrix.devices)})")
    profile = profile or matrix.default_profile
    # A local-wheel cell (run on request only) joins when its series is named.
    cells = sorted((c for c in matrix.cells if c.device == device and c.profile == profile
                    and (c.torch in torch if torch else not c.manual)),
                   key=lambda c: version_key(c.pins["torch"]))
    if torch:
        missing = sorted(set(torch) - {c.torch for c in cells})
        if missing:
            raise InvalidInput(f"no {device} cell with profile {profile} for torch "
                               f"{', '.join(missing)}")
    if len(cells) < 2:
        raise InvalidInput(f"{len(cells)} {device} cell(s) with profile {profile}: "
                           "nothing to compare")
    absent = detect.absent_reason(device, matrix.devices[device].detect)
    if absent and not os.environ.get(contract.SKIP_DETECT):
        raise AccelgridError(absent)
    path = test.split("::", 1)[0]
    if not (matrix.root / path).exists():
        raise InvalidInput(f"{path} does not exist under {matrix.root}")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", test).strip("-")[-120:]
    out = results_dir or results.results_root(matrix.root) / "bisect" / slug
    outputs.mark(out, "bisect", test=test, device=device)  # the grid passes its runs over
    if raw:
        os.environ[known_issues.ENV_DISABLE] = "1"  # read by the runner in the nox session
    print(f"bisect {test} on {device} ({profile}) over torch "
          f"{', '.join(_v(c) for c in cells)}; results in {out}/", flush=True)

    def outcome_of(cell: Cell) -> Outcome:
        run = run_in_nox(matrix, cell, [test], out, envdir=envdir, reuse=not fresh,
                         no_venv=no_venv, verbose=verbose, timeout=timeout)
        if run.error:
            o = Outcome("not run", run.error, ran=False, seconds=run.seconds)
        else:
            o = Outcome(*recorded_outcome(run.records, test), seconds=run.seconds)
        print(f"  torch {_v(cell)} ({cell.name}) {ARROW} {o.outcome if o.ran else 'not run'} "
              f"[{run.seconds:.0f} s]", flush=True)
        return o

    seen, verdict, _ = search(cells, outcome_of, run_all=run_all)
    print()
    print("\n".join(table(cells, seen)))
    print(f"verdict: {verdict}")
    return 0 if all(o.ran for o in seen.values()) else 1
