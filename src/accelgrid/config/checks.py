"""matrix.yaml's checks beyond its schema, as tables of named checks.

Each check takes the file as read (:class:`Loaded`, past its schema) and yields its
problems, in file order; :data:`STAGES` runs them, a stage only when the ones before it
found nothing (a control character or a misspelt device would only be repeated by every
later check). :data:`CELL_CHECKS` take the expanded cells. The problems' text and order
are what ``load_matrix`` reports (tests pin them).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .. import devices
from ..base import redact
from ..base.versions import in_range, public_version, range_is_empty
from . import compat, flags, indexes
from .model import NIGHTLY, PIN_NAMES, RELEASE, TEST, Cell, Matrix
from .validation import KeyPath, Problem, SourceMap, check_known, short, suggest

# Characters no generated file can hold safely in a value: they end a Containerfile
# instruction, a tox.ini line or a shell line (C0/C1 controls, DEL, Unicode line breaks).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# GitHub evaluates ${{ ... }} in (nearly) every workflow string, quoted or not.
EXPRESSION = "${{"
MAX_CELL_NAME = 128  # results.CELL_NAME's bound; well under a file name's 255 bytes


@dataclass(frozen=True)
class Loaded:
    """matrix.yaml as read and past its schema: what each check takes."""

    data: dict[str, Any]
    smap: SourceMap
    root: Path          # the matrix's folder: suite folders and spec files are relative to it

    def names(self, section: str) -> list[str]:
        """The names a top-level section declares (``devices``, ``torch``, ...)."""
        return list(self.data[section])

    def known(self, kind: str, value: str, known: list[str], path: KeyPath) -> list[Problem]:
        return check_known(kind, value, known, self.smap, path)

    def problem(self, path: KeyPath, message: str) -> Problem:
        return self.smap.problem(path, message)


Check = Callable[[Loaded], Iterable[Problem]]
# A check of one device's entry: (the file, the device's name, its entry).
DeviceCheck = Callable[[Loaded, str, dict[str, Any]], Iterable[Problem]]


# --- texts that go into generated files ------------------------------------------------
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


def _injection_problems(node: Any, smap: SourceMap, path: KeyPath = ()) -> list[Problem]:
    """:func:`injection_problem` of every key and string value under ``node``."""
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


def injections(m: Loaded) -> list[Problem]:
    """Every key and string value can go into a generated file."""
    return _injection_problems(m.data, m.smap)


# --- device types ----------------------------------------------------------------------
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


def device_types(m: Loaded) -> Iterator[Problem]:
    """Each device is a built-in type, or one its spec file declares."""
    for dev, spec in m.data["devices"].items():
        yield from _device_spec_problems(dev, spec.get("spec"), m.root, m.smap)


# --- defaults and torch series ---------------------------------------------------------
def defaults_known(m: Loaded) -> Iterator[Problem]:
    """The defaults name a declared torch series, profile and suites."""
    defaults = m.data["defaults"]
    yield from m.known("torch series", defaults["torch"], m.names("torch"), ("defaults", "torch"))
    if "profile" in defaults:
        yield from m.known("profile", defaults["profile"], m.names("profiles"),
                           ("defaults", "profile"))
    for i, name in enumerate(defaults["suites"]):
        yield from m.known("suite", name, m.names("suites"), ("defaults", "suites", i))


def _is_version(text: str) -> bool:
    try:
        public_version(text)
    except ValueError:
        return False
    return True


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


def torch_pins(m: Loaded) -> Iterator[Problem]:
    """Each series pins versions, its torch a release of that series and channel."""
    for key, spec in m.data["torch"].items():
        for pin, value in spec.items():
            if pin in PIN_NAMES and not _is_version(value):
                yield m.problem(("torch", key, pin), f"'{value}' is not a PEP 440 version")
        why = (_channel_pin_problem(spec.get("channel", RELEASE), str(spec["torch"]))
               or _series_pin_problem(str(key), str(spec["torch"])))
        if why:
            yield m.problem(("torch", key, "torch"), why)


# --- requirements and env flags --------------------------------------------------------
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


def _requirements(m: Loaded, texts: Iterable[str], where: KeyPath) -> Iterator[Problem]:
    """:func:`_requirement_problem` of each of ``texts`` (the list at ``where``)."""
    for i, text in enumerate(texts):
        why = _requirement_problem(text)
        if why:
            yield m.problem((*where, i), why)


def _flag_problems(env: dict[str, Any] | None, owner_devices: list[str] | None,
                   smap: SourceMap, base: KeyPath, what: str) -> list[Problem]:
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


# --- each device's entry (DEVICE_CHECKS) -----------------------------------------------
def _index_urls(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """The device's index and its channels' indexes are usable URLs."""
    why = indexes.index_url_problem(spec["index"])
    if why:
        yield m.problem(("devices", dev, "index"), why)
    for channel, url in (spec.get("channels") or {}).items():
        why = indexes.index_url_problem(url)
        if why:
            yield m.problem(("devices", dev, "channels", channel), why)


def _device_packages(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """The device's packages are listed per declared torch series, as requirements."""
    for key, texts in (spec.get("packages") or {}).items():
        where = ("devices", dev, "packages", key)
        yield from m.known("torch series", key, m.names("torch"), where)
        yield from _requirements(m, texts, where)


def _runner(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """The runner is named by labels or a scale set (self-hosted), and runs a container
    only where the device has an image."""
    runner = spec.get("runner") or {}
    if ("labels" in runner) == ("scale_set" in runner):
        yield m.problem(("devices", dev, "runner"), (
            "labels and scale_set both given: a runner scale set is reached by its name "
            "alone" if "labels" in runner else "give labels (runs-on) or scale_set (an "
            "actions-runner-controller scale set's name)"))
    elif runner.get("scale_set") and runner.get("hosted"):
        yield m.problem(("devices", dev, "runner", "hosted"),
                        "a scale set's runners are self-hosted")
    if runner.get("container") and not spec.get("container"):
        yield m.problem(("devices", dev, "runner", "container"),
                        f"device {dev} has no container image to run in "
                        "(container: null): leave runner.container out")


def _device_env(m: Loaded, dev: str, spec: dict[str, Any]) -> list[Problem]:
    """The device's env flags are read by the device."""
    return _flag_problems(spec.get("env"), [dev], m.smap, ("devices", dev, "env"),
                          f"device {dev}")


def _runtime_range_problems(text: str, smap: SourceMap, path: KeyPath) -> list[Problem]:
    try:
        if range_is_empty(text):
            return [smap.problem(path, f"range '{text}' matches no version")]
    except ValueError as exc:
        return [smap.problem(path, f"bad range '{text}': {exc}")]
    return []


def _runtimes(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """Each runtime's torch range matches releases; a from_wheels runtime has nothing to
    install or source."""
    for i, entry in enumerate(spec.get("runtime") or []):
        where = ("devices", dev, "runtime", i)
        yield from _runtime_range_problems(entry["torch"], m.smap, (*where, "torch"))
        extra = [k for k in ("version", "env_scripts", "check", "apt") if k in entry]
        if entry.get("from_wheels") and extra:
            yield m.problem((*where, extra[0]), (
                f"a from_wheels runtime is installed with torch: it has no {extra[0]}"))


def _runtime_overlaps(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """A torch release may fall in one runtime range of a device at most."""
    entries = spec.get("runtime") or []
    for series in m.data["torch"].values():
        release = series["torch"]
        try:
            hits = [i for i, e in enumerate(entries) if in_range(release, e["torch"])]
        except ValueError:
            continue   # a bad range: reported on its own
        for i in hits[1:]:
            yield m.problem(
                ("devices", dev, "runtime", i, "torch"),
                f"torch {release} is in this range and in runtime[{hits[0]}]'s "
                f"'{entries[hits[0]]['torch']}': one runtime per torch release")


def _family_env(m: Loaded, dev: str, spec: dict[str, Any]) -> Iterator[Problem]:
    """The env flags of the device's hardware families and driver stacks have valid
    values."""
    for kind in ("hardware", "drivers"):
        for name, entry in (spec.get(kind) or {}).items():
            for var, value in (entry.get("env") or {}).items():
                msg = flags.flag_value_problem(var, str(value))
                if msg:
                    yield m.problem(("devices", dev, kind, name, "env", var), msg)


DEVICE_CHECKS: tuple[DeviceCheck, ...] = (
    _index_urls, _device_packages, _runner, _device_env, _runtimes, _runtime_overlaps,
    _family_env,
)


def device_entries(m: Loaded) -> Iterator[Problem]:
    """:data:`DEVICE_CHECKS`, device by device."""
    for dev, spec in m.data["devices"].items():
        for check in DEVICE_CHECKS:
            yield from check(m, dev, spec)


# --- profiles, suites, tools -----------------------------------------------------------
def profile_entries(m: Loaded) -> Iterator[Problem]:
    """A profile names declared devices, and its env flags are read by them."""
    for prof, spec in m.data["profiles"].items():
        for i, dev in enumerate(spec.get("devices") or []):
            yield from m.known("device", dev, m.names("devices"), ("profiles", prof, "devices", i))
        yield from _flag_problems(spec.get("env"), spec.get("devices"), m.smap,
                                  ("profiles", prof, "env"), f"profile {prof}")


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


def suite_entries(m: Loaded) -> Iterator[Problem]:
    """A suite names declared devices, a folder inside the project and requirements."""
    for name, spec in m.data["suites"].items():
        for i, dev in enumerate(spec.get("devices") or []):
            yield from m.known("device", dev, m.names("devices"), ("suites", name, "devices", i))
        why = _suite_path_problem(m.root, spec["path"])
        if why:
            yield m.problem(("suites", name, "path"), why)
        yield from _requirements(m, spec.get("packages") or [], ("suites", name, "packages"))


def tool_requirements(m: Loaded) -> Iterator[Problem]:
    """The tools every cell installs are requirements."""
    yield from _requirements(m, m.data.get("tools") or [], ("tools",))


# --- the matrix: axes and include/exclude rules ----------------------------------------
def axes_listed_once(m: Loaded) -> Iterator[Problem]:
    """No axis lists a value twice (its cells would have one name)."""
    axes = m.data["matrix"]
    for axis in ("device", "torch", "profile"):
        first: dict[str, int] = {}
        for i, value in enumerate(axes.get(axis) or []):
            if value in first:
                yield m.problem(("matrix", axis, i),
                                f"'{value}' is listed twice: its cells would have duplicate names")
            first.setdefault(value, i)


def axes_known(m: Loaded) -> Iterator[Problem]:
    """The axes list declared devices, torch series and profiles."""
    axes = m.data["matrix"]
    for i, dev in enumerate(axes["device"]):
        yield from m.known("device", dev, m.names("devices"), ("matrix", "device", i))
    for i, ver in enumerate(axes["torch"]):
        yield from m.known("torch series", ver, m.names("torch"), ("matrix", "torch", i))
    for i, prof in enumerate(axes.get("profile") or []):
        yield from m.known("profile", prof, m.names("profiles"), ("matrix", "profile", i))


def _rule_names(m: Loaded, rule: dict[str, Any], base: KeyPath) -> Iterator[Problem]:
    """A rule's device, torch series, profile and suites are declared."""
    for key, kind, section in (("device", "device", "devices"),
                               ("torch", "torch series", "torch"),
                               ("profile", "profile", "profiles")):
        if key in rule:
            yield from m.known(kind, rule[key], m.names(section), (*base, key))
    for j, name in enumerate(rule.get("suites") or []):
        yield from m.known("suite", name, m.names("suites"), (*base, "suites", j))


def _rule_pins(m: Loaded, rule: dict[str, Any], base: KeyPath) -> Iterator[Problem]:
    """A rule's hardware family or driver stack is one its device declares."""
    for key, table in (("hardware", "hardware"), ("driver", "drivers")):
        if key not in rule:
            continue
        if "device" not in rule:
            yield m.problem((*base, key), f"a rule with {key} names its device too")
        elif rule["device"] in m.data["devices"]:
            known = list(m.data["devices"][rule["device"]].get(table) or {})
            yield from m.known(f"{rule['device']} {key}", rule[key], known, (*base, key))


def include_exclude_rules(m: Loaded) -> Iterator[Problem]:
    """Each include and exclude rule names what the file declares."""
    for kind in ("include", "exclude"):
        for i, rule in enumerate(m.data["matrix"].get(kind) or []):
            yield from _rule_names(m, rule, ("matrix", kind, i))
            yield from _rule_pins(m, rule, ("matrix", kind, i))


CHECKS: tuple[Check, ...] = (
    defaults_known, torch_pins, device_entries, profile_entries, suite_entries,
    tool_requirements, axes_listed_once, axes_known, include_exclude_rules,
)
# Each stage runs when the ones before it found nothing: device names alone (as the
# schema's checks are), since every later check of a misspelt device would only repeat it.
STAGES: tuple[tuple[Check, ...], ...] = ((injections,), (device_types,), CHECKS)


def file_problems(loaded: Loaded) -> list[Problem]:
    """The problems of the first stage of :data:`STAGES` that finds any."""
    for stage in STAGES:
        found = [p for check in stage for p in check(loaded)]
        if found:
            return found
    return []


# --- the cells -------------------------------------------------------------------------
def pairings(matrix: Matrix, cells: Sequence[Cell]) -> Iterator[Problem]:
    """No cell pins versions known not to work together (:mod:`.compat`); each once per
    torch series."""
    seen = set()
    for cell in cells:
        for why in compat.incompatibilities(cell.pins, cell.device):
            key = (cell.torch, why)
            if key in seen:
                continue
            seen.add(key)
            yield matrix.source.problem(("torch", cell.torch), f"{why} (cell {cell.name})")


def name_lengths(matrix: Matrix, cells: Sequence[Cell]) -> Iterator[Problem]:
    """A cell's name fits a file name."""
    for c in cells:
        if len(c.name) > MAX_CELL_NAME:
            yield matrix.source.problem(
                ("matrix",), f"cell name '{short(c.name)}' is {len(c.name)} characters; at "
                             f"most {MAX_CELL_NAME} (it names files and folders: "
                             "results/<cell>/, .nox/<cell>)")


CELL_CHECKS: tuple[Callable[[Matrix, Sequence[Cell]], Iterable[Problem]], ...] = (
    pairings, name_lengths,
)


def cell_problems(matrix: Matrix, cells: Sequence[Cell]) -> list[Problem]:
    """:data:`CELL_CHECKS` of the expanded ``cells``."""
    return [p for check in CELL_CHECKS for p in check(matrix, cells)]
