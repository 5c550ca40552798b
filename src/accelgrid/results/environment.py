"""Environment handling: profile flags, flag-value rules, secret redaction, pip -> uv config.

Flags such as ``PYTORCH_DEBUG_XPU_FALLBACK`` are read by torch as integers at import
time; anything but ``0``/``1`` can break ``import torch``, so they are checked up front.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping
from typing import Any, cast, overload

from .. import devices
from ..base import contract

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

# A variable whose name holds one of these is a secret, whatever its value looks like.
SECRET_MARKERS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "PASS", "PWD", "CREDENTIAL",
                  "AUTH", "COOKIE", "SESSION", "PRIVATE", "CERT_PASS", "SIGNATURE", "TKN",
                  "BEARER", "CREDS", "WEBHOOK")
# accelgrid's own variables that a marker would catch but that hold no secret.
NOT_SECRET = frozenset({contract.PASS})
REDACTED = "<redacted>"

# Values that are credentials whatever the variable is called: token formats with a
# recognisable prefix (GitHub, Hugging Face, AWS access keys, Slack, GitLab, OpenAI-style,
# npm, PyPI) and private-key blocks.
_TOKEN_SHAPES = re.compile(
    r"(?:\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,})\b"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))")
# Credentials in the shapes HTTP and JSON carry them, whatever names them: an
# Authorization scheme's token (Bearer/Basic: a word of token characters with a digit,
# an upper-case letter after the first or base64 padding, so prose like "Basic tests"
# stays), a JWT (three base64url parts, the first two JSON objects: "eyJ"), and the
# value after a key that names a secret (``"aws_secret_access_key": "..."``,
# ``password=...``, ``X-Api-Key: ...``).
_AUTH_SCHEME = re.compile(
    r"\b(?P<scheme>Bearer|Basic|Token|Digest|bearer|basic)(?P<gap>\s+)"
    r"(?=[A-Za-z0-9._~+/-]*(?:[0-9]|[A-Za-z][A-Z]|[+/=]))[A-Za-z0-9._~+/-]{8,}=*")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# A quote as JSON, a JSON string inside JSON, or XML (JUnit) writes it.
_QUOTE = r"(?:\\?[\"']|&quot;|&#34;|&apos;|&#39;)?"
_VALUE = r"[^\s\"',;&<>\\]{6,}"
_KEY_AROUND = r"[A-Za-z0-9_.-]*" + _QUOTE + r"\s*[:=]\s*" + _QUOTE + ")"
_NOT_A_VALUE = r"(?!<redacted>|(?:Bearer|Basic|Token|Digest)\b|[0-9]+\b)"
# Names that only a secret has: any value after them goes.
_NAMED_SECRET = re.compile(
    r"(?P<key>\b[A-Za-z0-9_.-]*(?:secret|passw(?:or)?d|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credential)" + _KEY_AROUND + r"(?P<value>" + _NOT_A_VALUE + _VALUE + ")",
    re.IGNORECASE)
# Names an ordinary setting has too (max_tokens, tokenizer, token_type, author): the value
# goes only when it looks like a token (a digit, a capital or base64 characters in it).
_NAMED_TOKEN = re.compile(
    r"(?P<key>\b[A-Za-z0-9_.-]*(?:token(?!iz)|auth(?!or))" + _KEY_AROUND
    + r"(?P<value>" + _NOT_A_VALUE + r"(?-i:(?=[^\s\"',;&<>\\]*[0-9A-Z+/=]))" + _VALUE + ")",
    re.IGNORECASE)
_NAMED_HINTS = ("secret", "token", "passw", "key", "credential", "auth")
# A webhook URL is its own credential (whoever has it can post): its path goes, the host
# stays. Slack's hooks.slack.com/services/..., any host named hooks.*, a .../webhook(s)/...
_WEBHOOK = re.compile(
    r"(?P<keep>\bhttps?://(?:hooks\.[^\s/\"'<>]+|[^\s/\"'<>]*webhook[^\s/\"'<>]*"
    r"|[^\s/\"'<>]+(?:/[^\s/\"'<>]+)*?/(?:hooks|webhooks?))/)[^\s\"'<>]+", re.IGNORECASE)
# user[:password]@ in a URL. The userinfo runs to the *last* '@' before the path, so a
# password with an unencoded '@' goes entirely.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/?#\s@]*(?:@[^/?#\s@]*)*@",
                           re.IGNORECASE)


def flag_value_problem(name: str, value: str) -> str | None:
    """Why ``value`` is not acceptable for env var ``name``, or None."""
    if "\x00" in value:
        return f"{name} contains a NUL character, which no environment variable can hold"
    if name in INTEGER_FLAGS and value not in ("0", "1"):
        return (
            f"{name} is read by torch as an integer when it loads; "
            f"use 0 or 1, not {value!r}"
        )
    return None


# Flags that only one device's runtime reads (each device module's ``flags``): set for
# another device they do nothing, which makes a cell claim a configuration it never had.


def flag_device(name: str) -> str | None:
    """The device whose runtime reads env var ``name`` (``xpu`` for ZE_/IGC_/SYCL_ and
    PYTORCH_*XPU*, ``mps`` for PYTORCH_*MPS*, ``cuda`` for PYTORCH_*CUDA*/CUBLAS_/CUDNN_),
    or None for a flag every device may use."""
    for kind in devices.TYPES.values():
        if kind.reads_flag(name):
            return kind.name
    return None


def is_secret(name: str) -> bool:
    upper = name.upper()
    return upper not in NOT_SECRET and any(marker in upper for marker in SECRET_MARKERS)


# Substrings every match of _TOKEN_SHAPES holds: texts without any skip the regex (test
# output is long and read by the hundred thousand for a grid).
_TOKEN_HINTS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "AKIA", "ASIA",
                "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "xox", "glpat-", "sk-", "npm_",
                "pypi-", "PRIVATE KEY")


def redact_text(text: str) -> str:
    """``text`` with credentials removed: the value of every variable of this process's
    environment that :func:`secret_values` names (a test that prints its HF_HUB_BEARER),
    then user:password@ of every URL and every token of a known format (any name) become
    ``<redacted>``."""
    if not text:
        return text
    values, cut = _env_secrets()
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    if cut is not None and ("..." in text or "\u2026" in text):
        text = cut.sub(REDACTED, text)  # what is left of one that a repr cut short
    return _redact_shapes(text)


def _redact_shapes(text: str) -> str:
    """:func:`redact_text` by shape alone (what a credential looks like)."""
    if not text:
        return text
    if "://" in text and "hook" in text.lower():
        text = _WEBHOOK.sub(r"\g<keep>" + REDACTED, text)
    if "@" in text and "://" in text:
        text = _URL_USERINFO.sub(r"\g<scheme>" + REDACTED + "@", text)
    if any(hint in text for hint in _TOKEN_HINTS):
        text = _TOKEN_SHAPES.sub(REDACTED, text)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    if any(hint in text for hint in ("Bearer", "Basic", "Token", "Digest", "bearer", "basic")):
        text = _AUTH_SCHEME.sub(lambda m: m["scheme"] + m["gap"] + REDACTED, text)
    lower = text.lower()
    if any(hint in lower for hint in _NAMED_HINTS):
        for pattern in (_NAMED_SECRET, _NAMED_TOKEN):
            text = pattern.sub(lambda m: m["key"] + REDACTED, text)
    return text


# Shorter values are not replaced in text by name (a "1", a "true" would go everywhere).
MIN_SECRET_VALUE = 6


def _plain_value(value: str) -> bool:
    """A value no rule by name redacts in text: short, a number, or an absolute path (the
    PWD, SSH_AUTH_SOCK or XDG_SESSION_* of a shell are no credentials)."""
    return (len(value) < MIN_SECRET_VALUE or value.isdigit()
            or (value.startswith("/") and not any(c.isspace() for c in value)))


def secret_values(env: Mapping[str, str]) -> tuple[str, ...]:
    """The values in ``env`` that are credentials, longest first: each of a variable whose
    name looks secret (:func:`is_secret`: HF_HUB_BEARER, TORCH_HUB_TKN, ...) unless it is
    plain (:func:`_plain_value`), and the credential in each whose shape is one (a token,
    a URL's password, a webhook's path) whatever its name (MY_THING=ghp_...)."""
    found = set()
    for name, value in env.items():
        if not isinstance(value, str):
            continue
        if is_secret(str(name)) and not _plain_value(value):
            found.add(value)
            continue
        part = _shaped_part(value)
        if len(part) >= MIN_SECRET_VALUE:
            found.add(part)
    return tuple(sorted(found, key=lambda v: (-len(v), v)))


def _shaped_part(value: str) -> str:
    """The part of ``value`` that :func:`_redact_shapes` replaces ("" when none): an index
    URL's user:password, not its host, so text naming the index still says which."""
    clean = _redact_shapes(value)
    if clean == value:
        return ""
    start = len(os.path.commonprefix([value, clean]))
    end = len(os.path.commonprefix([value[start:][::-1], clean[start:][::-1]]))
    return value[start:len(value) - end]


def _cut_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    """The start or end of each of ``values`` (:data:`MIN_SECRET_VALUE` characters or
    more) beside an ellipsis: what pytest's assertion rewriting leaves of a long string
    (``'ghp_A1b2C3d4...'``)."""
    parts = []
    for value in values:
        for k in range(len(value) - 1, MIN_SECRET_VALUE - 1, -1):
            parts.append(re.escape(value[:k]) + r"(?=\.\.\.|\u2026)")
            parts.append(r"(?:(?<=\.\.\.)|(?<=\u2026))" + re.escape(value[-k:]))
    return re.compile("|".join(parts)) if parts else None


_ENV_CACHE: list[Any] = [None, ((), None)]  # os.environ's items when read, what they give


def _env_secrets() -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """:func:`secret_values` of os.environ and their :func:`_cut_pattern`, worked out
    again only when os.environ changed (this runs for every text a record, log or grid
    holds)."""
    data = getattr(os.environ, "_data", None)  # CPython's raw mapping: cheap to compare
    key = tuple(data.items()) if isinstance(data, dict) else tuple(os.environ.items())
    if key != _ENV_CACHE[0]:
        values = secret_values(os.environ)
        _ENV_CACHE[:] = [key, (values, _cut_pattern(values))]
    return cast(tuple[tuple[str, ...], "re.Pattern[str] | None"], _ENV_CACHE[1])


@overload
def redact_value(value: dict[str, Any]) -> dict[str, Any]: ...
@overload
def redact_value(value: object) -> object: ...
def redact_value(value: object) -> object:
    """``value`` with :func:`redact_text` applied to every string in it (in mappings and
    lists too): records, env.json, JUnit files, logs and grids all go through
    :func:`redact_text` (by name only for environment mappings: :func:`redact`)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return value


def redact_url(url: str) -> str:
    """A URL safe to show: its user:password (if any) replaced."""
    return redact_text(url)


def url_credentials(url: str) -> bool:
    """Whether ``url`` carries user info (``user:password@``)."""
    return bool(_URL_USERINFO.search(url))


def index_url_problem(url: str, *, allow_credentials: bool = False) -> str | None:
    """Why ``url`` cannot be a package index (``default``, an http(s) URL with a host,
    or a file:// URL with a path), or None. Credentials are refused unless
    ``allow_credentials`` (a URL from the environment may carry them; a committed file
    must not)."""
    if url == "default":
        return None
    shown = redact_url(url)
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return f"'{shown}' is not a URL: it holds spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port if parts.scheme in ("http", "https") else None
    except ValueError as exc:
        return f"'{shown}' is not a valid URL: {exc}"
    del port
    if parts.scheme in ("http", "https"):
        if not parts.hostname:
            return f"'{shown}' has no host"
        if (parts.username or parts.password) and not allow_credentials:
            return (f"'{shown}' carries credentials: keep them out of committed files "
                    f"(set {contract.TORCH_INDEX}, or use ~/.netrc)")
        return None
    if parts.scheme == "file":
        return None if parts.path not in ("", "/") else f"'{shown}' names no folder"
    return f"'{shown}' is not an http(s):// or file:// URL"


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to write: secret-looking names lose their value, URLs their passwords,
    token-shaped values their token."""
    out = {}
    for name, value in env.items():
        if is_secret(str(name)):
            out[name] = REDACTED
        else:
            out[name] = redact_text(value) if isinstance(value, str) else value
    return out


# Env vars worth recording in provenance (the flags that change what torch does).
RECORDED_PREFIXES = (
    contract.PREFIX, "PYTORCH_", "TORCH_", "CUDA_", "CUBLAS_", "NCCL_", "ZE_", "SYCL_", "IGC_",
    "ONEAPI_", "OverrideDefault", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "KMP_", "PIP_", "UV_",
)
# Variables under a recorded prefix whose values env.json records whoever set them: which
# devices a test process sees, its threads, the offline switches, the index strategy. Any
# other one the cell did not set is recorded by name only (a host's HF_HUB_BEARER or
# PYTORCH_NOTIFY webhook is a credential no name or shape rule can know).
RECORDED_VALUES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "ZE_AFFINITY_MASK",
    "ZE_FLAT_DEVICE_HIERARCHY", "ONEAPI_DEVICE_SELECTOR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
    "UV_INDEX_STRATEGY", "UV_COMPILE_BYTECODE", "UV_LINK_MODE", "TORCH_SHOW_CPP_STACKTRACES",
    *INTEGER_FLAGS,
})
# accelgrid's own variables (every ACCELGRID_* name the contract defines): the runner's
# and the user's settings, recorded with their values (a URL's password still goes).
OWN_VARS = frozenset(v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)
                     and v.startswith(contract.PREFIX) and v != contract.PREFIX)
# Not inputs of the cell: the recorder's pid marks its own process tree (nested pytests
# record nothing) and differs every run; the list of what the cell set is said by the values.
_NOT_RECORDED = frozenset({contract.RECORDER_PID, contract.SET_VARS})


# The CI run a cell ran in, recorded in env.json's "ci" (not in "env": they change every
# run, and "env" is an input of the history's flaky rule). GitHub Actions sets them on every
# job (docs.github.com/en/actions/reference/variables-reference); the site's runs x cells
# page links each result to its run with them (ci_run_url).
CI_RUN_VARS = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT",
               "RUNNER_NAME")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


def ci_run(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`CI_RUN_VARS` set in ``env`` (default: os.environ), redacted as any."""
    env = os.environ if env is None else env
    return redact({k: env[k] for k in CI_RUN_VARS if env.get(k)})


def ci_run_url(ci: Mapping[str, Any] | None) -> str | None:
    """The CI run's page (``<server>/<owner>/<repo>/actions/runs/<id>[/attempts/<n>]``) from
    env.json's "ci", or None when it names none or a part is not what GitHub sets (an
    http(s) server without credentials, owner/name, numbers): the value becomes a link."""
    ci = ci or {}
    server = str(ci.get("GITHUB_SERVER_URL") or "").rstrip("/")
    repo, run = str(ci.get("GITHUB_REPOSITORY") or ""), str(ci.get("GITHUB_RUN_ID") or "")
    attempt = str(ci.get("GITHUB_RUN_ATTEMPT") or "")
    parts = urllib.parse.urlsplit(server)
    if (parts.scheme not in ("https", "http") or not parts.hostname or parts.username
            or parts.password or parts.query or parts.fragment
            or not _REPOSITORY.fullmatch(repo) or ".." in repo or not run.isdigit()
            or (attempt and not attempt.isdigit())):
        return None
    return (f"{server}/{repo}/actions/runs/{run}"
            + (f"/attempts/{attempt}" if attempt else ""))


def set_by_cell(env: Mapping[str, str]) -> frozenset[str]:
    """The names ``env``'s :data:`~accelgrid.base.contract.SET_VARS` lists (the runner's
    :func:`accelgrid.run.cellenv.cell_env` sets it)."""
    return frozenset(n.strip() for n in env.get(contract.SET_VARS, "").split(",") if n.strip())


def value_recorded(name: str, cell_set: frozenset[str] = frozenset()) -> bool:
    """Whether env.json records ``name``'s value (else its name only): the cell set it
    (``cell_set``), it is accelgrid's own, on :data:`RECORDED_VALUES`, or a flag of a device
    type (its visibility and hiding variables, its ``flags``). A secret-looking name or
    value is redacted all the same (:func:`redact`)."""
    if name in cell_set or name in OWN_VARS or name in RECORDED_VALUES:
        return True
    return any(name == kind.visibility_var or name in kind.hide or kind.reads_flag(name)
               for kind in devices.TYPES.values())


def recorded_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables under :data:`RECORDED_PREFIXES` in ``env`` (default: os.environ):
    the values of those :func:`value_recorded` allows, :data:`REDACTED` for the others;
    then :func:`redact` (by name and by shape) over all of them."""
    env = os.environ if env is None else env
    cell_set = set_by_cell(env)
    picked = {k: (v if value_recorded(k, cell_set) else REDACTED) for k, v in env.items()
              if k.startswith(RECORDED_PREFIXES) and k not in _NOT_RECORDED}
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
