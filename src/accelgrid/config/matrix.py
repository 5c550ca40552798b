"""The matrix model: matrix.yaml's semantic checks, typed access, and cells.

The schema is ``accelgrid/schemas/matrix.schema.json`` (``validation.load_schema("matrix")``);
``PIN_NAMES`` must match its pin keys (tests check it).

``load_matrix(path)`` returns a :class:`Matrix` or raises
:class:`~accelgrid.config.validation.ValidationFailed` listing every problem with file, line and
key. Its ``cells`` are the matrix's device x torch x profile combinations after
include/exclude, following GitHub Actions' matrix rules: ``exclude`` removes every
combination whose listed keys all match; an ``include`` entry whose device/torch/profile
match existing combinations adds its other keys (suites, timeout, workers) to them,
otherwise it adds a new combination. Profiles that declare ``devices`` are only crossed
with those devices. :func:`select` filters cells.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .. import devices
from ..base import contract, redact
from ..base.errors import UnknownName
from ..base.versions import in_range, public_version, range_is_empty
from ..devices import DeviceType
from ..devices import spec as device_spec
from . import compat, flags, indexes
from .validation import (
    Problem,
    SourceMap,
    ValidationFailed,
    check_schema,
    load_schema,
    load_yaml,
    memo_folder,
    read_bounded,
    short,
    suggest,
)
from .validation import check_known as _known

PIN_NAMES = ("torch", "torchao", "transformers", "accelerate", "torchvision", "datasets")
DEFAULT_MATRIX = "matrix.yaml"
# Installed in a cell only when its ``reruns`` > 0 (unless ``tools`` pins it already);
# the version the dev extra is tested with, constraints.txt's (tests/config/test_reruns.py checks).
RERUN_TOOL = "pytest-rerunfailures==16.7"
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
                    if _cell_name(device, torch, profile, self.default_profile) != name:
                        continue
                    combo = {"device": device, "torch": torch, "profile": profile}
                    for i, rule in enumerate(self.exclude):
                        if _matches(rule, combo):
                            return i
        return None


def _env(mapping: dict[str, Any] | None) -> dict[str, str]:
    return {k: str(v) for k, v in (mapping or {}).items()}


def _is_version(text: str) -> bool:
    try:
        public_version(text)
    except ValueError:
        return False
    return True


def _suite_path_problem(root: Path, text: str) -> str | None:
    """Why suite folder ``text`` is unusable: it must be a folder inside the project."""
    rel = PurePosixPath(text.replace("\\", "/"))
    if rel.is_absolute() or text.startswith("~") or re.match(r"^[A-Za-z]:", text):
        return f"suite folder '{short(text)}' must be relative to the matrix's folder"
    if ".." in rel.parts:
        return f"suite folder '{short(text)}' leads outside the project ('..')"
    try:
        folder = root / text
        if not folder.resolve().is_relative_to(root.resolve()):
            return f"suite folder '{short(text)}' leads outside the project (a symlink)"
        if not folder.is_dir():
            return f"suite folder '{short(text)}' does not exist"
    except (OSError, ValueError, RuntimeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        return f"suite folder '{short(text)}' cannot be used: {why}"
    return None


def _requirement_problem(text: str) -> str | None:
    """Why ``text`` is not one requirement (``name==1.0``) for pip/uv, or None."""
    if text.startswith("-"):
        return f"'{short(text)}' is an installer option, not a requirement"
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        return f"'{short(text)}' is not a requirement: {short(str(exc), 120)}"
    if req.url and redact.url_credentials(req.url):
        return (f"'{redact.redact_text(short(text, 200))}' carries credentials: keep "
                "them out of committed files")
    return None


def _flag_problems(env: dict, owner_devices: list[str] | None, smap: SourceMap,
                   base: tuple, what: str) -> list[Problem]:
    """Env flags that no device of ``owner_devices`` (None: every device) reads."""
    problems = []
    for var, value in (env or {}).items():
        msg = flags.flag_value_problem(var, str(value))
        if msg:
            problems.append(smap.problem((*base, var), msg))
            continue
        device = flags.flag_device(var)
        if device is None:
            continue
        if owner_devices is None:
            problems.append(smap.problem(
                (*base, var), f"{var} is read by {device} only, but {what} applies to every "
                              f"device: add devices: [{device}]"))
            continue
        others = [d for d in owner_devices if d != device]
        if others:
            problems.append(smap.problem(
                (*base, var), f"{var} is read by {device} only, not by {', '.join(others)} "
                              f"({what} lists {', '.join(owner_devices)})"))
    return problems


# Characters no generated file can hold safely in a value: they end a Containerfile
# instruction, a tox.ini line or a shell line (C0/C1 controls, DEL, Unicode line breaks).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# GitHub evaluates ${{ ... }} in (nearly) every workflow string, quoted or not.
EXPRESSION = "${{"
MAX_CELL_NAME = 128  # results.CELL_NAME's bound; well under a file name's 255 bytes


def control_problem(text: str) -> str | None:
    """Why ``text`` cannot be one line of a generated file (a control character), or None."""
    bad = _CONTROL.search(text)
    if bad:
        return (f"holds the control character {ascii(bad.group())[1:-1]}: it would end a "
                "line of the generated files (extra instructions); remove it")
    return None


def injection_problem(text: str) -> str | None:
    """Why ``text`` cannot go into a generated file (workflow, tox.ini, Containerfile,
    shell lines) whatever the quoting, or None."""
    bad = control_problem(text)
    if bad:
        return bad
    if EXPRESSION in text:
        return ("holds '${{', GitHub Actions' expression syntax, which the workflow would "
                "evaluate even quoted; remove it")
    return None


def _injection_problems(node: Any, smap: SourceMap, path: tuple = ()) -> list[Problem]:
    """:func:`injection_problem` of every key and string value in the matrix."""
    problems: list[Problem] = []
    if isinstance(node, dict):
        for key, value in node.items():
            why = injection_problem(str(key))
            if why:
                problems.append(smap.problem((*path, key), f"key {why}"))
            problems += _injection_problems(value, smap, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            problems += _injection_problems(value, smap, (*path, i))
    elif isinstance(node, str):
        why = injection_problem(node)
        if why:
            problems.append(smap.problem(path, f"'{short(node)}' {why}"))
    return problems


def _device_spec_problems(name: str, spec: str | None, root: Path, smap: SourceMap
                          ) -> list[Problem]:
    """A device outside accelgrid.devices' modules needs a spec file declaring it; the
    file is read here, not run (it may import a backend this process lacks: the cells
    get its type from accelgrid.devices.spec.resolve)."""
    where = ("devices", name, "spec") if spec else ("devices", name)
    # Built-in names only: a spec device an earlier load registered is still a spec device.
    known = [d.name for d in devices.BUILTIN]
    if spec is None:
        if name not in known:
            return [smap.problem(where, (
                f"unknown name '{name}'; expected one of: {', '.join(known)}"
                f"{suggest(name, known)} (another device type is declared by a spec: "
                "FILE.py, docs/guides/adding-a-device.md)"))]
        return []
    if name in known:
        return [smap.problem(where, f"'{name}' is a built-in device type; a spec file "
                                    "declares a device of another name")]
    path = root / spec
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        return [smap.problem(where, f"cannot read the device spec {spec}: {exc}")]
    declared = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "DEVICE_NAME" for t in node.targets)
                and isinstance(node.value, ast.Constant)]
    if declared != [name]:
        found = f"DEVICE_NAME = {declared[-1]!r}" if declared else "no DEVICE_NAME = '...'"
        return [smap.problem(where, f"{spec} has {found}; it must declare "
                                    f"DEVICE_NAME = {name!r}")]
    return []


def _semantic_problems(data: dict, smap: SourceMap, root: Path) -> list[Problem]:
    # Device names first, alone (as the schema's checks are): every later check of a
    # misspelt device would only repeat it.
    problems: list[Problem] = [p for dev, spec in data["devices"].items()
                               for p in _device_spec_problems(dev, spec.get("spec"), root, smap)]
    if problems:
        return problems
    devices = list(data["devices"])
    series = list(data["torch"])
    profiles = list(data["profiles"])
    suites = list(data["suites"])
    defaults = data["defaults"]

    problems += _known("torch series", defaults["torch"], series, smap, ("defaults", "torch"))
    if "profile" in defaults:
        problems += _known("profile", defaults["profile"], profiles, smap, ("defaults", "profile"))
    for i, name in enumerate(defaults["suites"]):
        problems += _known("suite", name, suites, smap, ("defaults", "suites", i))
    for key, spec in data["torch"].items():
        for pin, value in spec.items():
            if pin in PIN_NAMES and not _is_version(value):
                problems.append(smap.problem(("torch", key, pin),
                                             f"'{value}' is not a PEP 440 version"))
        why = (_channel_pin_problem(spec.get("channel", RELEASE), str(spec["torch"]))
               or _series_pin_problem(str(key), str(spec["torch"])))
        if why:
            problems.append(smap.problem(("torch", key, "torch"), why))

    for dev, spec in data["devices"].items():
        why = indexes.index_url_problem(spec["index"])
        if why:
            problems.append(smap.problem(("devices", dev, "index"), why))
        for channel, url in (spec.get("channels") or {}).items():
            why = indexes.index_url_problem(url)
            if why:
                problems.append(smap.problem(("devices", dev, "channels", channel), why))
        for key, texts in (spec.get("packages") or {}).items():
            where = ("devices", dev, "packages", key)
            problems += _known("torch series", key, series, smap, where)
            for i, text in enumerate(texts):
                why = _requirement_problem(text)
                if why:
                    problems.append(smap.problem((*where, i), why))
        runner = spec.get("runner") or {}
        if ("labels" in runner) == ("scale_set" in runner):
            problems.append(smap.problem(("devices", dev, "runner"), (
                "labels and scale_set both given: a runner scale set is reached by its name "
                "alone" if "labels" in runner else "give labels (runs-on) or scale_set (an "
                "actions-runner-controller scale set's name)")))
        elif runner.get("scale_set") and runner.get("hosted"):
            problems.append(smap.problem(("devices", dev, "runner", "hosted"),
                                         "a scale set's runners are self-hosted"))
        if runner.get("container") and not spec.get("container"):
            problems.append(smap.problem(("devices", dev, "runner", "container"),
                                         f"device {dev} has no container image to run in "
                                         "(container: null): leave runner.container out"))
        problems += _flag_problems(spec.get("env"), [dev], smap, ("devices", dev, "env"),
                                   f"device {dev}")
        for i, entry in enumerate(spec.get("runtime") or []):
            where = ("devices", dev, "runtime", i)
            problems += _runtime_range_problems(entry["torch"], smap, (*where, "torch"))
            extra = [k for k in ("version", "env_scripts", "check", "apt") if k in entry]
            if entry.get("from_wheels") and extra:
                problems.append(smap.problem((*where, extra[0]), (
                    f"a from_wheels runtime is installed with torch: it has no {extra[0]}")))
        problems += _runtime_overlaps(dev, spec.get("runtime") or [], data["torch"], smap)
        for kind in ("hardware", "drivers"):
            for name, entry in (spec.get(kind) or {}).items():
                for var, value in (entry.get("env") or {}).items():
                    msg = flags.flag_value_problem(var, str(value))
                    if msg:
                        problems.append(smap.problem(("devices", dev, kind, name, "env", var),
                                                     msg))
    for prof, spec in data["profiles"].items():
        for i, dev in enumerate(spec.get("devices") or []):
            problems += _known("device", dev, devices, smap, ("profiles", prof, "devices", i))
        problems += _flag_problems(spec.get("env"), spec.get("devices"), smap,
                                   ("profiles", prof, "env"), f"profile {prof}")
    for name, spec in data["suites"].items():
        for i, dev in enumerate(spec.get("devices") or []):
            problems += _known("device", dev, devices, smap, ("suites", name, "devices", i))
        why = _suite_path_problem(root, spec["path"])
        if why:
            problems.append(smap.problem(("suites", name, "path"), why))
        for i, text in enumerate(spec.get("packages") or []):
            why = _requirement_problem(text)
            if why:
                problems.append(smap.problem(("suites", name, "packages", i), why))
    for i, text in enumerate(data.get("tools") or []):
        why = _requirement_problem(text)
        if why:
            problems.append(smap.problem(("tools", i), why))

    axes = data["matrix"]
    for axis in ("device", "torch", "profile"):
        first: dict[str, int] = {}
        for i, value in enumerate(axes.get(axis) or []):
            if value in first:
                problems.append(smap.problem(
                    ("matrix", axis, i),
                    f"'{value}' is listed twice: its cells would have duplicate names"))
            first.setdefault(value, i)
    for i, dev in enumerate(axes["device"]):
        problems += _known("device", dev, devices, smap, ("matrix", "device", i))
    for i, ver in enumerate(axes["torch"]):
        problems += _known("torch series", ver, series, smap, ("matrix", "torch", i))
    for i, prof in enumerate(axes.get("profile") or []):
        problems += _known("profile", prof, profiles, smap, ("matrix", "profile", i))
    for kind in ("include", "exclude"):
        for i, rule in enumerate(axes.get(kind) or []):
            base = ("matrix", kind, i)
            if "device" in rule:
                problems += _known("device", rule["device"], devices, smap, (*base, "device"))
            if "torch" in rule:
                problems += _known("torch series", rule["torch"], series, smap, (*base, "torch"))
            if "profile" in rule:
                problems += _known("profile", rule["profile"], profiles, smap, (*base, "profile"))
            for j, name in enumerate(rule.get("suites") or []):
                problems += _known("suite", name, suites, smap, (*base, "suites", j))
            for key, table in (("hardware", "hardware"), ("driver", "drivers")):
                if key not in rule:
                    continue
                if "device" not in rule:
                    problems.append(smap.problem((*base, key),
                                                 f"a rule with {key} names its device too"))
                elif rule["device"] in data["devices"]:
                    known = list(data["devices"][rule["device"]].get(table) or {})
                    problems += _known(f"{rule['device']} {key}", rule[key], known, smap,
                                       (*base, key))
    return problems


def _series_pin_problem(series: str, pin: str) -> str | None:
    """Why torch ``pin`` is not a release of the series it is listed under (``2.12`` with
    ``2.21.0``: a typo that would run every cell of the series on another torch); None
    when it is, or when the series is not named X.Y."""
    if not re.fullmatch(r"\d{1,3}\.\d{1,3}", series) or not _is_version(pin):
        return None
    release = Version(pin).release
    if ".".join(map(str, release[:2])) != series:
        return f"torch {pin} is not a {series} release: series {series} takes {series}.x"
    return None


def _channel_pin_problem(channel: str, pin: str) -> str | None:
    """Why a torch pin cannot come from ``channel``, or None (a bad version is reported on
    its own)."""
    try:
        version = Version(pin)
    except InvalidVersion:
        return None
    if channel == NIGHTLY and (version.pre or version.post is not None or version.local):
        return (f"'{pin}' cannot come from the nightly channel: give the release its "
                "nightlies lead to ('2.16.0': the newest nightly when the cell runs) or one "
                "nightly ('2.16.0.dev20261201')")
    if channel == TEST and (version.is_prerelease or version.post is not None
                            or version.local):
        return (f"'{pin}' cannot come from the test channel: its release candidates carry "
                f"the final release number ('{version.base_version}')")
    return None


def _runtime_range_problems(text: str, smap: SourceMap, path: tuple) -> list[Problem]:
    try:
        if range_is_empty(text):
            return [smap.problem(path, f"range '{text}' matches no version")]
    except ValueError as exc:
        return [smap.problem(path, f"bad range '{text}': {exc}")]
    return []


def _runtime_overlaps(device: str, entries: list[dict], torch: dict[str, dict], smap: SourceMap
                      ) -> list[Problem]:
    """A torch release may fall in one runtime range of a device at most."""
    problems = []
    for spec in torch.values():
        release = spec["torch"]
        try:
            hits = [i for i, e in enumerate(entries) if in_range(release, e["torch"])]
        except ValueError:
            continue   # a bad range: reported on its own
        for i in hits[1:]:
            problems.append(smap.problem(
                ("devices", device, "runtime", i, "torch"),
                f"torch {release} is in this range and in runtime[{hits[0]}]'s "
                f"'{entries[hits[0]]['torch']}': one runtime per torch release"))
    return problems


def _hardware(table: dict[str, Any] | None) -> dict[str, Hardware]:
    return {name: Hardware(name, spec.get("description", ""), _env(spec.get("env")),
                           spec.get("label"))
            for name, spec in (table or {}).items()}


def _runtime(spec: dict[str, Any]) -> Runtime:
    check = spec.get("check") or {}
    apt = spec.get("apt") or {}
    return Runtime(
        torch=spec["torch"], name=spec["name"], from_wheels=bool(spec.get("from_wheels")),
        version=spec.get("version"), env_scripts=tuple(spec.get("env_scripts") or ()),
        check_env=check.get("env"), check_library=check.get("library"),
        apt_repository=apt.get("repository"), apt_key=apt.get("key"),
        apt_packages=tuple(apt.get("packages") or ()), source=spec.get("source", ""))


def _device_type(name: str, spec: str | None, root: Path, smap: SourceMap) -> DeviceType:
    """A built-in device type, or the one ``spec`` declares (run here, else its literal
    facts: accelgrid.devices.spec.resolve), registered so that what reads every device
    type (a cpu cell's hidden accelerators, flag owners) reads it too; a spec whose facts
    are wrong fails the load."""
    if spec is None:
        return devices.get(name)
    try:
        return devices.register(device_spec.resolve(root / spec))
    except device_spec.SpecError as exc:
        raise ValidationFailed([smap.problem(("devices", name, "spec"), str(exc))]) from exc


def _build(data: dict, path: Path, smap: SourceMap) -> Matrix:
    defaults = data["defaults"]
    timeout = defaults.get("timeout") or {}
    devices = {}
    for name, spec in data["devices"].items():
        container = spec.get("container") or {}
        runner = spec["runner"]
        devices[name] = Device(
            name=name,
            device_type=_device_type(name, spec.get("spec"), path.parent, smap),
            index=spec["index"],
            env=_env(spec.get("env")),
            detect=dict(spec["detect"]),
            # An ARC scale set is reached by its name as the only label.
            runner_labels=((runner["scale_set"],) if runner.get("scale_set")
                           else tuple(runner.get("labels") or ())),
            hosted=bool(runner.get("hosted", False)),
            description=spec.get("description", ""),
            torch_local_version=spec.get("torch_local_version"),
            container_family=container.get("family"),
            container_base=container.get("base"),
            workers=spec.get("workers"),
            shards=spec.get("shards"),
            reruns=spec.get("reruns"),
            runtime=tuple(_runtime(r) for r in spec.get("runtime") or ()),
            hardware=_hardware(spec.get("hardware")),
            drivers=_hardware(spec.get("drivers")),
            spec=spec.get("spec"),
            channels=dict(spec.get("channels") or {}),
            packages={k: tuple(v) for k, v in (spec.get("packages") or {}).items()},
            ci_container=bool(runner.get("container", bool(container))),
        )
    torch = {
        key: TorchSeries(key, {k: v for k, v in spec.items() if k in PIN_NAMES},
                         spec.get("python"), spec.get("channel", RELEASE))
        for key, spec in data["torch"].items()
    }
    profiles = {
        name: Profile(name, _env(spec.get("env")),
                      tuple(spec["devices"]) if "devices" in spec else None,
                      spec.get("description", ""))
        for name, spec in data["profiles"].items()
    }
    suites = {
        name: Suite(name, spec["path"], tuple(spec.get("needs") or ()),
                    tuple(spec.get("packages") or ()),
                    tuple(spec["devices"]) if "devices" in spec else None,
                    spec.get("description", ""), _env(spec.get("env")))
        for name, spec in data["suites"].items()
    }
    axes = data["matrix"]
    default_profile = defaults.get("profile", "default")
    return Matrix(
        path=path,
        root=path.parent,
        devices=devices,
        torch=torch,
        profiles=profiles,
        suites=suites,
        tools=tuple(data.get("tools") or ()),
        default_torch=defaults["torch"],
        default_profile=default_profile,
        default_python=defaults.get("python", "3.11"),
        default_suites=tuple(defaults["suites"]),
        cell_minutes=timeout.get("cell_minutes", 60),
        test_seconds=timeout.get("test_seconds", 900),
        workers=defaults.get("workers", 1),
        axes={
            "device": tuple(axes["device"]),
            "torch": tuple(axes["torch"]),
            "profile": tuple(axes.get("profile") or [default_profile]),
        },
        include=tuple(axes.get("include") or ()),
        exclude=tuple(axes.get("exclude") or ()),
        source=smap,
        reruns=defaults.get("reruns", 0),
    )


def _requirement_name(text: str) -> str:
    """A requirement's normalized project name ("" when it is not one)."""
    try:
        return re.sub(r"[-_.]+", "-", Requirement(text).name).lower()
    except InvalidRequirement:
        return ""


def _pairing_problems(matrix: Matrix, cells: Iterable[Cell]) -> list[Problem]:
    problems = []
    seen = set()
    for cell in cells:
        for why in compat.incompatibilities(cell.pins, cell.device):
            key = (cell.torch, why)
            if key in seen:
                continue
            seen.add(key)
            problems.append(matrix.source.problem(
                ("torch", cell.torch), f"{why} (cell {cell.name})"))
    return problems


# The last validated matrix, by (resolved path, file bytes), with its suite folders'
# existence: one `accelgrid run` loads the matrix in the CLI, the noxfile and the
# known-issue checks; validating it once saves ~0.1 s of a warm partial run. A changed
# file, or a suite folder appearing or going, loads it anew.
_LAST: dict[tuple[str, bytes], tuple[Matrix, tuple[tuple[str, bool], ...]]] = {}


def matrix_path(root: Path) -> Path:
    """The matrix file a run of the project at ``root`` uses: ``ACCELGRID_MATRIX`` when set
    (``accelgrid --matrix F`` sets it for the nox it starts), else ``root/matrix.yaml``."""
    named = os.environ.get(contract.MATRIX)
    return Path(named) if named else root / DEFAULT_MATRIX


def load_matrix(path: str | Path = DEFAULT_MATRIX) -> Matrix:
    """Load, validate and expand the matrix; raises ValidationFailed with every problem.
    Loading the same unchanged file again in a process returns the same (frozen) Matrix."""
    path = Path(path)
    try:
        # Bounded, regular files only (not /dev/zero, a FIFO or a huge file).
        key = (str(path.resolve()), read_bounded(path))
    except (OSError, RuntimeError, ValidationFailed):
        return _load_matrix(path)  # says what is wrong with the path
    hit = _LAST.get(key)
    if hit is not None and hit[1] == _suite_folders(hit[0]):
        return hit[0]
    matrix = _load_matrix(path)
    _LAST.clear()
    _LAST[key] = (matrix, _suite_folders(matrix))
    return matrix


def _suite_folders(matrix: Matrix) -> tuple[tuple[str, bool], ...]:
    """What the suite-folder checks looked at: where each leads, and whether it is one."""
    folders = [matrix.root / s.path for s in matrix.suites.values()]
    return tuple((str(f.resolve()), f.is_dir()) for f in folders)


def _load_matrix(path: Path) -> Matrix:
    data, smap = load_yaml(path)
    if not isinstance(data, dict):
        raise ValidationFailed([Problem(str(path), 1, (), "expected a mapping at the top level")])
    problems = check_schema(data, load_schema("matrix"), smap, memo=memo_folder(path.parent))
    if problems:
        raise ValidationFailed(problems)
    problems = _injection_problems(data, smap) or _semantic_problems(data, smap, path.parent)
    if problems:
        raise ValidationFailed(problems)
    matrix = _build(data, path, smap)
    cells, problems = _expand(matrix)
    problems += _pairing_problems(matrix, cells)
    problems += [smap.problem(("matrix",), f"cell name '{short(c.name)}' is {len(c.name)} "
                              f"characters; at most {MAX_CELL_NAME} (it names files and "
                              "folders: results/<cell>/, .nox/<cell>)")
                 for c in cells if len(c.name) > MAX_CELL_NAME]
    if not cells and not problems:
        problems.append(smap.problem(("matrix",), "expands to no cells: the exclude rules "
                                                  "remove every combination"))
    if problems:
        raise ValidationFailed(problems)
    return dataclasses.replace(matrix, cells=tuple(cells))


def select(cells: Iterable[Cell], *, device: list[str] | None = None,
           torch: list[str] | None = None, profile: list[str] | None = None) -> list[Cell]:
    """Cells matching every given filter (each filter: any of its values)."""
    return [
        c for c in cells
        if (not device or c.device in device)
        and (not torch or c.torch in torch)
        and (not profile or c.profile in profile)
    ]


# --- cells: the combinations after include/exclude -------------------------------------
def _cell_name(device: str, torch: str, profile: str, default_profile: str = "default") -> str:
    return f"{device}-{torch}" if profile == default_profile else f"{device}-{torch}-{profile}"


def _matches(rule: dict[str, Any], combo: dict[str, Any]) -> bool:
    return all(combo.get(k) == rule[k] for k in AXES if k in rule)


def _expand(matrix: Matrix) -> tuple[list[Cell], list[Problem]]:
    """All cells of ``matrix`` (built without them) in declaration order, and the problems
    found building them."""
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

    _name_pinned(combos)
    cells: list[Cell] = []
    seen: dict[str, tuple] = {}
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


# Include keys that pin a cell to a kind of runner: hardware is an axis of its own. Two
# rules pinning one cell to two families make two cells (GitHub Actions' include would let
# the second overwrite the first: one cell, silently on the last family).
PINS = ("hardware", "driver")


def _identity(combo: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(combo.get(k) for k in (*AXES, *PINS))


def _apply_include(combos: list[dict[str, Any]], targets: list[dict[str, Any]],
                   extras: dict[str, Any], origin: tuple) -> None:
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


def _name_pinned(combos: list[dict[str, Any]]) -> None:
    """Cells of one device, series and profile pinned to several hardware families (or,
    of one family, to several driver stacks) are named after them (``xpu-2.8-arc``,
    ``xpu-2.8-bmg``); a lone pin keeps the plain name."""
    for level, key in enumerate(PINS):
        groups: dict[tuple, set[Any]] = {}
        for combo in combos:
            groups.setdefault(_identity(combo)[:len(AXES) + level], set()).add(combo.get(key))
        for combo in combos:
            if combo.get(key) and len(groups[_identity(combo)[:len(AXES) + level]]) > 1:
                combo["_suffix"] = [*combo.get("_suffix", []), combo[key]]


def _make_cell(matrix: Matrix, combo: dict[str, Any]) -> Cell | str | Problem:
    """The cell of ``combo``, or why it cannot be one (a line naming the cell, or a
    problem located elsewhere than the rule that made the combo)."""
    device = matrix.devices[combo["device"]]
    series = matrix.torch[combo["torch"]]
    profile = matrix.profiles[combo["profile"]]
    name = "-".join([_cell_name(device.name, series.series, profile.name,
                                matrix.default_profile), *combo.get("_suffix", [])])
    suite_names = [
        s for s in combo.get("suites", matrix.default_suites)
        if (only := matrix.suites[s].devices) is None or device.name in only
    ]
    if not suite_names:
        return f"cell {name} resolves to no suites (none of its suites runs on {device.name})"
    suites = [matrix.suites[s] for s in suite_names]
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
    packages: list[str] = list(matrix.tools)
    # The backend's own package before the suites': what they import needs it.
    packages += [p for p in device.packages.get(series.series, ()) if p not in packages]
    for pin in sorted({n for s in suites for n in s.needs}):
        packages.append(f"{pin}=={series.pins[pin]}")
    for suite in suites:
        packages += [p for p in suite.packages if p not in packages]
    reruns = combo.get("reruns", device.reruns if device.reruns is not None
                       else matrix.reruns)
    if reruns and not any(_requirement_name(p) == "pytest-rerunfailures" for p in packages):
        packages.append(RERUN_TOOL)
    torch_req = channel_requirement(series.pins["torch"], series.channel,
                                    device.torch_local_version)
    wheel = combo.get("torch_wheel")
    channel = series.channel if wheel is None else RELEASE   # a local wheel is the build
    index = device.index
    if channel != RELEASE:
        if channel not in device.channels:
            return (f"cell {name}: torch {series.series} comes from PyTorch's {channel} "
                          f"channel and devices.{device.name}.channels has no {channel} index")
        index = device.channels[channel]
    runtimes = [r for r in device.runtime if in_range(series.pins["torch"], r.torch)]
    hardware = device.hardware.get(combo["hardware"]) if combo.get("hardware") else None
    driver = device.drivers.get(combo["driver"]) if combo.get("driver") else None
    labels = device.runner_labels + tuple(
        x.label for x in (hardware, driver) if x is not None and x.label
        and x.label not in device.runner_labels)
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
        suites=tuple(suite_names),
        suite_paths=tuple(s.path for s in suites),
        packages=tuple(packages),
        env={**device.env, **{k: v for s in suites for k, v in s.env.items()}, **profile.env,
             **_env(combo.get("env")),
             # the in-cell plugin loads the spec (relative: to the matrix's folder, where
             # the cell's pytest starts)
             **({contract.DEVICE_SPEC: device.spec} if device.spec else {})},
        index=index,
        torch_requirement=torch_req,
        runner_labels=labels,
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

