"""``accelgrid container``: build each cell's image and run the cell inside it.

    accelgrid container render CELL          # the cell's Containerfile, to stdout
    accelgrid container tag CELL             # the image tag it would get
    accelgrid container build CELL           # render + build (skipped when up to date)
    accelgrid container run CELL [-- ARGS]   # build if needed, run the cell, results on the host

An image holds one Python environment with accelgrid's runtime dependencies and the cell's
pins, the cell's env profile as ``ENV`` and a copy of the project; inside it the cell runs
with ``nox --no-venv -s CELL``. The tag is ``accelgrid/<cell>:<hash12>``, where the hash
covers everything that went in (the rendered Containerfile, the project files copied in,
the pins and where pip took packages from), so an unchanged cell is never rebuilt.
Engines: docker, podman or buildah, the first on PATH that answers (``--engine`` forces
one). ``--base IMAGE`` replaces the matrix's digest-pinned base (the offline path: a local
base, e.g. made with debootstrap). docs/guides/containers.md has the details and timings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from .. import results
from ..base import contract, redact
from ..base.errors import InvalidInput
from ..config.checks import control_problem
from ..config.model import Cell, Matrix, Runtime
from ..host import install, pipconfig, venvs
from ..results import provenance
from .container_pip import PipPassthrough, pip_fingerprint, pip_passthrough

TEMPLATES_DIR = "containers"
IMAGE_REPOSITORY = "accelgrid"
VENV = "/opt/accelgrid-venv"
PROJECT = "/accelgrid"                    # the project's copy inside the image (WORKDIR)
# Images whose torch needs a runtime bundle sourced (devices.<d>.runtime) run everything
# through this script; ENTRYPOINT for docker/podman, an explicit prefix for buildah run.
ENTRYPOINT = "/usr/local/bin/accelgrid-entrypoint"
ENGINES = ("docker", "podman", "buildah")   # probe order
HASH_LENGTH = 12

# A base pinned by digest: a tag alone can be moved to other content upstream.
DIGEST_PINNED = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")

# What a cell run needs from the project (the matrix is copied in as matrix.yaml).
PROJECT_FILES = ("pyproject.toml", "README.md", "noxfile.py", "conftest.py", "known_issues.yaml")
PROJECT_DIRS = ("src", "suites")
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".nox", "results"}
_SKIP_SUFFIXES = (".pyc", ".pyo")

# Host variables a containerised cell run still honours: a shard's (which one, and the
# durations file it balances by, mounted at the same path), the runner's declared hardware
# family and driver stack (its .env file, ci/README.md).
# ... and the CI run's variables, so env.json inside the container names the run too.
FORWARDED_ENV = (contract.WORKERS, contract.SKIP_DETECT, contract.SHARD,
                 contract.SHARD_DURATIONS, contract.HARDWARE, contract.DRIVER,
                 *provenance.CI_RUN_VARS)


class ContainerError(InvalidInput):
    """A problem the user must fix; the message is one line."""


# --- rendering ------------------------------------------------------------------------------

def _one_line(value: object) -> str:
    """``value``'s text, refused (ContainerError) when it holds a control character: a
    newline ends the instruction and the rest would be read as the next one, whatever
    the quoting (the matrix refuses them already; this holds for any input)."""
    text = str(value)
    why = control_problem(text)
    if why:
        raise ContainerError(f"Containerfile value {text!r} {why}")
    return text


def _envquote(value: object) -> str:
    # Containerfile ENV/LABEL values: double-quoted, and `$` escaped (ENV expands it).
    text = _one_line(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{text}"'


def _shquote(value: object) -> str:
    # A RUN line's word: POSIX shell quoting of one line.
    return shlex.quote(_one_line(value))


def _finalize(value: object) -> object:
    # Every {{ }} of a template, comments and plain words too: one line, but for the
    # templates' own line continuations (a join with " \\\n").
    _one_line(str(value).replace("\\\n", ""))
    return value


def _jinja(root: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root / TEMPLATES_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["shquote"] = _shquote
    env.filters["envquote"] = _envquote
    env.finalize = _finalize
    return env


def base_problem(base: str | None) -> str | None:
    """Why ``base`` is not an acceptable matrix base image, or None."""
    if not base:
        return "no base image"
    if not DIGEST_PINNED.match(base):
        return f"base image '{base}' is not pinned by digest (name@sha256:<64 hex digits>)"
    return None


def runtime_requirements(root: Path) -> list[str]:
    """accelgrid's own runtime dependencies from the project's pyproject.toml, each as
    its constraints.txt pins it where that file does (an image is built from exact
    versions; pyproject.toml holds ranges)."""
    import tomllib  # Python 3.11+; the images and the dev venv have it

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    path = root / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ContainerError(f"cannot read accelgrid's dependencies from {path}: {exc}") from None
    pinned: dict[str, str] = {}
    constraints = root / venvs.CONSTRAINTS
    lines = constraints.read_text(encoding="utf-8").splitlines() if constraints.is_file() else []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        try:
            req = Requirement(line) if line else None
        except InvalidRequirement as exc:
            raise ContainerError(f"{constraints}: {exc}") from None
        if req is not None and any(s.operator == "==" for s in req.specifier):
            pinned[canonicalize_name(req.name)] = line
    deps = list(data.get("project", {}).get("dependencies", []))
    return [pinned.get(canonicalize_name(Requirement(d).name), d) for d in deps]


def cell_for(matrix: Matrix, name: str) -> Cell:
    try:
        cell = matrix.cell(name)
    except KeyError as exc:
        raise ContainerError(exc.args[0]) from None
    if cell.manual:
        raise ContainerError(f"cell {cell.name}: its torch is a local wheel "
                             f"({cell.torch_wheel}): no container image")
    if not cell.container_family:
        raise ContainerError(f"cell {cell.name}: device {cell.device} has no container "
                             f"(matrix.yaml devices.{cell.device}.container)")
    return cell


def resolve_base(cell: Cell, base: str | None = None) -> str:
    """The image the cell builds on: ``base`` (an override, e.g. a local image) or the
    matrix's, which must be digest-pinned."""
    if base:
        return base
    why = base_problem(cell.container_base)
    if why:
        raise ContainerError(f"cell {cell.name}: {why} in matrix.yaml "
                             f"devices.{cell.device}.container.base; use --base IMAGE for a "
                             "local base")
    return str(cell.container_base)


def render(matrix: Matrix, cell: Cell, *, base: str | None = None, input_hash: str = "",
           torch_index: str | None = None, cpu_fallback: bool = False) -> str:
    """The cell's Containerfile (``input_hash`` goes into its label)."""
    family = cell.container_family
    if family is None:
        raise ContainerError(f"cell {cell.name}: device {cell.device} has no container")
    runtime = runtime_requirements(matrix.root)
    uv_req = next((r for r in runtime if re.match(r"^uv\b", r)), "uv")
    if torch_index and redact.url_credentials(torch_index):
        raise ContainerError(f"{contract.TORCH_INDEX} carries credentials, which a build would "
                             "write into the image: use a pip config (--build-arg) instead")
    plan = install.plan(cell, torch_index=torch_index, uv_env={}, cpu_fallback=cpu_fallback)
    runtime = [r for r in runtime if r not in plan.steps[1].args]   # the cell pins them too
    template = _jinja(matrix.root).get_template(f"{family}.Containerfile.j2")
    return template.render(
        cell=cell, family=family, base=resolve_base(cell, base), python=cell.python,
        steps=plan.steps, runtime=runtime, uv_requirement=uv_req, venv=VENV,
        project=PROJECT, input_hash=input_hash, bundle=bundle(cell), entrypoint=ENTRYPOINT,
    )


def bundle(cell: Cell) -> Runtime | None:
    """The runtime bundle the cell's image installs and sources, or None (the torch wheels
    bring theirs, or the device needs none)."""
    return cell.runtime if cell.runtime and not cell.runtime.from_wheels else None


# --- what goes in -------------------------------------------------------------------------

def project_files(matrix: Matrix) -> dict[str, Path]:
    """The files copied into the image: {path inside the project copy: file on the host}."""
    root = matrix.root
    files: dict[str, Path] = {"matrix.yaml": matrix.path}
    for name in PROJECT_FILES:
        if (root / name).is_file():
            files[name] = root / name
    for folder in PROJECT_DIRS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root)
            if (path.is_file() and not _SKIP_PARTS.intersection(rel.parts)
                    and not path.name.endswith(_SKIP_SUFFIXES)):
                files[rel.as_posix()] = path
    return dict(sorted(files.items()))


def input_hash(containerfile: str, files: Mapping[str, Path], cell: Cell,
               pip: PipPassthrough) -> str:
    """sha256 over everything that goes into the image."""
    digest = hashlib.sha256()

    def part(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    part("Containerfile", containerfile.encode())
    part("cell", json.dumps(cell.as_dict(), sort_keys=True).encode())
    part("pip", json.dumps(pip_fingerprint(pip), sort_keys=True).encode())
    if install.resolved_at_run(cell):   # a nightly range: a new image (and nightly) a day
        part("nightly", install.nightly_day().encode())
    for rel, path in sorted(files.items()):
        part(f"file:{rel}", path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ImageSpec:
    cell: Cell
    base: str
    containerfile: str              # final text, with the hash label
    files: dict[str, Path]
    pip: PipPassthrough
    digest: str = field(default="")

    @property
    def tag(self) -> str:
        return image_tag(self.cell.name, self.digest)


def image_tag(cell_name: str, digest: str) -> str:
    return f"{IMAGE_REPOSITORY}/{cell_name}:{digest[:HASH_LENGTH]}"


def spec(matrix: Matrix, cell: Cell, *, base: str | None = None,
         settings: Mapping[str, str] | None = None, can_mount: bool = True) -> ImageSpec:
    """Everything about the cell's image short of building it."""
    base = resolve_base(cell, base)
    torch_index = os.environ.get(contract.TORCH_INDEX)
    # A cpu cell's CPU index out of reach (a host with only a PyPI mirror): the image takes
    # torch's CPU build from the pip configuration passed to the build, as the nox session.
    fallback = (install.can_fall_back(cell, torch_index)
                and install.index_problem(cell.index) is not None)
    unlabelled = render(matrix, cell, base=base, torch_index=torch_index,
                        cpu_fallback=fallback)
    files = project_files(matrix)
    if settings is None:
        settings = pipconfig.pip_settings()
    pip = pip_passthrough(settings, can_mount=can_mount)
    digest = input_hash(unlabelled, files, cell, pip)
    final = render(matrix, cell, base=base, input_hash=digest, torch_index=torch_index,
                   cpu_fallback=fallback)
    return ImageSpec(cell, base, final, files, pip, digest)


def write_context(image: ImageSpec, folder: Path) -> Path:
    """The build context: the Containerfile and project/ (exactly the hashed files)."""
    (folder / "Containerfile").write_text(image.containerfile, encoding="utf-8")
    for rel, src in image.files.items():
        dest = folder / "project" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    return folder / "Containerfile"


# --- engines --------------------------------------------------------------------------------

def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


@dataclass(frozen=True)
class Engine:
    name: str                     # docker, podman or buildah
    exe: str
    isolation: str | None = None  # podman/buildah build isolation (chroot, oci, rootless)

    @property
    def can_mount_at_build(self) -> bool:
        return self.name in ("podman", "buildah")

    def _quiet(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([self.exe, *args], capture_output=True, text=True,
                              timeout=timeout, check=False)

    def image_exists(self, ref: str) -> bool:
        args = {"docker": ("image", "inspect", ref), "podman": ("image", "exists", ref),
                "buildah": ("inspect", "--type", "image", ref)}[self.name]
        return self._quiet(*args).returncode == 0

    def pull(self, ref: str) -> str | None:
        """None once ``ref`` is local, else the engine's reason in one line."""
        try:
            proc = self._quiet("pull", ref, timeout=1800)
        except subprocess.TimeoutExpired:
            return "pull timed out"
        return None if proc.returncode == 0 else _last_line(proc.stderr or proc.stdout)

    def build_command(self, image: ImageSpec, containerfile: Path) -> list[str]:
        cmd = [self.exe, "bud" if self.name == "buildah" else "build"]
        if self.name == "buildah":
            cmd.append("--layers")   # podman and docker cache layers by default
        if self.isolation and self.name != "docker":
            cmd += ["--isolation", self.isolation]
        cmd += ["-f", str(containerfile), "-t", image.tag]
        for key, value in image.pip.build_args.items():
            cmd += ["--build-arg", f"{key}={value}"]
        for path in image.pip.mounts:
            cmd += ["--volume", f"{path}:{path}:ro"]
        return [*cmd, str(containerfile.parent)]

    def retag(self, source: str, tag: str) -> str | None:
        """None once ``source`` is also ``tag``, else the engine's reason in one line."""
        proc = self._quiet("tag", source, tag)
        return None if proc.returncode == 0 else _last_line(proc.stderr or proc.stdout)

    def device_args(self, cell: Cell, dev_root: str = "/") -> list[str]:
        """How the device gets into the container: the device module's container_args
        (xpu: ``--device /dev/dri``; cuda: ``--gpus all`` with docker's NVIDIA runtime,
        CDI's ``nvidia.com/gpu=all`` with podman), and for a device folder passed in, the
        groups owning its render nodes (``--group-add GID``: docker and podman)."""
        args = cell.device_type.container_device_args(self.name)
        if self.name == "buildah":
            return args   # buildah run has no --group-add
        folders = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--device"]
        for gid in render_groups([Path(dev_root) / f.lstrip("/") for f in folders]):
            args += ["--group-add", str(gid)]
        return args

    def run_commands(self, cell: Cell, tag: str, results: Path, pytest_args: Sequence[str],
                     env: Mapping[str, str]) -> list[list[str]]:
        """The commands that run ``cell`` in ``tag``; results land in ``results``."""
        inside = f"{PROJECT}/results"
        env = {**env, contract.RESULTS_DIR: inside, contract.IMAGE: tag}
        env_args = [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
        command = ["nox", "--no-venv", "-s", cell.name, *(["--", *pytest_args]
                                                          if pytest_args else [])]
        if self.name == "buildah":
            # buildah run ignores ENTRYPOINT: the bundle is sourced by calling it.
            command = [ENTRYPOINT, *command] if bundle(cell) else command
            # buildah runs commands in a working container made from the image.
            ctr = f"accelgrid-{cell.name}-{os.getpid()}"
            return [
                [self.exe, "from", "--pull-never", "--name", ctr, tag],
                [self.exe, "run", "--volume", f"{results}:{inside}", *env_args,
                 *self.device_args(cell), ctr, "--", *command],
                [self.exe, "rm", ctr],
            ]
        mounts: list[str] = []
        durations = env.get(contract.SHARD_DURATIONS)
        if durations and Path(durations).is_file():   # read by the shard's split inside
            mounts = ["--volume", f"{durations}:{durations}:ro"]
        user: list[str] = []
        if self.name == "docker" and hasattr(os, "getuid") and os.getuid() != 0:
            # Results belong to the caller, not root (rootless podman maps root already).
            user = ["--user", f"{os.getuid()}:{os.getgid()}", "--env", "HOME=/tmp"]
        return [[self.exe, "run", "--rm", *self.device_args(cell), "--shm-size", "8g",
                 "--volume", f"{results}:{inside}:z", *mounts, *user, *env_args, tag,
                 *command]]


def render_groups(folders: Sequence[Path]) -> list[int]:
    """The groups owning the render nodes (``renderD*``) in ``folders``, e.g. /dev/dri: a
    process in the container needs one of them to open the GPU. The number, not the name:
    ``render`` has no fixed GID across hosts and an image's /etc/group may not have it
    (openvinotoolkit/docker_ci#73; "Unable to find group render" in
    open-edge-platform/physical-ai-studio#513)."""
    gids: list[int] = []
    for folder in folders:
        try:
            nodes = sorted(folder.glob("renderD*"))
        except OSError:
            continue
        for node in nodes:
            try:
                gid = node.stat().st_gid
            except OSError:
                continue
            if gid not in gids:
                gids.append(gid)
    return gids


def _engine_problem(name: str, exe: str) -> str | None:
    # docker's CLI is often installed without a daemon; only an answering engine counts.
    args = {"docker": ["version", "--format", "{{.Server.Version}}"],
            "podman": ["version", "--format", "{{.Client.Version}}"],
            "buildah": ["version"]}[name]
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"does not start ({exc})"
    if proc.returncode != 0:
        return f"does not answer ({_last_line(proc.stderr or proc.stdout)})"
    return None


def probe_engine(forced: str | None = None, path: str | None = None,
                 isolation: str | None = None) -> Engine:
    """The first engine (docker, podman, buildah) on ``path`` (default $PATH) that answers."""
    if forced and forced not in ENGINES:
        raise ContainerError(f"unknown engine '{forced}' (known: {', '.join(ENGINES)})")
    notes = []
    for name in (forced,) if forced else ENGINES:
        exe = shutil.which(name, path=path)
        if exe is None:
            notes.append(f"{name} not on PATH")
            continue
        why = _engine_problem(name, exe)
        if why:
            notes.append(f"{name} {why}")
            continue
        return Engine(name, exe, isolation)
    raise ContainerError("no container engine: " + "; ".join(notes)
                         + (" (install docker, podman or buildah)" if not forced else ""))


# --- build and run --------------------------------------------------------------------------

def _say(message: str) -> None:
    print(f"accelgrid container: {message}", flush=True)


def ensure_base(engine: Engine, base: str) -> None:
    if engine.image_exists(base):
        return
    _say(f"pulling {base} with {engine.name}")
    why = engine.pull(base)
    if why:
        raise ContainerError(f"base image {base} cannot be pulled with {engine.name}: {why}")


def build_image(matrix: Matrix, cell: Cell, engine: Engine, *, base: str | None = None,
          settings: Mapping[str, str] | None = None) -> ImageSpec:
    """Build the cell's image unless an image with its tag exists; returns its spec."""
    image = spec(matrix, cell, base=base, settings=settings,
                 can_mount=engine.can_mount_at_build)
    if engine.image_exists(image.tag):
        _say(f"{image.tag} up to date")
        return image
    registry = os.environ.get(contract.IMAGE_REGISTRY, "").strip().rstrip("/")
    if registry:
        # The tag is the hash of everything in the image: an image of that tag built
        # anywhere is this one.
        remote = f"{registry}/{image.tag}"
        why = engine.pull(remote) or engine.retag(remote, image.tag)
        if why is None:
            _say(f"pulled {remote}")
            return image
        _say(f"{remote} cannot be pulled ({why}): building it")
    for item in image.pip.dropped:
        _say(f"note: pip's {item} is a local path {engine.name} cannot mount during a "
             "build; packages come from the remaining indexes")
    ensure_base(engine, image.base)
    with tempfile.TemporaryDirectory(prefix="accelgrid-ctx-") as tmp:
        containerfile = write_context(image, Path(tmp))
        cmd = engine.build_command(image, containerfile)
        _say(f"building {image.tag} with {engine.name} on {image.base}")
        rc = subprocess.call(cmd)
    if rc != 0:
        raise ContainerError(f"building {image.tag} with {engine.name} failed (exit {rc}); "
                             "the build output above says why")
    _say(f"built {image.tag}")
    return image


def run(matrix: Matrix, cell: Cell, engine: Engine, pytest_args: Sequence[str] = (), *,
        base: str | None = None, results_root: Path | None = None) -> int:
    """Build if needed, then run the cell in its image; returns the cell's exit code."""
    image = build_image(matrix, cell, engine, base=base)
    if results_root is None:
        results_root = results.results_root(matrix.root)
    results_root = results_root.resolve()
    results_root.mkdir(parents=True, exist_ok=True)
    env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
    # The image has no .git: record which checkout it was built from (env.json keeps
    # ACCELGRID_* variables).
    commit, dirty = provenance.project_commit(matrix.root)
    if commit:
        env.update({contract.SOURCE_COMMIT: commit,
                    contract.SOURCE_DIRTY: "1" if dirty else "0"})
    commands = engine.run_commands(cell, image.tag, results_root, pytest_args, env)
    _say(f"running {cell.name} in {image.tag}; results in {results_root / cell.name}")
    if engine.name != "buildah":
        return subprocess.call(commands[0])
    make, run_it, remove = commands
    proc = subprocess.run(make, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise ContainerError(f"buildah from {image.tag} failed: {_last_line(proc.stderr)}")
    try:
        return subprocess.call(run_it)
    finally:
        subprocess.call(remove, stdout=subprocess.DEVNULL)


# --- command line ---------------------------------------------------------------------------


def run_named(matrix: Matrix, name: str, pytest_args: Sequence[str] = (), *,
              engine: str | None = None, isolation: str | None = None,
              base: str | None = None) -> int:
    """``accelgrid container run NAME``: check the cell has an image, find an engine, build
    if needed and run the cell inside; engine, isolation and base default to
    $ACCELGRID_CONTAINER_ENGINE, $BUILDAH_ISOLATION and $ACCELGRID_CONTAINER_BASE."""
    cell = cell_for(matrix, name)
    found = probe_engine(engine or os.environ.get(contract.CONTAINER_ENGINE) or None,
                         isolation=isolation or os.environ.get("BUILDAH_ISOLATION") or None)
    return run(matrix, cell, found, pytest_args,
               base=base or os.environ.get(contract.CONTAINER_BASE) or None)
