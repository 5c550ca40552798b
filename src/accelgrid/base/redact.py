"""Secret redaction: credentials out of every text and mapping accelgrid writes or shows.

A secret goes by its variable's name (:func:`is_secret`), by its shape whatever names it
(a token format, a URL's ``user:password@``, a webhook's path, an Authorization header, a
JWT, the value after a key that names a secret), and by value: any value of this
process's environment that is a credential (:func:`secret_values`), wherever a test
printed it. Records, env.json, JUnit files, logs, grids and error messages all go through
here. Standard library only: runs inside cells.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, cast, overload

from . import contract

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
