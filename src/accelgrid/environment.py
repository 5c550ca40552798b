"""Environment handling: profile flags, flag-value rules, secret redaction, pip -> uv config.

Flags such as ``PYTORCH_DEBUG_XPU_FALLBACK`` are read by torch as integers at import
time; anything but ``0``/``1`` can break ``import torch``, so they are checked up front.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping

# Flags torch / the Intel graphics compiler parse as integers when torch loads.
INTEGER_FLAGS = frozenset(
    {
        "PYTORCH_DEBUG_XPU_FALLBACK",
        "PYTORCH_ENABLE_XPU_FALLBACK",
        "PYTORCH_ENABLE_MPS_FALLBACK",
        "OverrideDefaultFP64Settings",
        "IGC_EnableDPEmulation",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "TORCH_SHOW_CPP_STACKTRACES",
    }
)

SECRET_MARKERS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL")
REDACTED = "<redacted>"

# Env vars worth recording in provenance (the flags that change what torch does).
RECORDED_PREFIXES = (
    "ACCELGRID_", "PYTORCH_", "TORCH_", "CUDA_", "CUBLAS_", "NCCL_", "ZE_", "SYCL_", "IGC_",
    "ONEAPI_", "OverrideDefault", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "KMP_", "PIP_", "UV_",
)


def flag_value_problem(name: str, value: str) -> str | None:
    """Why ``value`` is not acceptable for env var ``name``, or None."""
    if name in INTEGER_FLAGS and value not in ("0", "1"):
        return (
            f"{name} is read by torch as an integer when it loads; "
            f"use 0 or 1, not {value!r}"
        )
    return None


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to write: secret-looking names lose their value, URLs their passwords."""
    out = {}
    for name, value in env.items():
        if is_secret(name):
            out[name] = REDACTED
        else:
            out[name] = _URL_USERINFO.sub(r"\g<scheme>" + REDACTED + "@", value)
    return out


def recorded_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The flags worth recording from ``env`` (default: os.environ), redacted."""
    env = os.environ if env is None else env
    picked = {k: v for k, v in env.items() if k.startswith(RECORDED_PREFIXES)}
    return dict(sorted(redact(picked).items()))


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


def uv_env_from_pip(settings: Mapping[str, str], env: Mapping[str, str] | None = None
                    ) -> dict[str, str]:
    """UV_* variables carrying pip's configuration over; existing UV_* settings win."""
    env = os.environ if env is None else env
    out: dict[str, str] = {"UV_COMPILE_BYTECODE": "1"}
    for key, uv_name in _PIP_TO_UV.items():
        value = settings.get(key)
        if value and uv_name not in env:
            out[uv_name] = " ".join(value.split())
    if ("extra-index-url" in settings or "find-links" in settings) and (
        "UV_INDEX_STRATEGY" not in env
    ):
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out
