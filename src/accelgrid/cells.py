"""Cells: the matrix's device x torch x profile combinations, after include/exclude.

Rules follow GitHub Actions' matrix: ``exclude`` removes every combination whose listed
keys all match; an ``include`` entry whose device/torch/profile match existing
combinations adds its other keys (suites, timeout, workers) to them, otherwise it adds a
new combination. Profiles that declare ``devices`` are only crossed with those devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .validation import Problem

if TYPE_CHECKING:
    from .matrix import Matrix

AXES = ("device", "torch", "profile")


@dataclass(frozen=True)
class Cell:
    name: str
    device: str
    torch: str                    # the series, e.g. "2.13"
    profile: str
    pins: dict[str, str]          # torch, torchao, transformers, accelerate ...
    python: str
    suites: tuple[str, ...]
    suite_paths: tuple[str, ...]
    packages: tuple[str, ...]     # everything to install beside torch, pinned
    env: dict[str, str]           # device env + profile env
    index: str                    # "default" or the torch index URL
    torch_requirement: str        # e.g. "torch==2.5.1+xpu"
    runner_labels: tuple[str, ...]
    hosted: bool
    cell_minutes: int
    test_seconds: int
    workers: int
    is_default_torch: bool
    container_family: str | None = None
    container_base: str | None = None
    tags: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "device": self.device, "torch": self.torch,
            "profile": self.profile, "pins": dict(self.pins), "python": self.python,
            "suites": list(self.suites), "suite_paths": list(self.suite_paths),
            "packages": list(self.packages), "env": dict(self.env), "index": self.index,
            "torch_requirement": self.torch_requirement,
            "runner_labels": list(self.runner_labels), "hosted": self.hosted,
            "timeout": {"cell_minutes": self.cell_minutes, "test_seconds": self.test_seconds},
            "workers": self.workers, "default_torch": self.is_default_torch,
            "container": {"family": self.container_family, "base": self.container_base},
            "tags": list(self.tags),
        }


def cell_name(device: str, torch: str, profile: str, default_profile: str = "default") -> str:
    return f"{device}-{torch}" if profile == default_profile else f"{device}-{torch}-{profile}"


def _matches(rule: dict[str, Any], combo: dict[str, Any]) -> bool:
    return all(combo.get(k) == rule[k] for k in AXES if k in rule)


def expand(matrix: Matrix) -> tuple[list[Cell], list[Problem]]:
    """All cells of ``matrix`` in declaration order, and the problems found building them."""
    smap = matrix.source
    problems: list[Problem] = []
    combos: list[dict[str, Any]] = []
    for device in matrix.axes["device"]:
        for torch in matrix.axes["torch"]:
            for profile in matrix.axes["profile"]:
                if matrix.profiles[profile].applies_to(device):
                    combos.append({"device": device, "torch": torch, "profile": profile,
                                   "_origin": ("matrix",)})
    combos = [c for c in combos if not any(_matches(r, c) for r in matrix.exclude)]

    for i, rule in enumerate(matrix.include):
        origin = ("matrix", "include", i)
        extras = {k: v for k, v in rule.items() if k not in AXES}
        targets = [c for c in combos if _matches(rule, c)]
        if targets:
            for combo in targets:
                combo.update(extras)
                if extras:
                    combo["_origin"] = origin  # problems with this cell point at the rule
            continue
        complete = all(k in rule for k in ("device", "torch"))
        if not complete:
            problems.append(smap.problem(origin, "matches no cell and cannot add one: "
                                         "a new cell needs both device and torch"))
            continue
        combo = {"device": rule["device"], "torch": rule["torch"],
                 "profile": rule.get("profile", matrix.default_profile), **extras,
                 "_origin": origin}
        profile = matrix.profiles[combo["profile"]]
        if not profile.applies_to(combo["device"]):
            problems.append(smap.problem(
                (*origin, "profile"),
                f"profile '{profile.name}' applies to {', '.join(profile.devices or ())} only, "
                f"not {combo['device']}"))
            continue
        combos.append(combo)

    cells: list[Cell] = []
    seen: dict[str, tuple] = {}
    for combo in combos:
        cell, why = _make_cell(matrix, combo)
        if why:
            problems.append(smap.problem(combo["_origin"], why))
            continue
        if cell.name in seen:
            problems.append(smap.problem(
                combo["_origin"],
                f"duplicate cell name '{cell.name}' (also from line {smap.line(seen[cell.name])})"))
            continue
        seen[cell.name] = combo["_origin"]
        cells.append(cell)
    return cells, problems


def _make_cell(matrix: Matrix, combo: dict[str, Any]) -> tuple[Cell | None, str | None]:
    device = matrix.devices[combo["device"]]
    series = matrix.torch[combo["torch"]]
    profile = matrix.profiles[combo["profile"]]
    name = cell_name(device.name, series.series, profile.name, matrix.default_profile)
    suite_names = [
        s for s in combo.get("suites", matrix.default_suites)
        if matrix.suites[s].devices is None or device.name in matrix.suites[s].devices
    ]
    if not suite_names:
        return None, f"cell {name} resolves to no suites (none of its suites runs on {device.name})"
    suites = [matrix.suites[s] for s in suite_names]
    missing = sorted({n for s in suites for n in s.needs if n not in series.pins})
    if missing:
        return None, (f"cell {name}: suites need {', '.join(missing)} but torch "
                      f"{series.series} pins no version for it")
    packages: list[str] = list(matrix.tools)
    for pin in sorted({n for s in suites for n in s.needs}):
        packages.append(f"{pin}=={series.pins[pin]}")
    for suite in suites:
        packages += [p for p in suite.packages if p not in packages]
    torch_req = f"torch=={series.pins['torch']}"
    if device.torch_local_version:
        torch_req += f"+{device.torch_local_version}"
    timeout = combo.get("timeout") or {}
    tags = (device.name, f"torch-{series.series}", profile.name)
    return Cell(
        name=name,
        device=device.name,
        torch=series.series,
        profile=profile.name,
        pins=dict(series.pins),
        python=series.python or matrix.default_python,
        suites=tuple(suite_names),
        suite_paths=tuple(s.path for s in suites),
        packages=tuple(packages),
        env={**device.env, **profile.env},
        index=device.index,
        torch_requirement=torch_req,
        runner_labels=device.runner_labels,
        hosted=device.hosted,
        cell_minutes=timeout.get("cell_minutes", matrix.cell_minutes),
        test_seconds=timeout.get("test_seconds", matrix.test_seconds),
        workers=combo.get("workers", device.workers or matrix.workers),
        is_default_torch=series.series == matrix.default_torch,
        container_family=device.container_family,
        container_base=device.container_base,
        tags=tags,
    ), None


def select(cells: list[Cell], *, device: list[str] | None = None, torch: list[str] | None = None,
           profile: list[str] | None = None) -> list[Cell]:
    """Cells matching every given filter (each filter: any of its values)."""
    return [
        c for c in cells
        if (not device or c.device in device)
        and (not torch or c.torch in torch)
        and (not profile or c.profile in profile)
    ]
