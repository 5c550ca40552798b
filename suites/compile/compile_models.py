"""The compile suite's models and their batches: a small MLP, a small conv net, and the
image- and text-classification workloads of suites/hf_examples (tiny local configs,
nothing from the Hub). Each builder returns ``(model, batch, loss_fn)`` on the CPU in
fp32, seeded; the test moves them to the device and dtype.

Torch only at import (transformers on call), so tests/ can import it for the checkers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

SEED = 0
ROOT = Path(__file__).resolve().parents[2]
Batch = dict[str, Any]
LossFn = Callable[[Any, Batch], torch.Tensor]


def _ce(out: torch.Tensor, batch: Batch) -> torch.Tensor:
    return nn.functional.cross_entropy(out.float(), batch["labels"])


def mlp() -> tuple[nn.Module, Batch, LossFn]:
    """Linear-GELU-Linear-LayerNorm-GELU-Linear: matmuls, a pointwise op inductor fuses
    and a reduction (LayerNorm) whose order inductor may change."""
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64),
                          nn.GELU(), nn.Linear(64, 10))
    batch = {"x": torch.randn(16, 32, generator=gen),
             "labels": torch.randint(0, 10, (16,), generator=gen)}
    return model, batch, _ce


def convnet() -> tuple[nn.Module, Batch, LossFn]:
    """Conv-BatchNorm-ReLU-MaxPool-Conv-ReLU-AvgPool-Linear, in training mode (BatchNorm
    updates its running statistics inside the compiled graph)."""
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10))
    batch = {"x": torch.randn(4, 3, 16, 16, generator=gen),
             "labels": torch.randint(0, 10, (4,), generator=gen)}
    return model, batch, _ce


def _hf_loss(out: Any, batch: Batch) -> torch.Tensor:
    return out.loss.float()


# Dropout off: eager and compiled draw different random streams, so a training step with
# dropout has nothing to compare. problem_type set: the models set it on their first call
# with labels (modeling_bert.py: `if self.config.problem_type is None:`), which fails
# dynamo's guard on it and recompiles the second call once (TORCH_LOGS=recompiles, the
# cpu-2.13 cell, transformers 5.24.0).
HF_CONFIG = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
             "problem_type": "single_label_classification"}


def hf_workload(name: str, batch_size: int = 4) -> tuple[nn.Module, Batch, LossFn]:
    """The model of suites/hf_examples' workload ``name`` (tiny config, dropout off) and
    one collated batch of its training data."""
    if str(ROOT) not in sys.path:  # suites.hf_examples from the checkout, any import mode
        sys.path.insert(0, str(ROOT))
    from suites.hf_examples.workloads import WORKLOADS  # transformers, on call

    work = WORKLOADS[name](HF_CONFIG)
    rows = [work.train_dataset[i] for i in range(batch_size)]
    batch = dict(work.data_collator(rows))
    return work.model, batch, _hf_loss


BUILDERS: dict[str, Callable[[], tuple[nn.Module, Batch, LossFn]]] = {
    "mlp": mlp,
    "convnet": convnet,
    "image-classification": lambda: hf_workload("image-classification"),
    "text-classification": lambda: hf_workload("text-classification"),
}


def to(batch: Batch, device: str, dtype: torch.dtype) -> Batch:
    """The batch on ``device``; floating tensors in ``dtype``, ids and labels as they are."""
    return {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device))
            if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def forward(model: Any, batch: Batch) -> Any:
    """Call a plain model on ``x``, a Hugging Face one on the whole batch."""
    return model(batch["x"]) if "x" in batch else model(**batch)


def logits(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits
