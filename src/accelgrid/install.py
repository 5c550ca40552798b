"""Install planning: which packages a cell's environment gets, from which index.

Two steps: torch first, from the device's index when it has its own (PyTorch's XPU
wheels), then everything else from the default index with torch pinned, so the second
step can never swap the device build of torch for another. pip's own configuration is
carried over to uv (uv reads none of it).
"""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from . import contract, environment
from .errors import InvalidInput
from .matrix import Cell


@dataclass(frozen=True)
class Step:
    description: str                 # safe to show: no credentials
    args: tuple[str, ...]            # arguments for `pip install` / `uv pip install`
    # Variables the install needs beside ``args``: an index URL with credentials goes
    # here rather than on a command line that nox and CI logs print.
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InstallPlan:
    cell: str
    index: str
    steps: tuple[Step, ...]
    env: dict[str, str] = field(default_factory=dict)   # UV_* from pip's configuration

    @property
    def shown_index(self) -> str:
        """The index as it may be printed (credentials replaced)."""
        return environment.redact_url(self.index)

    def as_dict(self) -> dict:
        return {"index": self.shown_index, "env": environment.redact(self.env),
                "steps": [{"description": s.description, "args": list(s.args),
                           **({"env": environment.redact(s.env)} if s.env else {})}
                          for s in self.steps]}


def plan(cell: Cell, *, torch_index: str | None = None, uv_env: dict[str, str] | None = None
         ) -> InstallPlan:
    """The install plan for ``cell``. ``torch_index`` overrides the device's index (it
    comes from $ACCELGRID_TORCH_INDEX: InvalidInput when it is no index URL)."""
    if torch_index is not None and torch_index.strip():
        why = environment.index_url_problem(torch_index.strip(), allow_credentials=True)
        if why:
            raise InvalidInput(f"{contract.TORCH_INDEX}: {why}")
    index = (torch_index or "").strip() or cell.index
    if uv_env is None:
        uv_env = environment.uv_env_from_pip(environment.pip_settings())
    torch_args: tuple[str, ...] = (cell.torch_requirement,)
    torch_env: dict[str, str] = {}
    if index != "default" and environment.url_credentials(index):
        # Not on the command line: nox logs it, and so do CI jobs. pip and uv both read
        # extra indexes from the environment (space-separated).
        extra = " ".join(v for v in (index, uv_env.get("UV_EXTRA_INDEX_URL")
                                     or os.environ.get("UV_EXTRA_INDEX_URL")) if v)
        torch_env = {"UV_EXTRA_INDEX_URL": extra, "PIP_EXTRA_INDEX_URL": extra}
    elif index != "default":
        torch_args = ("--extra-index-url", index, cell.torch_requirement)
    shown = "the default index" if index == "default" else environment.redact_url(index)
    steps = (
        Step(f"torch from {shown}", torch_args, torch_env),
        Step("test tooling and suite packages", (cell.torch_requirement, *cell.packages)),
    )
    return InstallPlan(cell.name, index, steps, dict(uv_env))


def index_problem(index: str, timeout: float = 15.0) -> str | None:
    """None if ``index`` answers, else a one-line reason (for an early, clear failure).
    Credentials in the URL are sent as HTTP basic auth and never appear in the reason."""
    if index == "default" or index.startswith("file://"):
        return None
    shown = environment.redact_url(index)
    why = environment.index_url_problem(index, allow_credentials=True)
    if why:
        return f"package index {why}"
    parts = urllib.parse.urlsplit(index)
    headers = {}
    if parts.username is not None or parts.password is not None:
        # userinfo to its last '@' (a password may hold an unencoded '@')
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
        parts = parts._replace(netloc=host)
    url = urllib.parse.urlunsplit(parts).rstrip("/") + "/torch/"
    shown_url = environment.redact_url(shown.rstrip("/") + "/torch/")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers, method="GET"),
                                    timeout=timeout) as resp:
            resp.read(1)
        return None
    except urllib.error.HTTPError as exc:
        return f"package index {shown} answered HTTP {exc.code} for {shown_url}"
    except Exception as exc:  # noqa: BLE001 - URLError, OSError, http.client's InvalidURL...
        reason = getattr(exc, "reason", None) or exc
        return (f"package index {shown} cannot be reached: "
                f"{environment.redact_text(str(reason))[:300]}")
