"""Capturing the aten ops a workload executes, and how the cell's device runs each.

Runs inside the cell's interpreter (torch + stdlib). :class:`OpCapture` is a
``TorchDispatchMode`` that passes every call through unchanged (so results do not
change) and counts ``aten::name.overload`` per phase: ``forward``, ``backward`` (inside
an autograd graph task) and ``optimizer`` (between an optimizer's step hooks).
While it is active, CPU-fallback messages (Python warnings and c10 log lines written to
stderr from backward threads) and "not currently implemented" errors are collected and
parsed, so each op can be classified for the device:

  native      the dispatcher has a kernel for the device's key
  decomposed  no device kernel, but a CompositeImplicitAutograd one (needs none)
  fallback    seen falling back to the CPU at run time, through a per-op registration
              (torch-xpu-ops' fallback list, ``PYTORCH_XPU_FALLBACK_OP``)
  missing     the workload hit "not currently implemented" for it; or, with
              ``PYTORCH_ENABLE_XPU_FALLBACK=1`` (``PYTORCH_ENABLE_MPS_FALLBACK=1``), it fell
              back through the catch-all fallback that flag installs: the device has no
              kernel of its own for it (``missing_fell_back`` in the report)
  unknown     none of the above could be decided

Messages and captured names are matched by base op (:func:`base_op`): a fallback message
names the kernel that fell back (``aten::linspace.out``, ``aten::topk.values``) while the
mode sees the op the program called (``linspace.default``, ``topk.default``). On XPU the
messages also beat the dispatcher: torch-xpu-ops registers its fallback list per op on the
XPU key, so the dispatcher reports a kernel for ops that in fact run on the CPU.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from .. import devices

# The texts each device's runtime prints when an op runs on the CPU instead, or raises
# "not currently implemented", are the device type's (DeviceType.fallback_notice,
# fallback_messages, missing_messages: exact upstream strings, e.g. accelgrid.devices.xpu).
# Ops that print a fallback message because the device's fallback_flag is on are told
# apart from ops registered to fall back one by one by the dispatcher: a per-op
# registration is a kernel on the device's dispatch key, the catch-all is not.


def base_op(name: str) -> str:
    """The op a name belongs to, whatever form it comes in: ``aten::`` and the overload
    (``.out``, ``.values``, ``.grad_input``, ``.Scalar_out``, ``.default`` ...) stripped,
    an in-place ``foo_`` mapped to ``foo``.

    Fallback messages name kernels (``aten::lerp.Scalar_out``), a dispatch mode names calls
    (``lerp_.Scalar``), upstream lists name either: comparing base ops makes them meet.
    Only a trailing underscore is in-place (``_foreach_mul`` keeps its leading one, dunders
    like ``__rshift__`` stay). Ops that exist only in place (``cauchy_``, ``normal_``,
    ``uniform_``, ``bernoulli_``) map to ``cauchy`` etc. too: harmless, since every side
    is mapped the same way. Namespaces other than ``aten`` are kept.
    """
    name = name.strip()
    if name.startswith("aten::"):
        name = name[len("aten::"):]
    base = name.split(".", 1)[0]
    if base.endswith("_") and not base.endswith("__") and base.strip("_"):
        base = base[:-1]
    return base


def overload_family(name: str) -> str:
    """The overload a name calls, with its out-variant spelling folded in: ``default``,
    ``out`` and no overload are ``"default"``; ``Scalar_out`` is ``"Scalar"``.

    Needed only where one base op has several overloads with different fates
    (``_foreach_mul.Scalar`` has an XPU kernel in 2.5, ``_foreach_mul.Tensor`` not)."""
    rest = name.strip().split("::", 1)[-1]
    overload = rest.split(".", 1)[1] if "." in rest else ""
    if overload in ("", "default", "out"):
        return "default"
    return overload[: -len("_out")] if overload.endswith("_out") else overload


def _canonical(op: str) -> str:
    """A name with its namespace: the forced-fallback message quotes the op as written in
    PYTORCH_XPU_FALLBACK_OP (``abs.out``, upstream's own example), in the aten library."""
    return op if "::" in op else f"aten::{op}"


def parse_messages(text: str) -> dict[str, set[str]]:
    """Ops named in fallback / not-implemented messages in ``text`` (warnings or log lines,
    whatever their prefix): {"fallback": {...}, "missing": {...}, "generic_fallback": {...}}.

    ``generic_fallback`` holds the device's name when only its once-per-process notice was
    seen (XPU: ops on the built-in fallback list, without PYTORCH_DEBUG_XPU_FALLBACK=1).
    Every known device type's texts are looked for (a spec device's too, once loaded)."""
    found: dict[str, set[str]] = {"fallback": set(), "missing": set(), "generic_fallback": set()}
    for kind in devices.TYPES.values():
        for rx in kind.fallback_messages:
            found["fallback"].update(_canonical(m) for m in rx.findall(text))
        for rx in kind.missing_messages:
            found["missing"].update(_canonical(m) for m in rx.findall(text))
        if kind.fallback_notice and kind.fallback_notice.strip() in text:
            found["generic_fallback"].add(kind.name)
    return found


def flag_on(value: str | None) -> bool:
    """An env flag as torch-xpu-ops reads it (``std::stoi(v) != 0``): "1" on, "0" off."""
    try:
        return int(str(value).strip()) != 0
    except ValueError:
        return False


def unimplemented_fallbacks(kernels: set[str], device_type: str,
                            env: Any = None) -> set[str]:
    """The kernels among ``kernels`` (named by fallback messages) that fell back only
    because the device type's ``fallback_flag`` is on: the device registers no kernel of its
    own for them, so without the flag they would have raised "not currently implemented"."""
    kind = devices.find(device_type)
    flag = kind.fallback_flag if kind else None
    env = os.environ if env is None else env
    if not kernels or kind is None or not flag or not flag_on(env.get(flag)):
        return set()
    import torch

    out = set()
    for kernel in kernels:
        try:
            registered = torch._C._dispatch_has_kernel_for_dispatch_key(
                _dispatcher_name(kernel), kind.dispatch_key)
        except RuntimeError:  # an op this torch does not know: cannot tell
            continue
        if not registered:
            out.add(kernel)
    return out


def op_name(func: Any) -> str:
    """``aten::addmm.default`` style name of an OpOverload."""
    schema = func._schema
    overload = schema.overload_name or "default"
    return f"{schema.name}.{overload}"


def _dispatcher_name(op: str) -> str:
    """The name the dispatcher's lookup wants: ``aten::add.Tensor``; ``.default`` dropped."""
    return op[: -len(".default")] if op.endswith(".default") else op


def classify_op(op: str, device_type: str, fallback: set[str], missing: set[str]) -> str:
    """The op's status on ``device_type`` (see the module docstring)."""
    import torch

    # By base op on both sides (see the module docstring); checked before the dispatcher,
    # which on XPU also answers True for ops on torch-xpu-ops' fallback list.
    base = base_op(op)
    if base in {base_op(m) for m in missing}:
        return "missing"
    if base in {base_op(f) for f in fallback}:
        return "fallback"
    kind = devices.find(device_type)
    key = kind.dispatch_key if kind else None
    name = _dispatcher_name(op)
    try:
        if key and torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return "native"
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"):
            return "decomposed"
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        if has(name, "CompositeExplicitAutograd"):
            # Backend-agnostic kernels written in terms of other ops run on any device.
            return "decomposed"
        if has(name, "CompositeExplicitAutogradNonFunctional") and not any(
                has(name, k) for k in ("CPU", "CUDA")):
            # Structured ops also get such a wrapper, but it needs their backend kernels:
            # only ops no backend implements (diagonal_copy, ...) are truly composite.
            return "decomposed"
    except RuntimeError:
        return "unknown"
    return "unknown"


class _Phase(threading.local):
    optimizer = False


_PHASE = _Phase()
_OPT_HOOKS: list[Any] = []


def _install_optimizer_hooks() -> None:
    from torch.optim import optimizer

    if _OPT_HOOKS:
        return

    def pre(*_: Any) -> None:
        _PHASE.optimizer = True

    def post(*_: Any) -> None:
        _PHASE.optimizer = False

    _OPT_HOOKS.append(optimizer.register_optimizer_step_pre_hook(pre))
    _OPT_HOOKS.append(optimizer.register_optimizer_step_post_hook(post))


def _make_mode_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    # torch's TorchDispatchMode is untyped (its __init__, __init_subclass__).
    class _Counter(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __init__(self, counts: dict[tuple[str, str], Counter[str]]):
            super().__init__()  # type: ignore[no-untyped-call]
            self.counts = counts
            self.lock = threading.Lock()

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            # Compiled code runs compiled under capture, its ops (the artifact's calls)
            # counted as it runs them: a mode that keeps the default makes dynamo skip
            # every frame, and a fullgraph compile (torchao's low-bit optimizers' step)
            # raise "found no compiled frames". Read from torch 2.9; older ones ignore it.
            return True

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if _PHASE.optimizer:
                phase = "optimizer"
            elif torch._C._current_graph_task_id() != -1:
                phase = "backward"
            else:
                phase = "forward"
            name = op_name(func)
            device = _device_of(args, kwargs)
            with self.lock:
                self.counts[(phase, device)][name] += 1
            return func(*args, **kwargs)

    def _device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Where the op runs: its first tensor's device (a fallback op still gets the
        device's tensors), else a factory's ``device=``, else the CPU."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.Tensor):
                return value.device.type
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
                return value[0].device.type
        device = kwargs.get("device")
        return torch.device(device).type if device is not None else "cpu"

    return _Counter


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Copy fd 2 into ``path`` too: c10 log lines from backward threads bypass Python."""
    saved = os.dup(2)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    with open(path, "rb") as fh:
        data = fh.read()
    if data:
        os.write(2, data)  # still show it


class OpCapture:
    """``with OpCapture("xpu") as cap: ...``; then ``cap.report()``."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        # (phase, device type the op ran on) -> op -> calls
        self.counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.messages: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> OpCapture:
        _install_optimizer_hooks()
        # A step that raised under an earlier capture never reached its post hook: its
        # phase must not outlive it (a later test's ops counted as optimizer ops).
        _PHASE.optimizer = False
        fd, self._log = tempfile.mkstemp(prefix="accelgrid-ops-", suffix=".log")
        os.close(fd)
        self._warnings = self._stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        self._stack.enter_context(_stderr_to(self._log))
        self._stack.enter_context(_make_mode_class()(self.counts))
        return self

    def note_exception(self, exc: BaseException) -> None:
        """Keep a workload's NotImplementedError text for classification."""
        self.messages.append(str(exc))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.note_exception(exc)
        self._stack.close()
        self.messages += [str(w.message) for w in self._warnings]
        with open(self._log, encoding="utf-8", errors="replace") as fh:
            self.messages.append(fh.read())
        os.unlink(self._log)

    def report(self) -> dict[str, Any]:
        """{op: {"count", "phases": {phase: n}, "status"}} plus what the messages said:
        ``fallback_seen`` (kernels named by CPU-fallback messages), ``missing`` (named by
        "not currently implemented") and ``missing_fell_back`` (those of ``fallback_seen``
        that had no device kernel and ran on the CPU only because of the enable flag)."""
        text = "\n".join(self.messages)
        seen = parse_messages(text)
        fell_back = unimplemented_fallbacks(seen["fallback"], self.device_type)
        missing = seen["missing"] | fell_back
        ops: dict[str, dict[str, Any]] = {}
        host_calls = 0
        for (phase, device), counter in self.counts.items():
            for op, n in counter.items():
                if not op.startswith("aten::"):
                    continue
                if device != self.device_type:
                    # Host-side work of an accelerator cell (CPU references, the offload
                    # optimizer's CPU step): not what the device runs, so not classified.
                    host_calls += n
                    continue
                entry = ops.setdefault(op, {"count": 0, "phases": {}})
                entry["count"] += n
                entry["phases"][phase] = entry["phases"].get(phase, 0) + n
        captured_bases = {base_op(op) for op in ops}
        # Ops the messages name that no captured call matches (never dispatched
        # successfully, or called from inside another kernel): still worth a row.
        for op in sorted(missing | seen["fallback"]):
            if base_op(op) in captured_bases:
                continue  # the call the program made already has a row
            captured_bases.add(base_op(op))
            ops.setdefault(_dispatcher_name(op) if "." in op else f"{op}.default",
                           {"count": 0, "phases": {}})
        for op, entry in ops.items():
            entry["status"] = classify_op(op, self.device_type, seen["fallback"], missing)
        return {"device_type": self.device_type, "ops": dict(sorted(ops.items())),
                "host_calls": host_calls,
                "fallback_seen": sorted(seen["fallback"]), "missing": sorted(seen["missing"]),
                "missing_fell_back": sorted(fell_back),
                "generic_fallback_notice": bool(seen["generic_fallback"])}
