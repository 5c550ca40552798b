"""tools/extract_core_registrations.py: the TORCH_LIBRARY_IMPL(aten, XPU, m) parser on C++
written here in the upstream forms (plain and TORCH_SELECTIVE_NAME names, commented-out
blocks, other namespaces), a rebuild run as a command with its checks, and the packaged
per-series data as the rule reads it, on real names per release."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelgrid.ops import xpu_prediction as xp
from tools import extract_core_registrations as ecr

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "extract_core_registrations.py"

SRC = """\
namespace at::native::xpu {
// TORCH_LIBRARY_IMPL(aten, XPU, m) { m.impl("addmm", TORCH_FN(addmm)); }
/* TORCH_LIBRARY_IMPL(aten, XPU, m) {
  m.impl("bmm", TORCH_FN(bmm));
} */
TORCH_LIBRARY_IMPL(aten, XPU, m) {
  m.impl("tensordot.out", TORCH_FN(tensordot_out));
  m.impl(
      "convolution_backward_overrideable",
      TORCH_FN(convolution_backward_overrideable));
  if (true) { m.impl(TORCH_SELECTIVE_NAME("aten::_copy_from"), TORCH_FN(copy_from)); }
}
TORCH_LIBRARY_IMPL(mkldnn, XPU, m) {
  m.impl(TORCH_SELECTIVE_NAME("mkldnn::_convolution_pointwise"), TORCH_FN(pw));
}
TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("mm", TORCH_FN(mm_cpu)); }
}
"""


def test_registrations_reads_live_blocks_only():
    regs = ecr.registrations(SRC)
    assert regs == {"aten": ["_copy_from", "convolution_backward_overrideable",
                             "tensordot.out"],
                    "mkldnn": ["_convolution_pointwise"]}


def _torch(series_ops: dict[str, dict[str, str]]) -> dict:
    order = sorted(series_ops, key=lambda s: tuple(map(int, s.split("."))))
    out: dict[str, Any] = {"series": {order[0]: {"ops": series_ops[order[0]]}}}
    for s in order[1:]:
        out["series"][s] = {"set": series_ops[s], "drop": []}
    return out


def _spec(not_before: str | None) -> dict:
    return {"about": "test", "sources": [
        {"repo": "pytorch/pytorch", "path": "x/Blas.cpp", "commit": "a" * 40,
         "not_before": not_before, "dated_by": "test"}],
        "evidence": [{"ops": ["mm.out"], "series": ["2.4"], "why": "seed"}]}


def _run(tmp_path: Path, spec: dict, torch: dict, *extra: str):
    (tmp_path / "files" / ("a" * 40) / "x").mkdir(parents=True)
    (tmp_path / "files" / ("a" * 40) / "x" / "Blas.cpp").write_text(SRC)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "torch.json").write_text(json.dumps(torch))
    return subprocess.run([sys.executable, str(TOOL), str(tmp_path / "files"),
                           "--spec", str(tmp_path / "spec.json"),
                           "--torch", str(tmp_path / "torch.json"),
                           "--out", str(tmp_path / "out.json"), *extra],
                          capture_output=True, text=True, timeout=60)


OPS = {"tensordot.out": "I", "convolution_backward_overrideable": "E", "_copy_from": "E",
       "mm.out": "B"}


def test_rebuild_places_each_source_and_says_so(tmp_path):
    r = _run(tmp_path, _spec("2.5"), _torch({"2.4": OPS, "2.5": {}}))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    s24, s25 = doc["series"]["2.4"], doc["series"]["2.5"]
    assert s24["ops"]["mm.out"] == "evidence" and "mm.out" not in s25["ops"]
    assert s24["ops"]["tensordot.out"].startswith("pytorch/pytorch@aaaaaaaaaaaa:x/Blas.cpp")
    assert any("carried back (placed not before 2.5)" in b for b in s24["basis"])
    assert any("snapshot (placed not before 2.5)" in b for b in s25["basis"])
    assert doc["sources"][0]["other"] == {"mkldnn": ["_convolution_pointwise"]}
    assert all(not e["per_release"] for e in doc["series"].values())
    # --check: the same sources give the same file; a changed one differs (exit 1).
    assert _run_check(tmp_path).returncode == 0
    (tmp_path / "out.json").write_text("{}\n")
    assert _run_check(tmp_path).returncode == 1


def _run_check(tmp_path: Path):
    return subprocess.run([sys.executable, str(TOOL), str(tmp_path / "files"),
                           "--spec", str(tmp_path / "spec.json"),
                           "--torch", str(tmp_path / "torch.json"),
                           "--out", str(tmp_path / "out.json"), "--check"],
                          capture_output=True, text=True, timeout=60)


def test_rebuild_refuses_an_op_the_release_does_not_have(tmp_path):
    ops = dict(OPS)
    del ops["_copy_from"]
    r = _run(tmp_path, _spec(None), _torch({"2.4": ops}))
    assert r.returncode != 0 and "_copy_from" in r.stderr and "2.4" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


def test_rebuild_refuses_a_missing_source_file(tmp_path):
    spec = _spec(None)
    spec["sources"][0]["commit"] = "b" * 40
    r = _run(tmp_path, spec, _torch({"2.4": OPS}))
    assert r.returncode != 0 and "missing" in r.stderr


# --- the packaged data, as the rule's step (2) reads it, on real names per release ------

@pytest.mark.parametrize("series,op,status,rule", [
    # 2.4/2.5: oneDNN matmul by m.impl, before the yaml had XPU keys; evidence-based.
    ("2.4", "aten::mm.out", "native", "PyTorch core XPU registration"),
    ("2.5", "aten::addmv.out", "native", "PyTorch core XPU registration"),
    # From 2.6 the same kernels are XPU keys of that release's yaml.
    ("2.6", "aten::mm.out", "native", "PyTorch XPU key"),
    # Convolution through the overrideable op, every series (an undated snapshot).
    ("2.4", "aten::convolution_overrideable", "native", "PyTorch core XPU registration"),
    ("2.13", "aten::convolution_backward_overrideable", "native",
     "PyTorch core XPU registration"),
    ("2.12", "aten::tensordot.out", "native", "PyTorch core XPU registration"),
])
def test_core_registrations_per_release(series, op, status, rule):
    d = xp.predict_detail([op], series, routing=False)[op]
    assert d["status"] == status and d["rule"].startswith(rule)
    if rule.startswith("PyTorch core"):
        assert "not this release's own files" in d["rule"]


def test_core_data_covers_every_xpu_series_and_names_its_basis():
    core, torch_data = xp.load_core(), xp.load_torch()
    assert set(core["series"]) == set(torch_data["series"])
    for s, e in core["series"].items():
        assert e["per_release"] is False and e["basis"], s
        for op, src in e["ops"].items():
            assert src == "evidence" or any(src == x["id"] for x in core["sources"]), op
    # Matmul by m.impl only before the yaml took it over (2.6).
    assert "mm.out" in core["series"]["2.5"]["ops"]
    assert "mm.out" not in core["series"]["2.6"]["ops"]
    for src in core["sources"]:
        assert len(src["commit"]) == 40 and src["repo"] == "pytorch/pytorch"


def test_core_for_a_series_without_data_takes_the_nearest_earlier_and_says_so():
    core = xp.load_core()
    ops, note = xp.core_for(core, "2.16")
    assert ops == core["series"]["2.15"]["ops"]
    assert note.startswith("no core registration data for torch 2.16: torch 2.15's")
    assert xp.core_for(core, "2.3") == ({}, "no core registration data for torch 2.3")


def test_ops_predicted_says_what_stands_for_each_release():
    view = xp.predicted_view({"ops": {"aten::mm.out": "native"}}, ["2.4", "2.13"])
    for s in ("2.4", "2.13"):
        line = view["releases"][s]["core_registrations"]
        assert line.startswith("not this release's own files: ") and "Conv.cpp" in line
    assert "evidence" in view["releases"]["2.4"]["core_registrations"]
    assert "evidence" not in view["releases"]["2.13"]["core_registrations"]
