"""One Trainer run per Hugging Face example, on the cell's device.

Each ``test_workload``: first-step loss/gradients on the device (compared with a CPU
fp32 reference on accelerators), a few Trainer steps with memory metrics, an
evaluation, and a save_pretrained/from_pretrained round trip checked on the device.
``test_workload_optimizer`` adds the AdamW implementation (fused / foreach / for-loop)
as a dimension, on two cheap workloads only (see its docstring).
``test_workload_parity`` runs ``parity.STEPS`` steps on a fixed batch on the device and
compares losses, gradient norms and parameter updates with the CPU fp32 for-loop run.
Tolerances and their measurements: parity.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

from accelgrid.testing import not_run

from . import harness, optimizers, parity
from .workloads import RANDOM_LOSS, WORKLOADS, MissingModelClass

# Trainer computes an eval loss only for models with label arguments or return_loss;
# these self-supervised models have neither (their loss is checked in the round trip).
NO_EVAL_LOSS = frozenset({"speech-pretraining", "image-pretraining"})

GC_ID = "text-classification-gradient-checkpointing"
CASES = [pytest.param(name, False, id=name) for name in WORKLOADS] + [
    # pytorch/pytorch#128478: reentrant checkpointing took the CUDA path on other devices.
    pytest.param("text-classification", True, id=GC_ID),
]


@pytest.mark.parametrize(("name", "gradient_checkpointing"), CASES)
def test_workload(name: str, gradient_checkpointing: bool, device: str, tmp_path) -> None:
    # Dropout off where the step is compared in training mode (checkpointing is only
    # active there), so the CPU reference sees the same function.
    overrides = (
        {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
        if gradient_checkpointing else None
    )
    try:
        workload = WORKLOADS[name](overrides)
    except MissingModelClass as exc:
        not_run(str(exc))

    # --- first step on the device, and against CPU fp32 on accelerators -----------------
    batch = harness.first_batch(workload)
    probe = dict(train_mode=gradient_checkpointing, gradient_checkpointing=gradient_checkpointing)
    loss, grads = harness.first_step(copy.deepcopy(workload.model), batch, device, **probe)
    assert harness.finite(loss), f"first-step loss is {loss}"
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    assert not bad, f"non-finite gradients: {bad}"
    if device != "cpu" and name not in RANDOM_LOSS:
        ref_loss, ref_grads, noise = harness.reference_step(workload.model, batch, **probe)
        torch.testing.assert_close(loss, ref_loss, rtol=parity.LOSS_RTOL, atol=parity.LOSS_ATOL)
        parity.assert_grads_close(grads, ref_grads, noise)
    trained = {n for n, g in grads.items() if g.abs().sum() > 0}
    assert trained, "no parameter received a non-zero gradient"

    # --- a few Trainer steps --------------------------------------------------------------
    before = {n: p.detach().clone() for n, p in workload.model.named_parameters()}
    trainer = harness.make_trainer(
        workload, device, tmp_path / "out", gradient_checkpointing=gradient_checkpointing
    )
    assert trainer.args.device.type == device, (
        f"Trainer picked {trainer.args.device}, the cell's device is {device}"
    )
    result = trainer.train()
    assert result.global_step == harness.MAX_STEPS
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == harness.MAX_STEPS, trainer.state.log_history
    assert all(harness.finite(v) for v in losses), f"training losses {losses}"
    assert "train_mem_cpu_alloc_delta" in result.metrics, result.metrics
    if device in ("cuda", "xpu"):
        assert "train_mem_gpu_alloc_delta" in result.metrics, result.metrics
    model = trainer.model
    if gradient_checkpointing:
        assert harness.checkpointing_on(model), "Trainer did not enable checkpointing"
    after = {n: p.detach().cpu() for n, p in model.named_parameters()}
    unchanged = sorted(n for n in trained if torch.equal(after[n], before[n]))
    assert not unchanged, f"parameters with gradients but not updated: {unchanged}"

    # --- evaluation -------------------------------------------------------------------------
    metrics = trainer.evaluate()
    assert "eval_runtime" in metrics, metrics
    if name not in NO_EVAL_LOSS:
        assert harness.finite(metrics["eval_loss"]), metrics

    # --- save_pretrained / from_pretrained round trip on the device -------------------------
    saved = tmp_path / "saved"
    trainer.save_model(str(saved))
    reloaded, info = type(model).from_pretrained(str(saved), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    reloaded = reloaded.to(device).eval()
    model.eval()
    inputs = harness.to_device(
        harness.inputs_without_labels(harness.first_batch(workload, "eval"), trainer.label_names),
        device,
    )
    with torch.no_grad():
        want = harness.flat_tensors(model(**inputs))
        got = harness.flat_tensors(reloaded(**inputs))
    assert want, "the model returned no tensors"
    assert all(torch.isfinite(t).all() for t in want if t.is_floating_point())
    torch.testing.assert_close(got, want)


# The optimizer dimension, not on all 14 workloads (see test_workload_optimizer): every
# AdamW implementation on text-classification (the seed's MRPC column: foreach ops), and
# the for-loop one on multiple-choice too (its ROBERTA column: for-loop ops).
OPTIMIZER_CASES = [
    pytest.param(name, impl, id=f"{name}-adamw-{impl}")
    for name, impl in [
        *(("text-classification", impl) for impl in optimizers.ADAMW_IMPLS),
        ("multiple-choice", "forloop"),
    ]
]


@pytest.mark.parametrize(("name", "impl"), OPTIMIZER_CASES)
def test_workload_optimizer(name: str, impl: str, device: str, tmp_path) -> None:
    """Trainer with torch AdamW's ``fused``, ``foreach`` or ``forloop`` implementation.

    Why a dimension: the three run different aten ops (``_fused_adamw_``; the
    ``_foreach_*`` family; per-tensor ``lerp``/``addcmul``/``addcdiv``), and Trainer's
    default hides two of them: transformers on torch >= 2.8 picks fused AdamW, so the
    foreach ops the seed saw missing on XPU never ran, and neither did the for-loop ops
    it saw falling back. Why only here: the ops depend on the optimizer, not on the
    model, and the cpu cell's suites must stay under 3 minutes on 2 cores, so the
    workloads keep Trainer's default (one run each, in test_workload) and only the
    cheapest, text-classification (BERT, ~1.4 s a case), runs all three, plus the
    for-loop on multiple-choice (RoBERTa), the model the seed saw the for-loop ops
    with. This test is only what differs per implementation: Trainer steps and the
    update itself; evaluation and the save round trip are test_workload's.

    On accelerators the implementation is checked against a CPU fp32 reference: the
    same parameters and gradients (the workload's first-step gradients, computed on the
    CPU), ``MAX_STEPS`` AdamW steps with ``impl`` on the device versus the for-loop on
    the CPU (optimizers.PARAM_RTOL/ATOL). Comparing whole Trainer runs instead would not
    work: Adam divides by sqrt(v), so reduction-order noise on gradients that are zero
    in exact arithmetic becomes a full ``lr``-sized step of either sign.
    """
    try:
        workload = WORKLOADS[name]()
    except MissingModelClass as exc:
        not_run(str(exc))

    _, grads = harness.first_step(copy.deepcopy(workload.model), harness.first_batch(workload),
                                  "cpu")
    trained = {n for n, g in grads.items() if g.abs().sum() > 0}
    assert trained, "no parameter received a non-zero gradient"
    before = {n: p.detach().clone() for n, p in workload.model.named_parameters()}

    trainer = harness.make_trainer(workload, device, tmp_path / "out", optimizer=impl)
    assert trainer.args.device.type == device, (
        f"Trainer picked {trainer.args.device}, the cell's device is {device}"
    )
    result = trainer.train()
    assert optimizers.impl_of(trainer.optimizer) == impl, trainer.optimizer
    assert result.global_step == harness.MAX_STEPS
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == harness.MAX_STEPS, trainer.state.log_history
    assert all(harness.finite(v) for v in losses), f"training losses {losses}"
    after = {n: p.detach().cpu() for n, p in trainer.model.named_parameters()}
    assert all(torch.isfinite(p).all() for p in after.values()), "non-finite parameters"
    unchanged = sorted(n for n in trained if torch.equal(after[n], before[n]))
    assert not unchanged, f"parameters with gradients but not updated: {unchanged}"

    if device != "cpu":
        # Trainer's weight decay (0 by default) on every tensor: the decayed and
        # undecayed groups then coincide.
        kwargs = {**harness.adamw_kwargs(trainer.args), "weight_decay": trainer.args.weight_decay}
        got = optimizers.adamw_steps(before, grads, device, impl, harness.MAX_STEPS, **kwargs)
        ref = optimizers.adamw_steps(before, grads, "cpu", optimizers.REFERENCE_IMPL,
                                     harness.MAX_STEPS, **kwargs)
        optimizers.assert_params_close(got, ref, what=f"AdamW {impl} on {device} vs "
                                       f"{optimizers.REFERENCE_IMPL} on cpu")


# The multi-step parity, on cheap workloads: every AdamW implementation on
# text-classification (BERT; its gradients are cancellation residues, 6e-4 at most), and
# Trainer's default (fused) on object-detection (DETR: gradients from 616 down to its box
# head's 1e-2 and noise-only decoder tensors).
PARITY_CASES = [
    pytest.param(name, impl, id=f"{name}-parity-adamw-{impl}")
    for name, impl in [
        *(("text-classification", impl) for impl in optimizers.ADAMW_IMPLS),
        ("object-detection", "fused"),
    ]
]


@pytest.mark.usefixtures("one_intra_op_thread")
@pytest.mark.parametrize(("name", "impl"), PARITY_CASES)
def test_workload_parity(name: str, impl: str, device: str) -> None:
    """``parity.STEPS`` AdamW steps (``impl``) on one fixed batch on the device against the
    same on the CPU in fp32 with the for-loop AdamW: the loss and the pre-clip gradient
    norm at every step (clip_grad_norm_ with foreach for fused/foreach, without for the
    for-loop), the loss going down, and every parameter's update (parity.py). On the cpu
    cell this compares the CPU's fused/foreach kernels with its for-loop."""
    try:
        workload, noise, ref = harness.parity_reference(name)
    except MissingModelClass as exc:
        not_run(str(exc))
    got = harness.train_steps(copy.deepcopy(workload.model), harness.first_batch(workload),
                              device, impl, parity.STEPS)
    parity.assert_parity(got, ref, noise, what=f"{parity.STEPS} steps of AdamW {impl} on {device}")
