"""XPU op coverage predicted from upstream facts, for hosts without an Intel GPU.

Why: the question "which ops of our workloads fall back to the CPU, or are missing, on
torch X.Y for XPU" has a factual answer that needs no XPU. Two upstream sources decide it,
per release:

* intel/torch-xpu-ops' branch ``release/X.Y``: the ops it has XPU kernels for and the ops
  it sends to the CPU on purpose (``data/xpu_ops.json``, ``tools/extract_xpu_ops.py``);
* PyTorch's own ``native_functions.yaml`` of torch X.Y (``data/torch_registrations.json``,
  ``tools/extract_torch_registrations.py``): its ``XPU:`` keys, composite kernels
  (``CompositeExplicitAutograd``, ``...NonFunctional``, ``CompositeImplicitAutograd``) and
  ``structured_delegate``s; plus the few hand-written XPU kernels in PyTorch's core
  (``data/xpu_core_ops.json``, per series, tools/extract_core_registrations.py: oneDNN
  convolution, matmul before 2.6; no release's own file is reachable, so each such
  prediction's rule says what stands in for it, :func:`core_for`).

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

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..base.errors import InvalidInput
from ..testing.opcapture import base_op, overload_family

__all__ = [
    "COMPARED", "FALLBACK_ERROR", "FOREACH_COMPOSITES", "NIGHTLY_BEFORE_127412", "ROUTED",
    "SEED_SERIES", "STATUSES", "agreement_line", "base_op", "choose_series",
    "compare_with_seed", "core_for", "counts_table", "data_horizon", "extraction_table",
    "has_cpu_kernel", "load_core", "load_nightlies", "load_observations", "load_seed",
    "load_torch", "load_upstream", "matrix_series", "nightly_series",
    "observation_agreement", "observed_vs_predicted", "overload_family", "predict",
    "predict_all", "predict_detail", "predict_observation", "predicted_view",
    "prediction_table", "seed_figures", "seed_rows", "seed_series_agreement", "seed_table",
    "series_counts", "series_names", "series_of", "stopped_falling_back", "torch_ops",
]

DEVICE = "xpu"   # the device type these predictions are for (accelgrid.devices.xpu)
FALLBACK_ERROR = "fallback -> error"
STATUSES = ("native", "decomposed", "fallback", FALLBACK_ERROR, "missing", "routed: cpu",
            "routed: cuda", "unknown")
# Statuses an observed xpu cell and a prediction can be compared on; "unknown" and the
# routed classes say the prediction (or the observation) cannot tell.
COMPARED = ("native", "decomposed", "fallback", FALLBACK_ERROR, "missing")
BAD = ("fallback", FALLBACK_ERROR, "missing")
# Worst first, for a seed row exercised by several captured overloads.
# A listed op without a CPU kernel fails even with PYTORCH_ENABLE_XPU_FALLBACK=1, where a
# missing op would run on the CPU: the worst.
SEVERITY = {FALLBACK_ERROR: 7, "missing": 6, "fallback": 5, "unknown": 4, "routed: cuda": 3,
            "routed: cpu": 2, "decomposed": 1, "native": 0}
SEED_EXPECTS = {"explicit": "fallback", "manual": "missing"}
# The seed ran pytorch/pytorch@21144ce (June 2024, before 2.4). torch-xpu-ops' release/2.4
# branched from its main on 2024-05-18 and ends 2024-06-04 (head 97d692e, "Add CPU fallback
# for GradScaler"): the state PyTorch pinned for 2.4, the only branch from that time.
# seed_series_agreement() backs this up: 2.4 is the series that agrees best with the seed.
SEED_SERIES = "2.4"
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


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("accelgrid").joinpath("data", name)
                      .read_text(encoding="utf-8"))


def load_upstream() -> dict[str, Any]:
    """The packaged per-series extraction: ``{"series": {"2.4": {"branch", "commit",
    "native", "fallback", "sources", ...}}, ...}`` (see tools/extract_xpu_ops.py)."""
    return _read("xpu_ops.json")


def load_core() -> dict[str, Any]:
    """XPU kernels PyTorch itself registers outside its yaml, with their sources."""
    return _read("xpu_core_ops.json")


def load_seed() -> dict[str, Any]:
    """The seed's ops x examples table as extracted facts, with its provenance."""
    return _read("seed_000_ops.json")


def load_torch() -> dict[str, Any]:
    """PyTorch's per-series dispatch facts (tools/extract_torch_registrations.py): the
    first series whole, later ones as changes; :func:`torch_ops` rebuilds one series."""
    return _read("torch_registrations.json")


def torch_ops(torch_data: Mapping[str, Any], series: str) -> dict[str, str] | None:
    """``{op: code}`` of PyTorch's native_functions.yaml in torch ``series`` (codes:
    tools/extract_torch_registrations.py), or None where the data has no such series."""
    if series not in torch_data.get("series", {}):
        return None
    ops: dict[str, str] = {}
    for s in sorted(torch_data["series"], key=_version):
        entry = torch_data["series"][s]
        if "ops" in entry:
            ops = dict(entry["ops"])
        else:
            ops.update(entry.get("set", {}))
            for name in entry.get("drop", []):
                ops.pop(name, None)
        if s == series:
            return ops
    return None


def series_names(upstream: Mapping[str, Any]) -> list[str]:
    """The series in ``upstream``, oldest first ("2.10" after "2.9")."""
    return sorted(upstream["series"], key=lambda s: tuple(int(x) for x in s.split(".")))


def data_horizon(upstream: Mapping[str, Any] | None = None) -> tuple[str, str, str]:
    """The newest series with torch-xpu-ops data: ``(series, branch, date of its head)``.
    Series after it are predicted ``unknown``."""
    upstream = load_upstream() if upstream is None else upstream
    last = series_names(upstream)[-1]
    e = upstream["series"][last]
    return last, e["branch"], e.get("date", "")


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
        if have and _version(series) > _version(have[-1]):
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


def core_for(core: Mapping[str, Any], series: str) -> tuple[dict[str, str], str]:
    """``({op: source}, note)``: the core XPU registrations (data/xpu_core_ops.json,
    tools/extract_core_registrations.py) that stand for torch ``series``, and one line
    on what they are. A series the data lacks takes the nearest earlier one's, said so
    in the note; before the first, none."""
    have = sorted(core.get("series", {}), key=_version)
    known = [s for s in have if _version(s) <= _version(series)]
    if not known:
        return {}, f"no core registration data for torch {series}"
    entry = core["series"][known[-1]]
    src = sorted({v for v in entry["ops"].values()})
    note = ("this release's own files" if entry.get("per_release") else
            "not this release's own files: " + "; ".join(src))
    if known[-1] != series:
        note = f"no core registration data for torch {series}: torch {known[-1]}'s ({note})"
    return dict(entry["ops"]), note


def _version(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split(".") if x.isdigit())


def _exact(name: str) -> str:
    """The yaml's spelling of a name: ``aten::linspace.default`` -> ``linspace``."""
    name = name.strip()
    name = name[len("aten::"):] if name.startswith("aten::") else name
    return name[: -len(".default")] if name.endswith(".default") else name


def _status_of(record: Any) -> str | None:
    if isinstance(record, Mapping):
        return record.get("status")
    return record if isinstance(record, str) else None


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


def stopped_falling_back(predictions: Mapping[str, Mapping[str, str]]) -> dict[str, str | None]:
    """Per op that falls back or is missing in some series: the first series from which on
    it no longer does (None while it still does in the newest one). Ops never bad are left
    out. ``predictions`` is :func:`predict_all`'s result: the op x series view."""
    order = sorted(predictions, key=_version)
    ops = sorted({op for s in order for op in predictions[s]})
    out: dict[str, str | None] = {}
    for op in ops:
        seq = [(s, predictions[s].get(op)) for s in order if op in predictions[s]]
        bad = [i for i, (_, status) in enumerate(seq) if status in BAD]
        if bad:
            last = bad[-1]
            out[op] = seq[last + 1][0] if last + 1 < len(seq) else None
    return out


def series_counts(predictions: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """``{series: {status: number of ops}}`` over :data:`STATUSES`."""
    return {s: {st: sum(1 for v in p.values() if v == st) for st in STATUSES}
            for s, p in sorted(predictions.items(), key=lambda kv: _version(kv[0]))}


def series_of(version: str | None) -> str | None:
    """The series of a torch version: ``2.5.1+xpu`` -> ``2.5``; None if it has none."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return f"{m[1]}.{m[2]}" if m else None


def matrix_series(cells: Iterable[Any]) -> list[str]:
    """The torch series of a matrix's xpu cells (``Cell.device``/``.torch``), oldest first."""
    return sorted({c.torch for c in cells if c.device == DEVICE}, key=_version)


def choose_series(requested: Iterable[str] | None = None, cells: Iterable[Any] | None = None,
                  all_series: bool = False, upstream: Mapping[str, Any] | None = None
                  ) -> tuple[list[str], list[str]]:
    """The series to predict, oldest first, and notes: every series in the data with
    ``all_series``, else those ``requested``, else the matrix's xpu series (``cells``).
    A requested series without data is an :class:`InvalidInput`; a matrix series without
    data is left out with a note (one past the data says the data's last date)."""
    upstream = load_upstream() if upstream is None else upstream
    have = series_names(upstream)
    if all_series:
        return have, []
    if requested:
        wanted = list(dict.fromkeys(requested))
        unknown = [s for s in wanted if s not in upstream["series"]]
        if unknown:
            raise InvalidInput(f"no torch-xpu-ops data for series {', '.join(unknown)}; "
                               f"have {', '.join(have)}")
        return sorted(wanted, key=_version), []
    from_matrix = matrix_series(cells or ())
    last, branch, date = data_horizon(upstream)
    notes = []
    for s in from_matrix:
        if s in upstream["series"]:
            continue
        if _version(s) > _version(last):
            notes.append(f"the matrix's xpu series {s} is past the last torch-xpu-ops data "
                         f"({branch}, {date}): unknown; left out")
        else:
            notes.append(f"the matrix's xpu series {s} has no torch-xpu-ops data; left out")
    chosen = [s for s in from_matrix if s in upstream["series"]]
    if not chosen:
        raise InvalidInput("the matrix has no xpu cell with torch-xpu-ops data: name "
                           "--series or use --all-series")
    return chosen, notes


def _release_facts(upstream: Mapping[str, Any], series: str,
                   torch_data: Mapping[str, Any],
                   core: Mapping[str, Any] | None = None) -> dict[str, Any]:
    e = upstream["series"][series]
    src = torch_data.get("series", {}).get(series, {}).get("source", {})
    return {"branch": e["branch"], "commit": e["commit"], "date": e.get("date"),
            "kernel_list_from": e.get("native_commit") or e["commit"],
            "torch_wheel": src.get("wheel"), "torch_wheel_sha256": src.get("sha256"),
            "core_registrations": core_for(core or {}, series)[1]}


def predicted_view(captured: Mapping[str, Any], series: Iterable[str],
                   upstream: Mapping[str, Any] | None = None,
                   core: Mapping[str, Any] | None = None,
                   torch_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """ops-predicted.json's content: a cell's captured ops (ops.json's content) predicted
    for each of ``series``, with per-series counts, the op x series view (``predicted``
    per op, ``xpu_op`` for routed ones) and where each op stopped falling back or being
    missing; the seed's rows when :data:`SEED_SERIES` is among ``series``."""
    upstream = load_upstream() if upstream is None else upstream
    core = load_core() if core is None else core
    torch_data = load_torch() if torch_data is None else torch_data
    order = sorted(dict.fromkeys(series), key=_version)
    ops = captured.get("ops", {})
    details = {s: predict_detail(ops, s, upstream, core, torch_data) for s in order}
    preds = {s: {op: d["status"] for op, d in details[s].items()} for s in order}
    fixed = stopped_falling_back(preds)
    out_ops: dict[str, dict[str, Any]] = {}
    for op in sorted(ops):
        rec = ops[op] if isinstance(ops[op], Mapping) else {}
        entry = {"captured": _status_of(ops[op]), "workloads": dict(rec.get("workloads", {})),
                 "predicted": {s: preds[s][op] for s in order}}
        routed = {s: f"{details[s][op]['xpu_op']}: {details[s][op]['xpu_status']}"
                  for s in order if "xpu_op" in details[s][op]}
        if routed:
            entry["xpu_calls"] = routed
        if op in fixed:
            entry["stopped_falling_back"] = fixed[op]
        out_ops[op] = entry
    doc: dict[str, Any] = {
        "schema": 1,
        "captured": {k: captured.get(k) for k in ("cell", "device_type", "torch")}
        | {"sources": list(captured.get("sources") or [])},
        "series": order,
        "releases": {s: _release_facts(upstream, s, torch_data, core) for s in order},
        "workloads": list(captured.get("workloads") or sorted(
            {w for e in out_ops.values() for w in e["workloads"]})),
        "counts": series_counts(preds),
        "stopped_falling_back": fixed,
        "ops": out_ops,
        "seed": None,
    }
    if SEED_SERIES in order:
        rows = compare_with_seed(ops, SEED_SERIES, upstream, core=core, torch_data=torch_data)
        doc["seed"] = {"series": SEED_SERIES, "rows": rows, "agreement": agreement_line(rows)}
    return doc


def observed_vs_predicted(cell: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None,
                          torch_data: Mapping[str, Any] | None = None
                          ) -> dict[str, Any] | None:
    """For an xpu cell's ops.json content: the prediction for its torch series next to what
    it observed, and every disagreement (an op observed native but predicted fallback,
    ...). None for other devices. Ops where either side is outside :data:`COMPARED` are
    counted as not compared. A series without data gets ``error`` instead (past the data:
    its last date)."""
    if cell.get("device_type") != DEVICE:
        return None
    upstream = load_upstream() if upstream is None else upstream
    series = series_of(cell.get("torch"))
    if series is None or series not in upstream["series"]:
        why = f"no torch-xpu-ops data for torch {cell.get('torch')}"
        last, branch, date = data_horizon(upstream)
        if series and _version(series) > _version(last):
            why += f" (the last is {branch}, {date}): predicted unknown"
        return {"series": series, "error": why, "predicted": {}, "disagreements": [],
                "counts": {"agree": 0, "disagree": 0, "not_compared": len(cell.get("ops", {}))}}
    ops = cell.get("ops", {})
    predicted = predict(ops, series, upstream, core, torch_data)
    disagreements = []
    counts = {"agree": 0, "disagree": 0, "not_compared": 0}
    for op in sorted(ops):
        observed, guess = _status_of(ops[op]), predicted[op]
        if observed not in COMPARED or guess not in COMPARED:
            counts["not_compared"] += 1
        elif observed == guess:
            counts["agree"] += 1
        else:
            counts["disagree"] += 1
            disagreements.append({"op": op, "observed": observed, "predicted": guess})
    return {"series": series, "branch": upstream["series"][series]["branch"],
            "predicted": predicted, "disagreements": disagreements, "counts": counts}


# --- the seed's table ------------------------------------------------------------------

def _disagreement(expected: str, predicted: str) -> str:
    """Why a prediction differs from what the seed saw, as a category."""
    if predicted == "native":
        return "kernel-in-series"  # the release has a kernel the seed's build lacked
    if predicted == "decomposed":
        return "composite-in-series"  # the release runs a composite kernel (#127412, ...)
    if predicted == "fallback":
        return "on-fallback-list-in-series"  # seed: missing; the release lists it
    if predicted == "missing":
        return "not-on-fallback-list-in-series"  # seed: fell back; the release has no entry
    return "not-predictable"  # unknown


def compare_with_seed(captured: Mapping[str, Any] | Iterable[str], series: str = SEED_SERIES,
                      upstream: Mapping[str, Any] | None = None,
                      seed: Mapping[str, Any] | None = None,
                      core: Mapping[str, Any] | None = None,
                      torch_data: Mapping[str, Any] | None = None,
                      without_foreach_composites: bool = False) -> list[dict[str, Any]]:
    """Per seed row: the captured calls that exercise it, the prediction for ``series``,
    and whether it agrees with what the seed saw (explicit = fallback, manual = missing).

    A row is exercised by captured ops with its base op, or routed to one with it
    (``cudnn_batch_norm`` stands for ``native_batch_norm`` with that op's prediction);
    where several rows share a base op (``_foreach_mul.Scalar`` / ``.Tensor``) the
    overload family must match too. A row hit by several calls takes their worst
    prediction. Unexercised rows get ``agree: None`` and reason ``not-exercised``; they do
    not count in :func:`agreement_line`."""
    seed = load_seed() if seed is None else seed
    names = list(captured.keys() if isinstance(captured, Mapping) else captured)
    detail = predict_detail(names, series, upstream, core, torch_data,
                            without_foreach_composites)
    # What each call stands for on XPU: itself, or the op XPU calls instead.
    stands = {op: (d.get("xpu_op", op), d.get("xpu_status", d["status"]))
              for op, d in detail.items()}
    rows = seed["rows"]
    per_base: dict[str, int] = {}
    for row in rows:
        per_base[base_op(row["op"])] = per_base.get(base_op(row["op"]), 0) + 1
    out = []
    for row in rows:
        base, family = base_op(row["op"]), overload_family(row["op"])
        hits = sorted(op for op, (name, _) in stands.items() if base_op(name) == base
                      and (per_base[base] == 1 or overload_family(name) == family))
        expected = SEED_EXPECTS[row["status"]]
        result: dict[str, Any] = {"op": row["op"], "seed": row["status"], "expected": expected,
                                  "examples": row["examples"], "captured": hits,
                                  "predictions": {op: stands[op][1] for op in hits}}
        if not hits:
            result.update(predicted=None, agree=None, reason="not-exercised")
        else:
            worst = max((stands[op][1] for op in hits), key=SEVERITY.__getitem__)
            agree = worst == expected
            result.update(predicted=worst, agree=agree,
                          reason="agree" if agree else _disagreement(expected, worst))
        out.append(result)
    return out


def agreement_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """``Agreement with the seed's table: N of M rows (P %)`` over the exercised rows."""
    judged = [r for r in rows if r.get("agree") is not None]
    n, m = sum(1 for r in judged if r["agree"]), len(judged)
    pct = round(100 * n / m) if m else 0
    return f"Agreement with the seed's table: {n} of {m} rows ({pct} %)"


def seed_rows(series: str = SEED_SERIES, upstream: Mapping[str, Any] | None = None,
              seed: Mapping[str, Any] | None = None, core: Mapping[str, Any] | None = None,
              torch_data: Mapping[str, Any] | None = None,
              without_foreach_composites: bool = False) -> list[dict[str, Any]]:
    """The seed's rows predicted by their own names for ``series`` (no capture needed)."""
    seed = load_seed() if seed is None else seed
    return compare_with_seed([row["op"] for row in seed["rows"]], series, upstream, seed,
                             core, torch_data, without_foreach_composites)


def seed_series_agreement(upstream: Mapping[str, Any] | None = None,
                          seed: Mapping[str, Any] | None = None,
                          core: Mapping[str, Any] | None = None,
                          torch_data: Mapping[str, Any] | None = None,
                          without_foreach_composites: bool = True
                          ) -> dict[str, tuple[int, int]]:
    """Per series, how many of the seed's rows its data reproduce: ``(agree, rows)``, each
    row predicted by its own name. Evidence for which release stands for the seed's
    nightly; by default with the foreach composites taken away, as in that nightly."""
    upstream = load_upstream() if upstream is None else upstream
    out = {}
    for s in series_names(upstream):
        rows = seed_rows(s, upstream, seed, core, torch_data, without_foreach_composites)
        out[s] = (sum(1 for r in rows if r["agree"]), len(rows))
    return out


def seed_figures(upstream: Mapping[str, Any] | None = None,
                 seed: Mapping[str, Any] | None = None, core: Mapping[str, Any] | None = None,
                 torch_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The two seed figures of docs/devices/xpu-prediction.md: the seed against the torch it ran
    (the pre-#127412 nightly: release 2.4 without the foreach composites) and the seed's
    rows predicted for the 2.4.x release, each as its one line, with the rows that differ."""
    nightly = seed_rows(SEED_SERIES, upstream, seed, core, torch_data, True)
    release = seed_rows(SEED_SERIES, upstream, seed, core, torch_data, False)
    differ = [r for r in release if r["agree"] is False]
    n, m = sum(1 for r in nightly if r["agree"]), len(nightly)
    k, j = sum(1 for r in release if r["agree"]), len(release)
    return {
        "nightly": nightly, "release": release, "release_differs": differ,
        "nightly_line": (f"Seed against the nightly it ran (release {SEED_SERIES} data before "
                         f"{FOREACH_COMPOSITES}): {n} of {m} rows ({round(100 * n / m)} %)"),
        "release_line": (f"Seed's rows predicted for the {SEED_SERIES}.x release: {k} of {j} "
                         f"rows agree ({round(100 * k / j)} %); {len(differ)} differ"),
    }


# --- Markdown tables for docs/devices/xpu-prediction.md -----------------------------------------

def extraction_table(upstream: Mapping[str, Any]) -> str:
    """Series, branch, commit, date, number of kernel and fallback entries."""
    lines = ["| series | branch | commit | date | XPU kernels | fallback list | kernel list from |",
             "| --- | --- | --- | --- | ---: | ---: | --- |"]
    for s in series_names(upstream):
        e = upstream["series"][s]
        src = (f"`{e['native_commit'][:12]}` ({e.get('native_date', '')})"
               if e.get("native_commit") else "branch head")
        lines.append(f"| {s} | `{e['branch']}` | `{e['commit'][:12]}` | {e['date']} | "
                     f"{len(e['native'])} | {len(e['fallback'])} | {src} |")
    return "\n".join(lines) + "\n"


def prediction_table(predictions: Mapping[str, Mapping[str, str]],
                     only_interesting: bool = True) -> str:
    """Op x series statuses (ops native or decomposed in every series left out unless
    ``only_interesting`` is False), with the series each op stopped falling back in."""
    order = sorted(predictions, key=_version)
    fixed = stopped_falling_back(predictions)
    ops = sorted({op for p in predictions.values() for op in p})
    lines = ["| op | " + " | ".join(order) + " | no longer falls back / missing from |",
             "| --- |" + " --- |" * (len(order) + 1)]
    for op in ops:
        row = [predictions[s].get(op, "") for s in order]
        if only_interesting and all(v in ("native", "decomposed") for v in row):
            continue
        since = (fixed[op] or "not yet") if op in fixed else ""
        lines.append(f"| `{op}` | " + " | ".join(row) + f" | {since} |")
    return "\n".join(lines) + "\n"


def counts_table(predictions: Mapping[str, Mapping[str, str]]) -> str:
    """Per series, how many captured ops get each status."""
    counts = series_counts(predictions)
    lines = ["| series | " + " | ".join(STATUSES) + " |", "| --- |" + " ---: |" * len(STATUSES)]
    for s, c in counts.items():
        lines.append(f"| {s} | " + " | ".join(str(c[st]) for st in STATUSES) + " |")
    return "\n".join(lines) + "\n"


def seed_table(rows: Iterable[Mapping[str, Any]], series: str) -> str:
    """The seed's rows: what it saw, the captured calls, the prediction, agree or why not."""
    lines = [f"| seed row | seed saw | captured calls | predicted ({series}) | agrees | reason |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        calls = ", ".join(f"`{op}`" for op in r["captured"]) or "—"
        agrees = {True: "yes", False: "no", None: "—"}[r["agree"]]
        lines.append(f"| `{r['op']}` | {r['seed']} ({r['expected']}) | {calls} | "
                     f"{r['predicted'] or '—'} | {agrees} | {r['reason']} |")
    return "\n".join(lines) + "\n"


# --- out-of-sample upstream observations --------------------------------------------------

def load_observations() -> dict[str, Any]:
    """Dated upstream observations of single ops on XPU builds, with their links."""
    return _read("xpu_observations.json")


def load_nightlies() -> dict[str, Any]:
    """torch-xpu-ops' main as of each observation's nightly date (tools/extract_xpu_ops.py
    --nightly)."""
    return _read("xpu_ops_nightly.json")


def predict_observation(obs: Mapping[str, Any], upstream: Mapping[str, Any] | None = None,
                        nightlies: Mapping[str, Any] | None = None,
                        core: Mapping[str, Any] | None = None,
                        torch_data: Mapping[str, Any] | None = None) -> dict[str, str]:
    """One observation's prediction: a release by its series' data; a nightly by
    torch-xpu-ops' main on its date with the yaml of the release it led to, and without
    the foreach composites before :data:`NIGHTLY_BEFORE_127412`."""
    upstream = load_upstream() if upstream is None else upstream
    series = obs.get("series") or nightly_series(obs["date"], upstream)
    if obs.get("build") == "nightly":
        nightlies = load_nightlies() if nightlies is None else nightlies
        try:
            entry = nightlies["nightlies"][obs["date"]]
        except KeyError:
            raise InvalidInput(f"no torch-xpu-ops snapshot for the nightly of {obs['date']} "
                               "(tools/extract_xpu_ops.py --nightly)") from None
        upstream = {"series": {series: entry}}
        before = obs["date"] < NIGHTLY_BEFORE_127412
    else:
        before = False
    detail = predict_detail([obs["op"]], series, upstream, core, torch_data, before,
                            routing=False)
    return detail[obs["op"]]


def nightly_series(date: str, upstream: Mapping[str, Any] | None = None) -> str:
    """The release a nightly of ``date`` led to: the first series whose torch-xpu-ops
    release branch ends on or after that date (the branch is cut from main then)."""
    upstream = load_upstream() if upstream is None else upstream
    for s in series_names(upstream):
        if upstream["series"][s].get("date", "") >= date:
            return s
    return series_names(upstream)[-1]


def observation_agreement(observations: Mapping[str, Any] | None = None,
                          **data: Any) -> tuple[list[dict[str, Any]], str]:
    """Every observation with its prediction and ``agree``, and the line
    ``Agreement with upstream observations: N of M (P %)``."""
    observations = load_observations() if observations is None else observations
    rows = []
    for obs in observations["observations"]:
        pred = predict_observation(obs, **data)
        rows.append(dict(obs) | {"predicted": pred["status"], "rule": pred["rule"],
                                 "agree": pred["status"] == obs["observed"]})
    n, m = sum(1 for r in rows if r["agree"]), len(rows)
    pct = round(100 * n / m) if m else 0
    return rows, f"Agreement with upstream observations: {n} of {m} ({pct} %)"
