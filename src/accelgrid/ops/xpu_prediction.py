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

The prediction in parts, each a module of its own, all named here as before:

* :mod:`.xpu_data`: reading the packaged data files, the series they cover;
* :mod:`.xpu_rules`: the prediction itself, per op and series (its rules, the routed ops);
* :mod:`.xpu_series`: per series: which to predict, a cell's ops.json predicted for each
  (ops-predicted.json), an xpu cell against its series, the Markdown tables;
* :mod:`.xpu_seed`: the seed's table against the prediction;
* :mod:`.xpu_observations`: dated upstream observations, predicted one by one.
"""

from __future__ import annotations

from ..testing.opcapture import base_op, overload_family
from .xpu_data import (
    core_for,
    data_horizon,
    load_core,
    load_nightlies,
    load_observations,
    load_seed,
    load_torch,
    load_upstream,
    series_names,
    series_of,
    torch_ops,
)
from .xpu_observations import nightly_series, observation_agreement, predict_observation
from .xpu_rules import (
    COMPARED,
    DEVICE,
    FALLBACK_ERROR,
    FOREACH_COMPOSITES,
    NIGHTLY_BEFORE_127412,
    ROUTED,
    STATUSES,
    has_cpu_kernel,
    predict,
    predict_all,
    predict_detail,
)
from .xpu_seed import (
    SEED_SERIES,
    agreement_line,
    compare_with_seed,
    seed_figures,
    seed_rows,
    seed_series_agreement,
    seed_table,
)
from .xpu_series import (
    choose_series,
    counts_table,
    extraction_table,
    matrix_series,
    observed_vs_predicted,
    predicted_view,
    prediction_table,
    series_counts,
    stopped_falling_back,
)

__all__ = [
    "COMPARED", "DEVICE", "FALLBACK_ERROR", "FOREACH_COMPOSITES", "NIGHTLY_BEFORE_127412",
    "ROUTED", "SEED_SERIES", "STATUSES", "agreement_line", "base_op", "choose_series",
    "compare_with_seed", "core_for", "counts_table", "data_horizon", "extraction_table",
    "has_cpu_kernel", "load_core", "load_nightlies", "load_observations", "load_seed",
    "load_torch", "load_upstream", "matrix_series", "nightly_series",
    "observation_agreement", "observed_vs_predicted", "overload_family", "predict",
    "predict_all", "predict_detail", "predict_observation", "predicted_view",
    "prediction_table", "seed_figures", "seed_rows", "seed_series_agreement", "seed_table",
    "series_counts", "series_names", "series_of", "stopped_falling_back", "torch_ops",
]
