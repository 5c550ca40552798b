"""pip's configuration on this host, carried over to uv (which reads none of it).

pip's effective settings come from ``pip config`` run as a subprocess (every file pip
reads, ``install`` over ``global``, PIP_* variables over both) and become UV_* variables
for the cell envs' installs (:mod:`accelgrid.host.install`) and PIP_* build arguments for
the container images (:mod:`accelgrid.commands.containers`). Host side only: nothing that
runs in a cell asks pip anything (tests/project/test_in_cell.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping

# pip setting -> uv environment variable. pip merges all its indexes and picks the best
# version, so uv must do the same (unsafe-best-match) or a pin found only on the default
# index fails when an extra index also carries that package.
_PIP_TO_UV = {
    "index-url": "UV_INDEX_URL",
    "extra-index-url": "UV_EXTRA_INDEX_URL",
    "find-links": "UV_FIND_LINKS",
    "constraint": "UV_CONSTRAINT",
    "cert": "SSL_CERT_FILE",
    "trusted-host": "UV_INSECURE_HOST",
}


def pip_settings(python: str | None = None) -> dict[str, str]:
    """pip's effective configuration (files and PIP_* variables) as {setting: value}.

    Read through ``pip config list`` so every config file pip reads is honoured, with
    ``install`` overriding ``global`` and PIP_* variables overriding both, as pip does.
    """
    python = python or sys.executable
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    rank = {"global": 0, "install": 1}
    best: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(?P<section>[^.]*)\.(?P<key>[\w-]+)='(?P<value>.*)'$", line.strip())
        if not m:
            continue
        section = m["section"]
        if section not in rank and section != ":env:":
            continue
        level = 2 if section == ":env:" else rank[section]
        key = m["key"]
        if key not in best or level >= best[key][0]:
            best[key] = (level, m["value"])
    settings = {k: v for k, (_, v) in best.items()}
    for key in _PIP_TO_UV:
        env_name = "PIP_" + key.upper().replace("-", "_")
        if os.environ.get(env_name):
            settings[key] = os.environ[env_name]
    return settings


def pip_config_files(python: str | None = None) -> list[str] | None:
    """Every configuration file pip would read (present or not), as ``pip config debug``
    lists them; None when pip cannot say."""
    try:
        proc = subprocess.run([python or sys.executable, "-m", "pip", "config", "debug"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return [m["path"] for m in re.finditer(r"^\s+(?P<path>.+), exists: (?:True|False)$",
                                           proc.stdout, re.M)]


def uv_env_from_pip(settings: Mapping[str, str], env: Mapping[str, str] | None = None
                    ) -> dict[str, str]:
    """UV_* variables carrying pip's configuration over; existing UV_* settings win."""
    env = os.environ if env is None else env
    out: dict[str, str] = {"UV_COMPILE_BYTECODE": "1"}
    for key, uv_name in _PIP_TO_UV.items():
        value = settings.get(key)
        if value and uv_name not in env:
            # uv splits UV_FIND_LINKS at commas (its index lists at spaces, as pip does).
            out[uv_name] = ("," if uv_name == "UV_FIND_LINKS" else " ").join(value.split())
    if ("extra-index-url" in settings or "find-links" in settings) and (
        "UV_INDEX_STRATEGY" not in env
    ):
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out
