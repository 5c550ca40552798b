"""The matrix model: what matrix.yaml declares (devices, torch series, profiles, suites)
and the cells it expands to, as frozen dataclasses.

:mod:`.matrix` loads it (``load_matrix``), :mod:`.checks` holds the checks the loaded
file passes first, :mod:`.cells` the expansion into cells.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import contract
from ..base.errors import UnknownName
from ..devices import DeviceType
from .validation import SourceMap, suggest

# The schema's pin keys (accelgrid/schemas/matrix.schema.json; tests check they match).
PIN_NAMES = ("torch", "torchao", "transformers", "accelerate", "torchvision", "datasets")
AXES = ("device", "torch", "profile")
# PyTorch's channels (torch.<series>.channel): releases from the device's index; nightly
# builds (torch X.Y.Z.devYYYYMMDD) and release candidates (the test channel, final
# version numbers) from the device's index for that channel (devices.<d>.channels).
RELEASE, NIGHTLY, TEST = "release", "nightly", "test"
CHANNELS = (RELEASE, NIGHTLY, TEST)


@dataclass(frozen=True)
class Runtime:
    """What a device's torch wheels need beside them for a range of torch releases
    (``devices.<d>.runtime``): a bundle installed and sourced (Intel's Deep Learning
    Essentials for torch 2.5 +xpu), or nothing (``from_wheels``: the runtime comes as pip
    dependencies of torch, from 2.6 on)."""

    torch: str                              # PEP 440 range of torch releases, e.g. "<2.6"
    name: str
    from_wheels: bool = False
    version: str | None = None
    env_scripts: tuple[str, ...] = ()       # what to source, in order
    check_env: str | None = None            # set once sourced, e.g. ONEAPI_ROOT
    check_library: str | None = None       # on LD_LIBRARY_PATH once sourced, e.g. libsycl.so.7
    apt_repository: str | None = None      # "URL SUITE COMPONENT" (containers)
    apt_key: str | None = None
    apt_packages: tuple[str, ...] = ()
    source: str = ""                        # where the fact comes from

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"torch": self.torch, "name": self.name,
                               "from_wheels": self.from_wheels}
        if not self.from_wheels:
            out.update(version=self.version, env_scripts=list(self.env_scripts),
                       check={"env": self.check_env, "library": self.check_library},
                       apt={"repository": self.apt_repository, "key": self.apt_key,
                            "packages": list(self.apt_packages)})
        if self.source:
            out["source"] = self.source
        return out

    def describe(self) -> str:
        """One line for ``accelgrid plan``."""
        if self.from_wheels:
            return f"{self.name} (GPU driver only)"
        checks = [f"{self.check_env} set" if self.check_env else "",
                  f"{self.check_library} on LD_LIBRARY_PATH" if self.check_library else ""]
        return (f"{self.name} {self.version}, sourced: "
                f"{'; '.join(f'source {x}' for x in self.env_scripts)} "
                f"(checked: {', '.join(c for c in checks if c)})")


@dataclass(frozen=True)
class Hardware:
    """A hardware family (``devices.<d>.hardware``, e.g. ``ats-m``) or a driver stack
    (``devices.<d>.drivers``, e.g. ``lts``) that a runner can have: the env every cell run
    there gets (ATS-M: the fp64 emulation flags) and the runner label that names it."""

    name: str
    description: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    label: str | None = None


@dataclass(frozen=True)
class Device:
    name: str
    # Every fact accelgrid knows about the type (accelgrid.devices), resolved once here:
    # a built-in module's, or the spec file's (devices.<d>.spec).
    device_type: DeviceType = dataclasses.field(repr=False, compare=False)
    index: str
    env: dict[str, str]
    detect: dict[str, Any]
    runner_labels: tuple[str, ...]
    hosted: bool = False
    description: str = ""
    torch_local_version: str | None = None
    container_family: str | None = None
    container_base: str | None = None
    workers: int | None = None
    shards: int | None = None
    reruns: int | None = None
    runtime: tuple[Runtime, ...] = ()
    hardware: dict[str, Hardware] = dataclasses.field(default_factory=dict)
    drivers: dict[str, Hardware] = dataclasses.field(default_factory=dict)
    spec: str | None = None   # a device outside the four: its spec file (accelgrid.devices.spec)
    # PyTorch channel -> this device's index for it (devices.<d>.channels: nightly, test)
    channels: dict[str, str] = dataclasses.field(default_factory=dict)
    # torch series -> the device's own packages (devices.<d>.packages): an out-of-tree
    # backend's module (torch_npu) pairs with torch's series, so a series without an
    # entry has no cell of this device
    packages: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # CI runs its cells inside their images (runner.container; default: it has a family)
    ci_container: bool = False


@dataclass(frozen=True)
class TorchSeries:
    series: str
    pins: dict[str, str]
    python: str | None = None
    channel: str = RELEASE   # PyTorch's release, nightly or test channel


@dataclass(frozen=True)
class Profile:
    name: str
    env: dict[str, str]
    devices: tuple[str, ...] | None = None
    description: str = ""

    def applies_to(self, device: str) -> bool:
        return self.devices is None or device in self.devices


@dataclass(frozen=True)
class Suite:
    name: str
    path: str
    needs: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None
    description: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)   # in every cell running it


@dataclass(frozen=True)
class Cell:
    name: str
    device: str
    # The device's type (Device.device_type): what the runner, the passes and the
    # containers read, instead of looking the name up again.
    device_type: DeviceType = dataclasses.field(repr=False, compare=False)
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
    tags: tuple[str, ...] = ()
    runtime: Runtime | None = None      # what torch needs beside it (devices.<d>.runtime)
    hardware: str | None = None         # pinned by an include rule (else: the runner's)
    driver: str | None = None
    # The device's hardware families and driver stacks -> their env (applied at run time to
    # the family the runner declares or has, see accelgrid.host.detect.resolve_hardware).
    hardware_env: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    driver_env: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    # torch from a local wheel (an include rule's torch_wheel: a .whl file or a folder
    # holding one, e.g. an XPU source build of torch 2.4), absolute. Such a cell is run on
    # request only: not by a plain `nox`, `nox -t DEVICE`, CI or `accelgrid repro ID`.
    torch_wheel: str | None = None
    shards: int = 1     # runners its tests are split across in CI (accelgrid.results.shards)
    reruns: int = 0     # pytest-rerunfailures --reruns N (0: none, plugin not installed)
    channel: str = RELEASE   # where torch comes from: RELEASE, NIGHTLY or TEST
    ci_container: bool = False   # CI runs it inside its image (runner.container)

    @property
    def manual(self) -> bool:
        """Run only when named (its torch comes from a local wheel)."""
        return self.torch_wheel is not None

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
            "runtime": self.runtime.as_dict() if self.runtime else None,
            "hardware": self.hardware, "driver": self.driver,
            "torch_wheel": self.torch_wheel, "manual": self.manual, "shards": self.shards,
            "reruns": self.reruns, "channel": self.channel, "ci_container": self.ci_container,
        }


@dataclass(frozen=True)
class Matrix:
    path: Path
    root: Path
    devices: dict[str, Device]
    torch: dict[str, TorchSeries]
    profiles: dict[str, Profile]
    suites: dict[str, Suite]
    tools: tuple[str, ...]
    default_torch: str
    default_profile: str
    default_python: str
    default_suites: tuple[str, ...]
    cell_minutes: int
    test_seconds: int
    workers: int
    axes: dict[str, tuple[str, ...]]
    include: tuple[dict[str, Any], ...]
    exclude: tuple[dict[str, Any], ...]
    source: SourceMap
    cells: tuple[Cell, ...] = ()
    reruns: int = 0

    @property
    def nox_env(self) -> dict[str, str]:
        """What a nox process started for this matrix needs in its environment: the
        noxfile and the registry then load this file, not ``<root>/matrix.yaml``."""
        return {contract.MATRIX: str(self.path.resolve())}

    def cell(self, name: str) -> Cell:
        """The cell called ``name``; UnknownName (a KeyError) with a suggestion otherwise,
        or saying which exclude rule removed it."""
        for cell in self.cells:
            if cell.name == name:
                return cell
        names = [c.name for c in self.cells]
        rule = self.excluded_by(name)
        if rule is not None:
            shown = ", ".join(f"{k}: {v}" for k, v in self.exclude[rule].items())
            where = f"{self.path.name}:{self.source.line(('matrix', 'exclude', rule))}"
            raise UnknownName(f"cell '{name}' is excluded by {where} matrix.exclude[{rule}] "
                              f"({{{shown}}}); add an include rule for it to run it")
        raise UnknownName(f"unknown cell '{name}'{suggest(name, names)} "
                          f"(`accelgrid cells` lists all {len(names)})")

    def excluded_by(self, name: str) -> int | None:
        """The index of the exclude rule that removed the combination named ``name``."""
        for device in self.axes["device"]:
            for torch in self.axes["torch"]:
                for profile in self.axes["profile"]:
                    if cell_name(device, torch, profile, self.default_profile) != name:
                        continue
                    combo = {"device": device, "torch": torch, "profile": profile}
                    for i, rule in enumerate(self.exclude):
                        if rule_matches(rule, combo):
                            return i
        return None


def cell_name(device: str, torch: str, profile: str, default_profile: str = "default") -> str:
    """The name of a device x torch x profile combination (before any hardware suffix)."""
    return f"{device}-{torch}" if profile == default_profile else f"{device}-{torch}-{profile}"


def rule_matches(rule: dict[str, Any], combo: dict[str, Any]) -> bool:
    """Whether an include/exclude ``rule`` matches ``combo`` on every axis it names."""
    return all(combo.get(k) == rule[k] for k in AXES if k in rule)


def as_env(mapping: dict[str, Any] | None) -> dict[str, str]:
    """A YAML env mapping as environment variables (every value a string)."""
    return {k: str(v) for k, v in (mapping or {}).items()}
