"""tools/extract_xpu_ops.py on a tiny torch-xpu-ops look-alike: release branches in the
real per-release layouts (2.4's src/aten template, 2.6's extra native_functions.yaml, a
branch whose yaml/ was removed), so it runs without the upstream mirror."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "extract_xpu_ops.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

XPU_FUNCTIONS_24 = """\
backend: XPU
cpp_namespace: at
use_out_as_primary: true
device_guard: true
supported:
  - add.Tensor
  - add_.Tensor
  - add.out
  # - resize_as_  # hand-written registration
  - random_
  - random_.from
"""
FALLBACK_24 = """\
static void xpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_WARN("The operator '", op.schema().operator_name(),
      " on the XPU backend is falling back to run on the CPU.");
}
TORCH_LIBRARY_IMPL(aten, XPU, m) {
  static const char* fallback_op_str = getenv("PYTORCH_XPU_FALLBACK_OP");
  m.impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&xpu_fallback>());
}
TORCH_LIBRARY_IMPL(aten, XPU, m) {
  std::vector<std::string> fallback_list = {
    "_cdist_forward",
    "linspace.out",
    // "roll",
    "random_.to",
    "topk.values",
  };
  for (auto& op_name : fallback_list) {
    m.impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&xpu_fallback_impl>());
  }
}
"""
RESIZE = """\
TORCH_LIBRARY_IMPL(aten, XPU, m) {
  m.impl(TORCH_SELECTIVE_NAME("aten::resize_as_"), TORCH_FN(resize_as_));
  m.impl(
      TORCH_SELECTIVE_NAME("aten::_copy_from"),
      TORCH_FN(_copy_from));
}
"""
NATIVE_FUNCTIONS_26 = """\
- func: linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None) -> Tensor
  dispatch:
    CompositeExplicitAutograd: linspace

- func: linspace.out(Scalar start, Scalar end, int steps, *, Tensor(a!) out) -> Tensor(a!)
  dispatch:
    XPU: linspace_out

- func: topk.values(Tensor self, SymInt k, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)
  structured: True
  dispatch:
    XPU: topk_out_xpu

- func: topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)
  structured_delegate: topk.values

- func: _foreach_mul_.Tensor(Tensor(a!)[] self, Tensor other) -> ()
  dispatch:
    XPU , NestedTensorXPU: foreach_tensor_mul_tensor_kernel_xpu_

- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  dispatch:
    SparseXPU: add_sparse
"""  # noqa: E501
FALLBACK_26 = FALLBACK_24.replace('    "linspace.out",\n', "").replace(
    '    "topk.values",\n', "")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2024-06-04T12:00:00+00:00",
           "GIT_COMMITTER_DATE": "2024-06-04T12:00:00+00:00"}
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True, env=env).stdout


def _commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            _git(repo, "rm", "-q", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _git(repo, "add", rel)
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def fake_upstream(tmp_path: Path) -> dict[str, str]:
    repo = tmp_path / "torch-xpu-ops"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = {"2.4": _commit(repo, {"yaml/xpu_functions.yaml": XPU_FUNCTIONS_24,
                                  "src/aten/XPUFallback.template": FALLBACK_24,
                                  "src/aten/Resize.cpp": RESIZE}, "2.4 layout")}
    _git(repo, "branch", "release/2.4")
    _git(repo, "branch", "release/2.3")  # older than the range: ignored
    shas["2.6"] = _commit(repo, {
        "src/aten/XPUFallback.template": None, "src/aten/Resize.cpp": None,
        "src/ATen/native/xpu/XPUFallback.template": FALLBACK_26,
        "src/ATen/native/xpu/Resize.cpp": RESIZE,
        "yaml/native/native_functions.yaml": NATIVE_FUNCTIONS_26}, "2.6 layout")
    _git(repo, "branch", "release/2.6")
    shas["2.14-yaml"] = shas["2.6"]
    _commit(repo, {"yaml/xpu_functions.yaml": None, "yaml/native/native_functions.yaml": None},
            "Remove the obsolete folder yaml/")
    shas["2.14"] = _commit(repo, {
        "src/ATen/native/xpu/XPUFallback.template": None,
        "src/ATen/native/xpu/XPUFallback.cpp": FALLBACK_26.replace('"_cdist_forward",', "")},
        "template to cpp")
    _git(repo, "branch", "release/2.14")
    shas["repo"] = str(repo)
    return shas


def _run(repo: str, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(TOOL), repo, "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_extracts_each_release_layout(fake_upstream: dict[str, str], tmp_path: Path) -> None:
    data = _run(fake_upstream["repo"], tmp_path / "a.json")
    series = data["series"]
    assert list(series) == ["2.4", "2.6", "2.14"]  # version order, 2.3 out of range
    s24, s26, s214 = series["2.4"], series["2.6"], series["2.14"]
    assert s24["branch"] == "release/2.4" and s24["commit"] == fake_upstream["2.4"]
    assert s24["native"] == sorted(["add.Tensor", "add_.Tensor", "add.out", "random_",
                                    "random_.from", "resize_as_", "_copy_from"])
    # Commented-out entries are not on the list; the env-var block adds nothing.
    assert s24["fallback"] == ["_cdist_forward", "linspace.out", "random_.to", "topk.values"]
    assert s24["sources"] == ["yaml/xpu_functions.yaml", "src/aten/Resize.cpp",
                              "src/aten/XPUFallback.template"]
    # 2.6: dense XPU keys (also in a key list), structured delegates; not SparseXPU-only ops.
    assert {"linspace.out", "topk.values", "topk", "_foreach_mul_.Tensor"} <= set(s26["native"])
    # 2.6's xpu_functions.yaml still lists add.Tensor, but CMake no longer reads it: stale.
    assert "add.Tensor" not in s26["native"]
    assert "yaml/xpu_functions.yaml" not in s26["sources"]
    assert "linspace" not in s26["native"]  # CompositeExplicitAutograd, not an XPU kernel
    assert s26["fallback"] == ["_cdist_forward", "random_.to"]
    assert "yaml/native/native_functions.yaml" in s26["sources"]
    # 2.14: no yaml/ at the head; kernels read from the commit before its removal.
    assert s214["commit"] == fake_upstream["2.14"]
    assert s214["native_commit"] == fake_upstream["2.14-yaml"]
    assert s214["native"] == s26["native"]
    assert s214["fallback"] == ["random_.to"]
    assert "src/ATen/native/xpu/XPUFallback.cpp" in s214["sources"]


def test_output_is_deterministic(fake_upstream: dict[str, str], tmp_path: Path) -> None:
    a = _run(fake_upstream["repo"], tmp_path / "a.json")
    b = tmp_path / "b.json"
    _run(fake_upstream["repo"], b)
    assert (tmp_path / "a.json").read_bytes() == b.read_bytes()
    assert a["series"]["2.4"]["native"] == sorted(a["series"]["2.4"]["native"])


def test_plain_clone_reads_origin_branches(fake_upstream: dict[str, str], tmp_path: Path
                                           ) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", fake_upstream["repo"], str(clone)], check=True)
    data = _run(str(clone), tmp_path / "c.json")
    assert list(data["series"]) == ["2.4", "2.6", "2.14"]
    assert data["series"]["2.6"]["branch"] == "release/2.6"


def test_nightly_snapshots_from_main(fake_upstream: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "n.json"
    proc = subprocess.run([sys.executable, str(TOOL), fake_upstream["repo"], "--out", str(out),
                           "--nightly", "2024-06-04", "--nightly",
                           f"2024-06-03@{fake_upstream['2.4'][:9]}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())["nightlies"]
    assert list(data) == ["2024-06-03", "2024-06-04"]
    # The date alone: main's last commit on or before it; with a commit: that commit.
    assert data["2024-06-04"]["commit"] == fake_upstream["2.14"]
    assert data["2024-06-04"]["native_commit"] == fake_upstream["2.14-yaml"]
    assert data["2024-06-03"]["commit"] == fake_upstream["2.4"]
    assert data["2024-06-03"]["fallback"] == ["_cdist_forward", "linspace.out", "random_.to",
                                              "topk.values"]
    assert {e["branch"] for e in data.values()} == {"main"}
    proc = subprocess.run([sys.executable, str(TOOL), fake_upstream["repo"], "--out",
                           str(tmp_path / "x.json"), "--nightly", "2020-01-01"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "main has no commit on or before 2020-01-01" in proc.stderr
