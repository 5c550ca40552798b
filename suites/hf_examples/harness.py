"""Running a :class:`~workloads.Workload` through ``transformers.Trainer`` on one device,
and the probes the comparisons with the CPU reference use: one forward/backward
(:func:`first_step`, :func:`reference_step`) and a few steps on a fixed batch the way
Trainer takes them (:func:`train_steps`, :func:`parity_reference`); the comparisons
themselves are :mod:`parity`'s.

Kept apart from the tests so other suites (op coverage) can train a workload outside
pytest: ``make_trainer(WORKLOADS["translation"](), "xpu", out_dir).train()``.
Version differences (transformers 4.57 vs 5.x) are resolved by inspecting signatures,
never by version numbers.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from accelgrid.testing import dispatch

from . import parity
from .optimizers import CLIP_FOREACH, REFERENCE_IMPL, adamw_flags
from .workloads import BATCH_SIZE, WORKLOADS, Workload

MAX_STEPS = 3
# Larger than the examples' 5e-5 so three steps visibly move every trained tensor.
LEARNING_RATE = 1e-3
# Trainer's gradient clipping (the examples' default), also in train_steps.
MAX_GRAD_NORM = 1.0
# Keys that are targets or loss switches, not model inputs, for plain forward passes.
NON_INPUT_KEYS = ("return_loss",)


def _params(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters)


def training_arguments(
    output_dir: str | Path, device: str, *, gradient_checkpointing: bool = False,
    **overrides: Any,
) -> Any:
    """TrainingArguments for a few-step run with memory metrics on, for ``device``."""
    from transformers import TrainingArguments

    known = _params(TrainingArguments.__init__)
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        max_steps=MAX_STEPS,
        per_device_train_batch_size=BATCH_SIZE,
        per_device_eval_batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        max_grad_norm=MAX_GRAD_NORM,
        # Exercises the device's memory_allocated / max_memory_allocated /
        # reset_peak_memory_stats (pytorch/pytorch#127929).
        skip_memory_metrics=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        # Eval only needs the loss; gathering DETR/Mask2Former outputs needs extra care.
        prediction_loss_only=True,
    )
    if device == "cpu":
        # TrainingArguments picks the device itself; only CPU must be forced.
        kwargs["use_cpu" if "use_cpu" in known else "no_cuda"] = True
    if gradient_checkpointing:
        # transformers 5.x renamed gradient_* to activation_checkpointing* (old names warn).
        prefix = "activation" if "activation_checkpointing" in known else "gradient"
        kwargs[f"{prefix}_checkpointing"] = True
        if f"{prefix}_checkpointing_kwargs" in known:
            # The reentrant variant is the one of pytorch/pytorch#128478.
            kwargs[f"{prefix}_checkpointing_kwargs"] = {"use_reentrant": True}
    kwargs.update(overrides)
    return TrainingArguments(**{k: v for k, v in kwargs.items() if k in known})


def adamw_kwargs(args: Any, impl: str | None = None) -> dict[str, Any]:
    """The AdamW kwargs Trainer itself derives from ``args`` (lr, betas, eps: its
    ``get_optimizer_cls_and_kwargs``), with ``impl``'s ``fused``/``foreach`` flags
    (:data:`optimizers.ADAMW_IMPLS`) in place of whatever ``args.optim`` implied, or
    with no flags at all when ``impl`` is None."""
    from transformers import Trainer

    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    if cls is not torch.optim.AdamW:
        raise ValueError(f"args.optim={args.optim!r} is not torch's AdamW ({cls})")
    kwargs = {k: v for k, v in kwargs.items() if k not in ("fused", "foreach")}
    return kwargs if impl is None else {**kwargs, **adamw_flags(impl)}


def make_trainer(
    workload: Workload, device: str, output_dir: str | Path, *,
    gradient_checkpointing: bool = False, optimizer: str | None = None, **overrides: Any,
) -> Any:
    """A Trainer over ``workload``; ``processing_class`` or the older ``tokenizer`` kwarg.

    ``optimizer`` (``fused``, ``foreach``, ``forloop``) picks torch AdamW's
    implementation through ``optimizer_cls_and_kwargs``, so Trainer still builds its own
    param groups (weight decay) and scheduler; None keeps Trainer's default optimizer.
    """
    from transformers import Trainer

    args = training_arguments(
        output_dir, device, gradient_checkpointing=gradient_checkpointing, **overrides
    )
    kwargs: dict[str, Any] = dict(
        model=workload.model, args=args, train_dataset=workload.train_dataset,
        eval_dataset=workload.eval_dataset,
    )
    if optimizer is not None:
        if "optimizer_cls_and_kwargs" not in _params(Trainer.__init__):
            # Older than both pinned versions (4.57.5, 5.x); kept as a clear message.
            raise TypeError("this transformers' Trainer has no optimizer_cls_and_kwargs")
        kwargs["optimizer_cls_and_kwargs"] = (torch.optim.AdamW, adamw_kwargs(args, optimizer))
    if workload.data_collator is not None:
        kwargs["data_collator"] = workload.data_collator
    if workload.processing_class is not None:
        known = _params(Trainer.__init__)
        key = "processing_class" if "processing_class" in known else "tokenizer"
        kwargs[key] = workload.processing_class
    return Trainer(**kwargs)


def to_device(obj: Any, device: str | torch.device) -> Any:
    """Move tensors nested in dicts/lists/tuples to ``device`` (as Trainer does)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def first_batch(workload: Workload, split: str = "train") -> dict[str, Any]:
    """The first (unshuffled) batch of a split, collated on CPU."""
    from transformers import default_data_collator

    dataset = workload.train_dataset if split == "train" else workload.eval_dataset
    collate = workload.data_collator or default_data_collator
    return collate([dataset[i] for i in range(BATCH_SIZE)])


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """Full fp32 matmuls/convolutions (no TF32) for reference comparisons."""
    matmul = torch.get_float32_matmul_precision()
    cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = cudnn


def first_step(
    model: torch.nn.Module, batch: dict[str, Any], device: str, *,
    train_mode: bool = False, gradient_checkpointing: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients (on CPU) of one forward/backward of ``model`` on ``device``.

    Eval mode by default, so dropout and random quantisation do not differ between
    devices; ``train_mode`` (with dropout configured off) is for gradient checkpointing,
    which is only active in training mode.
    """
    dispatch("manual_seed", device, 0)
    model = model.to(device)
    model.train(train_mode)
    if gradient_checkpointing:
        enable_checkpointing(model)
    model.zero_grad(set_to_none=True)
    with strict_fp32():
        loss = model(**to_device(batch, device)).loss
        if gradient_checkpointing:
            assert graph_has(loss, "CheckpointFunction"), "checkpointing did not engage"
        loss.backward()
    grads = {
        name: p.grad.detach().cpu()
        for name, p in model.named_parameters()
        if p.requires_grad and p.grad is not None
    }
    return loss.detach().cpu(), grads


def to_dtype(obj: Any, dtype: torch.dtype) -> Any:
    """Floating tensors nested in dicts/lists/tuples cast to ``dtype``; others as they are."""
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, Mapping):
        return {k: to_dtype(v, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_dtype(v, dtype) for v in obj)
    return obj


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def reference_step(
    model: torch.nn.Module, batch: dict[str, Any], **probe: bool,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
    """The CPU fp32 reference of :func:`first_step` (on a copy of ``model``), and its noise:
    per tensor, the largest difference between those gradients and the same step's in
    float64 (what :mod:`parity` scales its tolerances by). The float64 step runs with
    float64 as the default dtype, so tensors a model or its loss makes on the fly (DETR's
    class weights) match."""
    loss, grads = first_step(copy.deepcopy(model), batch, "cpu", **probe)
    with default_dtype(torch.float64):
        _, exact = first_step(copy.deepcopy(model).double(), to_dtype(batch, torch.float64),
                              "cpu", **probe)
    noise = {name: float((g.double() - exact[name]).abs().max()) if g.numel() else 0.0
             for name, g in grads.items()}
    return loss, grads, noise


def train_steps(
    model: torch.nn.Module, batch: dict[str, Any], device: str, impl: str, steps: int, *,
    keep_grads: bool = False,
) -> parity.Trace:
    """``steps`` AdamW steps of ``model`` (moved to ``device``) on one fixed ``batch``, as
    Trainer takes them: gradients clipped to MAX_GRAD_NORM (clip_grad_norm_, multi-tensor
    or not as :data:`optimizers.CLIP_FOREACH` pairs with ``impl``), then AdamW with ``impl``,
    LEARNING_RATE, Trainer's betas/eps (torch's) and weight decay (0). Eval mode, as
    :func:`first_step`, so dropout does not differ between runs. ``keep_grads`` keeps each
    step's gradients (the reference run's set the update tolerance)."""
    dispatch("manual_seed", device, 0)
    model = model.to(device).eval()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    before = {n: p.detach().to("cpu", copy=True) for n, p in named}
    # torch.optim.AdamW and clip_grad_norm_ are looked up at call time, so a test can plant
    # a faulty one (test_parity_checks.py).
    opt = torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0, **adamw_flags(impl))
    inputs = to_device(batch, device)
    losses, norms, exact, kept = [], [], [], []
    with strict_fp32():
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = model(**inputs).loss
            loss.backward()
            losses.append(float(loss.detach()))
            grads = {n: p.grad.detach().to("cpu", copy=True)
                     for n, p in named if p.grad is not None}
            exact.append(float(torch.linalg.vector_norm(
                torch.cat([g.double().flatten() for g in grads.values()]))))
            if keep_grads:
                kept.append(grads)
            norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM,
                                                  foreach=CLIP_FOREACH[impl])
            norms.append(float(norm))
            opt.step()
        with torch.no_grad():
            losses.append(float(model(**inputs).loss))
    after = {n: p.detach().to("cpu", copy=True) for n, p in named}
    return parity.Trace(losses, norms, exact, before, after, LEARNING_RATE, kept)


@functools.cache
def parity_reference(name: str) -> tuple[Workload, dict[str, float], parity.Trace]:
    """The workload ``name``, its first-step gradient noise (:func:`reference_step`) and
    its reference run: ``parity.STEPS`` steps on the CPU in fp32 with the for-loop AdamW,
    gradients kept. Once per process: the same for every implementation under test (a
    fixed batch, deterministic on the CPU). Callers train copies of the model."""
    workload = WORKLOADS[name]()
    batch = first_batch(workload)
    _, _, noise = reference_step(workload.model, batch)
    ref = train_steps(copy.deepcopy(workload.model), batch, "cpu", REFERENCE_IMPL,
                      parity.STEPS, keep_grads=True)
    return workload, noise, ref


def enable_checkpointing(model: Any) -> None:
    """Reentrant activation checkpointing, under the 5.x name or the 4.x one."""
    reentrant = {"use_reentrant": True}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=reentrant)
    elif "gradient_checkpointing_kwargs" in _params(model.gradient_checkpointing_enable):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=reentrant)
    else:
        model.gradient_checkpointing_enable()


def checkpointing_on(model: Any) -> bool:
    """The model's own flag, under the 5.x name or the 4.x one."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(model.is_gradient_checkpointing)


def graph_has(tensor: torch.Tensor, node_name: str) -> bool:
    """Whether the autograd graph behind ``tensor`` contains a node named ``node_name*``
    (e.g. ``CheckpointFunctionBackward`` for reentrant checkpointing)."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        if type(fn).__name__.startswith(node_name):
            return True
        seen.add(fn)
        todo.extend(f for f, _ in fn.next_functions)
    return False


def flat_tensors(output: Any) -> list[torch.Tensor]:
    """All tensors of a model output (ModelOutput, tuples, dicts) in a stable order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return [t for v in output.values() for t in flat_tensors(v)]
    if isinstance(output, (list, tuple)):
        return [t for v in output for t in flat_tensors(v)]
    return []


def inputs_without_labels(batch: dict[str, Any], label_names: list[str]) -> dict[str, Any]:
    """A batch for a plain forward: targets dropped, so losses with random sampling
    (Mask2Former) do not enter the comparison."""
    return {k: v for k, v in batch.items() if k not in label_names and k not in NON_INPUT_KEYS}


def finite(value: float) -> bool:
    return math.isfinite(float(value))
