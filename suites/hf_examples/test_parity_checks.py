"""The parity checks (parity.py), checked: each fails on a planted fault, and names it.

Every test plants one fault in the run under test and compares it with the unfaulted CPU
fp32 reference (harness.parity_reference), as test_workload_parity and test_workload do.
The run under test is on the cell's device with the fused AdamW; on the cpu cell that is
the CPU's fused kernel against its for-loop reference, which round differently, so the
tolerances are exercised there too. The control, the same run without a fault, is
test_workload_parity[<workload>-parity-adamw-fused]; the first-step check's control is in
its test. Faults:

  skipped step        AdamW.step does nothing at step 2 (BERT)
  zeroed gradient     one tensor's gradient is zero at every step (a hook), in the first
                      step's check and in the parity run; the tensors include tiny-gradient
                      ones that the former model-wide tolerance (1e-3 x the model's largest
                      gradient) could not see (BERT, DETR)
  wrong grad norm     clip_grad_norm_ leaves out the tensor with the largest gradient (BERT)
  loss not going down AdamW steps up the gradient (BERT, DETR); and the same in both runs,
                      where only the loss check can see it (BERT)

The workloads are test_workload_parity's: text-classification (BERT) and object-detection
(DETR); a run takes well under a second on two CPU cores.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from accelgrid.testing import not_run

from . import harness, parity
from .workloads import MissingModelClass

TESTED_IMPL = "fused"
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")
# The former gradient tolerance: atol = this x the model's largest reference gradient.
FORMER_MODEL_SCALE = 1e-3


def reference(name: str) -> tuple[Any, dict[str, float], parity.Trace]:
    try:
        return harness.parity_reference(name)
    except MissingModelClass as exc:
        not_run(str(exc))


def run(name: str, device: str, plant: Callable[[torch.nn.Module], None] | None = None,
        ) -> list[str]:
    """The problems parity finds in a TESTED_IMPL run of ``name`` on ``device`` whose model
    got ``plant`` (the reference is computed first, so a patched optimizer or clip reaches
    only the run under test)."""
    workload, noise, ref = reference(name)
    model = copy.deepcopy(workload.model)
    if plant is not None:
        plant(model)
    got = harness.train_steps(model, harness.first_batch(workload), device, TESTED_IMPL,
                              parity.STEPS)
    return parity.parity_problems(got, ref, noise)


def named(problems: list[str], prefix: str) -> list[str]:
    return [p for p in problems if p.startswith(prefix)]


def zero_grad_of(victim: str) -> Callable[[torch.nn.Module], None]:
    def plant(model: torch.nn.Module) -> None:
        model.get_parameter(victim).register_hook(torch.zeros_like)
    return plant


class SkipsStep2(torch.optim.AdamW):
    """AdamW whose second step does nothing (a lost update)."""

    calls = 0

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        self.calls += 1
        return None if self.calls == 2 else super().step(closure)


class StepsUphill(torch.optim.AdamW):
    """AdamW on the negated gradients: gradient ascent (a sign error)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.neg_()
        return super().step(closure)


WORKLOADS = ["text-classification", "object-detection"]


def test_parity_catches_a_skipped_step(device: str, monkeypatch) -> None:
    _, _, ref = reference("text-classification")
    monkeypatch.setattr(torch.optim, "AdamW", SkipsStep2)
    problems = run("text-classification", device)
    # Most trained tensors are a third of their update short, not one or two (BERT's loss
    # moves by ~2e-4 in the whole run, inside LOSS_ATOL: the updates are what show it).
    assert len(named(problems, "parameter ")) > len(ref.before) // 2, problems


VICTIMS = [
    # (workload, tensor, whether the former model-wide tolerance could see it)
    ("text-classification", "classifier.weight", True),
    ("text-classification", "bert.encoder.layer.1.intermediate.dense.bias", False),
    ("object-detection", "bbox_predictor.layers.0.bias", False),
    ("object-detection", "model.encoder.layers.0.mlp.fc1.bias", False),
]


@pytest.mark.parametrize(("name", "victim", "visible_before"), VICTIMS,
                         ids=[f"{n}-{v}" for n, v, _ in VICTIMS])
def test_first_step_check_catches_a_zeroed_gradient(
    name: str, victim: str, visible_before: bool, device: str,
) -> None:
    workload, noise, trace = reference(name)
    batch = harness.first_batch(workload)
    ref = trace.grads[0]  # the reference run's first step is harness.first_step on the CPU
    top = max(float(g.abs().max()) for g in ref.values())
    assert (float(ref[victim].abs().max()) > FORMER_MODEL_SCALE * top) == visible_before
    _, got = harness.first_step(copy.deepcopy(workload.model), batch, device)
    assert parity.grad_problems(got, ref, noise) == []
    model = copy.deepcopy(workload.model)
    zero_grad_of(victim)(model)
    _, got = harness.first_step(model, batch, device)
    problems = parity.grad_problems(got, ref, noise)
    assert [p.split(":")[0] for p in problems] == [f"gradient of {victim}"], problems


@pytest.mark.parametrize(("name", "victim", "visible_before"), VICTIMS,
                         ids=[f"{n}-{v}" for n, v, _ in VICTIMS])
def test_parity_catches_a_zeroed_gradient(
    name: str, victim: str, visible_before: bool, device: str,
) -> None:
    problems = run(name, device, zero_grad_of(victim))
    assert named(problems, f"parameter {victim}:"), problems
    if not visible_before:
        # A tensor this small barely moves the others: only it is named.
        assert named(problems, "parameter ") == named(problems, f"parameter {victim}:"), problems


def test_parity_catches_a_clip_that_skips_a_tensor(device: str, monkeypatch) -> None:
    name = "text-classification"
    _, _, ref = reference(name)
    # The tensor with the largest gradient norm at step 1: the one whose absence shows.
    victim = max(ref.grads[0], key=lambda n: float(ref.grads[0][n].norm()))
    clip = torch.nn.utils.clip_grad_norm_

    def clip_but_one(params: Any, max_norm: float, **kwargs: Any) -> torch.Tensor:
        return clip([p for p in params if p is not skipped[0]], max_norm, **kwargs)

    skipped: list[torch.nn.Parameter] = []

    def plant(model: torch.nn.Module) -> None:
        skipped.append(model.get_parameter(victim))

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_but_one)
    problems = run(name, device, plant)
    assert named(problems, "step 1: gradient norm"), problems
    assert any("but the gradients' norm is" in p for p in problems), problems


@pytest.mark.parametrize("name", WORKLOADS)
def test_parity_catches_a_loss_that_does_not_go_down(name: str, device: str,
                                                     monkeypatch) -> None:
    reference(name)
    monkeypatch.setattr(torch.optim, "AdamW", StepsUphill)
    problems = run(name, device)
    assert named(problems, "loss did not go down"), problems
    if name == "object-detection":
        # DETR's loss moves by ~0.2 a step, so the per-step comparison sees it at once.
        assert named(problems, "loss after step 1"), problems


def test_only_the_loss_check_sees_a_fault_in_both_runs(device: str, monkeypatch) -> None:
    """The same sign error in the reference too: the runs agree, the loss goes up."""
    workload, noise, _ = reference("text-classification")
    batch = harness.first_batch(workload)
    monkeypatch.setattr(torch.optim, "AdamW", StepsUphill)
    ref = harness.train_steps(copy.deepcopy(workload.model), batch, "cpu", "forloop",
                              parity.STEPS, keep_grads=True)
    got = harness.train_steps(copy.deepcopy(workload.model), batch, device, TESTED_IMPL,
                              parity.STEPS)
    problems = parity.parity_problems(got, ref, noise)
    assert [p.split(" in ")[0] for p in problems] == ["loss did not go down"], problems


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_first_step_check_catches_a_non_finite_gradient(value: float, device: str) -> None:
    """A NaN compares False to every bound: the check is "not within", so one tensor's
    gradient all NaN (or Inf) on the real BERT workload is named; nothing else is."""
    workload, noise, trace = reference("text-classification")
    victim = "classifier.weight"
    model = copy.deepcopy(workload.model)
    model.get_parameter(victim).register_hook(lambda g: torch.full_like(g, value))
    _, got = harness.first_step(model, harness.first_batch(workload), device)
    problems = parity.grad_problems(got, trace.grads[0], noise)
    assert [p.split(":")[0] for p in problems] == [f"gradient of {victim}"], problems


def test_parity_catches_a_nan_gradient(device: str) -> None:
    def plant(model: torch.nn.Module) -> None:
        model.get_parameter("classifier.weight").register_hook(
            lambda g: torch.full_like(g, float("nan")))

    problems = run("text-classification", device, plant)
    assert named(problems, "parameter classifier.weight:"), problems
