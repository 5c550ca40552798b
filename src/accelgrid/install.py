"""Install planning: which packages a cell's environment gets, from which index.

Two steps: torch first, from the device's index when it has its own (PyTorch's XPU
wheels) or from the cell's local wheel (an include rule's ``torch_wheel``: a source build),
then everything else from the default index with torch pinned, so the second step can
never swap the device build of torch for another. pip's own configuration is carried over
to uv (uv reads none of it).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import environment
from .matrix import Cell
from .versions import version_key


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
    where = f"{'the default index' if index == 'default' else index}"
    pin = cell.torch_requirement
    if cell.torch_wheel is not None:
        wheel, _ = local_wheel(cell)
        pin = wheel or cell.torch_requirement   # the wheel file pins torch in both steps
        index, torch_args, where = "default", (pin,), f"the local wheel {wheel or cell.torch_wheel}"
    steps = (
        Step(f"torch from {where}", torch_args),
        Step("test tooling and suite packages", (pin, *cell.packages)),
    )
    if uv_env is None:
        uv_env = environment.uv_env_from_pip(environment.pip_settings())
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
