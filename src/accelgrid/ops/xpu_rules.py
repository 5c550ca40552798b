"""The XPU prediction itself: per op and torch series, a status from the upstream
facts (:mod:`accelgrid.ops.xpu_data`).

One rule, whatever device captured the ops (the capture's own status plays no part), per
op O and series X.Y (:func:`classify`):

1. O's base op is on release/X.Y's fallback list: ``fallback``. Except where the same base
   op also has XPU kernels (2.4's ``random_``: ``random_`` and ``random_.from`` native,
   ``random_.to`` listed): then the called overload's family
   (:func:`accelgrid.testing.opcapture.overload_family`) decides. And where the release's
   yaml gives O no CPU kernel (no ``CPU`` key, no composite, no delegate with one):
   ``fallback -> error``, the fallback sends the call to a CPU that cannot run it
   ("Could not run 'aten::_flash_attention_forward' with arguments from the 'CPU'
   backend", intel/torch-xpu-ops#2270, #2442; ``_thnn_fused_gru_cell`` #258;
   ``_scaled_dot_product_efficient_attention`` #811). CPU kernels registered by hand
   outside the yaml are not in the data: none is known for a listed op.
2. O has an XPU kernel, in torch-xpu-ops (a kernel of the called family, or of the base
   op's default/out overload: ``_foreach_mul.Scalar`` had one in 2.5, ``.Tensor`` not),
   in PyTorch's ``XPU:`` keys or in a core registration: ``native``.
3. O has a ``structured_delegate`` D whose status is ``native`` or ``fallback``: D's.
4. O has a composite kernel, or no ``dispatch:`` at all (codegen's default is
   ``CompositeImplicitAutograd``): ``decomposed``. A composite wins over the XPU backend
   fallback (``torch._C._dispatch_dump_table``: the XPU row reads "default backend
   kernel"), so from 2.4.0 the ``_foreach_*`` slow paths (pytorch/pytorch#127412) run on
   XPU without kernels; what they call is classified on its own.
5. Otherwise ``missing``; ``unknown`` where the op is not in the release's yaml, where
   the release's torch-xpu-ops kernel list is older than its branch head and PyTorch's
   yaml of that release is not in the data, or for a series newer than the last
   torch-xpu-ops data (the date of that data is said, :func:`data_horizon`).

Ops the capturing device routes to itself (CPU's ``_scaled_dot_product_flash_attention_
for_cpu`` and ``_weight_int4pack_mm_for_cpu``, CUDA's efficient/flash/cuDNN attention and
``cudnn_batch_norm``) get their own class, ``routed: cpu`` / ``routed: cuda``, never
``missing``; where the op XPU calls instead is known (``cudnn_batch_norm`` ->
``native_batch_norm``; ``_weight_int4pack_mm_for_cpu`` -> ``_weight_int4pack_mm``; SDPA ->
the fused op with an XPU key in that release's yaml: flash attention from 2.10, the
overrideable op from 2.7, before it the math path), that op is classified too
(:func:`predict_detail`) and stands for it against the seed's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..testing.opcapture import base_op, overload_family
from .xpu_data import (
    core_for,
    data_horizon,
    load_core,
    load_torch,
    load_upstream,
    series_key,
    series_names,
    torch_ops,
)

DEVICE = "xpu"   # the device type these predictions are for (accelgrid.devices.xpu)
FALLBACK_ERROR = "fallback -> error"
STATUSES = ("native", "decomposed", "fallback", FALLBACK_ERROR, "missing", "routed: cpu",
            "routed: cuda", "unknown")
# Statuses an observed xpu cell and a prediction can be compared on; "unknown" and the
# routed classes say the prediction (or the observation) cannot tell.
COMPARED = ("native", "decomposed", "fallback", FALLBACK_ERROR, "missing")
BAD = ("fallback", FALLBACK_ERROR, "missing")
# The seed's nightly predates pytorch/pytorch#127412 (foreach slow paths registered as
# CompositeExplicitAutograd; its part #127623 merged 2024-06-01): there the `_foreach_*`
# ops had CPU/CUDA kernels only. NIGHTLY_BEFORE_127412 models that build: release 2.4
# with those composites taken away (:func:`predict` ``without_foreach_composites``).
NIGHTLY_BEFORE_127412 = "2024-06-01"
FOREACH_COMPOSITES = "pytorch/pytorch#127412 (#127623, merged 2024-06-01)"

# Ops the capturing device routes to itself: device -> the op XPU calls instead.
# "sdpa"/"sdpa_backward": what scaled_dot_product_attention picks on XPU (below).
ROUTED: dict[str, tuple[str, str | None]] = {
    "_scaled_dot_product_flash_attention_for_cpu": ("cpu", "sdpa"),
    "_scaled_dot_product_flash_attention_for_cpu_backward": ("cpu", "sdpa_backward"),
    # int4 weight-only: the CPU's own packing and matmul, split from the ops every other
    # device (XPU too) calls by pytorch/pytorch#139611 ("Split int4wo weight packing").
    "_convert_weight_to_int4pack_for_cpu": ("cpu", "_convert_weight_to_int4pack"),
    "_weight_int4pack_mm_for_cpu": ("cpu", "_weight_int4pack_mm"),
    "_scaled_dot_product_efficient_attention": ("cuda", "sdpa"),
    "_scaled_dot_product_efficient_attention_backward": ("cuda", "sdpa_backward"),
    "_scaled_dot_product_flash_attention": ("cuda", "sdpa"),
    "_scaled_dot_product_flash_attention_backward": ("cuda", "sdpa_backward"),
    "_scaled_dot_product_cudnn_attention": ("cuda", "sdpa"),
    "_scaled_dot_product_cudnn_attention_backward": ("cuda", "sdpa_backward"),
    "_efficient_attention_forward": ("cuda", "sdpa"),
    "_efficient_attention_backward": ("cuda", "sdpa_backward"),
    "_flash_attention_forward": ("cuda", "sdpa"),
    "_flash_attention_backward": ("cuda", "sdpa_backward"),
    "cudnn_batch_norm": ("cuda", "native_batch_norm"),
    "cudnn_batch_norm_backward": ("cuda", "native_batch_norm_backward"),
    "miopen_batch_norm": ("cuda", "native_batch_norm"),
    "miopen_batch_norm_backward": ("cuda", "native_batch_norm_backward"),
    "cudnn_convolution": ("cuda", "convolution_overrideable"),
    "cudnn_convolution_transpose": ("cuda", "convolution_overrideable"),
    "miopen_convolution": ("cuda", "convolution_overrideable"),
}
# What scaled_dot_product_attention calls on XPU, newest first, each where that release's
# native_functions.yaml gives it an XPU key: flash attention (2.10 on), the overrideable
# fused op (2.7 on, with _fused_sdp_choice); before, XPU always took the math path, a
# CompositeImplicitAutograd op whose backward is autograd over decomposed ops.
_SDPA_FUSED = (("_scaled_dot_product_flash_attention",
                "_scaled_dot_product_flash_attention_backward"),
               ("_scaled_dot_product_fused_attention_overrideable",
                "_scaled_dot_product_fused_attention_overrideable_backward"))
_SDPA_MATH = "_scaled_dot_product_attention_math"


@dataclass(frozen=True)
class _Release:
    native: dict[str, set[str]]  # base op -> overload families with an XPU kernel
    fallback: dict[str, set[str]]  # base op -> families on the fallback list
    torch: dict[str, str] | None  # PyTorch's yaml: op -> code (None: not in the data)
    native_names: frozenset[str]  # exact names with a torch-xpu-ops kernel
    fallback_names: frozenset[str]  # exact names on the fallback list
    core: frozenset[str]  # exact names with a core XPU registration
    complete: bool  # every XPU kernel of the release is known
    beyond: str | None = None  # set for a series past the data: why it is unknown
    core_note: str = ""  # where the core registrations of this series come from


def _families(names: Iterable[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in names:
        out.setdefault(base_op(name), set()).add(overload_family(name))
    return out


def _release(upstream: Mapping[str, Any], series: str, core: Mapping[str, Any],
             torch_data: Mapping[str, Any], without_foreach_composites: bool = False
             ) -> _Release:
    entry = upstream["series"].get(series)
    if entry is None:
        have = series_names(upstream)
        if have and series_key(series) > series_key(have[-1]):
            last, branch, date = data_horizon(upstream)
            return _Release({}, {}, None, frozenset(), frozenset(), frozenset(), False,
                            beyond=f"no torch-xpu-ops data after {branch} ({date})")
        raise KeyError(f"no upstream data for series {series!r}; have {', '.join(have)}")
    torch = torch_ops(torch_data, series)
    if torch is not None and without_foreach_composites:
        # Before #127412 the foreach ops had backend kernels only (a CPU one among them).
        torch = {k: _without_composite(v) if k.startswith("_foreach_") else v
                 for k, v in torch.items()}
    native = list(entry["native"])
    core_ops, core_note = core_for(core, series)
    native += list(core_ops)
    core_names = {_exact(op) for op in core_ops}
    # A stale torch-xpu-ops kernel list (2.14: registrations moved into PyTorch) is made
    # whole again by that release's yaml, whose XPU keys then hold them.
    complete = (entry.get("native_commit", entry["commit"]) == entry["commit"]
                or torch is not None)
    return _Release(_families(native), _families(entry["fallback"]), torch,
                    frozenset(_exact(n) for n in entry["native"]),
                    frozenset(_exact(n) for n in entry["fallback"]), frozenset(core_names),
                    complete, core_note=core_note)


def _without_composite(code: str) -> str:
    """A foreach op's code before #127412: its CompositeExplicitAutograd slow path was then
    its CPU kernel (``CPU: foreach_tensor_..._slow``)."""
    letters, sep, delegate = code.partition(">")
    if "E" not in letters:
        return code
    letters = letters.replace("E", "")
    letters += "" if "B" in letters else "B"
    letters += "" if "C" in letters else "C"
    return letters + sep + delegate


def has_cpu_kernel(name: str, torch_ops_of_series: Mapping[str, str] | None,
                   depth: int = 0) -> bool | None:
    """Whether torch's yaml gives op ``name`` something to run on the CPU: a ``CPU`` key
    (code letter C), a composite kernel (E, F, I) or a ``structured_delegate`` that has
    one. None where the yaml of the series is not in the data or lacks the op."""
    if torch_ops_of_series is None:
        return None
    code = torch_ops_of_series.get(_exact(name))
    if code is None:
        return None
    letters, _, delegate = code.partition(">")
    if set(letters) & set("CEFI"):
        return True
    if delegate and depth < 3:
        return bool(has_cpu_kernel(delegate, torch_ops_of_series, depth + 1))
    return False


def _exact(name: str) -> str:
    """The yaml's spelling of a name: ``aten::linspace.default`` -> ``linspace``."""
    name = name.strip()
    name = name[len("aten::"):] if name.startswith("aten::") else name
    return name[: -len(".default")] if name.endswith(".default") else name


def _routed_target(base: str, rel: _Release) -> str | None:
    """The op XPU calls where the capturing device called its own ``base``."""
    target = ROUTED[base][1]
    if target in ("sdpa", "sdpa_backward"):
        for pair in _SDPA_FUSED:
            op = pair[target == "sdpa_backward"]
            if "X" in (rel.torch or {}).get(op, "").split(">")[0]:
                return op
        return _SDPA_MATH
    return target


def _classify(name: str, rel: _Release, depth: int = 0) -> tuple[str, str]:
    """(status, which rule decided) for one op name, rules 1-5 of the module docstring."""
    if rel.beyond:
        return "unknown", rel.beyond
    base, family, exact = base_op(name), overload_family(name), _exact(name)
    native = rel.native.get(base, set())
    code = (rel.torch or {}).get(exact)
    letters, _, delegate = (code or "").partition(">")
    if base in rel.fallback:
        if family in native and family not in rel.fallback[base]:
            return "native", "torch-xpu-ops kernel of a partly listed op"
        # The list registers exact names (m.impl(name)): a backend kernel of its own that
        # is not listed (norm.dtype_out beside a listed norm.out) does not reach it.
        own_kernel = letters.replace("C", "") == "B" and not delegate
        if not own_kernel or exact in rel.fallback_names:
            if has_cpu_kernel(exact, rel.torch) is False:
                return FALLBACK_ERROR, ("torch-xpu-ops fallback list, no CPU kernel in "
                                        "PyTorch's yaml")
            return "fallback", "torch-xpu-ops fallback list"
    if exact in rel.native_names or (rel.torch is None and (
            family in native or "default" in native)):
        return "native", "torch-xpu-ops kernel"
    if "X" in letters:
        return "native", "PyTorch XPU key"
    if exact in rel.core:
        return "native", f"PyTorch core XPU registration ({rel.core_note})"
    if delegate and depth < 3:
        status, _ = _classify(delegate, rel, depth + 1)
        if status in ("native", "fallback"):
            return status, f"structured_delegate {delegate}"
    if set(letters) & set("EFI"):
        return "decomposed", "PyTorch composite kernel"
    if rel.torch is not None and code is None:
        if family in native or "default" in native:
            return "native", "torch-xpu-ops kernel (op not in this release's yaml)"
        return "unknown", "not in this release's native_functions.yaml"
    if not rel.complete or rel.torch is None:
        return "unknown", "kernel list incomplete for this release"
    return "missing", "no XPU kernel, no composite, not on the fallback list"


def predict_detail(captured: Mapping[str, Any] | Iterable[str], series: str,
                   upstream: Mapping[str, Any] | None = None,
                   core: Mapping[str, Any] | None = None,
                   torch_data: Mapping[str, Any] | None = None,
                   without_foreach_composites: bool = False,
                   routing: bool = True) -> dict[str, dict[str, str]]:
    """Per op: ``{"status", "rule"}``, and for a routed op also ``xpu_op`` (the op XPU
    calls instead) with its ``xpu_status``. Only the names count: the capturing device's
    status plays no part. ``routing=False`` for ops called directly on XPU (an upstream
    test calling ``_scaled_dot_product_efficient_attention`` itself): no routed class."""
    upstream = load_upstream() if upstream is None else upstream
    rel = _release(upstream, series, load_core() if core is None else core,
                   load_torch() if torch_data is None else torch_data,
                   without_foreach_composites)
    names = captured.keys() if isinstance(captured, Mapping) else captured
    out: dict[str, dict[str, str]] = {}
    for name in names:
        base = base_op(name)
        if routing and base in ROUTED and not rel.beyond:
            target = _routed_target(base, rel)
            rec = {"status": f"routed: {ROUTED[base][0]}",
                   "rule": f"{ROUTED[base][0]} routes the call to its own op"}
            if target:
                status, rule = _classify(target, rel)
                rec |= {"xpu_op": f"aten::{target}", "xpu_status": status, "xpu_rule": rule}
            out[name] = rec
            continue
        status, rule = _classify(name, rel)
        out[name] = {"status": status, "rule": rule}
    return out


def predict(captured: Mapping[str, Any] | Iterable[str], series: str,
            upstream: Mapping[str, Any] | None = None,
            core: Mapping[str, Any] | None = None,
            torch_data: Mapping[str, Any] | None = None,
            without_foreach_composites: bool = False) -> dict[str, str]:
    """Each op's predicted status on torch ``series`` for XPU (:func:`predict_detail`'s
    ``status``). ``captured``: op names as a TorchDispatchMode sees them
    (``aten::linspace.default``, ``aten::_foreach_mul_.Scalar``), a list or an ops.json
    ``ops`` mapping; rules: the module docstring."""
    detail = predict_detail(captured, series, upstream, core, torch_data,
                            without_foreach_composites)
    return {name: rec["status"] for name, rec in detail.items()}


def predict_all(ops_json_data: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                core: Mapping[str, Any] | None = None,
                torch_data: Mapping[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """``{series: {op: status}}`` for every series in the upstream data, from a cell's
    ops.json content (its ``ops`` names; the capturing device does not matter)."""
    upstream = load_upstream() if upstream is None else upstream
    core = load_core() if core is None else core
    torch_data = load_torch() if torch_data is None else torch_data
    ops = ops_json_data.get("ops", ops_json_data)
    return {s: predict(ops, s, upstream, core, torch_data) for s in series_names(upstream)}
