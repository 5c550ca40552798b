"""The known-issue registry, ``known_issues.yaml``: strict validation, scope matching.

Each entry names an upstream issue (``owner/repo#N``, its link and title), the cells it
affects (devices, torch range, profiles, package ranges), the tests it affects (fnmatch
patterns of node ids) and how they end while the bug is there (``failed``, ``error`` or
``skipped``, optionally with a message regex). In scope, such a test is a strict xfail
that carries the issue's link; if it passes, it fails saying the issue looks fixed.

Ranges are PEP 440 version specifiers (:mod:`accelgrid.base.versions`: ``"<2.5"``,
``">=2.4,<2.6"``, ``"==2.5.*"``; local labels such as ``+xpu`` are ignored when comparing).
The schema is ``accelgrid/schemas/known_issues.schema.json``.

Errors read like matrix.yaml's: ``FILE:LINE: key.path: message`` with suggestions.
The in-cell half (stdlib, pytest and packaging only) is
:mod:`accelgrid.testing.known_issues_runtime`.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import contract, jsonio
from ..base.jsonio import dumps
from ..base.redact import redact_text
from ..base.versions import in_range, range_is_empty
from .matrix import load_matrix, matrix_path
from .model import Cell, Matrix
from .validation import (
    KeyPath,
    Problem,
    SourceMap,
    ValidationFailed,
    check_schema,
    load_schema,
    load_yaml,
    memo_folder,
    short,
    suggest,
)
from .validation import check_known as _known

DEFAULT_REGISTRY = "known_issues.yaml"
ENV_DISABLE = contract.NO_KNOWN_ISSUES  # =1: run cells without the registry (raw outcomes)
REPRO_DIR = "suites/repro"

ISSUE_ID = re.compile(
    r"^(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+)#(?P<number>[1-9]\d*)$")
_ID_HINT = "an issue id like owner/repo#123"


@dataclass(frozen=True)
class KnownIssue:
    id: str
    url: str
    title: str
    tests: tuple[tuple[str, str | None], ...]   # (node-id pattern, torch range or None)
    expect: str
    match: str | None = None
    devices: tuple[str, ...] | None = None
    hardware: tuple[str, ...] | None = None     # families: the runner's (declared/detected)
    drivers: tuple[str, ...] | None = None      # driver stacks the runner declares
    torch: str | None = None
    profiles: tuple[str, ...] | None = None
    packages: dict[str, str] = field(default_factory=dict)
    status: str = "open"
    fixed_in: str | None = None
    note: str = ""
    # Per item of ``tests``: the devices it is narrowed to (None: all of scope.devices).
    test_devices: tuple[tuple[str, ...] | None, ...] = ()

    def out_of_scope_reason(self, cell: Cell) -> str | None:
        """Why the entry does not apply to ``cell`` (by the matrix's pins), or None."""
        if self.devices is not None and cell.device not in self.devices:
            return f"device {cell.device} is not in {', '.join(self.devices)}"
        if self.profiles is not None and cell.profile not in self.profiles:
            return f"profile {cell.profile} is not in {', '.join(self.profiles)}"
        # Hardware and driver are the runner's: known here only for a cell pinned to them.
        for kind, wanted, pinned in (("hardware", self.hardware, cell.hardware),
                                     ("driver", self.drivers, cell.driver)):
            if wanted is not None and pinned is not None and pinned not in wanted:
                return f"{kind} {pinned} is not in {', '.join(wanted)}"
        for package, text in {"torch": self.torch, **self.packages}.items():
            if text is None:
                continue
            version = cell.pins.get(package)
            if version is None:
                return f"the cell pins no {package}"
            if not in_range(version, text):
                return f"{package} {version} is outside {text}"
        return None

    def in_scope(self, cell: Cell) -> bool:
        return self.out_of_scope_reason(cell) is None

    def on_runner(self, hardware: str | None, driver: str | None) -> bool:
        """Whether the runner's hardware family and driver stack (None: not known) are in
        scope; an entry that names some is out of scope where they are not known."""
        return ((self.hardware is None or hardware in self.hardware)
                and (self.drivers is None or driver in self.drivers))

    def covers(self, nodeid: str, torch_version: str | None = None,
               device: str | None = None) -> bool:
        """Whether the entry names ``nodeid`` (at ``torch_version`` and on ``device``, for
        narrowed tests)."""
        # Imported here: the runtime side is a pytest plugin, and the CLI needs no pytest.
        from ..testing.known_issues_runtime import covers

        return covers(self.runtime_entry(device), nodeid, torch_version)

    def runtime_entry(self, device: str | None = None) -> dict[str, Any]:
        """What the in-cell plugin needs (device/profile are already checked): the tests
        that concern ``device`` (None: every test)."""
        devices = self.test_devices or (None,) * len(self.tests)
        return {"id": self.id, "url": self.url, "title": self.title,
                "tests": [{"test": p, "torch": r} for (p, r), devs in zip(self.tests, devices,
                                                                          strict=True)
                          if device is None or devs is None or device in devs],
                "expect": self.expect, "match": self.match, "torch": self.torch,
                "packages": dict(self.packages)}


@dataclass
class Registry:
    path: Path
    issues: dict[str, KnownIssue]

    def get(self, issue_id: str) -> KnownIssue:
        """The entry ``issue_id``; KeyError with a suggestion otherwise."""
        if issue_id in self.issues:
            return self.issues[issue_id]
        raise KeyError(f"{issue_id} is not in {self.path}{suggest(issue_id, self.issues)} "
                       f"(known: {', '.join(self.issues) or 'none'})")


def issue_url(issue_id: str) -> str:
    m = ISSUE_ID.match(issue_id)
    if not m:
        raise ValueError(f"'{issue_id}' is not {_ID_HINT}")
    return f"https://github.com/{m['owner']}/{m['repo']}/issues/{m['number']}"


def repro_file(issue_id: str) -> str:
    """The reproduction's file for an issue: ``suites/repro/test_<owner>_<repo>_<N>.py``."""
    m = ISSUE_ID.match(issue_id)
    if not m:
        raise ValueError(f"'{issue_id}' is not {_ID_HINT}")
    slug = re.sub(r"[^a-z0-9]+", "_", f"{m['owner']}_{m['repo']}".lower())
    return f"{REPRO_DIR}/test_{slug}_{m['number']}.py"


def _range_problems(text: str, smap: SourceMap, path: KeyPath) -> list[Problem]:
    try:
        if range_is_empty(text):
            return [smap.problem(path, f"range '{short(text)}' matches no version")]
    except ValueError as exc:
        return [smap.problem(path, f"bad range '{short(text)}': {short(str(exc), 120)}")]
    return []


def _outside_problem(pattern: str) -> str | None:
    """Why a test pattern points outside the project (patterns are node ids relative to
    the project's folder), or None."""
    path = pattern.split("::", 1)[0].replace("\\", "/")
    if path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        return f"'{short(pattern)}' is not relative to the project (node ids are)"
    if ".." in path.split("/"):
        return f"'{short(pattern)}' leads outside the project ('..')"
    if "\x00" in pattern:
        return "a test pattern cannot hold a NUL character"
    return None


@dataclass(frozen=True)
class _Entry:
    """One registry entry as read (past its schema): what each of :data:`ENTRY_CHECKS`
    takes."""

    id: str
    spec: dict[str, Any]
    smap: SourceMap
    matrix: Matrix

    @property
    def base(self) -> KeyPath:
        return ("issues", self.id)

    @property
    def scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = self.spec["scope"]
        return scope

    def problem(self, path: KeyPath, message: str) -> Problem:
        return self.smap.problem((*self.base, *path), message)

    def known(self, kind: str, value: str, known: list[str], path: KeyPath) -> list[Problem]:
        return _known(kind, value, known, self.smap, (*self.base, *path))


def _url(e: _Entry) -> Iterator[Problem]:
    """A given url is the issue's (or its pull request's) link."""
    if "url" not in e.spec:
        return
    url: str = e.spec["url"]
    if url.rstrip("/") not in (
            issue_url(e.id), issue_url(e.id).replace("/issues/", "/pull/")):
        yield e.problem(("url",), f"'{redact_text(short(url, 120))}' is not the link of "
                                  f"{e.id} (expected {issue_url(e.id)})")


def _scope_devices(e: _Entry) -> Iterator[Problem]:
    """The scope's devices are the matrix's."""
    for i, dev in enumerate(e.scope.get("devices") or []):
        yield from e.known("device", dev, list(e.matrix.devices), ("scope", "devices", i))


def _scope_runner(e: _Entry) -> Iterator[Problem]:
    """The scope's hardware families and driver stacks are its devices' in the matrix."""
    devices = e.scope.get("devices") or []
    for key, table in (("hardware", "hardware"), ("drivers", "drivers")):
        known = [n for dev in devices if dev in e.matrix.devices
                 for n in getattr(e.matrix.devices[dev], table)]
        what = "hardware family" if key == "hardware" else "driver stack"
        if key in e.scope and not known:
            listed = ", ".join(devices) or "no device"
            yield e.problem(("scope", key), (
                f"scope.devices ({listed}) has no {what} in {e.matrix.path.name} "
                f"(devices.<d>.{table})"))
            continue
        for i, name in enumerate(e.scope.get(key) or []):
            yield from e.known(what, name, known, ("scope", key, i))


def _scope_profiles(e: _Entry) -> Iterator[Problem]:
    """The scope's profiles are the matrix's."""
    for i, prof in enumerate(e.scope.get("profiles") or []):
        yield from e.known("profile", prof, list(e.matrix.profiles), ("scope", "profiles", i))


def _scope_torch(e: _Entry) -> list[Problem]:
    """The scope's torch range is one, and matches a torch release of the matrix."""
    if "torch" not in e.scope:
        return []
    text = e.scope["torch"]
    found = _range_problems(text, e.smap, (*e.base, "scope", "torch"))
    releases = [s.pins["torch"] for s in e.matrix.torch.values()]
    if not found and not any(in_range(r, text) for r in releases):
        found = [e.problem(("scope", "torch"),
                           f"range '{text}' matches no torch release of "
                           f"{e.matrix.path.name} ({', '.join(releases)})")]
    return found


def _scope_packages(e: _Entry) -> Iterator[Problem]:
    """The scope's package ranges are ranges."""
    for name, text in (e.scope.get("packages") or {}).items():
        yield from _range_problems(text, e.smap, (*e.base, "scope", "packages", name))


def _test(e: _Entry, i: int, item: str | dict[str, Any]) -> Iterator[Problem]:
    """Test ``i`` names test files of the project; its torch range is one, its devices
    the scope's."""
    pattern = item if isinstance(item, str) else item["test"]
    where = ("tests", i) if isinstance(item, str) else ("tests", i, "test")
    outside = _outside_problem(pattern)
    if outside:
        yield e.problem(where, outside)
    elif not glob.glob(str(e.matrix.root / pattern.split("::", 1)[0])):
        yield e.problem(where, f"'{short(pattern)}' matches no test file "
                               f"(patterns are node ids relative to {e.matrix.root.name}/)")
    if isinstance(item, str):
        return
    if "torch" in item:
        yield from _range_problems(item["torch"], e.smap, (*e.base, "tests", i, "torch"))
    scoped = e.scope.get("devices") or []
    for j, dev in enumerate(item.get("devices") or []):
        if dev not in scoped:
            yield e.problem(("tests", i, "devices", j),
                            f"device '{dev}' is not in scope.devices ({', '.join(scoped)})")


def _tests(e: _Entry) -> Iterator[Problem]:
    for i, item in enumerate(e.spec["tests"]):
        yield from _test(e, i, item)


def _match(e: _Entry) -> Iterator[Problem]:
    """The message pattern is a regular expression."""
    if "match" in e.spec:
        try:
            re.compile(e.spec["match"])
        except (re.error, OverflowError, RecursionError) as exc:
            yield e.problem(("match",), f"not a valid regular expression: {exc}")


# Each entry's checks, in this order (its problems read in file order).
ENTRY_CHECKS: tuple[Callable[[_Entry], Iterable[Problem]], ...] = (
    _url, _scope_devices, _scope_runner, _scope_profiles, _scope_torch, _scope_packages,
    _tests, _match,
)


def _semantic_problems(data: dict[str, Any], smap: SourceMap, matrix: Matrix
                       ) -> list[Problem]:
    """:data:`ENTRY_CHECKS`, entry by entry."""
    entries = [_Entry(issue_id, spec, smap, matrix)
               for issue_id, spec in (data.get("issues") or {}).items()]
    return [p for e in entries for check in ENTRY_CHECKS for p in check(e)]


def load_registry(path: str | Path, matrix: Matrix) -> Registry:
    """Load and validate the registry against ``matrix``; raises ValidationFailed."""
    path = Path(path)
    data, smap = load_yaml(path)
    if not isinstance(data, dict):
        raise ValidationFailed([Problem(str(path), 1, (), "expected a mapping at the top level")])
    problems = check_schema(data, load_schema("known-issues"), smap,
                            memo=memo_folder(matrix.root))
    if problems:
        raise ValidationFailed(problems)
    problems = _semantic_problems(data, smap, matrix)
    if problems:
        raise ValidationFailed(problems)
    issues = {}
    for issue_id, spec in (data["issues"] or {}).items():
        scope = spec["scope"]
        issues[issue_id] = KnownIssue(
            id=issue_id, url=spec.get("url", issue_url(issue_id)), title=spec["title"],
            tests=tuple((t, None) if isinstance(t, str) else (t["test"], t.get("torch"))
                        for t in spec["tests"]),
            expect=spec["expect"], match=spec.get("match"),
            devices=tuple(scope["devices"]) if "devices" in scope else None,
            hardware=tuple(scope["hardware"]) if "hardware" in scope else None,
            drivers=tuple(scope["drivers"]) if "drivers" in scope else None,
            torch=scope.get("torch"),
            profiles=tuple(scope["profiles"]) if "profiles" in scope else None,
            packages=dict(scope.get("packages") or {}),
            status=spec.get("status", "open"), fixed_in=spec.get("fixed_in"),
            note=spec.get("note", ""),
            test_devices=tuple(tuple(t["devices"]) if isinstance(t, dict) and "devices" in t
                               else None for t in spec["tests"]))
    return Registry(path, issues)


def registry_path(root: Path) -> Path:
    return root / DEFAULT_REGISTRY


def registry_for_run(root: Path) -> Registry | None:
    """The registry a cell run of the project at ``root`` uses: None without a registry
    file or with ``ACCELGRID_NO_KNOWN_ISSUES=1``. Raises ValidationFailed for an invalid
    one, so callers check it before they touch anything (results, environments)."""
    path = registry_path(root)
    if os.environ.get(ENV_DISABLE) == "1" or not os.path.lexists(path):
        return None
    # Validated each time (a few ms; it globs the project's test files), against the
    # matrix that load_matrix keeps while its file is unchanged.
    return load_registry(path, load_matrix(matrix_path(root)))


_UNREAD = Registry(Path(), {})  # cell_env's default: the registry is read there


def cell_env(cell: Cell, root: Path, folder: Path, *, hardware: str | None = None,
             driver: str | None = None, registry: Registry | None = _UNREAD
             ) -> dict[str, str]:
    """For the runner: write the cell's registry entries to ``folder/known_issues.json`` and
    return the env var pointing the plugin at it (nothing without a registry file, or with
    ``ACCELGRID_NO_KNOWN_ISSUES=1``). ``hardware`` / ``driver``: the runner's family and
    driver stack (None: not known), for entries scoped by them. Raises ValidationFailed for
    an invalid registry. ``registry``: the run's, read once by its preflight (else read
    here)."""
    if registry is _UNREAD:
        registry = registry_for_run(root)
    if registry is None:
        return {}
    path = registry.path
    entries = [i.runtime_entry(cell.device) for i in registry.issues.values()
               if (i.devices is None or cell.device in i.devices)
               and (i.profiles is None or cell.profile in i.profiles)
               and i.on_runner(hardware, driver)]
    entries = [e for e in entries if e["tests"]]   # narrowed to other devices only
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / contract.KNOWN_ISSUES_FILE
    text = dumps({"cell": cell.name, "registry": str(path), "issues": entries},
                 indent=2) + "\n"
    try:
        same = out.read_text(encoding="utf-8") == text
    except OSError:
        same = False
    if not same:   # in one step: a pytest reading it reads all of one or the other
        jsonio.write_text(out, text)
    return {contract.KNOWN_ISSUES: str(out)}
