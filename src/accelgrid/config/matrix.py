"""Loading matrix.yaml: read it, check it against its schema and :mod:`.checks`, build the
model (:mod:`.model`) and expand it into cells (:mod:`.cells`).

The schema is ``accelgrid/schemas/matrix.schema.json`` (``validation.load_schema("matrix")``);
``model.PIN_NAMES`` must match its pin keys (tests check it).

``load_matrix(path)`` returns a :class:`~accelgrid.config.model.Matrix` or raises
:class:`~accelgrid.config.validation.ValidationFailed` listing every problem with file, line and
key.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from .. import devices
from ..base import contract
from ..devices import DeviceType
from ..devices import spec as device_spec
from . import checks
from .cells import expand
from .model import (
    PIN_NAMES,
    RELEASE,
    Device,
    Hardware,
    Matrix,
    Profile,
    Runtime,
    Suite,
    TorchSeries,
    as_env,
)
from .validation import (
    Problem,
    SourceMap,
    ValidationFailed,
    check_schema,
    load_schema,
    load_yaml,
    memo_folder,
    read_bounded,
)

DEFAULT_MATRIX = "matrix.yaml"

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
    problems = checks.file_problems(checks.Loaded(data, smap, path.parent))
    if problems:
        raise ValidationFailed(problems)
    matrix = _build(data, path, smap)
    cells, problems = expand(matrix)
    problems += checks.cell_problems(matrix, cells)
    if not cells and not problems:
        problems.append(smap.problem(("matrix",), "expands to no cells: the exclude rules "
                                                  "remove every combination"))
    if problems:
        raise ValidationFailed(problems)
    return dataclasses.replace(matrix, cells=tuple(cells))


# --- building the model from the checked file ------------------------------------------
def _hardware(table: dict[str, Any] | None) -> dict[str, Hardware]:
    return {name: Hardware(name, spec.get("description", ""), as_env(spec.get("env")),
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


def _device(name: str, spec: dict[str, Any], root: Path, smap: SourceMap) -> Device:
    container = spec.get("container") or {}
    runner = spec["runner"]
    return Device(
        name=name,
        device_type=_device_type(name, spec.get("spec"), root, smap),
        index=spec["index"],
        env=as_env(spec.get("env")),
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


def _build(data: dict[str, Any], path: Path, smap: SourceMap) -> Matrix:
    """The model of the checked file ``data``, without its cells (:func:`.cells.expand`)."""
    defaults = data["defaults"]
    timeout = defaults.get("timeout") or {}
    devices = {name: _device(name, spec, path.parent, smap)
               for name, spec in data["devices"].items()}
    torch = {
        key: TorchSeries(key, {k: v for k, v in spec.items() if k in PIN_NAMES},
                         spec.get("python"), spec.get("channel", RELEASE))
        for key, spec in data["torch"].items()
    }
    profiles = {
        name: Profile(name, as_env(spec.get("env")),
                      tuple(spec["devices"]) if "devices" in spec else None,
                      spec.get("description", ""))
        for name, spec in data["profiles"].items()
    }
    suites = {
        name: Suite(name, spec["path"], tuple(spec.get("needs") or ()),
                    tuple(spec.get("packages") or ()),
                    tuple(spec["devices"]) if "devices" in spec else None,
                    spec.get("description", ""), as_env(spec.get("env")))
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
