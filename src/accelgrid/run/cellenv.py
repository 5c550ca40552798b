"""The environment a cell's pytest starts with.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base import contract, jsonio
from ..base.errors import AccelgridError
from ..config import known_issues
from ..config.model import Cell
from ..results.provenance import project_commit
from . import preflight
from .console import say

# The pytest plugins of every run: crash isolation and time limits (the matrix's tools),
# and accelgrid's own (by module name, as its entry point and a conftest name it: once).
RUN_PLUGINS = ("xdist.plugin", "pytest_timeout", contract.PLUGIN)


def cell_env(cell: Cell, root: Path, folder: Path, base: dict[str, str] | None = None, *,
             checked: preflight.Preflight,
             python: str | Path | None = None, quiet: bool = False,
             commit: tuple[str | None, bool] | None = None) -> dict[str, str]:
    """The environment the cell's pytest starts with: the host's, the cell's (device and
    profile), its hardware family's and driver's (``hardware.json`` in ``folder`` says which
    and how they were known), and accelgrid's own variables. ``checked``: the run's
    preflight, made once by the caller (against ``base``). ``python``: the interpreter the run
    starts; inside a virtual environment, the compilers' caches go there
    (:func:`compile_caches`). ``quiet``: the hardware line is not said (said already for
    this run). ``commit``: the project's commit and whether its tree is dirty, when the
    caller knows them (else asked of git)."""
    env = dict(os.environ if base is None else base)
    hardware = checked.hardware
    if hardware.problem:
        raise AccelgridError(hardware.problem)
    # What the cell sets, which env.json records with its values (the host's other
    # variables by name only: results.provenance.recorded_env).
    ours = {**cell.env, **hardware.env(cell)}
    env.update(ours)
    head, dirty = commit if commit is not None else project_commit(root)
    src = str(root / "src")
    ours.update({
        contract.CELL: cell.name,
        contract.DEVICE: cell.device,
        contract.TORCH: cell.torch,
        contract.TORCH_CHANNEL: cell.channel,
        contract.PROFILE: cell.profile,
        contract.RESULTS: str(folder),
        contract.COMMIT: head or "",
        contract.DIRTY: "1" if dirty else "0",
        # The plugin and the suites' helpers come from this checkout, not an install.
        "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        # pytest loads the plugins a run needs, not every one the interpreter has: on the
        # --no-venv H200 machine (nine plugins) a worker's first test came 5.0-5.8 s after
        # its start instead of 6.4-7.3 s, and a stray plugin can change how tests run.
        # More: PYTEST_PLUGINS in the caller's environment, or `-p NAME` after `--`.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_PLUGINS": ",".join(dict.fromkeys(
            [*RUN_PLUGINS, *(p.strip() for p in env.get("PYTEST_PLUGINS", "").split(",")
                             if p.strip())])),
    })
    env.update(ours)
    for key, value in compile_caches(python).items():
        if key not in env:  # the host's or the cell's own setting wins
            env[key] = ours[key] = value
    # The cell's known_issues.yaml entries, as JSON for the in-cell plugin.
    env.pop(contract.KNOWN_ISSUES, None)
    env.pop(contract.RECORDER_PID, None)  # a run started from inside a cell's test records
    issues = known_issues.cell_env(cell, root, folder, hardware=hardware.family,
                                   driver=hardware.driver, registry=checked.registry)
    env.update(issues)
    ours.update(issues)
    env[contract.SET_VARS] = ",".join(sorted(ours))
    if cell.hardware_env or cell.driver_env:
        extra = " ".join(f"{k}={v}" for k, v in hardware.env(cell).items()
                         if not k.startswith(contract.PREFIX))
        if not quiet:
            say(cell.name, hardware.describe() + (f": {extra}" if extra else ""))
        jsonio.write_json(folder / contract.HARDWARE_FILE, {
            "family": hardware.family, "how": hardware.how, "driver": hardware.driver,
            "note": hardware.note, "env": hardware.env(cell),
            **cell.device_type.host_inventory()})
    return env


# torch.compile's on-disk caches: inductor's (FX graphs, compiled C++ and Triton kernels)
# and Triton's own kernel cache. Torch's defaults are /tmp/torchinductor_<user> and
# ~/.triton/cache, shared by every torch on the host and gone with /tmp.
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
CACHE_DIR = "accelgrid-compile-cache"


def compile_caches(python: str | Path | None) -> dict[str, str]:
    """The compile caches' variables for a run on ``python``: folders of
    :data:`CACHE_DIR` in its virtual environment (the cell's env: its torch, its cache, so
    a warm re-run does not compile again and a rebuilt env starts clean); none for an
    interpreter outside one (``--no-venv`` on a system python: torch's defaults)."""
    if python is None:
        return {}
    env = Path(python).parent.parent  # not resolved: a venv's python links outside it
    if not (env / "pyvenv.cfg").is_file():
        return {}
    return {key: str(env / CACHE_DIR / sub) for key, sub in COMPILE_CACHES.items()}
