"""Install planning: which packages a cell's environment gets, from which index.

Two steps: torch first, from the device's index when it has its own (PyTorch's XPU
wheels), then everything else from the default index with torch pinned, so the second
step can never swap the device build of torch for another. pip's own configuration is
carried over to uv (uv reads none of it).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from . import environment
from .matrix import Cell


@dataclass(frozen=True)
class Step:
    description: str
    args: tuple[str, ...]            # arguments for `pip install` / `uv pip install`


@dataclass(frozen=True)
class InstallPlan:
    cell: str
    index: str
    steps: tuple[Step, ...]
    env: dict[str, str] = field(default_factory=dict)   # UV_* from pip's configuration

    def as_dict(self) -> dict:
        return {"index": self.index, "env": environment.redact(self.env),
                "steps": [{"description": s.description, "args": list(s.args)}
                          for s in self.steps]}


def plan(cell: Cell, *, torch_index: str | None = None, uv_env: dict[str, str] | None = None
         ) -> InstallPlan:
    """The install plan for ``cell``. ``torch_index`` overrides the device's index."""
    index = torch_index or cell.index
    torch_args: tuple[str, ...] = (cell.torch_requirement,)
    if index != "default":
        torch_args = ("--extra-index-url", index, cell.torch_requirement)
    steps = (
        Step(f"torch from {'the default index' if index == 'default' else index}", torch_args),
        Step("test tooling and suite packages", (cell.torch_requirement, *cell.packages)),
    )
    if uv_env is None:
        uv_env = environment.uv_env_from_pip(environment.pip_settings())
    return InstallPlan(cell.name, index, steps, dict(uv_env))


def index_problem(index: str, timeout: float = 15.0) -> str | None:
    """None if ``index`` answers, else a one-line reason (for an early, clear failure)."""
    if index == "default" or index.startswith("file://"):
        return None
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"),
                                    timeout=timeout) as resp:
            resp.read(1)
        return None
    except urllib.error.HTTPError as exc:
        return f"package index {index} answered HTTP {exc.code} for {url}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"package index {index} cannot be reached: {reason}"
