"""nox sessions from the matrix: one session per cell, plus the project sessions.

``noxfile.py`` calls :func:`register`. A cell session checks the device is present and
its torch's runtime bundle sourced (:func:`accelgrid.host.detect.runtime_problem`), builds its
env with uv (pip's configuration carried over), installs the cell's pins from the right
index, and hands over to :mod:`accelgrid.run.cell`. With ``--no-venv`` it installs nothing
and runs on the current interpreter, refusing a torch of another version.

nox creates a session's env before the session's code runs, so a cell whose runtime is
missing on this host (or whose declared hardware is wrong) is registered without one
(``python=False``): it stops with the one line before anything is created.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nox
from nox.command import CommandFailed
from nox.virtualenv import PassthroughEnv

from .. import __version__, results
from ..base import contract, jsonio
from ..base.errors import AccelgridError, InvalidInput
from ..config.matrix import Cell, Matrix
from ..host import detect, inputs, install, venvs
from ..results import environment, history, shards
from ..run import console, preflight
from ..run.cell import run_cell
from ..run.headstart import prestart
from ..run.passes import workers_override
from ..run.request import RunRequest
from . import actions


def _python_in(session: nox.Session) -> str:
    if isinstance(session.virtualenv, PassthroughEnv):
        return sys.executable
    bin_dir = Path(session.bin)
    exe = bin_dir / ("python.exe" if os.name == "nt" else "python")
    return str(exe)


def _fail(session: nox.Session, message: str) -> None:
    """Stop the session with one line, never showing a credential."""
    session.error(environment.redact_text(message))


def run_cell_session(session: nox.Session, matrix: Matrix, cell: Cell,
                     host: preflight.HostCheck | None = None) -> None:
    """The body of every cell session; ``host``: the host check its registration made."""
    global _IDLE_SINCE
    console.tolerant_console()
    try:
        _run_cell_session(session, matrix, cell, host)
    except AccelgridError as exc:  # e.g. an invalid known_issues.yaml: one line
        _fail(session, str(exc) if hasattr(exc, "problems") else f"{cell.name}: {exc}")
    finally:
        _IDLE_SINCE = time.time()


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


def _run_cell_session(session: nox.Session, matrix: Matrix, cell: Cell,
                      host: preflight.HostCheck | None = None) -> None:
    out = _shard_results(results.results_root(matrix.root), cell)
    # The host as the registration checked it (else now): the device, its runtime, the
    # hardware; once per run, the run and its env get this answer.
    if host is None:
        device = matrix.devices[cell.device]
        host = preflight.host_check(cell, absent=detect.absent_reason(cell.device,
                                                                      device.detect))
    if host.absent and not os.environ.get(contract.SKIP_DETECT):
        _fail(session, f"{cell.name}: {host.absent}")
    if host.problem:
        _fail(session, host.problem)
    # Everything the run reads is checked before anything is installed or replaced.
    checked = preflight.check(cell, matrix.root, host=host)
    workers = workers_override()
    python = _python_in(session)
    accepted: inputs.Checked | None = None
    if isinstance(session.virtualenv, PassthroughEnv):
        found = _checked_inputs(cell, python)
        if not found.ok:
            line = _inputs_line(cell, found)
            if not inputs.accepted():
                _fail(session, f"{line} (--no-venv runs on the current interpreter, which "
                      f"nothing installs into; {inputs.ACCEPT}=1 runs on it anyway, and the "
                      "results say so)")
            session.warn(f"{line}: running on them ({inputs.ACCEPT}=1); the results say so")
            accepted = found
        session.log(f"{cell.name}: --no-venv, using {python} with its installed packages")
    else:
        envdir = Path(session.bin).parent
        plan, pins, current = _install_plan(session, cell, envdir)
        session.env.update(plan.env)
        # Files gone: stamped, then damaged since; or unstamped, a kill mid-install. uv
        # would see the metadata and change nothing: reinstall straight away.
        gone = install.missing_files(envdir, remember=True) if envdir.is_dir() else None
        if not current or gone:
            prestart.cancel()   # the env changes under it: tests started ahead end
        if gone:
            session.log(f"{cell.name}: the env " + ("lost files since its install" if current
                        else "is incomplete, an interrupted earlier install") +
                        f" ({gone}): reinstalling its packages")
            current = False
        if not current:
            install.forget(envdir)
        installed_now = build_env(session, cell, plan, holds_pins=current, repair=bool(gone))
        if installed_now:
            gpu = install.cuda_build(envdir) if cell.device == install.CPU_DEVICE else None
            if gpu:   # never a cpu cell on a CUDA build without saying so: no stamp, stop
                _fail(session, f"{cell.name}: {gpu}: a cpu cell takes torch's CPU build "
                      f"({cell.index}, or set {contract.TORCH_INDEX} to an index with it)")
            _verified_or_repaired(session, cell, plan, envdir, python)
        # Whatever the stamp says: what is installed is what the matrix pins, and the
        # pinned files are the bytes their wheels' RECORDs name (a fresh env, a warm one,
        # nox -R alike), before any test.
        # One subprocess asks the env's python its import path (the inputs' check) and its
        # site-packages (the link to the checkout): a python started costs a warm run.
        try:
            path, site = inputs.interpreter(python)
        except OSError as exc:
            raise AccelgridError(f"reading the env's inputs: {exc}") from None
        _inputs_as_planned(session, cell, plan, python, full=True if gone else None,
                           path=path)
        if installed_now:
            install.write_stamp(envdir, pins)
        checkout = venvs.runner_checkout()
        if checkout is not None:
            # Its python imports accelgrid from the runner's checkout by itself (venvs.PTH).
            if not venvs.linked(site, checkout):
                prestart.cancel()   # started ahead, its python may not import it
            venvs.link_project(python, checkout, site=site)
            venvs.compile_source(checkout)
        else:
            _install_accelgrid(session, cell, python)
    if _install_only(session):   # the env is ready, run nothing
        return
    try:
        request = RunRequest(cell, python, matrix.root, out, checked, tuple(session.posargs),
                             workers, finalized=write_op_pages)
        # The run `accelgrid run` started ahead, held until now, when it is this one.
        rc = run_cell(request, prestarted=prestart.take(request))
    except OSError as exc:  # a full disk or read-only results folder: one line, no traceback
        problem = jsonio.storage_problem(exc)
        if problem is None:
            raise
        _fail(session, f"{cell.name}: {problem}")
    folder = results.last_run(out / cell.name)[1]
    _inputs_after_run(session, cell, folder, accepted)
    if rc != 0:
        _fail(session, f"{cell.name}: pytest exited with {rc} (results in {folder})")


def _install_accelgrid(session: nox.Session, cell: Cell, python: str) -> None:
    """An accelgrid installed from a wheel runs the cell: the env gets its version (the in-cell
    plugin, found through its pytest11 entry point), once per version; a wheel named by
    $ACCELGRID_WHEEL is installed every time (a rebuilt wheel keeps its version)."""
    wanted = venvs.self_requirement()
    from_wheel = not wanted.startswith("accelgrid==")
    if not from_wheel and venvs.installed_accelgrid(python) == __version__:
        return
    prestart.cancel()
    session.log(f"{cell.name}: installing accelgrid {__version__} (no dependencies: the "
                f"cell's pins bring what a cell needs): {wanted}")
    session.install("--no-deps", *(("--reinstall-package", "accelgrid") if from_wheel else ()),
                    wanted, silent=True)
    got = venvs.installed_accelgrid(python)
    if got != __version__:
        _fail(session, f"{cell.name}: the env has accelgrid {got} after installing {wanted}, "
                       f"not the runner's {__version__}")


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


def _inputs_as_planned(session: nox.Session, cell: Cell, plan: install.InstallPlan,
                       python: str, full: bool | None = None,
                       path: list[str] | None = None) -> None:
    """Stop in one line when the env holds other versions or builds than the matrix pins
    (under nox -R nothing installs the pins); reinstall, with one line, the pinned
    distributions whose files are not their RECORD's bytes, even under nox -R: the
    versions stay, only their files come back. ``full``: every hashed file (a repair);
    a reinstall is checked so too (its env asked again: a reinstall may add a .pth).
    ``path``: the env's import path, when asked already. The files that matched are kept
    by stat key in the env (:data:`accelgrid.host.inputs.HASHED_STORE`): an unchanged one
    is not hashed again."""
    start = time.monotonic()
    envdir = Path(session.bin).parent
    found = _checked_inputs(cell, python, full, path, store=envdir / inputs.HASHED_STORE)
    if found.differences:
        hint = ("" if _installs(session) else
                ": nothing was installed (nox -R / --no-install); run without -R to "
                "install the pins")
        _fail(session, inputs.one_line(cell.name, found.differences) + hint)
    if found.altered:
        names = sorted({a.name for a in found.altered})
        session.log(f"{inputs.altered_line(cell.name, found.altered)}: reinstalling "
                    f"{', '.join(names)}")
        _reinstall(session, cell, plan, python, names)
        found = _checked_inputs(cell, python, full=True)
        if found.altered and not found.differences:
            # The same bytes again: uv's unpacked copy holds them, an env linked to its
            # cache (built before cell envs were copies) was edited in place.
            session.log(f"{inputs.altered_line(cell.name, found.altered)} again: uv's "
                        "cache holds the same bytes (an env linked to it was edited in "
                        f"place): uv cache clean {' '.join(names)}, then reinstalling")
            _reinstall(session, cell, plan, python, names, clean_cache=True)
            found = _checked_inputs(cell, python, full=True)
        if not found.ok:
            _fail(session, _inputs_line(cell, found) + " after a reinstall: delete "
                  f"{Path(session.bin).parent} and run again")
        session.log(f"{cell.name}: reinstalled {', '.join(names)} "
                    f"[{time.monotonic() - start:.1f} s]")


def _installs(session: nox.Session) -> bool:
    """Whether nox runs session.install (not under -R / --no-install)."""
    config = getattr(getattr(session, "_runner", None), "global_config", None)
    return not getattr(config, "no_install", False)


def _reinstall(session: nox.Session, cell: Cell, plan: install.InstallPlan, python: str,
               names: list[str], *, clean_cache: bool = False) -> None:
    """:func:`accelgrid.host.inputs.reinstall` through the plan's steps, or stop in one
    line."""
    from nox.virtualenv import find_uv

    prestart.cancel()
    has_uv, uv = find_uv()[:2]   # (found, path[, version]): nox's own uv
    if not has_uv:
        _fail(session, f"{cell.name}: uv is not installed: cannot reinstall {names}")
    failed = inputs.reinstall(uv, python, names, [(s.args, s.env) for s in plan.steps],
                              {**os.environ, **plan.env}, clean_cache=clean_cache)
    if failed:
        _fail(session, f"{cell.name}: reinstalling {', '.join(names)} failed:\n{failed}")


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
        _fail(session, f"{cell.name}: {env_file} says the run ran on other inputs than "
              "the matrix pins: " + "; ".join(map(str, diffs)))


def _install_plan(session: nox.Session, cell: Cell, envdir: Path
                  ) -> tuple[install.InstallPlan, dict, bool]:
    """The plan the env is built with, its stamp and whether the env holds it already.
    A cpu cell whose CPU index cannot be reached takes torch's CPU build from pip's
    configuration, saying so in one line; a warm env asks no index."""
    plans = install.plans(cell, envdir)
    held = install.held_plan(envdir, plans)
    if held is not None:
        return *held, True
    plan = plans[0]
    problem = install.local_wheel(cell)[1] or install.index_problem(plan.index)
    if problem and len(plans) > 1:
        session.warn(f"{cell.name}: {problem}: {install.CPU_FALLBACK}")
        plan, problem = plans[1], None
    if problem:
        _fail(session, f"{cell.name}: {problem}")
    return plan, install.pins(plan, envdir), False


def _verified_or_repaired(session: nox.Session, cell: Cell, plan: install.InstallPlan,
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
        _fail(session, f"{cell.name}: the env is still incomplete after a reinstall "
                       f"({broken}): delete {envdir} and run again")


# When nox last had nothing of ours to do (the noxfile loaded, a cell session ended): a
# venv made after it was made for the session now starting, in about the time since.
_IDLE_SINCE = time.time()
_INDEX_OPTIONS = ("--extra-index-url", "--index-url", "-i", "--find-links", "-f")


def build_env(session: nox.Session, cell: Cell, plan: install.InstallPlan, *,
              holds_pins: bool = False, reinstall: bool = False, repair: bool = False
              ) -> bool:
    """Install ``plan``'s steps, one numbered line each before (what is installed) and
    after (what changed, seconds taken); the venv nox made is step 1. ``holds_pins``: the
    env's stamp says it holds them (:func:`accelgrid.host.install.env_holds`), each step is
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
                        f"env holds the cell's pins ({install.STAMP} matches)")
        return False
    installed = True
    can_fall_back = install.can_fall_back(cell, os.environ.get(contract.TORCH_INDEX))
    for number, step in enumerate(plan.steps, 2):
        # The index options and their URLs are in the description already.
        wanted = " ".join(environment.redact_text(a) for i, a in enumerate(step.args)
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
                _fail(session, (clear + "\n" if clear else "")
                      + f"{cell.name}: installing {step.description} failed after "
                      f"{time.monotonic() - start:.1f} s:\n" + "\n".join(tail))
            out.seek(0)
            text = out.read()
        # In GitHub Actions: uv's own output, folded away under the step's line.
        with actions.group(f"{cell.name}: [{number}/{total}] uv's output"):
            if actions.active():
                sys.stdout.write(environment.redact_text(text).rstrip("\n") + "\n")
        installed = installed and bool(text.strip())
        did = (install.uv_changes(text, wanted.split()) if text.strip()
               else "skipped: nox reuses the env without installing (-R / --no-install)")
        session.log(f"{cell.name}: [{number}/{total}] {did} [{time.monotonic() - start:.1f} s]")
    return installed


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
                _fail(session, f"{_cell.name}: {absent[_cell.device]}")

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
