"""Saving and loading CPUOffloadOptimizer state: in process, across processes, and into a
model that does not match.

What torchao does with a mismatched state (recorded in docs/offload.md): its
``load_state_dict`` zips the saved per-param states with its own by position, and each
per-param CPU optimizer is a plain torch optimizer whose ``load_state_dict`` checks group
sizes but not shapes. The mismatch tests pin that behaviour; if one fails, upstream changed
it and docs/offload.md needs updating.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import offload_helpers as h
import pytest
import torch
from torch import nn

from accelgrid.outcomes import not_run

RESUME_SCRIPT = Path(__file__).with_name("offload_resume.py")
CHANGED = "upstream behaviour changed; update this test and docs/offload.md"


def _saved_tensors(state: dict) -> list[torch.Tensor]:
    return [v for per_param in state["state"].values() for v in per_param.values()]


def test_state_dict_round_trip(offload_cls: type, device: str, tmp_path: Path) -> None:
    """2 steps, save (through torch.save), rebuild, load, 2 more steps == uninterrupted."""
    torch.manual_seed(0)
    model1 = h.checkpoint_model(device)
    opt1 = offload_cls(model1.parameters(), torch.optim.AdamW)
    h.train(model1, opt1, h.seeded_inputs(device, torch.float32, steps=2, seed=1))

    state = opt1.state_dict()
    per_param = h.offloaded_states(state)
    if h.has_minimal_size(offload_cls):
        # Weights (32768, 131072 elements) offloaded; biases (1024, 128) on device.
        assert set(state) == {"offloaded", "on-device"}, sorted(state)
        assert len(per_param) == 2
    else:
        assert len(per_param) == 4  # before minimal_size everything was offloaded
    for sub in per_param:
        assert all(t.device.type == "cpu" for t in _saved_tensors(sub) if torch.is_tensor(t))

    path = tmp_path / "optim.pt"
    torch.save(state, path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)

    model2 = copy.deepcopy(model1)
    opt2 = offload_cls(model2.parameters(), torch.optim.AdamW)
    opt2.load_state_dict(loaded)

    more = h.seeded_inputs(device, torch.float32, steps=2, seed=2)
    h.train(model1, opt1, more)
    h.train(model2, opt2, more)
    h.assert_params_close(h.snapshot(model2), h.snapshot(model1))


def test_resume_in_fresh_process(offload_cls: type, device: str, tmp_path: Path) -> None:
    """Train, save model + optimizer to disk, continue in a new interpreter, and compare
    with the run that never stopped."""
    torch.manual_seed(0)
    model = h.checkpoint_model(device)
    opt = offload_cls(model.parameters(), torch.optim.AdamW)
    h.train(model, opt, h.seeded_inputs(device, torch.float32, steps=2, seed=1))

    more = h.seeded_inputs(device, torch.float32, steps=2, seed=2)
    ckpt = tmp_path / "ckpt.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "inputs": [[x.cpu() for x in mb] for mb in more],
        },
        ckpt,
    )
    h.train(model, opt, more)

    out = tmp_path / "resumed.pt"
    proc = subprocess.run(
        [sys.executable, str(RESUME_SCRIPT), str(ckpt), str(out), device],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, f"resume process failed:\n{proc.stderr[-4000:]}"
    resumed = torch.load(out, map_location="cpu", weights_only=True)
    h.assert_params_close(resumed, h.snapshot(model))


def _stack(in_features: int, depth: int, device: str, *, bias: bool) -> nn.Sequential:
    # Each weight (in_features * 128 >= 16384 elements) is offloaded; biases (128) are not.
    return h.mlp(128, depth, device, in_features=in_features, bias=bias)


def _one_step(model: nn.Sequential, opt: object, device: str) -> None:
    x = torch.randn(4, model[0].in_features, device=device)
    h.train(model, opt, [[x]])


@pytest.mark.parametrize("saved_depth,new_depth", [(3, 2), (2, 3)], ids=["fewer", "more"])
def test_load_param_count_mismatch_is_silent(
    offload_cls: type, device: str, saved_depth: int, new_depth: int
) -> None:
    """Offloaded params only (no biases): a state for 3 params loads into 2 and vice versa
    without any error; states are matched by position, extra ones dropped or left empty."""
    torch.manual_seed(0)
    src = _stack(128, saved_depth, device, bias=False)
    src_opt = offload_cls(src.parameters(), torch.optim.AdamW)
    _one_step(src, src_opt, device)
    saved = src_opt.state_dict()

    dst = _stack(128, new_depth, device, bias=False)
    dst_opt = offload_cls(dst.parameters(), torch.optim.AdamW)
    try:
        dst_opt.load_state_dict(saved)
    except Exception as exc:  # any error at all is the change we watch for
        pytest.fail(f"load_state_dict now rejects a param-count mismatch ({exc!r}); {CHANGED}")

    saved_states = h.offloaded_states(saved)
    loaded_states = h.offloaded_states(dst_opt.state_dict())
    assert len(loaded_states) == new_depth
    for i in range(min(saved_depth, new_depth)):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(loaded_states[i]["state"][0][key], saved_states[i]["state"][0][key])
    for extra in loaded_states[saved_depth:]:
        assert extra["state"] == {}, "a param with no saved state got one"


def test_load_on_device_count_mismatch_raises(offload_cls: type, device: str) -> None:
    """With biases kept on device, the on-device optimizer's own check catches a param-count
    mismatch — but only after the offloaded states were already overwritten."""
    if not h.has_minimal_size(offload_cls):
        not_run("this torchao offloads every param (no minimal_size, no on-device optimizer)")
    torch.manual_seed(0)
    src = _stack(128, 3, device, bias=True)
    src_opt = offload_cls(src.parameters(), torch.optim.AdamW)
    _one_step(src, src_opt, device)
    saved = src_opt.state_dict()

    dst = _stack(128, 2, device, bias=True)
    dst_opt = offload_cls(dst.parameters(), torch.optim.AdamW)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        dst_opt.load_state_dict(saved)

    # The failed load is not atomic: offloaded states were loaded before the error.
    loaded = h.offloaded_states(dst_opt.state_dict())
    first = h.offloaded_states(saved)[0]["state"][0]["exp_avg"]
    assert torch.equal(loaded[0]["state"][0]["exp_avg"], first)


@pytest.mark.parametrize("base", ["AdamW-fused", "SGD-momentum"])
def test_load_shape_mismatch(offload_cls: type, device: str, base: str) -> None:
    """A state saved for a (128, 256) weight, loaded for a (128, 128) one.

    Load accepts it (torch's Optimizer.load_state_dict checks counts, not shapes). Then:
    SGD (a plain CPU kernel) fails on the first step with a shape error; AdamW, which
    CPUOffloadOptimizer runs as fused CPU AdamW by default, steps without any error and
    keeps the wrong-shaped state: silent corruption. (Only the shrinking direction is run:
    growing makes the fused kernel write past the saved buffers — see docs/offload.md.)
    """
    optimizer_class, kwargs, key = {
        "AdamW-fused": (torch.optim.AdamW, {}, "exp_avg"),
        "SGD-momentum": (torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9}, "momentum_buffer"),
    }[base]
    torch.manual_seed(0)
    src = _stack(256, 1, device, bias=False)  # weight (128, 256)
    src_opt = offload_cls(src.parameters(), optimizer_class, **kwargs)
    _one_step(src, src_opt, device)

    dst = _stack(128, 1, device, bias=False)  # weight (128, 128)
    dst_opt = offload_cls(dst.parameters(), optimizer_class, **kwargs)
    try:
        dst_opt.load_state_dict(src_opt.state_dict())
    except Exception as exc:  # any error at all is the change we watch for
        pytest.fail(f"load_state_dict now rejects a shape mismatch ({exc!r}); {CHANGED}")

    def loaded_shape() -> tuple[int, ...]:
        return tuple(h.offloaded_states(dst_opt.state_dict())[0]["state"][0][key].shape)

    assert loaded_shape() == (128, 256), "load kept the saved (wrong) shape"
    if base == "SGD-momentum":
        with pytest.raises(RuntimeError, match="must match the size"):
            _one_step(dst, dst_opt, device)
    else:
        try:
            _one_step(dst, dst_opt, device)
        except RuntimeError as exc:
            pytest.fail(f"fused CPU AdamW now rejects the wrong-shaped state ({exc}); {CHANGED}")
        assert loaded_shape() == (128, 256), "the step replaced the wrong-shaped state"
