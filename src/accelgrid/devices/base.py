"""What accelgrid knows about one device type, in one place (:class:`DeviceType`).

Note [Adding a Device Type] (docs/guides/adding-a-device.md): a device type is one module of
this package holding one ``DEVICE = DeviceType(...)``, listed in ``devices.BUILTIN``; or,
for an out-of-tree (PrivateUse1) backend, a spec file named by the matrix
(``devices.<name>.spec``, read by :mod:`accelgrid.devices.spec`). Every other module asks
the table (``devices.get(name)``) instead of keeping its own ``{"cuda": ..., "xpu": ...}``.

Standard library only: this runs inside a cell, torch is imported where a fact needs it.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The device APIs accelgrid.devices.backends dispatches (its tables, one per API), in the order a
# spec file's hooks are documented (docs/guides/adding-a-device.md).
APIS = ("manual_seed", "synchronize", "device_count", "device_name", "memory_allocated",
        "max_memory_allocated", "reset_peak_memory_stats", "empty_cache", "Stream", "Event",
        "is_bf16_supported")
# One implementation of a device API (accelgrid.devices.backends): a dotted attribute path under
# torch (resolved lazily, so a missing API is reported by its exact name), a callable, or
# None when the device does not claim the API.
Impl = str | Callable[..., Any] | None
# The devices torch sees of this type and the driver's version, from the imported torch
# module (env.json's torch section, accelgrid.results.provenance.torch_facts).
TorchDevices = Callable[[Any], tuple[list[dict[str, Any]], str | None]]
# This host's devices of the type, found without torch (before anything is installed):
# (env, the cell env's python or None, the cell's torch version or None) -> (their ids in
# the numbering the visibility variable uses, how they are known).
HostIds = Callable[[Mapping[str, str], str | None, str | None], tuple[list[str], str]]
# The filesystem root holding sys/ and dev/ (None: $ACCELGRID_HOST_ROOT, else /) -> the
# hardware family of each of this host's devices of a known family, and whether it is
# discrete: matrix.yaml's devices.<d>.hardware keys.
HostHardware = Callable[[str | Path | None], list[tuple[str, bool]]]
HOST_TOOLS = "the host's tools"   # how ids read from the host's own tools are known


def _no_devices(_torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    return [], None


def _not_available(_torch: Any) -> bool:
    return False


def _no_host_ids(_env: Mapping[str, str], _python: str | None, _torch_version: str | None
                 ) -> tuple[list[str], str]:
    return [], HOST_TOOLS


def _no_memory() -> list[float]:
    return []


def _no_hardware(_root: str | Path | None) -> list[tuple[str, bool]]:
    return []


def _no_inventory() -> dict[str, Any]:
    return {}


def not_implemented_message(key: str) -> re.Pattern[str]:
    """The "not currently implemented" error a backend raises for an op it lacks (and its
    catch-all fallback is off), naming the device as ``key`` ("XPU", "MPS"); group 1 is
    the op."""
    return re.compile(r"The operator '(aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)' is not "
                      rf"currently implemented for the {re.escape(key)} device")


def tool_lines(cmd: list[str], keep: str = "") -> list[str]:
    """The non-empty output lines of a host tool (at most 32, those holding ``keep``);
    [] where it is missing or fails to start."""
    exe = shutil.which(cmd[0])
    if not exe:
        return []
    try:
        out = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=60,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip() and keep in ln][:32]


@dataclass(frozen=True)
class DeviceType:
    """One device type. Fields left at their defaults mean "this device has none"."""

    name: str                          # the device type tests and records name ("xpu")
    dispatch_key: str                  # its key in torch's dispatcher ("XPU"; "PrivateUse1")
    # accelgrid.devices.backends' tables: api name -> implementation; an api not listed falls to
    # backends.DEFAULTS (torch.manual_seed for manual_seed, None for the rest).
    apis: Mapping[str, Impl] = dataclasses.field(default_factory=dict)
    # Where tests put tensors, when not on ``name`` (a spec device run on another backend's
    # kernels, e.g. the fake device of tests/fake_device.py on "cpu").
    torch_device: str | None = None
    accelerator: bool = True           # False: the host CPU (its cells hide accelerators)
    # How a process is pinned to some of the host's devices of this type (set before torch
    # is imported): the runner pins xdist workers with it; suites read it to size a world.
    visibility_var: str | None = None
    # What hides this type's devices from a process (a cpu cell's tests), set before torch
    # is imported; {} where nothing can (MPS).
    hide: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Whether processes may use one device of this type at the same time (then the pass
    # that sees every device runs beside the pinned workers instead of after them).
    shared_by_processes: bool = False
    # Env vars only this device's runtime reads (set for another device they do nothing).
    flags: re.Pattern[str] | None = None
    # The flag that makes the device's catch-all fallback run unimplemented ops on the CPU.
    fallback_flag: str | None = None
    # What the device's runtime prints when ops run on the CPU instead (accelgrid.testing.
    # opcapture parses them, whatever the prefix): a once-per-process notice naming no op;
    # per-op messages (group 1: the op that fell back); "not currently implemented"
    # errors (group 1: the op).
    fallback_notice: str | None = None
    fallback_messages: tuple[re.Pattern[str], ...] = ()
    missing_messages: tuple[re.Pattern[str], ...] = ()
    runtime_attr: str | None = None    # torch.version.<attr>: the runtime torch was built for
    torch_devices: TorchDevices = _no_devices
    available: Callable[[Any], bool] = _not_available   # torch module -> has a device now
    # This host's devices without torch: their ids, each one's memory in GiB ([]: the
    # host cannot say, then the runner shares a device less widely), their hardware
    # families, and what the host's tools say about them (hardware.json).
    host_ids: HostIds = _no_host_ids
    host_memory_gib: Callable[[], list[float]] = _no_memory
    host_hardware: HostHardware = _no_hardware
    host_inventory: Callable[[], dict[str, Any]] = _no_inventory
    # torch.distributed's backend for this device, and the torch.distributed function that
    # says whether this torch build has it (None: every build that has the device does).
    collective_backend: str | None = None
    collective_check: str | None = None
    # torchao's CPUOffloadOptimizer runs on it (pytorch/ao#958: CUDA and XPU; with both
    # present torchao picks the first of devices.BUILTIN's order, cuda).
    offload: bool = False
    float64: bool = True               # torch.float64 tensors can live on it
    # Container engine -> the arguments that give a container this device ("default": any
    # other engine).
    container_args: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    source: str = ""                   # where it was declared (module or spec file)

    @property
    def tensor_device(self) -> str:
        """The device string tests put tensors on."""
        return self.torch_device or self.name

    def reads_flag(self, var: str) -> bool:
        return bool(self.flags and self.flags.match(var))

    def container_device_args(self, engine: str) -> list[str]:
        return list(self.container_args.get(engine, self.container_args.get("default", ())))
