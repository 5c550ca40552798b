"""Each xpu repro's registry expectation against accelgrid's per-release prediction.

A repro module names the aten ops each of its cases reaches on XPU (``XPU_CALLS``, read
here without importing torch). Per xpu cell of the matrix with upstream data, a test the
registry expects to fail there must have a case op the prediction gives the entry's kind
of failure ("not currently implemented": ``missing``; "falling back": ``fallback``), and
one it does not name there must have none; no repro case may hit a ``missing`` op where no
entry expects it (it would raise). So a registry entry that calls a bug present where the
release in fact runs a composite (pytorch/pytorch#127931 on 2.4) fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from accelgrid.config.known_issues import load_registry
from accelgrid.config.matrix import load_matrix
from accelgrid.ops import xpu_prediction as xp

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(ROOT / "matrix.yaml")
REGISTRY = load_registry(ROOT / "known_issues.yaml", MATRIX)
UPSTREAM = xp.load_upstream()
CELLS = sorted((c for c in MATRIX.cells if c.device == "xpu" and c.profile == "default"
                and xp.series_of(c.torch) in UPSTREAM["series"]),
               key=lambda c: tuple(map(int, c.torch.split("."))))


def _repro(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(XPU_CALLS, the module's test function names) from its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "XPU_CALLS" for t in node.targets):
            calls = ast.literal_eval(node.value)
    tests = [n.name for n in tree.body
             if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return calls, tests


def _kind(match: str | None) -> str | None:
    if match and "not currently implemented" in match:
        return "missing"
    if match and re.search(r"falling back|fallback", match):
        return "fallback"
    return None


ENTRIES = []
for issue in REGISTRY.issues.values():
    files = {p.split("::")[0] for p, _ in issue.tests}
    for f in sorted(files):
        if (ROOT / f).is_file() and _repro(ROOT / f)[0] and "xpu" in (issue.devices or ()):
            ENTRIES.append((issue.id, f))


def test_the_op_level_repros_declare_their_calls() -> None:
    assert [i for i, _ in ENTRIES] == ["pytorch/pytorch#127931", "pytorch/pytorch#127937",
                                       "pytorch/pytorch#127941", "intel/torch-xpu-ops#1574"]
    assert [xp.series_of(c.torch) for c in CELLS] == ["2.4", "2.5", "2.6", "2.8", "2.11",
                                                      "2.13", "2.14"]


@pytest.mark.parametrize(("issue_id", "path"), ENTRIES)
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.name)
def test_registry_scope_is_the_prediction(issue_id: str, path: str, cell) -> None:
    issue = REGISTRY.get(issue_id)
    kind = _kind(issue.match)
    assert kind, f"{issue_id}: match {issue.match!r} names no op-level failure"
    calls, tests = _repro(ROOT / path)
    series = xp.series_of(cell.torch)
    assert series is not None
    version = cell.pins["torch"]
    named = {p.split("::", 1)[1].split("[")[0] for p, _ in issue.tests if "::" in p} or set(tests)
    for case, ops in sorted(calls.items()):
        predicted = xp.predict_detail(ops, series, routing=False)
        statuses = {op: d["status"] for op, d in predicted.items()}
        for fn in tests:
            nodeid = f"{path}::{fn}[{case}]"
            covered = issue.in_scope(cell) and issue.covers(nodeid, version, "xpu")
            if fn in named:
                bad = kind in statuses.values()
                expects = "expects" if covered else "does not expect"
                assert covered == bad, (
                    f"{nodeid} on {cell.name}: the registry {expects} it to fail ({kind}), "
                    f"the prediction says {statuses}")
            if "missing" in statuses.values():
                assert covered and kind == "missing", (
                    f"{nodeid} on {cell.name}: {statuses} raises, and no entry expects it")


def test_a_wrong_scope_is_caught() -> None:
    # The old entry: #127931 "not currently implemented" on 2.4 and _foreach_mul_.Tensor
    # on 2.5. The prediction has composites running there: nothing missing.
    calls, _ = _repro(ROOT / "suites/repro/test_pytorch_pytorch_127931.py")
    for series in ("2.4", "2.5"):
        for ops in calls.values():
            assert "missing" not in xp.predict(ops, series).values(), (series, ops)
    # ... while the nightly the seed ran (no foreach composites) has them missing.
    assert xp.predict(calls["mul_tensor"][:1], "2.4", without_foreach_composites=True) == {
        "aten::_foreach_mul_.Tensor": "missing"}
