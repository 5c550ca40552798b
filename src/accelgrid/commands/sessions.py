"""nox sessions from the matrix: one session per cell, plus the project sessions.

``noxfile.py`` calls :func:`register`. A cell session checks the device is present and
its torch's runtime bundle sourced (:func:`accelgrid.host.detect.runtime_problem`), builds its
env with uv (pip's configuration carried over), installs the cell's pins from the right
index, and hands over to :mod:`accelgrid.run.cell`. With ``--no-venv`` it installs nothing
and runs on the current interpreter, refusing a torch of another version.

A cell session is a list of named steps over one :class:`CellSession` (:func:`steps_of`,
as :mod:`accelgrid.run.cell`'s STEPS): check_host (the run's one preflight), then the env
(plan_env, build, check_inputs, repair_inputs, stamp, check_link, link; with ``--no-venv``
accept_inputs), run (one :class:`~accelgrid.run.request.RunRequest`) and check_run. A
step that finds the env must change says so (``changes_env``); :func:`run_steps` then
ends the run ``accelgrid run`` started ahead (the head start), once, before the change.
:mod:`.envbuild` builds the env.

nox creates a session's env before the session's code runs, so a cell whose runtime is
missing on this host (or whose declared hardware is wrong) is registered without one
(``python=False``): it stops with the one line before anything is created.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import nox
from nox.virtualenv import PassthroughEnv

from .. import __version__, results
from ..base import contract, jsonio
from ..base.errors import AccelgridError, InvalidInput
from ..config.model import Cell, Matrix
from ..host import detect, inputs, install, venvs
from ..host import stamp as env_stamp
from ..results import history, shards
from ..run import console, preflight
from ..run.cell import CellRun, run_cell
from ..run.passes import workers_override
from ..run.request import RunRequest
from . import envbuild
from .envbuild import fail


class HeadStart(Protocol):
    """A run started ahead of the session, held at its gate (`accelgrid run`'s head start,
    :mod:`accelgrid.run.headstart.prestart`): the session takes it or ends it."""

    def take(self, request: RunRequest) -> CellRun | None: ...

    def cancel(self) -> None: ...


# Set by `accelgrid run` (cli.run) around the nox it runs in its own process, the head
# start's one way in; None for a session nox started from a shell: nothing to take or end.
HEAD_START: HeadStart | None = None


def _python_in(session: nox.Session) -> str:
    if isinstance(session.virtualenv, PassthroughEnv):
        return sys.executable
    bin_dir = Path(session.bin)
    exe = bin_dir / ("python.exe" if os.name == "nt" else "python")
    return str(exe)


def run_cell_session(session: nox.Session, matrix: Matrix, cell: Cell,
                     host: preflight.HostCheck | None = None) -> None:
    """The body of every cell session (its steps: :func:`steps_of`); ``host``: the host
    check its registration made."""
    console.tolerant_console()
    try:
        state = CellSession(session, matrix, cell,
                            _shard_results(results.results_root(matrix.root), cell), host)
        run_steps(state, steps_of(state))
    except AccelgridError as exc:  # e.g. an invalid known_issues.yaml: one line
        fail(session, str(exc) if hasattr(exc, "problems") else f"{cell.name}: {exc}")
    finally:
        envbuild.mark_idle()


@dataclass
class CellSession:
    """One cell session as its steps (:func:`steps_of`) hand it along: what nox gave it,
    then what each step finds. Each step takes it and returns it."""

    session: nox.Session
    matrix: Matrix
    cell: Cell
    out: Path                          # where the run writes (a shard's own folder)
    host: preflight.HostCheck | None = None   # the registration's check, else check_host's
    checked: preflight.Preflight | None = None   # the run's one preflight
    workers: int | None = None
    python: str = ""
    accepted: inputs.Checked | None = None   # --no-venv: inputs it runs on anyway
    # The env (a venv session):
    plan: install.InstallPlan | None = None
    pins: dict[str, Any] = field(default_factory=dict)   # its stamp, once installed
    current: bool = False              # its stamp holds the cell's pins
    gone: str | None = None            # files lost since its install: a repair
    installed_now: bool = False
    path: list[str] = field(default_factory=list)   # its python's import path
    site: Path | None = None           # its site-packages
    found: inputs.Checked | None = None   # its inputs against the pins and RECORDs
    found_at: float = 0.0              # when that check began
    checkout: Path | None = None       # the runner's checkout it imports accelgrid from
    wheel: str | None = None           # else what installs accelgrid into it, when needed
    # A step found that the env changes (an install, a repair, a relink): the run started
    # ahead of the session (the head start: its pytest reads this env) is ended before
    # the next step, by run_steps.
    changes_env: bool = False
    done: bool = False                 # --install-only: the env is ready, run nothing
    rc: int = 0

    @property
    def envdir(self) -> Path:
        return Path(self.session.bin).parent


SessionStep = Callable[[CellSession], CellSession]


def run_steps(state: CellSession, steps: Sequence[SessionStep]) -> CellSession:
    """``state`` through ``steps``; the head start ended once, here, as soon as a step
    says the env changes (before that step's change is made, by the next step)."""
    ended = False
    for step in steps:
        state = step(state)
        if state.done:
            break
        if state.changes_env and not ended:
            if HEAD_START is not None:   # the env changes under it: its tests end
                HEAD_START.cancel()
            ended = True
    return state


def write_op_pages(cell: Cell, folder: Path) -> None:
    """The session step after a run: the cell's op coverage pages (ops.json, ops.md,
    ops.html) where its tests captured ops (the run leaves report pages to its caller:
    run and report are siblings)."""
    if not (folder / contract.OPS_RAW_DIR).is_dir():
        return   # nothing captured: ops (and through it pytest) need not be imported
    from .. import ops

    captured = ops.aggregate(folder)
    if captured is not None:
        from ..report import ops_pages  # only then: the report package brings jinja2

        ops_pages.write_cell(folder, captured)
        console.say(cell.name, f"op coverage in {folder / 'ops.md'}")


def _shard_results(out: Path, cell: Cell) -> Path:
    """Where the run writes: ``out``, or a shard run's ``out/shard-K-of-N`` (so the shards
    of a cell never share a folder, here or in a CI artifacts download). A shard run
    balances by recorded durations (every shard must get the same), the first of:
    ACCELGRID_SHARD_DURATIONS (a results folder, a JSON file, or a history database), the
    history database (ACCELGRID_HISTORY, else ``out/history.sqlite``) when it has runs of
    the cell, the cell's last full run here; without any, equal counts."""
    try:
        shard = shards.selected()
    except shards.ShardError as exc:
        raise InvalidInput(f"{contract.SHARD}: {exc}") from None
    if shard is None:
        return out
    folder = out / shards.folder_name(*shard)
    named = os.environ.get(contract.SHARD_DURATIONS, "").strip()
    if named:
        db = Path(named) if history.is_database(Path(named)) else None
    else:
        found = Path(os.environ.get(contract.HISTORY) or out / "history.sqlite")
        db = found if found.is_file() else None
    if db is not None:
        # The in-cell split reads JSON (standard library only): the medians, written down.
        with history.open_store(db, create=False) as store:
            recorded = store.durations(cell.name)
        if recorded or named:
            path = folder / f"{cell.name}.durations.json"
            folder.mkdir(parents=True, exist_ok=True)
            shards.write_durations(path, recorded)
            os.environ[contract.SHARD_DURATIONS] = str(path)
            return folder
    if not named and (out / cell.name).is_dir():
        os.environ[contract.SHARD_DURATIONS] = str(out / cell.name)
    return folder


def check_host(state: CellSession) -> CellSession:
    """The host as the registration checked it (else now: the device, its runtime, the
    hardware), then the run's preflight, once per run: the run and its env get this
    answer. Everything the run reads is checked before anything is installed or
    replaced."""
    session, cell = state.session, state.cell
    host = state.host
    if host is None:
        device = state.matrix.devices[cell.device]
        host = state.host = preflight.host_check(
            cell, absent=detect.absent_reason(cell.device, device.detect))
    if host.absent and not os.environ.get(contract.SKIP_DETECT):
        fail(session, f"{cell.name}: {host.absent}")
    if host.problem:
        fail(session, host.problem)
    state.checked = preflight.check(cell, state.matrix.root, host=host)
    state.workers = workers_override()
    state.python = _python_in(session)
    return state


def accept_inputs(state: CellSession) -> CellSession:
    """``--no-venv``: the current interpreter's packages against the cell's pins; other
    ones stop the session unless accepted (the results then say so)."""
    session, cell, python = state.session, state.cell, state.python
    found = _checked_inputs(cell, python)
    if not found.ok:
        line = _inputs_line(cell, found)
        if not inputs.accepted():
            fail(session, f"{line} (--no-venv runs on the current interpreter, which "
                 f"nothing installs into; {inputs.ACCEPT}=1 runs on it anyway, and the "
                 "results say so)")
        session.warn(f"{line}: running on them ({inputs.ACCEPT}=1); the results say so")
        state.accepted = found
    session.log(f"{cell.name}: --no-venv, using {python} with its installed packages")
    return state


def plan_env(state: CellSession) -> CellSession:
    """The plan the env is built with and whether it holds it already: its stamp, and
    its files (gone: stamped, then damaged since; or unstamped, a kill mid-install. uv
    would see the metadata and change nothing: reinstalled straight away)."""
    session, cell, envdir = state.session, state.cell, state.envdir
    state.plan, state.pins, state.current = envbuild.install_plan(session, cell, envdir)
    session.env.update(state.plan.env)
    state.gone = install.missing_files(envdir, remember=True) if envdir.is_dir() else None
    state.changes_env = not state.current or bool(state.gone)
    if state.gone:
        session.log(f"{cell.name}: the env " + ("lost files since its install"
                    if state.current else "is incomplete, an interrupted earlier install")
                    + f" ({state.gone}): reinstalling its packages")
        state.current = False
    return state


def build(state: CellSession) -> CellSession:
    """The plan's install steps (:func:`.envbuild.build_env`: skipped where the stamp
    holds the pins); a fresh install is whole (else repaired once) and, in a cpu cell, never
    torch's CUDA build."""
    session, cell, envdir, plan = state.session, state.cell, state.envdir, state.plan
    assert plan is not None
    if not state.current:
        env_stamp.forget(envdir)
    state.installed_now = envbuild.build_env(session, cell, plan, holds_pins=state.current,
                                             repair=bool(state.gone))
    if state.installed_now:
        gpu = install.cuda_build(envdir) if cell.device == install.CPU_DEVICE else None
        if gpu:   # never a cpu cell on a CUDA build without saying so: no stamp, stop
            fail(session, f"{cell.name}: {gpu}: a cpu cell takes torch's CPU build "
                 f"({cell.index}, or set {contract.TORCH_INDEX} to an index with it)")
        envbuild.verified_or_repaired(session, cell, plan, envdir, state.python)
    return state


def check_inputs(state: CellSession) -> CellSession:
    """Whatever the stamp says: what is installed is what the matrix pins (else one line:
    under nox -R nothing installs the pins), and the pinned files are the bytes their
    wheels' RECORDs name (a fresh env, a warm one, nox -R alike), before any test. Every
    hashed file after a repair (``gone``). The files that matched are kept by stat key in
    the env (:data:`accelgrid.host.inputs.HASHED_STORE`): an unchanged one is not hashed
    again."""
    session, cell = state.session, state.cell
    # One subprocess asks the env's python its import path (the inputs' check) and its
    # site-packages (the link to the checkout): a python started costs a warm run.
    try:
        state.path, state.site = inputs.interpreter(state.python)
    except OSError as exc:
        raise AccelgridError(f"reading the env's inputs: {exc}") from None
    state.found_at = time.monotonic()
    state.found = found = _checked_inputs(
        cell, state.python, True if state.gone else None, state.path,
        store=state.envdir / inputs.HASHED_STORE)
    if found.differences:
        hint = ("" if _installs(session) else
                ": nothing was installed (nox -R / --no-install); run without -R to "
                "install the pins")
        fail(session, inputs.one_line(cell.name, found.differences) + hint)
    state.changes_env = state.changes_env or bool(found.altered)
    return state


def repair_inputs(state: CellSession) -> CellSession:
    """Reinstall, with one line, the pinned distributions whose files are not their
    RECORD's bytes, even under nox -R: the versions stay, only their files come back;
    each reinstall is checked again, every file (a reinstall may add a .pth)."""
    session, cell, python, plan = state.session, state.cell, state.python, state.plan
    found = state.found
    assert found is not None and plan is not None
    if not found.altered:
        return state
    names = sorted({a.name for a in found.altered})
    session.log(f"{inputs.altered_line(cell.name, found.altered)}: reinstalling "
                f"{', '.join(names)}")
    envbuild.reinstall(session, cell, plan, python, names)
    found = _checked_inputs(cell, python, full=True)
    if found.altered and not found.differences:
        # The same bytes again: uv's unpacked copy holds them, an env linked to its
        # cache (built before cell envs were copies) was edited in place.
        session.log(f"{inputs.altered_line(cell.name, found.altered)} again: uv's "
                    "cache holds the same bytes (an env linked to it was edited in "
                    f"place): uv cache clean {' '.join(names)}, then reinstalling")
        envbuild.reinstall(session, cell, plan, python, names, clean_cache=True)
        found = _checked_inputs(cell, python, full=True)
    if not found.ok:
        fail(session, _inputs_line(cell, found) + " after a reinstall: delete "
             f"{state.envdir} and run again")
    session.log(f"{cell.name}: reinstalled {', '.join(names)} "
                f"[{time.monotonic() - state.found_at:.1f} s]")
    return state


def stamp(state: CellSession) -> CellSession:
    """A fresh install, checked, is stamped: the next run skips its install steps."""
    if state.installed_now:
        env_stamp.write_stamp(state.envdir, state.pins)
    return state


def check_link(state: CellSession) -> CellSession:
    """How the env gets this accelgrid: linked to the runner's checkout (its python
    imports it from there: venvs.PTH), else installed from a wheel (the in-cell plugin,
    found through its pytest11 entry point) once per version; a wheel named by
    $ACCELGRID_WHEEL every time (a rebuilt wheel keeps its version)."""
    state.checkout = venvs.runner_checkout()
    if state.checkout is not None:
        assert state.site is not None
        relink = not venvs.linked(state.site, state.checkout)
        state.changes_env = state.changes_env or relink
        return state
    wanted = venvs.self_requirement()
    if not wanted.startswith("accelgrid==") \
            or venvs.installed_accelgrid(state.python) != __version__:
        state.wheel = wanted
        state.changes_env = True
    return state


def link(state: CellSession) -> CellSession:
    """The env linked to the checkout (its source compiled ahead), or accelgrid
    installed into it, as :func:`check_link` found."""
    session, cell, python = state.session, state.cell, state.python
    if state.checkout is not None:
        venvs.link_project(python, state.checkout, site=state.site)
        venvs.compile_source(state.checkout)
    elif state.wheel is not None:
        wanted = state.wheel
        from_wheel = not wanted.startswith("accelgrid==")
        session.log(f"{cell.name}: installing accelgrid {__version__} (no dependencies: "
                    f"the cell's pins bring what a cell needs): {wanted}")
        session.install("--no-deps", *(("--reinstall-package", "accelgrid") if from_wheel
                                       else ()), wanted, silent=True)
        got = venvs.installed_accelgrid(python)
        if got != __version__:
            fail(session, f"{cell.name}: the env has accelgrid {got} after installing "
                          f"{wanted}, not the runner's {__version__}")
    return state


def run(state: CellSession) -> CellSession:
    """The cell's run (:func:`accelgrid.run.cell.run_cell`): one request, with the
    session's preflight; the run ``accelgrid run`` started ahead, held until now, when it
    is this one. Under --install-only (the env is ready) nothing runs."""
    session, cell = state.session, state.cell
    if _install_only(session):
        state.done = True
        return state
    assert state.checked is not None
    request = RunRequest(cell, state.python, state.matrix.root, state.out, state.checked,
                         tuple(session.posargs), state.workers, finalized=write_op_pages)
    try:
        held = HEAD_START.take(request) if HEAD_START is not None else None
        state.rc = run_cell(request, prestarted=held)
    except OSError as exc:  # a full disk or read-only results folder: one line, no traceback
        problem = jsonio.storage_problem(exc)
        if problem is None:
            raise
        fail(session, f"{cell.name}: {problem}")
    return state


def check_run(state: CellSession) -> CellSession:
    """What the run ran on is what the matrix pins (env.json), and it passed."""
    folder = results.last_run(state.out / state.cell.name)[1]
    _inputs_after_run(state.session, state.cell, folder, state.accepted)
    if state.rc != 0:
        fail(state.session, f"{state.cell.name}: pytest exited with {state.rc} (results in "
                             f"{folder})")
    return state


# A cell session, step by step (as run/cell.py's STEPS): the host and the preflight; the
# env built, checked and linked (or, --no-venv, the interpreter's packages accepted); the
# run and its check.
ENV_STEPS: tuple[SessionStep, ...] = (
    plan_env, build, check_inputs, repair_inputs, stamp, check_link, link)
NO_VENV_STEPS: tuple[SessionStep, ...] = (accept_inputs,)


def steps_of(state: CellSession) -> tuple[SessionStep, ...]:
    """The session's steps: with a venv (:data:`ENV_STEPS`) or on the current
    interpreter (``--no-venv``: :data:`NO_VENV_STEPS`)."""
    here = isinstance(state.session.virtualenv, PassthroughEnv)
    return (check_host, *(NO_VENV_STEPS if here else ENV_STEPS), run, check_run)


def _install_only(session: nox.Session) -> bool:
    """Whether nox runs with --install-only: its option, where this nox keeps it, else
    session.run's answer (None under --install-only), at the cost of a python started."""
    config = getattr(getattr(session, "_runner", None), "global_config", None)
    flag = getattr(config, "install_only", None)
    if isinstance(flag, bool):
        return flag
    return session.run(sys.executable, "-c", "pass", silent=True, external=True,
                       log=False) is None


def _checked_inputs(cell: Cell, python: str, full: bool | None = None,
                    path: list[str] | None = None, store: Path | None = None
                    ) -> inputs.Checked:
    try:
        return inputs.check(cell, install.planned_torch(cell), python, full=full, path=path,
                            store=store)
    except OSError as exc:
        raise AccelgridError(f"reading the env's inputs: {exc}") from None


def _inputs_line(cell: Cell, found: inputs.Checked) -> str:
    parts = []
    if found.differences:
        parts.append(inputs.one_line(cell.name, found.differences))
    if found.altered:
        parts.append(inputs.altered_line(cell.name, found.altered))
    return "; ".join(p if i == 0 else p.removeprefix(f"{cell.name}: ")
                     for i, p in enumerate(parts))


def _installs(session: nox.Session) -> bool:
    """Whether nox runs session.install (not under -R / --no-install)."""
    config = getattr(getattr(session, "_runner", None), "global_config", None)
    return not getattr(config, "no_install", False)


def _inputs_after_run(session: nox.Session, cell: Cell, folder: Path,
                      accepted: inputs.Checked | None) -> None:
    """env.json names what the run's test processes ran on: the pins (or, with inputs
    accepted, those inputs, recorded under ``inputs``), else the cell fails in one line."""
    env_file = folder / contract.ENV_FILE
    env, err = jsonio.read_json(env_file)
    if err or not isinstance(env, dict):
        return   # no env.json: the run failed before it, which its exit status says
    if accepted is not None:
        env["inputs"] = {"accepted_mismatch": [str(d) for d in accepted.differences],
                         "altered": [str(a) for a in accepted.altered],
                         "accepted_by": f"{inputs.ACCEPT}=1"}
        jsonio.write_json(env_file, env)
    wanted = inputs.pins(cell, install.planned_torch(cell))
    diffs = inputs.after_run(env, wanted, accepted.differences if accepted else ())
    if diffs:
        fail(session, f"{cell.name}: {env_file} says the run ran on other inputs than "
             "the matrix pins: " + "; ".join(map(str, diffs)))


def _describe(cell: Cell) -> str:
    return (f"{cell.device} / torch {cell.pins['torch']} / profile {cell.profile}: "
            f"{', '.join(cell.suites)}")


def register(matrix: Matrix) -> list[str]:
    """Register a nox session per cell; returns the sessions a plain ``nox`` runs.

    A cell whose device is not on this host gets a session without an environment
    (``python=False``) that only says so: nox would otherwise build its venv first.
    ``ACCELGRID_SKIP_DETECT=1`` registers every cell as runnable."""
    reasons = {name: why for name, dev in matrix.devices.items()
               if (why := detect.absent_reason(name, dev.detect))}
    absent = {} if os.environ.get(contract.SKIP_DETECT) else reasons
    for cell in matrix.cells:
        if cell.device in absent:

            def _absent(session: nox.Session, _cell: Cell = cell) -> None:
                fail(session, f"{_cell.name}: {absent[_cell.device]}")

            _absent.__doc__ = _describe(cell)
            nox.session(name=cell.name, python=False, tags=list(cell.tags),
                        default=False)(_absent)
            continue

        # Its torch's runtime bundle not sourced, or the runner's hardware declaration
        # wrong (unknown, or not what the host has): the session stops first thing, with
        # no env to create for it. The session's run reuses this check.
        host = preflight.host_check(cell, absent=reasons.get(cell.device))

        def _session(session: nox.Session, _cell: Cell = cell,
                     _host: preflight.HostCheck = host) -> None:
            run_cell_session(session, matrix, _cell, _host)

        _session.__doc__ = _describe(cell)
        python: str | bool = False if host.problem else cell.python
        nox.session(name=cell.name, python=python, venv_backend="uv",
                    tags=list(cell.tags), default=False)(_session)
    present = [d for d in matrix.axes["device"] if d in matrix.devices and d not in reasons]
    return [c.name for c in matrix.cells
            if c.device in present and c.is_default_torch and c.profile == matrix.default_profile
            and not c.manual]


def prepared_python(root: Path, cell: Cell, env: dict[str, str] | None = None) -> str:
    """Create or refresh ``cell``'s nox env (``--install-only``) and return its python.
    Interrupted, it stops nox and the installs it started (its stamp is then gone, so
    the next run installs again)."""
    from ..base import lifetime

    cmd = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", cell.name,
           "--install-only"]
    proc = lifetime.run_group(cmd, cwd=root, env=env)
    if proc.returncode != 0:
        raise AccelgridError(f"{cell.name}: preparing its env failed:\n{proc.stdout[-2000:]}")
    return str(venvs.python_in(venvs.env_dir(root, cell)))
