"""suites/hf_examples against the seed's ops x examples table.

Fast tests need only torch (the dev venv): the seed-coverage report
(suites/hf_examples/seed_coverage.py) on made-up capture records, the AdamW
implementation helpers (suites/hf_examples/optimizers.py) that the workload tests use to
compare an accelerator's AdamW with the CPU for-loop one, run here CPU against CPU, and
the tolerance arithmetic of the parity checks (suites/hf_examples/parity.py) on made-up
gradients and runs (the real workloads with planted faults are the cell's
suites/hf_examples/test_parity_checks.py).
The slow test runs the workload tests in the real cpu-2.13-op-capture cell and checks
that every op of the seed's table was captured, and by the workloads meant to hit it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suites.hf_examples import seed_coverage

ROOT = Path(__file__).resolve().parents[2]


def record(workload: str, *ops: str) -> dict:
    return {"nodeid": f"suites/hf_examples/test_workloads.py::test_workload[{workload}]",
            "workload": workload,
            "ops": {op: {"count": 1, "phases": {"forward": 1}, "status": "native"} for op in ops}}


SEED = {"rows": [
    {"op": "aten::_foreach_addcdiv.ScalarList", "status": "manual",
     "examples": {"text-classification": "MRPC", "image-detection": "DETR"}},
    {"op": "aten::lerp.Scalar_out", "status": "explicit",
     "examples": {"multiple-choice": "ROBERTA"}},
    {"op": "aten::native_batch_norm", "status": "explicit",
     "examples": {"instance-segmentation": "SWIN"}},
    {"op": "aten::roll", "status": "explicit", "examples": {"instance-segmentation": "SWIN"}},
]}


# --------------------------------------------------------------------------- seed_coverage


def test_rows_match_by_base_op_and_variants_stand_in_for_their_workload() -> None:
    rows = seed_coverage.coverage(SEED, [
        # in-place call with another overload: still _foreach_addcdiv
        record("text-classification-adamw-foreach", "aten::_foreach_addcdiv_.ScalarList"),
        record("multiple-choice-adamw-forloop", "aten::lerp_.Scalar"),
        record("object-detection", "aten::convolution.default"),
    ])
    by_op = {r["op"]: r for r in rows}
    foreach = by_op["aten::_foreach_addcdiv.ScalarList"]
    assert foreach["captured"] and foreach["workloads"] == ["text-classification-adamw-foreach"]
    assert foreach["captured_as"] == ["aten::_foreach_addcdiv_.ScalarList"]
    assert foreach["examples_hit"] == ["text-classification"]
    # the seed's image-detection column is the object-detection workload, which ran
    # only a convolution here
    assert foreach["examples_missed"] == ["image-detection"]
    assert by_op["aten::lerp.Scalar_out"]["examples_hit"] == ["multiple-choice"]
    assert not by_op["aten::roll"]["captured"]
    assert by_op["aten::roll"]["examples_missed"] == ["instance-segmentation"]


def test_variant_prefix_needs_a_dash() -> None:
    # "text-classificationX" is not a variant of text-classification
    rows = seed_coverage.coverage(SEED, [
        record("text-classificationX", "aten::_foreach_addcdiv_.ScalarList"),
    ])
    assert rows[0]["examples_hit"] == []


def test_an_op_reached_through_a_composite_on_the_seeds_xpu_is_reported_as_via() -> None:
    rows = seed_coverage.coverage(SEED, [
        record("instance-segmentation", "aten::native_group_norm.default"),
        record("semantic-segmentation", "aten::native_batch_norm.default"),
    ])
    bn = next(r for r in rows if r["op"] == "aten::native_batch_norm")
    assert bn["captured"] and bn["workloads"] == ["semantic-segmentation"]
    assert bn["examples_via"] == {"instance-segmentation": "native_group_norm"}
    assert bn["examples_missed"] == []


def write_raw(folder: Path, records: list[dict]) -> Path:
    raw = folder / "ops-raw"
    raw.mkdir(parents=True)
    half = len(records) // 2  # two workers' files
    for name, part in (("gw0", records[:half]), ("gw1", records[half:])):
        (raw / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return folder


def test_main_reads_every_worker_file_and_exits_1_while_a_row_is_missing(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(seed_coverage, "load_seed", lambda: SEED)
    some = [record("text-classification-adamw-foreach", "aten::_foreach_addcdiv_.ScalarList"),
            record("instance-segmentation", "aten::roll.default")]
    assert seed_coverage.main([str(write_raw(tmp_path / "a", some))]) == 1
    out = capsys.readouterr().out
    assert "2 of 4 seed rows captured." in out
    assert "Not captured: `aten::lerp.Scalar_out`, `aten::native_batch_norm`" in out

    every = some + [record("multiple-choice-adamw-forloop", "aten::lerp_.Scalar"),
                    record("semantic-segmentation", "aten::native_batch_norm.default")]
    assert seed_coverage.main([str(write_raw(tmp_path / "b", every)), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["captured"] for r in rows)


def test_main_without_raw_records_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run the cell with op capture first"):
        seed_coverage.main([str(tmp_path)])


def workload_ids() -> set[str]:
    """The keys of workloads.WORKLOADS, read from the source (importing it needs numpy
    and the cell's packages)."""
    tree = ast.parse((ROOT / "suites" / "hf_examples" / "workloads.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "WORKLOADS":
            assert isinstance(node.value, ast.Dict), ast.dump(node)
            ids: set[str] = set()
            for k in node.value.keys:  # literal names (None would be a ** spread)
                assert isinstance(k, ast.Constant) and isinstance(k.value, str), k
                ids.add(k.value)
            return ids
    raise AssertionError("no WORKLOADS table in workloads.py")


def test_every_example_of_the_real_seed_table_has_a_workload() -> None:
    seed = seed_coverage.load_seed()
    examples = {ex for row in seed["rows"] for ex in row["examples"]}
    # 9 example columns; question-answering's is empty in every row
    assert len(seed["rows"]) == 32 and len(examples) == 8
    assert {seed_coverage.workload_for(ex) for ex in examples} <= workload_ids()


# --------------------------------------------------------------------------- optimizers

torch = pytest.importorskip("torch")
from suites.hf_examples import optimizers  # noqa: E402  (imports torch)


def params_and_grads() -> tuple[dict, dict]:
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (8, 5), "b": (5,), "ln": (5,), "zero": (3,)}
    params = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    grads = {n: torch.randn(s, generator=gen) * 1e-2 for n, s in shapes.items()}
    grads["zero"] = torch.zeros(3)  # exactly-zero gradients: Adam must leave them alone
    return params, grads


KWARGS: dict[str, Any] = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_every_implementation_matches_the_for_loop_reference_on_cpu(impl: str) -> None:
    params, grads = params_and_grads()
    got = optimizers.adamw_steps(params, grads, "cpu", impl, 3, **KWARGS)
    ref = optimizers.adamw_steps(params, grads, "cpu", optimizers.REFERENCE_IMPL, 3, **KWARGS)
    optimizers.assert_params_close(got, ref, what=impl)
    moved = (got["w"] - params["w"]).abs()
    assert 1e-4 < float(moved.max()) <= 3 * KWARGS["lr"] * 1.01  # ~lr per step
    assert torch.equal(got["zero"], params["zero"])


def test_the_tolerance_catches_a_step_too_many_or_a_wrong_bias_correction() -> None:
    params, grads = params_and_grads()
    ref = optimizers.adamw_steps(params, grads, "cpu", "forloop", 3, **KWARGS)
    extra = optimizers.adamw_steps(params, grads, "cpu", "foreach", 4, **KWARGS)
    with pytest.raises(AssertionError, match="parameter w"):
        optimizers.assert_params_close(extra, ref, what="4 steps vs 3")
    other_beta = optimizers.adamw_steps(params, grads, "cpu", "foreach", 3,
                                        **{**KWARGS, "betas": (0.9, 0.99)})
    with pytest.raises(AssertionError):
        optimizers.assert_params_close(other_beta, ref, what="beta2")


def test_impl_of_reads_the_flags_back_through_wrappers() -> None:
    p = [torch.nn.Parameter(torch.zeros(2))]
    for impl, flags in optimizers.ADAMW_IMPLS.items():
        opt = torch.optim.AdamW(p, **flags)
        assert optimizers.impl_of(opt) == impl

        class Wrapped:  # as accelerate's AcceleratedOptimizer: the real one in .optimizer
            optimizer = opt

        assert optimizers.impl_of(Wrapped()) == impl
    assert optimizers.impl_of(torch.optim.AdamW(p)) == "torch-default"
    with pytest.raises(ValueError, match="unknown AdamW implementation 'apex'"):
        optimizers.adamw_flags("apex")


# --------------------------------------------------------------------------- parity

from suites.hf_examples import parity  # noqa: E402  (imports torch)


def gradients() -> tuple[dict, dict]:
    """Reference gradients of a made-up model, and each tensor's measured fp32 noise: a
    large tensor, a real but tiny one (1e-4 of the largest), and one that is zero in exact
    arithmetic (all noise, but noise from large cancelling terms)."""
    gen = torch.Generator().manual_seed(0)
    ref = {"big": torch.randn(64, generator=gen),
           "tiny": torch.randn(16, generator=gen) * 1e-4,
           "cancelled": torch.randn(4, generator=gen) * 1e-5}
    noise = {"big": 1e-7, "tiny": 1e-11, "cancelled": 1e-5}
    return ref, noise


def test_gradient_tolerance_is_per_tensor_with_a_measured_noise_floor() -> None:
    ref, noise = gradients()
    gen = torch.Generator().manual_seed(1)
    # Another device: each tensor off by a few times its noise, the all-noise one by
    # entirely different noise.
    got = {n: g + 3 * noise[n] * torch.randn(g.shape, generator=gen) for n, g in ref.items()}
    got["cancelled"] = torch.randn(4, generator=gen) * 1e-5
    assert parity.grad_problems(got, ref, noise) == []

    tiny_zeroed = {**got, "tiny": torch.zeros(16)}
    problems = parity.grad_problems(tiny_zeroed, ref, noise)
    assert [p.split(":")[0] for p in problems] == ["gradient of tiny"]
    # The former tolerance, 1e-3 x the model's largest gradient, let that pass.
    assert float(ref["tiny"].abs().max()) < 1e-3 * float(ref["big"].abs().max())
    # A gradient that is only noise may come back as zeros.
    assert parity.grad_problems({**got, "cancelled": torch.zeros(4)}, ref, noise) == []
    assert parity.grad_problems({"big": got["big"]}, ref, noise)[0].startswith(
        "gradients differ in which parameters get them")


def test_the_model_wide_floor_stands_in_where_the_cpu_happened_to_be_exact() -> None:
    ref, noise = gradients()
    floors = parity.noise_floors({**noise, "big": 0.0}, ref)
    top = float(ref["big"].abs().max())
    assert floors["big"] == parity.NOISE_FLOOR * top
    assert floors["cancelled"] == parity.NOISE_FACTOR * noise["cancelled"]


LR = 1e-3


def trace(updates: dict, grads: dict, *, losses=(1.0, 0.9, 0.8, 0.7), norms=(1.0, 1.0, 1.0),
          exact=None) -> parity.Trace:
    before = {n: torch.zeros_like(u) for n, u in updates.items()}
    steps = len(norms)
    return parity.Trace(list(losses), list(norms), list(exact or norms), before,
                        {n: before[n] + u for n, u in updates.items()}, LR, [grads] * steps)


def test_updates_agree_up_to_drift_and_noise_steps_may_go_either_way() -> None:
    ref_grads, noise = gradients()
    unit = 3 * LR
    ref_updates = {n: -unit * g.sign() for n, g in ref_grads.items()}
    ref = trace(ref_updates, ref_grads)
    drifted = {n: u * (1 - parity.UPDATE_ATOL / 2) for n, u in ref_updates.items()}
    drifted["cancelled"] = -ref_updates["cancelled"]  # noise: the other sign, a whole step
    assert parity.parity_problems(trace(drifted, {}), ref, noise) == []

    skipped = {n: u * 2 / 3 for n, u in ref_updates.items()}  # one step of three lost
    problems = parity.parity_problems(trace(skipped, {}), ref, noise)
    assert [p.split(":")[0] for p in problems] == ["parameter big", "parameter tiny"]

    zeroed = {**drifted, "tiny": torch.zeros(16)}
    problems = parity.parity_problems(trace(zeroed, {}), ref, noise)
    assert [p.split(":")[0] for p in problems] == ["parameter tiny"]

    without_grads = ref._replace(grads=[])
    with pytest.raises(AssertionError, match="must keep its gradients"):
        parity.parity_problems(trace(drifted, {}), without_grads, noise)


def test_losses_and_gradient_norms_per_step() -> None:
    ref_grads, noise = gradients()
    updates = {n: torch.zeros_like(g) for n, g in ref_grads.items()}
    ref = trace(updates, ref_grads)
    flat = trace(updates, {}, losses=(1.0, 1.0, 1.0, 1.0))
    assert parity.parity_problems(flat, ref, noise) == [
        "loss after step 1: 1 vs reference 0.9", "loss after step 2: 1 vs reference 0.8",
        "loss after step 3: 1 vs reference 0.7",
        "loss did not go down in 3 steps: [1.0, 1.0, 1.0, 1.0]"]
    # a clip that left a tensor out: its norm is not the gradients' norm, nor the reference's
    short = trace(updates, {}, norms=(0.9, 1.0, 1.0), exact=(1.0, 1.0, 1.0))
    assert parity.parity_problems(short, ref, noise) == [
        "step 1: gradient norm 0.9, but the gradients' norm is 1",
        "step 1: gradient norm 0.9 vs reference 1"]
    close = trace(updates, {}, norms=(1 + parity.NORM_RTOL / 2, 1.0, 1.0),
                  exact=(1 + parity.NORM_RTOL / 2, 1.0, 1.0))
    assert parity.parity_problems(close, ref, noise) == []


# --------------------------------------------------------------------------- the real cell

SEED_OPS_BY_VARIANT = {
    # variant suffix -> base ops that only that AdamW implementation runs
    "adamw-foreach": {"_foreach_addcdiv", "_foreach_addcmul", "_foreach_div", "_foreach_lerp",
                      "_foreach_sqrt"},
    "adamw-forloop": {"addcdiv", "addcmul", "lerp"},
}


@pytest.mark.slow
def test_cpu_op_capture_cell_captures_every_seed_op(tmp_path: Path,
                                                    outside_envdir: Path) -> None:
    """The workload tests in the real cpu-2.13-op-capture cell (its own env, built by
    nox with uv on first use), then the seed-coverage report over its ops-raw."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s",
         "cpu-2.13-op-capture", "--", "suites/hf_examples/test_workloads.py",
         # Not the parity cases: two full trainings each, on one thread (their ops are
         # the other cases' ops; the checks below must hold without them).
         "-k", "not test_workload_parity"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "ACCELGRID_RESULTS_DIR": str(out)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = seed_coverage.read_records(out / "cpu-2.13-op-capture")
    rows = seed_coverage.coverage(seed_coverage.load_seed(), records)
    assert [r["op"] for r in rows if not r["captured"]] == []
    by_op = {r["base_op"]: r for r in rows}
    assert {"image-pretraining", "instance-segmentation"} <= set(by_op["roll"]["workloads"])
    assert by_op["silu"]["workloads"] == ["translation"]
    # The optimizer dimension comes from test_workload_optimizer alone (the parity cases,
    # which also run the for-loop reference, are not in this run).
    assert not [r for r in records if "::test_workload_parity[" in r["nodeid"]]
    by_op = {r["base_op"]: r for r in seed_coverage.coverage(seed_coverage.load_seed(), records)}
    for suffix, ops in SEED_OPS_BY_VARIANT.items():
        for op in ops:
            assert by_op[op]["workloads"], op
            assert all(w.endswith(suffix) for w in by_op[op]["workloads"]), (op, by_op[op])
    fused = seed_coverage.captured_by_workload(records)["_fused_adamw"]
    assert {"translation", "text-classification-adamw-fused"} <= set(fused)  # the default
    assert by_op["lerp"]["workloads"] == ["multiple-choice-adamw-forloop",
                                          "text-classification-adamw-forloop"]
