"""Working inside a cell by hand: the variables a run of the cell gives its tests, and a
shell (or one command) in the cell's env with them.

The variables come from the runner's own functions: :func:`accelgrid.run.cellenv.cell_env`
(device, profile, hardware family and driver, accelgrid's contract, the cell's known
issues) and the first pass of :func:`accelgrid.run.passes.passes` (a cpu cell hides the
host's accelerators; one device is pinned). Left out are what only a run has: its id and
its pytest arguments. A test run by hand records into ``results/<cell>/.debug/``, which no
grid reads and the cell's next full run clears.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .. import results
from ..base import contract, jsonio
from ..base.errors import InvalidInput
from ..config.model import Cell, Matrix
from ..host import detect, inputs, install, venvs
from ..run import cellenv, preflight
from ..run import passes as pass_plan
from ..run.cell import plan_inputs

DEBUG = ".debug"   # results/<cell>/.debug/: a dot folder, so grids never take it for a cell


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _comment(text: str) -> str:
    """A shell comment line of ``text``: control characters (a newline would end the
    comment and run the rest) shown as escapes."""
    return "# " + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True)
class CellEnv:
    """The cell's env and what a run of the cell changes in the environment it starts in."""

    cell: str
    env_dir: Path | None          # None: --no-venv, the interpreter as it is
    python: Path
    results: Path                 # where a test run by hand records
    pass_name: str                # the run's pass whose variables these are
    set: dict[str, str]           # new or changed by the run
    unset: tuple[str, ...]        # removed by the run (e.g. another cell's known issues)

    def activation(self, base: Mapping[str, str]) -> dict[str, str]:
        """What activating the env sets: VIRTUAL_ENV, and its bin/ first on PATH (nothing
        for ``--no-venv``: the interpreter and PATH stay as they are, as in the run)."""
        if self.env_dir is None:
            return {}
        path = base.get("PATH", "")
        return {"VIRTUAL_ENV": str(self.env_dir),
                "PATH": os.pathsep.join(p for p in (str(self.python.parent), path) if p)}

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` as the cell's tests see it, with the env activated."""
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.set)
        env.update(self.activation(base))
        env.pop("PYTHONHOME", None)  # would point the env's python at another prefix
        return env

    def exports(self) -> str:
        """Shell lines for ``eval``: the run's variables, then the activation."""
        # Comments hold paths (a folder name may hold a newline: the rest of the line
        # would run); names the shell cannot set are left out rather than spliced in.
        lines = [_comment(f"{self.cell}: the variables a run gives its tests "
                          f"(pass {self.pass_name})"),
                 _comment(f"env: {self.env_dir or '--no-venv: no env, the interpreter as it is'}"),
                 _comment(f"python: {self.python}"),
                 _comment(f"a test run by hand records into {self.results}")]
        lines += [f"unset {name}" for name in self.unset if _SHELL_NAME.match(name)]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.set.items())
                  if _SHELL_NAME.match(k)]
        odd = [k for k in (*self.unset, *self.set) if not _SHELL_NAME.match(k)]
        if odd:
            lines.append(_comment(f"{len(odd)} variable(s) whose names a shell cannot set "
                                  "left out (--json lists them)"))
        if self.env_dir is not None:
            lines += ["# the env, activated",
                      f"export VIRTUAL_ENV={shlex.quote(str(self.env_dir))}",
                      f'export PATH={shlex.quote(str(self.python.parent))}"${{PATH:+:$PATH}}"']
        else:
            lines += [f"# run tests with {shlex.quote(str(self.python))} -m pytest ..."]
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict:
        return {"cell": self.cell, "env_dir": str(self.env_dir) if self.env_dir else None,
                "python": str(self.python),
                "results": str(self.results), "pass": self.pass_name,
                "set": dict(sorted(self.set.items())), "unset": list(self.unset)}


def cell_env(matrix: Matrix, name: str, base: Mapping[str, str] | None = None,
             note: TextIO | None = None, no_venv: bool = False) -> CellEnv:
    """The variables a run of cell ``name`` gives its tests, against ``base`` (default:
    this process's environment). Raises UnknownName for a cell that does not exist and
    :class:`~accelgrid.host.venvs.NotBuilt` when its env is not built yet. Writes what the
    run would write before its tests start (the cell's known issues) into the
    ``.debug`` folder, which it empties first. Notes (the runner's hardware line, a
    relinked env) go to ``note`` (a file; default stderr), never to stdout, which is for
    ``eval``. ``no_venv``: as ``nox --no-venv -s CELL`` runs it, on this interpreter
    with its installed packages (InvalidInput when they are not the cell's pins, torch's
    version and build among them, as the run refuses them, unless
    ``ACCELGRID_ACCEPT_INPUTS=1``)."""
    note = note or sys.stderr
    cell = matrix.cell(name)
    root = matrix.root.resolve()   # as the noxfile's ROOT: every path printed is absolute
    if no_venv:
        python = Path(sys.executable)
        # The run's own check (pins, not only torch's series); RECORD hashes are the run's.
        found = inputs.check(cell, install.planned_torch(cell), str(python), full=False)
        if found.differences and not inputs.accepted(base):
            raise InvalidInput(inputs.one_line(cell.name, found.differences) +
                               " (--no-venv runs on the current interpreter; "
                               f"{inputs.ACCEPT}=1 runs on it anyway)")
    else:
        python = venvs.built_python(root, cell)
        _, before = venvs.link_project(python, root)
        if before:
            print(f"accelgrid: {cell.name}: its env imported accelgrid from {before}; now "
                  f"from {root / 'src'}", file=note, flush=True)
    base = dict(os.environ if base is None else base)
    # Not resolved: a symlink planted as the cell folder or .debug is refused, never
    # followed to empty the folder it names.
    folder = results.results_root(root) / cell.name / DEBUG
    jsonio.refuse_symlink(folder, results.results_root(root))
    results.clear_for_run(folder)
    with contextlib.redirect_stdout(note):
        # The run's one preflight, as a session makes it for its run.
        checked = preflight.check(cell, root, base)
        env = cellenv.cell_env(cell, root, folder, base, checked=checked, python=python)
    first = _first_pass(cell, env, str(python))
    # As the run: the recorder's plan.json in .debug names the cell's pins and matrix entry.
    env.update({**dict(first.env), contract.PASS: first.name,
                contract.PLAN_INPUTS: plan_inputs(cell)})
    return CellEnv(
        cell=cell.name, env_dir=None if no_venv else venvs.env_dir(root, cell), python=python,
        results=folder, pass_name=first.name,
        set={k: v for k, v in env.items() if base.get(k) != v},
        unset=tuple(sorted(k for k in base if k not in env)))


def _first_pass(cell: Cell, env: Mapping[str, str], python: str | None = None) -> pass_plan.Pass:
    """The pass a test runs in, as the runner plans it for this host (an xpu cell's
    devices counted in its env, as the run counts them). With several devices the run
    pins one to each worker: by hand, one process, the first device."""
    workers = 1 if env.get(contract.WORKERS, "").strip() else None  # only None matters
    ids = detect.device_ids(cell.device_type, dict(env), python, cell.torch)
    plan = pass_plan.passes(cell, workers, ids)
    if plan[0].name == contract.PASS_PINNED:
        plan = pass_plan.passes(cell, None, ids[:1])
    return plan[0]


def run_in(found: CellEnv, command: Sequence[str], base: Mapping[str, str] | None = None
           ) -> int:
    """Run ``command`` (default: ``$SHELL``, else /bin/sh) in the cell's env with its
    variables. On POSIX this process becomes the command (its exit status is the
    command's; signals go straight to it); elsewhere it waits and returns the status."""
    env = found.environ(os.environ if base is None else base)
    argv = list(command) or [env.get("SHELL") or "/bin/sh"]
    if not command:
        where = found.env_dir or f"{found.python} (--no-venv)"
        print(f"accelgrid shell: {found.cell}: {where} with the variables of a run "
              f"(pass {found.pass_name}); records go to {found.results}; `exit` leaves",
              file=sys.stderr, flush=True)
    sys.stdout.flush()
    if os.name != "posix":
        try:
            return subprocess.call(argv, env=env)
        except FileNotFoundError:
            raise InvalidInput(f"no command {argv[0]!r} in the cell's env or on PATH") from None
    # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must not inherit that.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        raise InvalidInput(f"no command {argv[0]!r} in the cell's env or on PATH") from None
    except PermissionError as exc:
        raise InvalidInput(f"cannot run {argv[0]!r}: {exc.strerror}") from None
    return 0  # not reached: execvpe does not return
