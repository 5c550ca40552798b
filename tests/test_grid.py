"""Grids across cells (grid.json/.md/.html), baselines and regressions, and the HTML in a
real headless browser (Debian's chromium; skipped with the reason when it is absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from accelgrid import baseline, grid, results
from accelgrid.bench import grid as bench_grid
from accelgrid.cli import main

ROOT = Path(__file__).resolve().parents[1]
ISSUE = {"id": "pytorch/pytorch#127929", "title": "fp64 unsupported on ATS-M",
         "url": "https://github.com/pytorch/pytorch/issues/127929"}


def _write_cell(folder: Path, name: str, outcomes: dict[str, str], torch: str = "2.13.0+cpu",
                device_name: str = "Box", extra: dict[str, dict] | None = None,
                finished: bool = True, **env: object) -> Path:
    cell = folder / name
    cell.mkdir(parents=True)
    results.write_json(cell / results.ENV, {
        "cell": name, "device_type": name.split("-")[0], "start": "s",
        "end": "e" if finished else None, "status": "finished" if finished else "running",
        "torch": {"version": torch, "devices": [{"name": device_name}], "device_count": 1},
        "host": {"name": "h"}, **env})
    # One write, not append_record's fsync per test: some tests write thousands.
    lines = [json.dumps({"nodeid": nodeid, "outcome": outcome, "message": f"why {outcome}",
                         "cell": name, **(extra or {}).get(nodeid, {})}) + "\n"
             for nodeid, outcome in outcomes.items()]
    if lines:
        (cell / results.TESTS).write_text("".join(lines))
    return cell


def _demo(folder: Path) -> list[Path]:
    """A small realistic matrix: three devices, several torch versions and a profile, a
    known issue, a failure with a traceback, and an errored cell."""
    smoke = "suites/smoke/test_device_api.py::"
    hf = "suites/hf_examples/test_workloads.py::test_workload"
    off = "suites/offload/test_offload_correctness.py::test_matches"
    common = {smoke + "test_device_available": "passed", smoke + "test_memory_stats": "passed",
              f"{hf}[text-classification]": "passed", f"{hf}[image-classification]": "passed",
              f"{off}[fp32]": "passed", f"{off}[bf16]": "passed"}
    cells = [
        _write_cell(folder, "cpu-2.13", {**common, smoke + "test_memory_stats": "skipped"},
                    device_name="x86_64"),
        _write_cell(folder, "cpu-2.6", common, torch="2.6.0+cpu", device_name="x86_64"),
        _write_cell(folder, "cuda-2.11", {**common, f"{off}[bf16]": "failed"},
                    torch="2.11.0+cu128", device_name="NVIDIA H200",
                    extra={f"{off}[bf16]": {"message": "AssertionError: bf16 mismatch 0.3",
                                            "longrepr": "Traceback ...\nAssertionError"}}),
        _write_cell(folder, "xpu-2.5", {**common, f"{hf}[speech-recognition]": "xfailed"},
                    torch="2.5.1+xpu", device_name="Intel(R) Data Center GPU Max 1100",
                    extra={f"{hf}[speech-recognition]": {"issue": ISSUE}}),
        _write_cell(folder, "xpu-2.5-fp64-emulation", {**common, f"{off}[fp32]": "crashed"},
                    torch="2.5.1+xpu", device_name="Intel(R) Arc(TM) A770"),
    ]
    broken = folder / "xpu-2.13"
    broken.mkdir()
    results.write_json(broken / results.ENV, {"cell": "xpu-2.13", "device_type": "xpu"})
    return [*cells, broken]


# --- model ------------------------------------------------------------------------------

def test_grid_rows_columns_counts(tmp_path: Path) -> None:
    a = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed",
                                           "suites/smoke/t.py::b": "failed"})
    b = _write_cell(tmp_path, "cpu-2.4", {"suites/smoke/t.py::a": "passed",
                                          "suites/offload/t.py::c": "skipped"}, torch="2.4.1")
    model = grid.build([a, b])
    assert [c["name"] for c in model["columns"]] == ["cpu-2.4", "cpu-2.13"]  # version order
    assert [r["nodeid"] for r in model["rows"]] == [
        "suites/offload/t.py::c", "suites/smoke/t.py::a", "suites/smoke/t.py::b"]
    assert model["columns"][1]["counts"]["failed"] == 1
    md = grid.render_markdown(model)
    assert "| cpu-2.13 | 2.13.0+cpu | Box | 1 | 1 |" in md
    page = grid.render_html(model)
    assert len(re.findall(r'<td class="d0 failed"', page)) == 1 and "why failed" in page


def test_rows_grouped_by_suite_and_workload() -> None:
    assert grid.split_nodeid("suites/hf/t.py::test_workload[text-classification]") == (
        "suites/hf/t.py", "test_workload", "text-classification")
    assert grid.split_nodeid("suites/s/t.py::TestX::test_y") == ("suites/s/t.py", "test_y", None)
    # An id may itself hold "::" or brackets; only the first "[" starts it.
    assert grid.split_nodeid("t.py::test_a[x::y[1]]") == ("t.py", "test_a", "x::y[1]")


def test_columns_grouped_by_device_torch_profile_with_provenance(tmp_path: Path) -> None:
    model = grid.build(_demo(tmp_path))
    assert [c["name"] for c in model["columns"]] == [
        "cpu-2.6", "cpu-2.13", "cuda-2.11", "xpu-2.5", "xpu-2.5-fp64-emulation", "xpu-2.13"]
    col = {c["name"]: c for c in model["columns"]}
    assert col["xpu-2.5-fp64-emulation"]["profile"] == "fp64-emulation"
    assert col["cuda-2.11"]["device_name"] == "NVIDIA H200"
    rows = {r["nodeid"]: r for r in model["rows"]}
    hf = rows["suites/hf_examples/test_workloads.py::test_workload[speech-recognition]"]
    assert (hf["suite"], hf["workload"], hf["test"]) == (
        "hf_examples", "speech-recognition", "test_workload")
    # Suites, then workloads within them.
    keys = [(r["suite"], r["workload"]) for r in model["rows"]]
    assert keys == sorted(keys) and keys[0][0] == "hf_examples"
    page = grid.render_html(model)
    for text in ("2.11.0+cu128", "NVIDIA H200", "Intel(R) Arc(TM) A770", "torch 2.5"):
        assert text in page
    assert 'colspan="2">torch 2.5</th>' in page  # xpu-2.5 and its fp64 profile


def test_broken_cells_show_as_errored(tmp_path: Path) -> None:
    good = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    empty = tmp_path / "cpu-2.6"
    empty.mkdir()
    corrupt = _write_cell(tmp_path, "cpu-2.8", {"suites/smoke/t.py::a": "passed"})
    with open(corrupt / results.TESTS, "a") as fh:
        fh.write('{"nodeid": "suites/smoke/t.py::b", "outc')  # killed mid-write
    (corrupt / results.ENV).write_text("{not json")
    killed = _write_cell(tmp_path, "cpu-2.9", {"suites/smoke/t.py::a": "passed",
                                               "suites/smoke/t.py::c": "sideways"},
                         finished=False)
    model = grid.build([good, empty, corrupt, killed, tmp_path / "cpu-2.7"])
    cols = {c["name"]: c for c in model["columns"]}
    assert cols["cpu-2.6"]["error"].startswith("no tests.jsonl")
    assert cols["cpu-2.6"]["status"] == "errored"
    assert "does not exist" in cols["cpu-2.7"]["error"]
    assert cols["cpu-2.8"]["error"] is None and cols["cpu-2.8"]["counts"]["passed"] == 1
    assert cols["cpu-2.8"]["status"] == "partial"
    assert any("unreadable line" in p for p in cols["cpu-2.8"]["problems"])
    assert "never finished" in cols["cpu-2.9"]["reason"]
    assert cols["cpu-2.9"]["counts"]["error"] == 1  # the unknown outcome, with its reason
    assert "unknown outcome 'sideways'" in cols["cpu-2.9"]["reason"]
    assert cols["cpu-2.13"]["counts"]["passed"] == 1 and cols["cpu-2.13"]["status"] == "ok"
    md = grid.render_markdown(model)
    assert "| cpu-2.6 | ? | cpu | errored: no tests.jsonl" in md
    assert "**cpu-2.9** partial" in md
    page = grid.render_html(model)
    assert "errored: no tests.jsonl" in page and "st-partial" in page


def test_discovers_cells_in_an_artifacts_download(tmp_path: Path, capsys) -> None:
    art = tmp_path / "artifacts"
    _write_cell(art / "results-cpu-2.13" / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    # An artifact uploaded from inside the cell folder: files at its root, no env.json;
    # the cell's name then comes from the records.
    flat = _write_cell(tmp_path, "cuda-2.11", {"suites/s/t.py::a": "failed"})
    (flat / results.ENV).unlink()
    shutil.copytree(flat, art / "results-cuda-2.11")
    (flat / results.RUNNING).mkdir()
    results.write_json(flat / results.RUNNING / "gw0.json", {"nodeid": "x"})
    (art / ".hidden" / "cpu-2.4").mkdir(parents=True)
    (art / ".hidden" / "cpu-2.4" / results.TESTS).write_text("")
    (tmp_path / "grid.html").write_text("<html>")
    folders, notes = grid.discover([art, tmp_path / "grid.html", art / "results-cuda-2.11"])
    assert sorted(p.name for p in folders) == ["cpu-2.13", "results-cuda-2.11"]
    assert notes == [f"{tmp_path / 'grid.html'}: a file, not a results folder; ignored"]
    model = grid.build([art, flat / results.TESTS])  # a cell's file stands for its folder
    names = [c["name"] for c in model["columns"]]
    assert names == ["cpu-2.13", "cuda-2.11", "cuda-2.11#2"]  # the same cell twice, told apart
    assert main(["grid", str(art), str(tmp_path / "grid.html"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr()
    assert "cuda-2.11: 1 failed (partial: env.json missing)" in out.out
    assert "not a results folder; ignored" in out.err
    assert main(["grid", str(tmp_path / "grid.html"), "--out", str(tmp_path / "o")]) == 1
    assert "no results folders found" in capsys.readouterr().err


def test_issue_links_and_messages_are_rendered_safely(tmp_path: Path) -> None:
    evil = "</script><script>alert(1)</script> & <b>"
    cell = _write_cell(tmp_path, "xpu-2.5", {
        "suites/s/t.py::a": "xfailed", "suites/s/t.py::b": "failed", "suites/s/t.py::c": "xfailed",
        "suites/s/t.py::d": "xfailed"}, extra={
        "suites/s/t.py::a": {"issue": ISSUE},
        "suites/s/t.py::b": {"message": evil, "longrepr": evil * 3},
        "suites/s/t.py::c": {"issue": {"id": "x", "url": "javascript:alert(1)"}},
        "suites/s/t.py::d": {"issue": "intel/torch-xpu-ops#1234"}})
    model = grid.build([cell])
    rows = {r["nodeid"]: r["cells"]["xpu-2.5"] for r in model["rows"]}
    assert rows["suites/s/t.py::d"]["issue"]["url"] == (
        "https://github.com/intel/torch-xpu-ops/issues/1234")
    assert rows["suites/s/t.py::c"]["issue"]["url"] == ""
    page = grid.render_html(model)
    assert f'href="{ISSUE["url"]}"' in page and ">#127929</a>" in page
    assert 'href="javascript:' not in page
    assert "<script>alert(1)" not in page  # escaped in attributes and inside the JSON
    data = re.search(r'<script type="application/json" id="details">(.*?)</script>', page, re.S)
    details = json.loads(data[1])
    assert evil in [d.get("message") for d in details.values()]
    md = grid.render_markdown(model)
    assert f"[pytorch/pytorch#127929]({ISSUE['url']})" in md
    assert "<script>" not in md


def test_html_is_self_contained(tmp_path: Path) -> None:
    page = grid.render_html(grid.build(_demo(tmp_path)))
    assert "<link" not in page and not re.search(r"<(script|img|iframe)[^>]* src=", page)
    assert not re.search(r"url\(|@import", page)
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs == [ISSUE["url"]]  # the only link is the known issue's


def test_json_schema_is_documented(tmp_path: Path) -> None:
    folders, base = _baseline_case(tmp_path)
    model = grid.build(folders, baseline_dir=base)
    data = json.loads(grid.render_json(model))
    assert data["schema"] == grid.SCHEMA_VERSION == 2
    assert all("longrepr" not in c for r in data["rows"] for c in r["cells"].values())
    failed = [c for r in model["rows"] for c in r["cells"].values() if c.get("longrepr")]
    assert failed, "the model keeps tracebacks for the HTML"
    doc = (ROOT / "docs" / "grid-schema.md").read_text()
    assert f"Current schema: **{grid.SCHEMA_VERSION}**" in doc
    # Every key grid.json has is documented: top level, columns, rows, cells, baseline.
    keys = {*data, *data["baseline"], *data["baseline"]["changes"][0]}
    keys |= {k for c in data["columns"] for k in c} | {k for r in data["rows"] for k in r}
    keys |= {k for c in data["columns"] if c["baseline"] for k in c["baseline"]}
    keys |= {k for r in data["rows"] for c in r["cells"].values() for k in c}
    keys |= {k for r in data["rows"] for c in r["cells"].values() for k in c.get("issue", {})}
    assert "lost" in keys and "issue" in keys and "change" in keys
    missing = sorted(k for k in keys if f"`{k}`" not in doc)
    assert not missing


def test_markdown_stays_under_summary_budget(tmp_path: Path) -> None:
    cells = [_write_cell(tmp_path, f"cpu-2.{i}", {f"suites/s/t.py::test_{n}": "passed"
                                                  for n in range(400)}) for i in range(20)]
    failing = _write_cell(tmp_path, "cuda-2.11", {f"suites/s/t.py::test_{n}": "failed"
                                                  for n in range(60)})
    model = grid.build([*cells, failing])
    assert len(grid.render_markdown(model).encode()) > 16 * 1024  # would not fit otherwise
    md = grid.render_markdown(model, limit=16 * 1024)
    assert len(md.encode()) <= 16 * 1024
    # First it drops the rows where every cell is fine, keeping the failure.
    assert "rows with a bad result or a change only" in md and "| test_7 |" in md
    assert "| test_300 |" not in md
    tiny = grid.render_markdown(model, limit=6 * 1024)
    assert len(tiny.encode()) <= 6 * 1024 and "truncated" in tiny
    assert tiny.count("<details") == tiny.count("</details>")


def test_synthetic_grid_is_complete(tmp_path: Path) -> None:
    folders = bench_grid.synthesize(tmp_path / "a", cells=6, tests=300)
    model = grid.build([tmp_path / "a"])
    assert len(model["columns"]) == 6 and len(model["rows"]) == 300
    errored = [c["name"] for c in model["columns"] if c["error"]]
    assert errored == [folders[-1].name]
    for col in model["columns"]:
        if col["error"]:
            continue
        recs = [json.loads(line) for line in (Path(col["path"]) / results.TESTS).open()]
        assert col["total"] == 300
        assert col["counts"]["failed"] == sum(r["outcome"] == "failed" for r in recs)
    page = grid.render_html(model)
    assert page.count('<tr class="t"') == 300


# --- baselines -------------------------------------------------------------------------

@pytest.mark.parametrize(("expected", "actual", "change"), [
    ("passed", "failed", baseline.REGRESSION), ("xfailed", "xpassed", baseline.REGRESSION),
    ("skipped", "crashed", baseline.REGRESSION), ("passed", "timeout", baseline.REGRESSION),
    ("failed", "passed", baseline.NEW_PASS), ("xfailed", "passed", baseline.NEW_PASS),
    ("failed", "error", baseline.EXPECTED_FAILURE), ("passed", "passed", baseline.UNCHANGED),
    ("passed", "skipped", baseline.CHANGED), ("passed", None, baseline.LOST),
    (None, "failed", baseline.NEW), (None, None, None),
])
def test_classify(expected: str | None, actual: str | None, change: str | None) -> None:
    assert baseline.classify(expected, actual) == change


def _baseline_case(tmp_path: Path) -> tuple[list[Path], Path]:
    folders = _demo(tmp_path / "r")
    base = tmp_path / "baselines"
    assert baseline.main(["update", str(tmp_path / "r"), "--dir", str(base)]) == 1  # xpu-2.13
    doc = json.loads((base / "cuda-2.11.json").read_text())
    off = "suites/offload/test_offload_correctness.py::test_matches"
    doc["tests"][f"{off}[fp32]"] = "failed"  # now passes: a new pass
    doc["tests"][f"{off}[bf16]"] = "passed"  # now fails: a regression
    doc["tests"]["suites/smoke/test_device_api.py::test_gone"] = "passed"  # lost
    del doc["tests"]["suites/smoke/test_device_api.py::test_memory_stats"]  # new
    (base / "cuda-2.11.json").write_text(json.dumps(doc))
    return folders, base


def test_grid_against_baselines(tmp_path: Path) -> None:
    folders, base = _baseline_case(tmp_path)
    model = grid.build(folders, baseline_dir=base)
    b = model["baseline"]
    assert b["regressions"] == 1
    assert {k: v for k, v in b["counts"].items() if v and k != "unchanged"} == {
        "regression": 1, "new-pass": 1, "lost": 1, "new": 1, "expected-failure": 1}
    assert [(c["cell"], c["change"]) for c in b["changes"][:2]] == [
        ("cuda-2.11", "regression"), ("cuda-2.11", "new-pass")]
    assert "xpu-2.13" not in b["cells"]  # no baseline was written for the errored cell
    rows = {r["nodeid"]: r for r in model["rows"]}
    assert rows["suites/smoke/test_device_api.py::test_gone"]["lost"] == {"cuda-2.11": "passed"}
    reg = rows["suites/offload/test_offload_correctness.py::test_matches[bf16]"]["cells"]
    assert reg["cuda-2.11"]["change"] == "regression" and reg["cuda-2.11"]["expected"] == "passed"
    assert "change" not in reg["cpu-2.13"]
    md = grid.render_markdown(model)
    assert "### ❌ Regressions (1)" in md and "**REGRESSION**" in md
    assert "1 regression, 1 new pass" in md
    page = grid.render_html(model)
    assert page.count('class="d1 failed ch-regression"') == 1 and 'class="d1 lost"' in page
    data = json.loads(grid.render_json(model))
    assert data["baseline"]["changes"][0]["nodeid"].endswith("[bf16]")


def test_cli_gates_on_regressions(tmp_path: Path, monkeypatch, capsys) -> None:
    folders, base = _baseline_case(tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    args = ["grid", *map(str, folders), "--out", str(out), "--baseline", str(base)]
    assert main(args) == baseline.EXIT_REGRESSION
    assert "REGRESSION cuda-2.11: suites/offload/test_offload_correctness.py::test_matches" \
           "[bf16]: passed -> failed" in capsys.readouterr().out
    assert "Regressions (1)" in summary.read_text()
    # Accept the new state: the gate opens.
    assert main(["baseline", "update", str(tmp_path / "r"), "--dir", str(base),
                 "--cell", "cuda-2.11"]) == 0
    assert main(args) == 0
    assert main(["grid", *map(str, folders), "--out", str(out)]) == 0  # no baseline, no gate


def test_cli_grid_writes_files_and_step_summary(tmp_path: Path, monkeypatch) -> None:
    cell = _write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["grid", str(cell), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "grid.json").read_text())["schema"] == 2
    assert "cpu-2.13" in summary.read_text()


def test_baseline_update_and_show(tmp_path: Path, capsys) -> None:
    cell = _write_cell(tmp_path / "r", "xpu-2.5", {"suites/s/t.py::a": "passed",
                                                   "suites/s/t.py::b": "xfailed"})
    base = tmp_path / "b"
    assert baseline.main(["update", str(cell), "--dir", str(base)]) == 0
    doc = json.loads((base / "xpu-2.5.json").read_text())
    assert doc["tests"] == {"suites/s/t.py::a": "passed", "suites/s/t.py::b": "xfailed"}
    assert doc["cell"] == "xpu-2.5" and doc["source"]["torch"] == "2.13.0+cpu"
    capsys.readouterr()
    assert baseline.main(["show", "xpu-2.5", "--dir", str(base)]) == 0
    out = capsys.readouterr().out
    assert "xpu-2.5: 2 tests" in out and "1 passed, 1 xfailed" in out
    assert "xfailed  suites/s/t.py::b" in out and "suites/s/t.py::a" not in out
    assert baseline.main(["show", "xpu-2.55", "--dir", str(base)]) == baseline.EXIT_USAGE
    assert "did you mean 'xpu-2.5'" in capsys.readouterr().err
    # A partial run (-k) may keep what it did not run.
    (base / "xpu-2.5.json").write_text(json.dumps({"suites/s/t.py::old": "failed"}))
    assert baseline.read(base / "xpu-2.5.json") == {"suites/s/t.py::old": "failed"}
    assert baseline.main(["update", str(cell), "--dir", str(base), "--keep-missing"]) == 0
    assert set(baseline.read(base / "xpu-2.5.json")) == {
        "suites/s/t.py::a", "suites/s/t.py::b", "suites/s/t.py::old"}
    # Unfinished results are refused unless asked for.
    killed = _write_cell(tmp_path / "k", "xpu-2.6", {"suites/s/t.py::a": "passed"},
                         finished=False)
    assert baseline.main(["update", str(killed), "--dir", str(base)]) == 1
    assert "never finished" in capsys.readouterr().err
    assert not (base / "xpu-2.6.json").exists()
    assert baseline.main(["update", str(killed), "--dir", str(base), "--allow-partial"]) == 0
    # Through the accelgrid CLI, with --matrix choosing the folder beside the matrix.
    (tmp_path / "m").mkdir()
    shutil.copytree(base, tmp_path / "m" / "baselines")
    assert main(["--matrix", str(tmp_path / "m" / "matrix.yaml"), "baseline", "show",
                 "xpu-2.6"]) == 0
    assert "xpu-2.6: 1 tests" in capsys.readouterr().out


def test_malformed_baseline_is_a_note_not_a_crash(tmp_path: Path) -> None:
    cell = _write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::a": "failed"})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cpu-2.13.json").write_text('{"suites/s/t.py::a": 3}')
    model = grid.build([cell], baseline_dir=tmp_path / "b")
    assert model["baseline"]["regressions"] == 0 and model["columns"][0]["baseline"] is None
    assert any("baseline ignored" in n and "cpu-2.13.json" in n for n in model["notes"])


# --- in a real browser -----------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium "
                             "chromium-driver); the HTML grid is not tested in a browser")


def _chromium_flags(profile: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}"]


def _page(tmp_path: Path) -> tuple[Path, dict]:
    folders, base = _baseline_case(tmp_path)
    model = grid.build(folders, baseline_dir=base)
    paths = grid.write(model, tmp_path / "out")
    return paths["html"], model


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@needs_chromium
def test_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    page, model = _page(tmp_path)
    flags = _chromium_flags(tmp_path / "profile")
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    n = len(model["rows"])
    assert 'data-ready="1"' in dom  # the script ran to the end
    assert f'<span id="shown">{n} of {n} tests shown</span>' in dom
    assert dom.count('<tr class="t"') == n and "NVIDIA H200" in dom
    artifacts = os.environ.get("ACCELGRID_ARTIFACTS")
    shot = (Path(artifacts) if artifacts else tmp_path) / "grid-screenshot.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1400,900",
                    "--hide-scrollbars", page.as_uri()], capture_output=True, timeout=120,
                   check=True)
    assert _png_size(shot) == (1400, 900) and shot.stat().st_size > 20_000


@needs_chromium
def test_html_filters_in_browser(tmp_path: Path) -> None:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    if CHROMEDRIVER is None:
        pytest.skip("chromedriver not installed (apt-get install -y chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    page, model = _page(tmp_path)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*_chromium_flags(tmp_path / "profile"), "--window-size=1400,900"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(page.as_uri())
        n = len(model["rows"])

        def shown() -> str:
            return driver.find_element(By.ID, "shown").text

        def row(nodeid: str):
            return driver.find_element(By.CSS_SELECTOR, f'td.test[title="{nodeid}"]')

        assert shown() == f"{n} of {n} tests shown"
        all_pass = "suites/smoke/test_device_api.py::test_device_available"
        failing = "suites/offload/test_offload_correctness.py::test_matches[bf16]"
        assert row(all_pass).is_displayed() and row(failing).is_displayed()

        # Unchecking "passed" hides the rows where every result passed.
        driver.find_element(By.CSS_SELECTOR, '.f-outcome[value="P"]').click()
        assert not row(all_pass).is_displayed() and row(failing).is_displayed()
        left = sum(1 for r in model["rows"] if r.get("lost") or any(
            c["outcome"] != "passed" for c in r["cells"].values()))
        assert shown() == f"{left} of {n} tests shown" and left < n
        driver.find_element(By.CSS_SELECTOR, '.f-outcome[value="P"]').click()
        assert row(all_pass).is_displayed()

        # Unchecking a device hides its columns (headers and results), others stay.
        cuda_head = driver.find_element(By.CSS_SELECTOR, 'th.col[data-j="2"]')
        cpu_head = driver.find_element(By.CSS_SELECTOR, 'th.col[data-j="0"]')
        assert "cuda-2.11" in cuda_head.text and cuda_head.is_displayed()
        cuda = next(e for e in driver.find_elements(By.CSS_SELECTOR, ".f-device")
                    if e.find_element(By.XPATH, "..").text.strip() == "cuda")
        cuda.click()
        assert not cuda_head.is_displayed() and cpu_head.is_displayed()
        failed_td = driver.find_element(By.CSS_SELECTOR, "td.failed")
        assert not failed_td.is_displayed()
        # ... and rows whose only change was on that device go with "changed vs baseline".
        driver.find_element(By.ID, "only-changes").click()
        assert shown() == f"0 of {n} tests shown"
        cuda.click()
        changed = sum(1 for r in model["rows"] if r.get("lost") or any(
            c.get("change") not in (None, "expected-failure") for c in r["cells"].values()))
        assert shown() == f"{changed} of {n} tests shown" and changed == 4
        driver.find_element(By.ID, "only-changes").click()

        # Suite filter hides that suite's header and rows.
        driver.find_element(By.CSS_SELECTOR, '.f-suite[value="offload"]').click()
        assert not row(failing).is_displayed() and row(all_pass).is_displayed()
        driver.find_element(By.CSS_SELECTOR, '.f-suite[value="offload"]').click()

        # A failure opens its message, traceback and the cell's provenance.
        driver.find_element(By.CSS_SELECTOR, "td.failed").click()
        panel = driver.find_element(By.ID, "panel")
        assert panel.is_displayed()
        assert "AssertionError: bf16 mismatch 0.3" in panel.text
        assert "2.11.0+cu128" in panel.text and "NVIDIA H200" in panel.text
        # The known issue is a link to the upstream issue.
        link = driver.find_element(By.CSS_SELECTOR, "td.xfailed a")
        assert link.get_attribute("href") == ISSUE["url"] and link.text == "#127929"
    finally:
        driver.quit()


def test_grid_shows_the_device_a_pinned_worker_ran_on(tmp_path: Path) -> None:
    cell = tmp_path / "cuda-2.11"
    cell.mkdir()
    results.write_json(cell / results.ENV, {"cell": "cuda-2.11", "device_type": "cuda",
                                            "torch": {"version": "2.11.0"}})
    for n, dev in enumerate(("cuda:0", "cuda:1")):
        results.append_record(cell / results.TESTS, {"nodeid": f"suites/s/t.py::t{n}",
                                                     "outcome": "passed", "device": dev})
    page = grid.render_html(grid.build([cell]))
    assert 'title="[cuda:0]"' in page and 'title="[cuda:1]"' in page
    assert {r["cells"]["cuda-2.11"]["device"] for r in grid.build([cell])["rows"]} == {
        "cuda:0", "cuda:1"}
