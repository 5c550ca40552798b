"""A matrix's cells: its device x torch x profile combinations after include/exclude.

Following GitHub Actions' matrix rules: ``exclude`` removes every combination whose listed
keys all match; an ``include`` entry whose device/torch/profile match existing
combinations adds its other keys (suites, timeout, workers) to them, otherwise it adds a
new combination. Profiles that declare ``devices`` are only crossed with those devices.
An include rule pinning a hardware family or driver stack makes a cell of its own
(:data:`PINS`). :func:`expand` makes the cells, :func:`select` filters them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from ..base import contract
from ..base.versions import in_range, public_version
from .model import (
    AXES,
    NIGHTLY,
    RELEASE,
    Cell,
    Device,
    Hardware,
    Matrix,
    Suite,
    TorchSeries,
    as_env,
    cell_name,
    rule_matches,
)
from .validation import KeyPath, Problem

# Installed in a cell only when its ``reruns`` > 0 (unless ``tools`` pins it already);
# the version the dev extra is tested with, constraints.txt's (tests/config/test_reruns.py checks).
RERUN_TOOL = "pytest-rerunfailures==16.7"
# Include keys that pin a cell to a kind of runner: hardware is an axis of its own. Two
# rules pinning one cell to two families make two cells (GitHub Actions' include would let
# the second overwrite the first: one cell, silently on the last family).
PINS = ("hardware", "driver")

# One combination on its way to a cell: the axes, an include rule's other keys, and
# bookkeeping under "_" keys (_origin: the rule that made it, where its problems point;
# _unpinned: the combination before a hardware/driver pin; _suffix: its name's pins).
Combo = dict[str, Any]


def select(cells: Iterable[Cell], *, device: list[str] | None = None,
           torch: list[str] | None = None, profile: list[str] | None = None) -> list[Cell]:
    """Cells matching every given filter (each filter: any of its values)."""
    return [
        c for c in cells
        if (not device or c.device in device)
        and (not torch or c.torch in torch)
        and (not profile or c.profile in profile)
    ]


def expand(matrix: Matrix) -> tuple[list[Cell], list[Problem]]:
    """All cells of ``matrix`` (built without them) in declaration order, and the problems
    found building them."""
    combos = [c for c in _crossed(matrix) if not any(rule_matches(r, c) for r in matrix.exclude)]
    problems = _include(matrix, combos)
    _name_pinned(combos)
    cells: list[Cell] = []
    seen: dict[str, KeyPath] = {}
    smap = matrix.source
    for combo in combos:
        cell = _make_cell(matrix, combo)
        if isinstance(cell, str):  # why there is no cell
            problems.append(smap.problem(combo["_origin"], cell))
            continue
        if isinstance(cell, Problem):
            problems.append(cell)
            continue
        if cell.name in seen:
            problems.append(smap.problem(
                combo["_origin"],
                f"duplicate cell name '{cell.name}' (also from line {smap.line(seen[cell.name])})"))
            continue
        seen[cell.name] = combo["_origin"]
        cells.append(cell)
    return cells, problems


def _crossed(matrix: Matrix) -> list[Combo]:
    """The axes crossed, each profile with the devices it applies to."""
    return [{"device": device, "torch": torch, "profile": profile, "_origin": ("matrix",)}
            for device in matrix.axes["device"]
            for torch in matrix.axes["torch"]
            for profile in matrix.axes["profile"]
            if matrix.profiles[profile].applies_to(device)]


def _include(matrix: Matrix, combos: list[Combo]) -> list[Problem]:
    """Apply the include rules to ``combos`` (in place); the problems of rules that can
    neither extend nor add a combination."""
    smap = matrix.source
    problems: list[Problem] = []
    for i, rule in enumerate(matrix.include):
        origin = ("matrix", "include", i)
        extras = {k: v for k, v in rule.items() if k not in AXES}
        targets = [c for c in combos if rule_matches(rule, c)]
        if targets:
            _apply_include(combos, targets, extras, origin)
            continue
        complete = all(k in rule for k in ("device", "torch"))
        if not complete:
            problems.append(smap.problem(origin, "matches no cell and cannot add one: "
                                         "a new cell needs both device and torch"))
            continue
        combo = {"device": rule["device"], "torch": rule["torch"],
                 "profile": rule.get("profile", matrix.default_profile), **extras,
                 "_origin": origin}
        rule_profile = matrix.profiles[combo["profile"]]
        if not rule_profile.applies_to(combo["device"]):
            problems.append(smap.problem(
                (*origin, "profile"),
                f"profile '{rule_profile.name}' applies to "
                f"{', '.join(rule_profile.devices or ())} only, "
                f"not {combo['device']}"))
            continue
        combos.append(combo)
    return problems


def _identity(combo: Combo) -> tuple[Any, ...]:
    return tuple(combo.get(k) for k in (*AXES, *PINS))


def _apply_include(combos: list[Combo], targets: list[Combo], extras: dict[str, Any],
                   origin: KeyPath) -> None:
    """Add an include rule's ``extras`` to the combos it matches (``targets``, in
    ``combos``). A combo already pinned to another family or driver than the rule's stays
    as it is and gains a sibling on the rule's: the combo as it was before any pin, plus
    the rule (what a rule for one family set stays with that family)."""
    pins = {k: extras[k] for k in PINS if k in extras}
    have = {_identity(c) for c in combos}
    for combo in targets:
        if not any(combo.get(k) not in (None, v) for k, v in pins.items()):
            if pins and not any(combo.get(k) for k in PINS):
                combo["_unpinned"] = {k: v for k, v in combo.items() if k != "_unpinned"}
            combo.update(extras)
            if extras:
                combo["_origin"] = origin  # problems with this cell point at the rule
            continue
        base = combo.get("_unpinned") or combo
        sibling = {**base, **{k: combo[k] for k in PINS if k in combo and k not in pins},
                   **extras, "_origin": origin, "_unpinned": base}
        if _identity(sibling) not in have:   # else it is a target too, updated above/below
            have.add(_identity(sibling))
            combos.append(sibling)


def _name_pinned(combos: list[Combo]) -> None:
    """Cells of one device, series and profile pinned to several hardware families (or,
    of one family, to several driver stacks) are named after them (``xpu-2.8-arc``,
    ``xpu-2.8-bmg``); a lone pin keeps the plain name."""
    for level, key in enumerate(PINS):
        groups: dict[tuple[Any, ...], set[Any]] = {}
        for combo in combos:
            groups.setdefault(_identity(combo)[:len(AXES) + level], set()).add(combo.get(key))
        for combo in combos:
            if combo.get(key) and len(groups[_identity(combo)[:len(AXES) + level]]) > 1:
                combo["_suffix"] = [*combo.get("_suffix", []), combo[key]]


def _why_no_cell(matrix: Matrix, name: str, device: Device, series: TorchSeries,
                 suites: list[Suite], channel: str) -> str | Problem | None:
    """Why the combination named ``name`` cannot be a cell: a line naming it, or a problem
    located elsewhere than the rule that made it; None when it can."""
    if not suites:
        return f"cell {name} resolves to no suites (none of its suites runs on {device.name})"
    missing = sorted({n for s in suites for n in s.needs if n not in series.pins})
    if missing:
        return (f"cell {name}: suites need {', '.join(missing)} but torch "
                f"{series.series} pins no version for it")
    if device.packages and series.series not in device.packages:
        # Said where the fix goes (once per series, whichever cells lack it): without its
        # package the backend's spec file cannot even import.
        return matrix.source.problem(
            ("devices", device.name, "packages"),
            f"no entry for torch {series.series}, the series of cell {name} ([] if the "
            "device needs no package with it)")
    if channel != RELEASE and channel not in device.channels:
        return (f"cell {name}: torch {series.series} comes from PyTorch's {channel} "
                f"channel and devices.{device.name}.channels has no {channel} index")
    return None


def _requirement_name(text: str) -> str:
    """A requirement's normalized project name ("" when it is not one)."""
    try:
        return re.sub(r"[-_.]+", "-", Requirement(text).name).lower()
    except InvalidRequirement:
        return ""


def _packages(matrix: Matrix, device: Device, series: TorchSeries, suites: list[Suite],
              reruns: int) -> tuple[str, ...]:
    """What a cell installs beside torch, pinned: the tools, the backend's own package
    before the suites' (what they import needs it), the pins the suites need, the suites'
    packages, and the rerun plugin when the cell reruns."""
    packages: list[str] = list(matrix.tools)
    packages += [p for p in device.packages.get(series.series, ()) if p not in packages]
    for pin in sorted({n for s in suites for n in s.needs}):
        packages.append(f"{pin}=={series.pins[pin]}")
    for suite in suites:
        packages += [p for p in suite.packages if p not in packages]
    if reruns and not any(_requirement_name(p) == "pytest-rerunfailures" for p in packages):
        packages.append(RERUN_TOOL)
    return tuple(packages)


def _runner_labels(device: Device, *pinned: Hardware | None) -> tuple[str, ...]:
    """The device's runner labels, then those of the family and driver a rule pins."""
    return device.runner_labels + tuple(
        x.label for x in pinned if x is not None and x.label
        and x.label not in device.runner_labels)


def _make_cell(matrix: Matrix, combo: Combo) -> Cell | str | Problem:
    """The cell of ``combo``, or why it cannot be one (a line naming the cell, or a
    problem located elsewhere than the rule that made the combo)."""
    device = matrix.devices[combo["device"]]
    series = matrix.torch[combo["torch"]]
    profile = matrix.profiles[combo["profile"]]
    name = "-".join([cell_name(device.name, series.series, profile.name,
                               matrix.default_profile), *combo.get("_suffix", [])])
    suites = [matrix.suites[s] for s in combo.get("suites", matrix.default_suites)
              if (only := matrix.suites[s].devices) is None or device.name in only]
    wheel = combo.get("torch_wheel")
    channel = series.channel if wheel is None else RELEASE   # a local wheel is the build
    why = _why_no_cell(matrix, name, device, series, suites, channel)
    if why is not None:
        return why
    reruns = combo.get("reruns", device.reruns if device.reruns is not None
                       else matrix.reruns)
    runtimes = [r for r in device.runtime if in_range(series.pins["torch"], r.torch)]
    hardware = device.hardware.get(combo["hardware"]) if combo.get("hardware") else None
    driver = device.drivers.get(combo["driver"]) if combo.get("driver") else None
    timeout = combo.get("timeout") or {}
    if wheel is not None:
        wheel = str((matrix.root / wheel).resolve()) if not Path(wheel).is_absolute() else wheel
    # A cell run on request only carries none of the tags `nox -t` selects by.
    tags = ((device.name, f"torch-{series.series}", profile.name) if wheel is None
            else ("local-wheel",))
    return Cell(
        name=name,
        device=device.name,
        device_type=device.device_type,
        torch=series.series,
        profile=profile.name,
        pins=dict(series.pins),
        python=series.python or matrix.default_python,
        suites=tuple(s.name for s in suites),
        suite_paths=tuple(s.path for s in suites),
        packages=_packages(matrix, device, series, suites, reruns),
        env={**device.env, **{k: v for s in suites for k, v in s.env.items()}, **profile.env,
             **as_env(combo.get("env")),
             # the in-cell plugin loads the spec (relative: to the matrix's folder, where
             # the cell's pytest starts)
             **({contract.DEVICE_SPEC: device.spec} if device.spec else {})},
        index=device.index if channel == RELEASE else device.channels[channel],
        torch_requirement=channel_requirement(series.pins["torch"], series.channel,
                                              device.torch_local_version),
        runner_labels=_runner_labels(device, hardware, driver),
        hosted=device.hosted,
        cell_minutes=timeout.get("cell_minutes", matrix.cell_minutes),
        test_seconds=timeout.get("test_seconds", matrix.test_seconds),
        workers=combo.get("workers", device.workers or matrix.workers),
        is_default_torch=series.series == matrix.default_torch,
        container_family=device.container_family if wheel is None else None,
        container_base=device.container_base if wheel is None else None,
        tags=tags,
        runtime=runtimes[0] if runtimes else None,
        hardware=hardware.name if hardware else None,
        driver=driver.name if driver else None,
        hardware_env={k: dict(v.env) for k, v in device.hardware.items()},
        driver_env={k: dict(v.env) for k, v in device.drivers.items()},
        torch_wheel=wheel,
        shards=combo.get("shards", device.shards or 1),
        reruns=reruns,
        channel=channel,
        ci_container=device.ci_container and wheel is None,
    )


def channel_requirement(pin: str, channel: str = RELEASE, local: str | None = None) -> str:
    """The requirement torch is installed with: ``torch==2.5.1+xpu`` for a release or a
    release candidate (the test channel's wheels carry the final number), one exact nightly
    for a pin like ``2.16.0.dev20261201``, and for a nightly pin ``2.16.0`` every nightly
    leading to it, ``torch>=2.16.0.dev0,<2.16.0a0`` (the newest is resolved when the cell
    runs; a range takes no local label, the channel's index holds only its device's
    builds)."""
    if channel == NIGHTLY and ".dev" not in pin:
        base = public_version(pin).base_version
        return f"torch>={base}.dev0,<{base}a0"
    return f"torch=={pin}" + (f"+{local}" if local and "+" not in pin else "")
