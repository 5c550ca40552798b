"""Install planning: which packages a cell's environment gets, from which index.

Two steps: torch first, from the device's index when it has its own (PyTorch's XPU
wheels) or from the cell's local wheel (an include rule's ``torch_wheel``: a source build),
then everything else from the default index with torch pinned, so the second step can
never swap the device build of torch for another. pip's own configuration is carried over
to uv (uv reads none of it).
"""

from __future__ import annotations

import base64
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import contract, environment
from .errors import InvalidInput
from .matrix import Cell
from .versions import version_key


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
    pin = cell.torch_requirement
    torch_args: tuple[str, ...] = (cell.torch_requirement,)
    torch_env: dict[str, str] = {}
    if cell.torch_wheel is not None:
        wheel, _ = local_wheel(cell)
        pin = wheel or cell.torch_requirement   # the wheel file pins torch in both steps
        return InstallPlan(cell.name, "default", (
            Step(f"torch from the local wheel {wheel or cell.torch_wheel}", (pin,)),
            Step("test tooling and suite packages", (pin, *cell.packages)),
        ), dict(uv_env))
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


def local_wheel(cell: Cell) -> tuple[str | None, str | None]:
    """The torch wheel file a local-wheel cell installs, or why there is none (one line).
    ``cell.torch_wheel`` names the file or a folder holding exactly one torch wheel of the
    cell's series (e.g. ``torch-2.4.1+xpu-cp311-cp311-linux_x86_64.whl`` or a source
    build's ``torch-2.4.0a0+git…``)."""
    if cell.torch_wheel is None:
        return None, None
    path = Path(cell.torch_wheel)
    if path.is_file():
        return str(path), None
    if not path.is_dir():
        return None, (f"{cell.name}: torch comes from a local wheel and {path} does not exist "
                      f"(build torch {cell.torch} from source and put its wheel there: "
                      "docs/xpu.md)")
    found = sorted(w for w in path.glob("torch-*.whl") if _series(w.name) == cell.torch)
    if len(found) == 1:
        return str(found[0]), None
    if not found:
        return None, (f"{cell.name}: no torch {cell.torch} wheel in {path} (build torch "
                      f"{cell.torch} from source and put its wheel there: docs/xpu.md)")
    return None, (f"{cell.name}: {len(found)} torch {cell.torch} wheels in {path} "
                  f"({', '.join(w.name for w in found)}): keep one")


def _series(filename: str) -> str | None:
    try:
        release = version_key(filename.split("-")[1]).release
    except (IndexError, ValueError):
        return None
    return ".".join(str(n) for n in release[:2])


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


def uv_changes(output: str, requested: Sequence[str] = ()) -> str:
    """What ``uv pip install`` did, in a few words, from its output: the packages it
    added (``+ name==version``; the ``requested`` requirements' first), replaced or
    removed; ``nothing to change`` when it only checked them."""
    added, removed = {}, {}
    for line in output.splitlines():
        sign, _, spec = line.strip().partition(" ")
        name, _, version = spec.partition("==")
        if sign in ("+", "-", "~") and name:
            (removed if sign == "-" else added)[name] = version
    changed = [n for n in added if n in removed]
    asked = {re.split(r"[=<>!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-")
             for r in requested}
    new = sorted((n for n in added if n not in removed), key=lambda n: n.lower() not in asked)
    gone = [n for n in removed if n not in added]
    parts = []
    if new:
        shown = ", ".join(f"{n} {added[n]}" for n in new[:6])
        parts.append(f"{len(new)} installed ({shown}" + (", ..." if len(new) > 6 else "") + ")")
    if changed:
        parts.append(f"{len(changed)} replaced ("
                     + ", ".join(f"{n} {removed[n]} -> {added[n]}" for n in changed[:6])
                     + (", ..." if len(changed) > 6 else "") + ")")
    if gone:
        parts.append(f"{len(gone)} removed")
    return "; ".join(parts) or "nothing to change, all installed already"
