"""A cell session's env built with uv: the install plan it holds or gets
(:func:`install_plan`), its numbered install steps (:func:`build_env`), a fresh install
checked whole or repaired once (:func:`verified_or_repaired`), pinned files reinstalled
(:func:`reinstall`). :mod:`.sessions` runs them as its steps.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nox
from nox.command import CommandFailed

from ..base import contract, redact
from ..config.model import Cell
from ..host import inputs, install, stamp
from ..run import console
from . import actions


def fail(session: nox.Session, message: str) -> None:
    """Stop the session with one line, never showing a credential."""
    session.error(redact.redact_text(message))


def install_plan(session: nox.Session, cell: Cell, envdir: Path
                 ) -> tuple[install.InstallPlan, dict[str, Any], bool]:
    """The plan the env is built with, its stamp and whether the env holds it already.
    A cpu cell whose CPU index cannot be reached takes torch's CPU build from pip's
    configuration, saying so in one line; a warm env asks no index."""
    plans = stamp.plans(cell, envdir)
    held = stamp.held_plan(envdir, plans)
    if held is not None:
        return *held, True
    plan = plans[0]
    problem = install.local_wheel(cell)[1] or install.index_problem(plan.index)
    if problem and len(plans) > 1:
        session.warn(f"{cell.name}: {problem}: {install.CPU_FALLBACK}")
        plan, problem = plans[1], None
    if problem:
        fail(session, f"{cell.name}: {problem}")
    return plan, stamp.pins(plan, envdir), False


def verified_or_repaired(session: nox.Session, cell: Cell, plan: install.InstallPlan,
                         envdir: Path, python: str) -> None:
    """After the install steps: the env is whole (:func:`accelgrid.host.install.verify`), or
    its packages are reinstalled once with one line saying why (an earlier build was
    interrupted: uv saw the metadata and changed nothing), or the session fails."""
    broken = install.verify(envdir, python)
    if not broken:
        return
    session.log(f"{cell.name}: the env is incomplete ({broken}), an interrupted earlier "
                "install: reinstalling its packages")
    build_env(session, cell, plan, reinstall=True)
    broken = install.verify(envdir, python)
    if broken:
        fail(session, f"{cell.name}: the env is still incomplete after a reinstall "
                      f"({broken}): delete {envdir} and run again")


# When nox last had nothing of ours to do (the noxfile loaded, a cell session ended): a
# venv made after it was made for the session now starting, in about the time since.
_IDLE_SINCE = time.time()


def mark_idle() -> None:
    """nox has nothing of ours to do from now (a cell session ended)."""
    global _IDLE_SINCE
    _IDLE_SINCE = time.time()


_INDEX_OPTIONS = ("--extra-index-url", "--index-url", "-i", "--find-links", "-f")


def build_env(session: nox.Session, cell: Cell, plan: install.InstallPlan, *,
              holds_pins: bool = False, reinstall: bool = False, repair: bool = False
              ) -> bool:
    """Install ``plan``'s steps, one numbered line each before (what is installed) and
    after (what changed, seconds taken); the venv nox made is step 1. ``holds_pins``: the
    env's stamp says it holds them (:func:`accelgrid.host.stamp.env_holds`), each step is
    skipped; ``reinstall``: uv reinstalls every package (a repair); ``repair``: each step
    reinstalls the distributions that miss files as it starts (one reinstall of torch, not
    one per step that names it). Returns whether uv
    installed every step (not under ``--no-install``)."""
    total = len(plan.steps) + 1
    shown = console.shown_path(Path(session.bin).parent)
    # nox's own record of whether it reused the env (its sessions read it too); the file
    # times said "created" once for a reused env in CI.
    reused = bool(getattr(session.virtualenv, "_reused", False))
    how = "reused" if reused else f"created with uv in {time.time() - _IDLE_SINCE:.1f} s"
    session.log(f"{cell.name}: [1/{total}] environment {shown}: {how}")
    if holds_pins:
        for number, step in enumerate(plan.steps, 2):
            session.log(f"{cell.name}: [{number}/{total}] {step.description}: skipped, the "
                        f"env holds the cell's pins ({stamp.STAMP} matches)")
        return False
    installed = True
    can_fall_back = install.can_fall_back(cell, os.environ.get(contract.TORCH_INDEX))
    for number, step in enumerate(plan.steps, 2):
        # The index options and their URLs are in the description already.
        wanted = " ".join(redact.redact_text(a) for i, a in enumerate(step.args)
                          if a not in _INDEX_OPTIONS
                          and (i == 0 or step.args[i - 1] not in _INDEX_OPTIONS))
        session.log(f"{cell.name}: [{number}/{total}] installing {step.description}: {wanted}")
        start = time.monotonic()
        # uv's output is kept to say what it changed (and why, if it fails).
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
            again = [a for n in (install.incomplete(Path(session.bin).parent) if repair
                                 else ()) for a in ("--reinstall-package", n)]
            try:
                session.install(*(("--reinstall",) if reinstall else ()), *again, *step.args,
                                env=step.env or None, silent=False, stdout=out, log=False)
            except CommandFailed:
                out.seek(0)
                tail = [ln for ln in out.read().splitlines() if ln.strip()][-20:]
                clear = (install.fallback_failure(cell, step.args[0], "\n".join(tail))
                         if plan.index == "default" and can_fall_back else None)
                fail(session, (clear + "\n" if clear else "")
                     + f"{cell.name}: installing {step.description} failed after "
                     f"{time.monotonic() - start:.1f} s:\n" + "\n".join(tail))
            out.seek(0)
            text = out.read()
        # In GitHub Actions: uv's own output, folded away under the step's line.
        with actions.group(f"{cell.name}: [{number}/{total}] uv's output"):
            if actions.active():
                sys.stdout.write(redact.redact_text(text).rstrip("\n") + "\n")
        installed = installed and bool(text.strip())
        did = (install.uv_changes(text, wanted.split()) if text.strip()
               else "skipped: nox reuses the env without installing (-R / --no-install)")
        session.log(f"{cell.name}: [{number}/{total}] {did} [{time.monotonic() - start:.1f} s]")
    return installed


def reinstall(session: nox.Session, cell: Cell, plan: install.InstallPlan, python: str,
               names: list[str], *, clean_cache: bool = False) -> None:
    """:func:`accelgrid.host.inputs.reinstall` through the plan's steps, or stop in one
    line."""
    from nox.virtualenv import find_uv

    has_uv, uv = find_uv()[:2]   # (found, path[, version]): nox's own uv
    if not has_uv:
        fail(session, f"{cell.name}: uv is not installed: cannot reinstall {names}")
    failed = inputs.reinstall(uv, python, names, [(s.args, s.env) for s in plan.steps],
                              {**os.environ, **plan.env}, clean_cache=clean_cache)
    if failed:
        fail(session, f"{cell.name}: reinstalling {', '.join(names)} failed:\n{failed}")
