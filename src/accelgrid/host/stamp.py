"""A warm env: the stamp a successful install leaves in the env folder (:data:`STAMP`),
of everything the install depended on (:func:`pins`: the plan's steps, pip's
configuration as uv gets it, uv's variables, a local wheel's size and time, the env's
Python). A later run whose pins give the same stamp, in an env whose installed
distributions are still those it had (:func:`env_holds`), installs nothing: two no-op
``uv pip install`` calls cost seconds per run. The plans themselves: :mod:`.install`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..base import contract, jsonio
from ..config.model import Cell
from . import install

STAMP = ".accelgrid-pins.json"   # in the env folder


def pins(plan: install.InstallPlan, envdir: Path, env: Mapping[str, str] | None = None
         ) -> dict[str, Any]:
    """What an install of ``plan`` into ``envdir`` depends on, as a stamp: the digest of
    the steps (pins, index, their variables), pip's configuration as uv gets it, uv's own
    UV_* variables (``env``, default os.environ), the local torch wheel's size and time and
    the env's Python, beside the plan as it may be shown (credentials only in the
    digest)."""
    uv_env = os.environ if env is None else env
    wheels = {a: state for step in plan.steps for a in step.args
              if a.endswith(".whl") and (state := _wheel_state(a)) is not None}
    material = {
        "steps": [[list(s.args), sorted(s.env.items())] for s in plan.steps],
        "env": sorted(plan.env.items()),
        "uv": sorted((k, v) for k, v in uv_env.items() if k.startswith("UV_")),
        "wheels": sorted(wheels.items()),
        "python": _python_of(envdir),
        **({"nightly_day": install.nightly_day()} if plan.daily else {}),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return {"cell": plan.cell, "digest": digest, "plan": plan.as_dict()}


def _wheel_state(path: str) -> list[int] | None:
    """A local wheel's size and time, None where it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def env_holds(envdir: Path, wanted: dict[str, Any]) -> bool:
    """Whether ``envdir``'s stamp is ``wanted``'s and its installed distributions are the
    ones it was written with (anything installed, removed or upgraded since: False). A
    missing, partial or unreadable stamp is False."""
    stamp, err = jsonio.read_json(envdir / STAMP)
    return (not err and isinstance(stamp, dict) and stamp.get("digest") == wanted["digest"]
            and stamp.get("distributions") is not None
            and stamp.get("distributions") == _distributions(envdir))


def plans(cell: Cell, envdir: Path) -> list[install.InstallPlan]:
    """The plans ``cell``'s env may be built with: from its index, then (a cpu cell whose
    CPU index may be out of reach) torch's CPU build from pip's configuration."""
    torch_index = os.environ.get(contract.TORCH_INDEX)
    uv = install.uv_env(envdir)
    found = [install.plan(cell, torch_index=torch_index, uv_env=uv)]
    if install.can_fall_back(cell, torch_index):
        found.append(install.plan(cell, torch_index=torch_index, uv_env=uv, cpu_fallback=True))
    return found


def held_plan(envdir: Path, candidates: Sequence[install.InstallPlan]
              ) -> tuple[install.InstallPlan, dict[str, Any]] | None:
    """The first of ``candidates`` whose pins the env's stamp says it holds, with them."""
    for candidate in candidates:
        wanted = pins(candidate, envdir)
        if env_holds(envdir, wanted):
            return candidate, wanted
    return None


def write_stamp(envdir: Path, wanted: dict[str, Any]) -> None:
    """Record a successful install of ``wanted`` (atomically)."""
    jsonio.write_json(envdir / STAMP, {**wanted, "distributions": _distributions(envdir)})


def forget(envdir: Path) -> None:
    """Drop the stamp before an install: one that fails half way leaves none."""
    (envdir / STAMP).unlink(missing_ok=True)


def _python_of(envdir: Path) -> str:
    """The env's interpreter as pyvenv.cfg records it (home and version)."""
    try:
        text = (envdir / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(sorted(line.strip() for line in text.splitlines()
                            if line.split("=")[0].strip() in ("home", "version",
                                                               "version_info")))


def _distributions(envdir: Path) -> str | None:
    """A digest of the names of the distributions installed in the env (name and
    version: ``torch-2.13.0+cpu.dist-info``), or None without a site-packages folder."""
    folders = [*envdir.glob("lib/python*/site-packages"), envdir / "Lib" / "site-packages"]
    names: list[str] = []
    found = False
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        found = True
        names += (n for n in entries if n.endswith((".dist-info", ".egg-info")))
    if not found:
        return None
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()
