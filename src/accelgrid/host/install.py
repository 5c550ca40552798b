"""Install planning: which packages a cell's environment gets, from which index.

Two steps: torch first, from the device's index when it has its own (PyTorch's XPU
wheels) or from the cell's local wheel (an include rule's ``torch_wheel``: a source build),
then everything else from the default index with torch pinned, so the second step can
never swap the device build of torch for another. pip's own configuration is carried over
to uv (uv reads none of it).

A warm env skips both steps: after a successful install the session writes a stamp of
everything the install depended on into the env folder (:mod:`accelgrid.host.stamp`); a
later run whose pins give the same stamp, in an env whose installed distributions are
still those it had, installs nothing (two no-op ``uv pip install`` calls cost seconds per
run).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import platform
import re
import sys
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..base import contract, jsonio, redact, statkey
from ..base.errors import InvalidInput
from ..base.versions import version_key
from ..config.indexes import index_url_problem
from ..config.model import RELEASE, Cell
from . import pipconfig, statcache


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
    # A nightly range: the build is the newest on the channel when the env is built, so
    # a warm env (and an image) is re-resolved once a day (:func:`.stamp.pins`,
    # :func:`nightly_day`).
    daily: bool = False

    @property
    def shown_index(self) -> str:
        """The index as it may be printed (credentials replaced)."""
        return redact.redact_url(self.index)

    def as_dict(self) -> dict:
        return {"index": self.shown_index, "env": redact.redact(self.env),
                "steps": [{"description": s.description, "args": list(s.args),
                           **({"env": redact.redact(s.env)} if s.env else {})}
                          for s in self.steps]}


# --- cpu cells: torch's CPU build ----------------------------------------------------------
# PyPI's Linux x86-64 torch wheels are CUDA builds (torch 2.4.1: 2.7 GB of NVIDIA libraries
# beside it); PyTorch's CPU index has the CPU builds, tagged +cpu on Linux and Windows x86-64.
CPU_DEVICE = "cpu"
CPU_BUILD_TAG = "cpu"
CPU_FALLBACK = ("taking torch's CPU build from pip's configuration instead (its find-links "
                "and indexes)")


def fallback_failure(cell: Cell, requirement: str, uv_output: str) -> str | None:
    """One line for a cpu cell whose CPU index cannot be reached and whose torch CPU build
    pip's configuration does not have either (uv: "no version of torch==X+cpu"), or
    None for any other failure. The ``+cpu`` pin is why no CUDA build of the same version
    stands in for it."""
    if not requirement.startswith("torch==") or \
            f"no version of {requirement}" not in uv_output.replace("\n", " "):
        return None
    version = requirement.removeprefix("torch==")
    return (f"{cell.name}: torch {version} is neither on {cell.index} (cannot be reached) "
            "nor in pip's configuration (its find-links and indexes): put its wheel in a "
            f"find-links folder or set {contract.TORCH_INDEX} to an index that has it; no "
            "other build of torch is taken instead")


def cpu_build_tag(system: str | None = None, machine: str | None = None) -> str | None:
    """The local version PyTorch's CPU wheels carry on this platform (``cpu`` on Linux and
    Windows x86-64), or None where they carry none (macOS, arm64): there only the check
    after the install (:func:`cuda_build`) tells a CUDA build."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    return CPU_BUILD_TAG if system in ("Linux", "Windows") and machine in (
        "x86_64", "amd64") else None


def torch_requirement(cell: Cell, *, tag: str | None = None) -> str:
    """The requirement both install steps pin torch with: a cpu cell's names the CPU build
    where its wheels are tagged (``torch==2.4.1+cpu``), so no index can hand it a CUDA
    build of the same version."""
    if cell.device != CPU_DEVICE or "+" in cell.torch_requirement or \
            not cell.torch_requirement.startswith("torch=="):
        return cell.torch_requirement   # a nightly range takes no local label
    tag = cpu_build_tag() if tag is None else tag
    return f"{cell.torch_requirement}+{tag}" if tag else cell.torch_requirement


def planned_torch(cell: Cell) -> str:
    """What torch is installed as: the local wheel's path, else :func:`torch_requirement`
    (what :mod:`accelgrid.host.inputs` checks the env's torch against)."""
    if cell.torch_wheel is not None:
        return local_wheel(cell)[0] or cell.torch_requirement
    return torch_requirement(cell)


# uv hardlinks an env's files to its cache by default on Linux: an edit in place of one
# env's file (a debugging print in site-packages) changes the cache and every env built
# from it. Cell envs get copies unless the user chose a mode (clone, where the file
# system has reflinks: as cheap as a link, never shared once written).
LINK_MODE = ("UV_LINK_MODE", "copy")


def link_mode(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """UV_LINK_MODE for a cell env's installs: the user's, else ``copy``."""
    chosen = (os.environ if env is None else env).get(LINK_MODE[0], "").strip()
    return {} if chosen else {LINK_MODE[0]: LINK_MODE[1]}


def can_fall_back(cell: Cell, torch_index: str | None = None) -> bool:
    """Whether an unreachable torch index lets ``cell`` take torch from pip's configuration
    (a cpu cell on its device's CPU index, not an index the user named: that one must
    answer)."""
    return (cell.device == CPU_DEVICE and cell.torch_wheel is None and cell.channel == RELEASE
            and not (torch_index or "").strip() and cell.index != "default")


def resolved_at_run(cell: Cell) -> bool:
    """Whether the cell's torch build is known only when it installs (a nightly range,
    ``torch>=2.16.0.dev0,<2.16.0a0``): the run's env.json records which it got."""
    return cell.torch_wheel is None and not cell.torch_requirement.startswith("torch==")


def nightly_day(now: datetime.datetime | None = None) -> str:
    """The UTC day a nightly-range env was resolved on: PyTorch publishes a nightly a
    day, so an env (or image) of an earlier day is re-resolved and gets the newer one."""
    now = now or datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (as provenance)
    return now.astimezone(datetime.timezone.utc).date().isoformat()  # noqa: UP017


def cuda_build(envdir: Path) -> str | None:
    """Whether the torch installed in ``envdir`` is a CUDA (or ROCm) build, as one line
    naming its version and what gives it away (a ``+cuXXX`` tag, NVIDIA packages it
    requires), or None (a CPU build, or no torch)."""
    for meta in sorted(envdir.glob("lib/python*/site-packages/torch-*.dist-info/METADATA")) + \
            sorted(envdir.glob("Lib/site-packages/torch-*.dist-info/METADATA")):
        try:
            text = meta.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        version = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                        if ln.startswith("Version:")), "?")
        nvidia = sorted({m.group(1) for m in re.finditer(
            r"^Requires-Dist:\s*(nvidia-[A-Za-z0-9_.-]+)", text, re.M)})
        local = version.partition("+")[2]
        if nvidia or local.startswith(("cu", "rocm")):
            why = (f"requires {', '.join(nvidia[:3])}" + (", ..." if len(nvidia) > 3 else "")
                   if nvidia else f"tagged +{local}")
            return f"torch {version} is a GPU build ({why}), not a CPU build"
    return None


def plan(cell: Cell, *, torch_index: str | None = None, uv_env: dict[str, str] | None = None,
         cpu_fallback: bool = False) -> InstallPlan:
    """The install plan for ``cell``. ``torch_index`` overrides the device's index (it
    comes from $ACCELGRID_TORCH_INDEX: InvalidInput when it is no index URL; ``default``:
    pip's configuration alone). ``cpu_fallback``: the cpu cell's CPU index cannot be
    reached, torch's CPU build comes from pip's configuration (:func:`can_fall_back`)."""
    if torch_index is not None and torch_index.strip():
        why = index_url_problem(torch_index.strip(), allow_credentials=True)
        if why:
            raise InvalidInput(f"{contract.TORCH_INDEX}: {why}")
    index = (torch_index or "").strip() or cell.index
    if uv_env is None:
        uv_env = pipconfig.uv_env_from_pip(pipconfig.pip_settings())
    uv_env = {**uv_env, **link_mode()}
    requirement = torch_requirement(cell)
    if cpu_fallback and can_fall_back(cell, torch_index):
        return InstallPlan(cell.name, "default", (
            Step(f"torch's CPU build from pip's configuration ({cell.index} cannot be "
                 "reached)", (requirement,)),
            Step("test tooling and suite packages", (requirement, *cell.packages)),
        ), dict(uv_env))
    pin = cell.torch_requirement
    torch_args: tuple[str, ...] = (requirement,)
    torch_env: dict[str, str] = {}
    if cell.torch_wheel is not None:
        wheel, _ = local_wheel(cell)
        pin = wheel or cell.torch_requirement   # the wheel file pins torch in both steps
        return InstallPlan(cell.name, "default", (
            Step(f"torch from the local wheel {wheel or cell.torch_wheel}", (pin,)),
            Step("test tooling and suite packages", (pin, *cell.packages)),
        ), dict(uv_env))
    if index != "default" and redact.url_credentials(index):
        # Not on the command line: nox logs it, and so do CI jobs. pip and uv both read
        # extra indexes from the environment (space-separated).
        extra = " ".join(v for v in (index, uv_env.get("UV_EXTRA_INDEX_URL")
                                     or os.environ.get("UV_EXTRA_INDEX_URL")) if v)
        torch_env = {"UV_EXTRA_INDEX_URL": extra, "PIP_EXTRA_INDEX_URL": extra}
    elif index != "default":
        torch_args = ("--extra-index-url", index, requirement)
    daily = resolved_at_run(cell)
    if daily:   # an env holding an older nightly satisfies the range: take the newest
        torch_args = ("--upgrade", *torch_args)
    shown = "the default index" if index == "default" else redact.redact_url(index)
    what = f"torch ({cell.channel} channel)" if cell.channel != RELEASE else "torch"
    steps = (
        Step(f"{what} from {shown}", torch_args, torch_env),
        Step("test tooling and suite packages", (requirement, *cell.packages)),
    )
    return InstallPlan(cell.name, index, steps, dict(uv_env), daily)


def expected_download(plan: InstallPlan, requirement: str, python: str) -> str | None:
    """The size of the torch wheel ``plan``'s first step would take, where a local source
    holds it (the local wheel, a find-links folder, a file:// index: the largest wheel
    matching ``requirement`` for ``python`` on this platform, in one phrase), else None:
    a remote index's sizes are known only once uv resolves it."""
    from packaging.requirements import Requirement
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    first = plan.steps[0].args
    if first and first[-1].endswith(".whl"):
        st = _stat(first[-1])
        return None if st is None else f"{_mb(st.st_size)} (the local wheel {first[-1]})"
    req = Requirement(requirement)
    folders = [u.removeprefix("file://")
               for u in plan.env.get("UV_FIND_LINKS", "").replace(",", " ").split()
               if "://" not in u or u.startswith("file://")]
    indexes = [u.removeprefix("file://") for key in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL")
               for u in plan.env.get(key, "").split() if u.startswith("file://")]
    if plan.index.startswith("file://"):
        indexes.append(plan.index.removeprefix("file://"))
    folders += [str(Path(i) / req.name) for i in indexes]
    platforms = {t.platform for t in sys_tags()}
    interpreters = {f"cp{python.replace('.', '')}", "py3", f"py{python.split('.')[0]}"}
    best: tuple[int, str] | None = None
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            try:
                dist, version, _, tags = parse_wheel_filename(name)
            except InvalidWheelFilename:
                continue
            if dist != req.name or not req.specifier.contains(version, prereleases=True) or \
                    not any(t.interpreter in interpreters and t.platform in platforms
                            for t in tags):
                continue
            st = _stat(str(Path(folder) / name))
            if st is not None and (best is None or st.st_size > best[0]):
                best = (st.st_size, str(Path(folder) / name))
    return None if best is None else f"{_mb(best[0])} ({best[1]})"


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size} bytes"


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
                      "docs/devices/xpu.md)")
    found = sorted(w for w in path.glob("torch-*.whl") if _series(w.name) == cell.torch)
    if len(found) == 1:
        return str(found[0]), None
    if not found:
        return None, (f"{cell.name}: no torch {cell.torch} wheel in {path} (build torch "
                      f"{cell.torch} from source and put its wheel there: docs/devices/xpu.md)")
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
    # Here: 10 ms of the start of every warm run, which never asks an index.
    from urllib.error import HTTPError
    from urllib.request import Request, urlopen

    shown = redact.redact_url(index)
    why = index_url_problem(index, allow_credentials=True)
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
    shown_url = redact.redact_url(shown.rstrip("/") + "/torch/")
    try:
        with urlopen(Request(url, headers=headers, method="GET"), timeout=timeout) as resp:
            resp.read(1)
        return None
    except HTTPError as exc:
        return f"package index {shown} answered HTTP {exc.code} for {shown_url}"
    except Exception as exc:  # noqa: BLE001 - URLError, OSError, http.client's InvalidURL...
        reason = getattr(exc, "reason", None) or exc
        return (f"package index {shown} cannot be reached: "
                f"{redact.redact_text(str(reason))[:300]}")


def uv_changes(output: str, requested: Sequence[str] = ()) -> str:
    """What ``uv pip install`` did, in a few words, from its output: the packages it
    added (``+ name==version``; the ``requested`` requirements' first), replaced or
    removed; ``nothing to change`` when it only checked them."""
    added: dict[str, str] = {}   # name -> version
    removed: dict[str, str] = {}
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

# --- pip's configuration, remembered ------------------------------------------------------
PIP_CONFIG = ".accelgrid-pip.json"   # in the env folder
# Variables that change what pip reads or where its files are.
_PIP_VARS = ("PIP_", "UV_", "XDG_CONFIG_", "HOME", "APPDATA")


def uv_env(envdir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """pip's configuration as uv's variables
    (:func:`accelgrid.host.pipconfig.uv_env_from_pip`), remembered in ``envdir`` while
    the interpreter running pip, the variables that steer pip (PIP_*, UV_*, HOME,
    XDG_CONFIG_*) and every configuration file pip reads (as ``pip config debug`` lists
    them: each one's presence, size and time) stay as they were: asking pip costs a second
    on a busy host, on every run. A configuration with a credential in it is never written
    down: pip is asked each time then."""
    env = dict(os.environ if env is None else env)
    key = hashlib.sha256(json.dumps(
        [sys.executable, sorted((k, v) for k, v in env.items() if k.startswith(_PIP_VARS))]
    ).encode()).hexdigest()
    cache = envdir / PIP_CONFIG
    data, err = jsonio.read_json(cache)
    if (not err and isinstance(data, dict) and data.get("key") == key
            and isinstance(data.get("files"), dict) and isinstance(data.get("uv_env"), dict)
            and all(_file_state(f) == state for f, state in data["files"].items())):
        return {str(k): str(v) for k, v in data["uv_env"].items()}
    files = pipconfig.pip_config_files()
    found = pipconfig.uv_env_from_pip(pipconfig.pip_settings(), env)
    secret = any(redact.redact({k: v})[k] != v for k, v in found.items())
    if files is not None and not secret and envdir.is_dir():
        jsonio.write_json(cache, {"key": key, "files": {f: _file_state(f) for f in files},
                                   "uv_env": found})
    return found


def _file_state(path: str) -> list[int] | None:
    st = _stat(path)
    return None if st is None else [st.st_size, st.st_mtime_ns]


def incomplete(envdir: Path) -> list[str]:
    """The names of the env's distributions whose RECORD names files that are not there
    (what a repair reinstalls: ``uv pip install --reinstall-package NAME``)."""
    names: list[str] = []
    while (gone := missing_files(envdir, skip=names)) is not None:
        names.append(gone.split(":", 1)[0].rsplit("-", 1)[0])
    return names


PRESENT_STORE = ".accelgrid-present.json"   # statcache: distributions found whole


def missing_files(envdir: Path, limit: int = 3, skip: Collection[str] = (),
                  remember: bool = False) -> str | None:
    """What an interrupted install left out: the first distribution of the env whose
    RECORD names files that are not there (``torch-2.13.0+cpu: 3127 of 15880 files
    missing, e.g. torch/lib/libtorch_cpu.so``), or None when every RECORD file is.
    Killed while uv links a wheel, an env holds its metadata but not its files, and a
    later install then finds nothing to change. ``remember``: a distribution found whole
    is kept in the env's :data:`PRESENT_STORE` with the stat keys of its RECORD and of
    every folder its files are in; while none of them changed (no entry of those folders
    removed, added or renamed), it is whole still and its RECORD is not read again."""
    import csv

    store = statcache.Store(envdir / PRESENT_STORE) if remember else None
    try:
        for site in [*envdir.glob("lib/python*/site-packages"), envdir / "Lib" / "site-packages"]:
            try:
                infos = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
            except OSError:
                continue
            listed = _Listing(str(site))
            for info in infos:
                if info.removesuffix(".dist-info").rsplit("-", 1)[0] in skip:
                    continue
                record = site / info / "RECORD"
                entry = f"{site.relative_to(envdir).as_posix()}/{info}"
                record_key = statkey.key(record) if store is not None else None
                if store is not None and store.unchanged(entry, record_key, "folders",
                                                         str(site)):
                    continue
                try:
                    with open(record, encoding="utf-8", errors="replace", newline="") as fh:
                        paths = [row[0] for row in csv.reader(fh) if row and row[0]]
                except OSError:
                    if (site / info / "METADATA").exists():
                        continue  # an installer that writes no RECORD: nothing to check
                    return f"{info.removesuffix('.dist-info')}: its metadata is incomplete"
                gone = [p for p in paths if not listed.has(p)]
                if gone:
                    if store is not None:
                        store.drop(entry)
                    shown = ", ".join(gone[:limit])
                    return (f"{info.removesuffix('.dist-info')}: {len(gone)} of {len(paths)} "
                            f"files missing, e.g. {shown}")
                if store is not None:   # whole: kept with every folder its files are in
                    folders = {p.replace("\\", "/").rpartition("/")[0] for p in paths}
                    store.keep(entry, record_key, "folders",
                               {f: statkey.key(os.path.join(site, f)) for f in folders})
        return None
    finally:
        if store is not None:
            store.save()


class _Listing:
    """Whether paths under ``site`` exist, as :func:`os.path.lexists` says, from one
    listing per folder: torch's RECORD names 16 000 files in 2 500 folders, and a warm
    run checks them all (an lstat each took 0.3 s a run, the listings 0.09 s). A name a
    listing lacks is asked again with lexists (a case-insensitive file system, a file
    made since), so only what lexists misses is missing."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.folders: dict[str, frozenset[str]] = {}

    def has(self, path: str) -> bool:
        folder, _, name = path.replace("\\", "/").rpartition("/")
        names = self.folders.get(folder)
        if names is None:
            try:
                names = frozenset(os.listdir(os.path.join(self.site, folder)))
            except OSError:
                names = frozenset()
            self.folders[folder] = names
        return name in names or os.path.lexists(os.path.join(self.site, path))


def verify(envdir: Path, python: str, module: str = "torch", timeout: float = 600
           ) -> str | None:
    """Why the install in ``envdir`` is not whole (:func:`missing_files`, or ``import
    module`` failing in its ``python``), or None. Checked before a stamp is written, so
    only a verified install is ever taken as done."""
    import subprocess

    gone = missing_files(envdir)
    if gone:
        return gone
    try:
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"import {module} could not run: {exc}"
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return f"import {module} fails: {(lines or ['exit ' + str(done.returncode)])[-1][:300]}"
    return None


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None
