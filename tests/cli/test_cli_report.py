"""The report commands (accelgrid.cli.report): ``grid``, ``baseline update|show|list`` and
``ops build|grid|predict``: output, files, help and exit codes (0 ok, 1 nothing found or refused,
2 invalid input, 3 regression); and :func:`accelgrid.report.grid`, which ``nox -s grid``
calls."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.report_cases import CUDA_CAPTURE, artifacts, baseline_case, ops_cell, write_cell

from accelgrid import report
from accelgrid.base.errors import EXIT_INVALID, EXIT_REGRESSION, AccelgridError, Regression
from accelgrid.cli import main
from accelgrid.ops import xpu_prediction

# --- grid ------------------------------------------------------------------------------

def test_grid_of_an_artifacts_download(tmp_path: Path, capsys) -> None:
    art, _ = artifacts(tmp_path)
    assert main(["grid", str(art), str(tmp_path / "grid.html"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr()
    assert "cuda-2.11: 1 failed (partial: env.json missing)" in out.out
    assert "not a results folder; ignored" in out.err
    assert main(["grid", str(tmp_path / "grid.html"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"accelgrid grid: no results folders found in {tmp_path / 'grid.html'}\n" in err


def test_cli_gates_on_regressions(tmp_path: Path, monkeypatch, capsys) -> None:
    folders, base = baseline_case(tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    args = ["grid", *map(str, folders), "--out", str(out), "--baseline", str(base)]
    assert main(args) == EXIT_REGRESSION == 3
    assert "REGRESSION cuda-2.11: suites/offload/test_offload_correctness.py::test_matches" \
           "[bf16]: passed -> failed" in capsys.readouterr().out
    assert "Regressions (1)" in summary.read_text()
    # Accept the new state: the gate opens.
    assert main(["baseline", "update", str(tmp_path / "r"), "--dir", str(base),
                 "--cell", "cuda-2.11"]) == 0
    assert main(args) == 0
    assert "vs baselines: " in capsys.readouterr().out
    assert main(["grid", *map(str, folders), "--out", str(out)]) == 0  # no baseline, no gate


def test_cli_grid_writes_files_and_step_summary(tmp_path: Path, monkeypatch) -> None:
    cell = write_cell(tmp_path, "cpu-2.13", {"suites/smoke/t.py::a": "passed"})
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["grid", str(cell), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "grid.json").read_text())["schema"] == 2
    assert "cpu-2.13" in summary.read_text()


def test_report_grid_is_what_nox_calls(tmp_path: Path) -> None:
    folders, base = baseline_case(tmp_path)
    summary = tmp_path / "summary.md"
    made = report.grid(folders, tmp_path / "out", baseline_dir=base, step_summary=summary)
    assert made.paths["md"].read_text() == summary.read_text()
    assert set(made.paths) == {"json", "md", "html", "junit"} and all(
        p.is_file() for p in made.paths.values())
    lines = made.lines()
    assert "xpu-2.13: errored: no tests.jsonl: the cell did not run or its results were lost" \
        in lines
    assert lines[-2].startswith("REGRESSION cuda-2.11: ") and len(made.regressions) == 1
    assert lines[-1] == ("LOST TEST cuda-2.11: suites/smoke/test_device_api.py::test_gone: "
                         "passed -> no record")
    with pytest.raises(Regression, match="1 regression.*; 1 lost test"):
        made.check()
    plain = report.grid(folders, tmp_path / "out2")
    plain.check()  # no baseline, no gate
    assert not any(line.startswith("vs baselines") for line in plain.lines())
    (tmp_path / "grid.html").write_text("<html>")
    empty = report.grid([tmp_path / "grid.html"], tmp_path / "out3")
    with pytest.raises(AccelgridError, match="no results folders found") as exc:
        empty.check()
    assert exc.value.return_code == 1


# --- baseline --------------------------------------------------------------------------

def test_baseline_update_and_show(tmp_path: Path, capsys) -> None:
    cell = write_cell(tmp_path / "r", "xpu-2.5", {"suites/s/t.py::a": "passed",
                                                  "suites/s/t.py::b": "xfailed"})
    base = tmp_path / "b"
    assert main(["baseline", "update", str(cell), "--dir", str(base)]) == 0
    assert f"xpu-2.5: wrote {base / 'xpu-2.5.json'} (2 tests: 1 passed, 1 xfailed; new)" in \
        capsys.readouterr().out
    doc = json.loads((base / "xpu-2.5.json").read_text())
    assert doc["tests"] == {"suites/s/t.py::a": "passed", "suites/s/t.py::b": "xfailed"}
    assert doc["cell"] == "xpu-2.5" and doc["source"]["torch"] == "2.13.0+cpu"
    assert main(["baseline", "show", "xpu-2.5", "--dir", str(base)]) == 0
    out = capsys.readouterr().out
    assert "xpu-2.5: 2 tests" in out and "1 passed, 1 xfailed" in out
    assert "xfailed  suites/s/t.py::b" in out and "suites/s/t.py::a" not in out
    assert "from torch 2.13.0+cpu on Box (host h)" in out
    assert main(["baseline", "show", "xpu-2.55", "--dir", str(base)]) == EXIT_INVALID == 2
    err = capsys.readouterr().err
    assert "did you mean 'xpu-2.5'" in err and "Traceback" not in err
    assert main(["baseline", "show", "xpu-2.5", "--dir", str(base), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc["tests"]
    # A partial run (-k) may keep what it did not run.
    (base / "xpu-2.5.json").write_text(json.dumps({"suites/s/t.py::old": "failed"}))
    assert main(["baseline", "update", str(cell), "--dir", str(base), "--keep-missing"]) == 0
    assert "3 tests: 1 failed, 1 passed, 1 xfailed; 2 changed, 0 dropped" in \
        capsys.readouterr().out
    assert set(json.loads((base / "xpu-2.5.json").read_text())["tests"]) == {
        "suites/s/t.py::a", "suites/s/t.py::b", "suites/s/t.py::old"}
    # Unfinished results are refused unless asked for.
    killed = write_cell(tmp_path / "k", "xpu-2.6", {"suites/s/t.py::a": "passed"},
                        finished=False)
    assert main(["baseline", "update", str(killed), "--dir", str(base)]) == 1
    err = capsys.readouterr().err
    assert "never finished" in err and "accelgrid baseline: not updated: xpu-2.6" in err
    assert not (base / "xpu-2.6.json").exists()
    assert main(["baseline", "update", str(killed), "--dir", str(base),
                 "--allow-partial"]) == 0
    # With --matrix choosing the folder beside the matrix (before or after the command).
    (tmp_path / "m").mkdir()
    shutil.copytree(base, tmp_path / "m" / "baselines")
    capsys.readouterr()
    assert main(["--matrix", str(tmp_path / "m" / "matrix.yaml"), "baseline", "show",
                 "xpu-2.6"]) == 0
    assert "xpu-2.6: 1 tests" in capsys.readouterr().out
    assert main(["baseline", "show", "xpu-2.6", "--matrix",
                 str(tmp_path / "m" / "matrix.yaml")]) == 0
    assert "xpu-2.6: 1 tests" in capsys.readouterr().out
    assert main(["baseline", "list", "--matrix", str(tmp_path / "m" / "matrix.yaml")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "xpu-2.5: 3 tests, 1 expected bad", "xpu-2.6: 1 tests, 0 expected bad"]


def test_baseline_exit_codes(tmp_path: Path, capsys) -> None:
    cell = write_cell(tmp_path / "r", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    base = tmp_path / "b"
    # Nothing to update from: bad input, 2.
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.txt").write_text("")
    assert main(["baseline", "update", str(tmp_path / "nothing" / "notes.txt"),
                 "--dir", str(base)]) == 2
    assert "no results folders found" in capsys.readouterr().err
    # A cell that has no results: 1.
    assert main(["baseline", "update", str(cell), "--dir", str(base), "--cell", "cpu-2.4"]) == 1
    assert "no results for cpu-2.4" in capsys.readouterr().err
    assert not base.exists()
    # A folder that does not exist: bad input, 2, nothing written.
    assert main(["baseline", "update", str(tmp_path / "gone"), "--dir", str(base)]) == 2
    assert "gone: no such file or folder" in capsys.readouterr().err
    assert not base.exists()
    # Show: no baselines at all, then an unreadable one: 2.
    assert main(["baseline", "show", "cpu-2.13", "--dir", str(base)]) == 2
    assert f"no baseline for cpu-2.13 in {base}/" in capsys.readouterr().err
    base.mkdir()
    (base / "cpu-2.13.json").write_text("{oops")
    assert main(["baseline", "show", "cpu-2.13", "--dir", str(base)]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["baseline", "list", "--dir", str(base)]) == 0
    assert "cpu-2.13: unreadable (" in capsys.readouterr().out
    assert main(["baseline", "list", "--dir", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out == ""
    # Replacing the unreadable baseline says so.
    assert main(["baseline", "update", str(cell), "--dir", str(base)]) == 0
    assert "replacing unreadable baseline" in capsys.readouterr().err


# --- ops -------------------------------------------------------------------------------

def test_ops_build_and_grid(tmp_path: Path, capsys) -> None:
    old = ops_cell(tmp_path / "r", "xpu-2.5", "2.5.1+xpu",
                   {"aten::roll.default": "fallback", "aten::addmm.default": "native"})
    new = ops_cell(tmp_path / "r", "xpu-2.13", "2.13.0+xpu",
                   {"aten::roll.default": "native", "aten::addmm.default": "native"})
    assert main(["ops", "build", str(old)]) == 0
    assert capsys.readouterr().out == "xpu-2.5: 1 fallback, 1 native\n"
    assert {p.name for p in old.iterdir()} >= {"ops.json", "ops.md", "ops.html"}
    out = tmp_path / "out"
    assert main(["ops", "grid", str(new), str(old), str(tmp_path / "none"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "none: no captured ops" in printed
    assert f"wrote {out / 'ops-grid.md'}, {out / 'ops-grid.html'}, {out / 'ops-grid.json'}" \
        in printed
    # Synthetic xpu cells: each is compared with the prediction for its release (2.5 has
    # roll kernels: the made-up fallback disagrees).
    assert ("xpu-2.5 observed vs predicted from torch-xpu-ops release/2.5: 1 agree, "
            "1 disagree, 0 not compared") in printed
    view = json.loads((out / "ops-grid.json").read_text())
    assert view["cells"] == ["xpu-2.5", "xpu-2.13"]
    assert view["stopped_falling_back"] == {"aten::roll.default": {"xpu": "2.13.0+xpu"}}
    assert view["disagreements"] == [{"cell": "xpu-2.5", "op": "aten::roll.default",
                                      "observed": "fallback", "predicted": "native"}]
    assert ("| `aten::roll.default` | fallback | native ≠ | native | native | "
            "xpu: torch 2.13.0+xpu |") in (out / "ops-grid.md").read_text()
    assert (new / "ops.json").is_file()  # grid builds each cell's pages too


def test_ops_predict_on_the_h200_capture(tmp_path: Path, capsys) -> None:
    capture = tmp_path / "cuda" / "ops-cuda-2.11.json"
    capture.parent.mkdir()
    shutil.copy(CUDA_CAPTURE, capture)
    matrix = str(Path(__file__).resolve().parents[2] / "matrix.yaml")
    # Default: the matrix's xpu series; files beside the input.
    assert main(["--matrix", matrix, "ops", "predict", str(capture)]) == 0
    out = capsys.readouterr().out.splitlines()
    doc = json.loads((capture.parent / "ops-predicted.json").read_text())
    # What the lines say is derived from the capture and the upstream facts, not pasted
    # from a run: one line per xpu series of the matrix, each op predicted once.
    captured = json.loads(CUDA_CAPTURE.read_text())["ops"]
    assert out[0] == (f"captured: {capture}: cuda-2.11-op-capture (cuda, torch 2.11.0+cu130), "
                      f"{len(captured)} ops")
    series = ["2.4", "2.5", "2.6", "2.8", "2.11", "2.13", "2.14"]   # matrix.yaml's xpu cells
    # cuDNN/MIOpen kernels are CUDA's own: those the capture called, by name.
    cuda_only = sum(1 for op in captured if re.match(r"aten::_?(cudnn|miopen)_", op))
    for s, line in zip(series, out[1:8], strict=True):
        head, _, tail = line.partition(": ")
        assert head == f"xpu {s} (release/{s})"
        counts = {status: int(n) for n, status in
                  re.findall(r"(\d+) ([a-z-]+(?:: [a-z]+| -> [a-z]+)?)", tail)}
        assert list(counts) == ["native", "decomposed", "fallback", "fallback -> error",
                                "missing", "routed: cpu", "routed: cuda", "unknown"]
        assert sum(counts.values()) == len(captured)
        # A CUDA capture routes nothing to the CPU's own kernels; its cuDNN calls are routed.
        assert counts["routed: cpu"] == 0 and counts["routed: cuda"] >= cuda_only
        assert counts == doc["counts"][s]
    # torch-xpu-ops release/2.4 still had roll and linspace.out on its fallback list
    # (pytorch/pytorch#127941) and no XPU kernels for many ops that 2.5 added: 2.4 predicts
    # more ops off the device than every later series.
    bad = {s: doc["counts"][s]["fallback"] + doc["counts"][s]["missing"] for s in series}
    assert all(bad["2.4"] > bad[s] for s in series[1:])
    rows = [r for r in doc["seed"]["rows"] if r["agree"] is not None]
    agree = sum(1 for r in rows if r["agree"])
    assert out[8] == (f"Agreement with the seed's table: {agree} of {len(rows)} rows "
                      f"({round(100 * agree / len(rows))} %) (series 2.4)")
    assert out[9:] == [
        f"wrote {capture.parent / 'ops-predicted.json'}, {capture.parent / 'ops-predicted.md'}, "
        f"{capture.parent / 'ops-predicted.html'}"]
    # The seed's rows for ops fixed upstream after it: their base ops are in the capture.
    by_op = {r["op"]: r for r in doc["seed"]["rows"]}
    assert by_op["aten::linspace.out"]["predicted"] == "fallback"   # on release/2.4's list
    assert doc["series"] == series
    assert doc["ops"]["aten::linspace.default"]["predicted"]["2.5"] == "fallback"
    assert "aten::_foreach_mul_.Tensor" not in doc["stopped_falling_back"]  # composite
    assert doc["seed"] is not None  # the matrix has xpu 2.4, the seed's series
    # Chosen series, another folder, JSON on stdout.
    assert main(["ops", "predict", str(capture), "--series", "2.6", "--series", "2.5",
                 "--out", str(tmp_path / "o"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["series"] == ["2.5", "2.6"]
    assert printed == json.loads((tmp_path / "o" / "ops-predicted.json").read_text())
    # Every series in the data: 2.4 brings the seed's table.
    assert main(["ops", "predict", str(capture), "--all-series", "--out",
                 str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    every = json.loads((tmp_path / "all" / "ops-predicted.json").read_text())
    assert every["series"] == xpu_prediction.series_names(xpu_prediction.load_upstream())
    for s in every["series"]:
        assert sum(every["counts"][s].values()) == len(captured)
        assert f"xpu {s} (release/{s}): {every['counts'][s]['native']} native, " in out
    assert f"Agreement with the seed's table: {agree} of {len(rows)} rows" in out


def test_ops_predict_from_a_results_folder_and_merged(tmp_path: Path, capsys) -> None:
    a = ops_cell(tmp_path / "r", "cpu-2.13-op-capture", "2.13.0+cpu",
                 {"aten::linspace.default": "decomposed", "aten::addmm.default": "native"},
                 device_type="cpu")
    b = tmp_path / "ops.json"
    shutil.copy(CUDA_CAPTURE, b)
    assert main(["ops", "predict", str(a), "--series", "2.5"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "xpu 2.5 (release/2.5): 1 native, 0 decomposed, 1 fallback, 0 fallback -> error, "
        "0 missing, "
        "0 routed: cpu, 0 routed: cuda, 0 unknown")
    assert (a / "ops-predicted.md").is_file()  # in the cell's folder
    assert main(["ops", "predict", str(a), str(b), "--series", "2.5", "--out",
                 str(tmp_path / "both")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"captured: {a}, {b}: cpu-2.13-op-capture + cuda-2.11-op-capture "
                     "(cpu, cuda, torch 2.11.0+cu130, 2.13.0+cpu), 178 ops")


@pytest.mark.parametrize(("argv", "message"), [
    (["ops", "predict", "nope.json", "--series", "2.5"], "nope.json: no such file or folder"),
    (["ops", "predict", "README.md", "--series", "2.5"], "README.md: not an ops.json"),
    (["ops", "predict", "docs/cuda/ops-cuda-2.11.json", "--series", "2.3"],
     "no torch-xpu-ops data for series 2.3; have 2.4, 2.5,"),
])
def test_ops_predict_refuses_bad_input_with_exit_2(argv, message, capsys, monkeypatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(argv) == EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("accelgrid ops: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_ops_predict_on_a_folder_without_ops(tmp_path: Path, capsys) -> None:
    empty = write_cell(tmp_path, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    assert main(["ops", "predict", str(empty), "--series", "2.5"]) == EXIT_INVALID
    assert "no captured ops (no ops-raw/*.jsonl nor ops.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # one or the other
        main(["ops", "predict", str(empty), "--series", "2.5", "--all-series"])
    assert exc.value.code == 2


def test_ops_exit_codes(tmp_path: Path, capsys) -> None:
    empty = write_cell(tmp_path, "cpu-2.13", {"suites/s/t.py::a": "passed"})
    assert main(["ops", "build", str(empty)]) == 1
    captured = capsys.readouterr()
    assert "no captured ops (run with ACCELGRID_CAPTURE_OPS=1" in captured.out
    assert captured.err.startswith("accelgrid ops: no captured ops in ")
    assert main(["ops", "grid", str(empty), "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


# --- help ------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "words"), [
    (["--help"], ["grid", "baseline", "ops"]),
    (["grid", "--help"], ["--out", "--baseline"]),
    (["baseline", "--help"], ["update", "show", "list", "exits 3"]),
    (["baseline", "update", "--help"],
     ["--dir", "--cell", "--add-new", "--keep-missing", "--allow-partial", "--matrix"]),
    (["baseline", "show", "--help"], ["--json", "--dir"]),
    (["baseline", "list", "--help"], ["--dir"]),
    (["ops", "--help"], ["build", "grid", "predict", "ACCELGRID_CAPTURE_OPS"]),
    (["ops", "build", "--help"], ["results"]),
    (["ops", "grid", "--help"], ["--out"]),
    (["ops", "predict", "--help"], ["RESULTS_OR_OPS_JSON", "--series", "--all-series",
                                    "--out", "--json", "runtime routing"]),
])
def test_help(argv: list[str], words: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(" ".join(["usage: accelgrid", *argv[:-1]]))
    for word in words:
        assert word in out


def test_help_through_the_entry_point() -> None:
    for argv in (["baseline", "--help"], ["baseline", "update", "--help"],
                 ["ops", "build", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "accelgrid", *argv], capture_output=True,
                              text=True)
        assert proc.returncode == 0 and proc.stdout.startswith("usage: accelgrid "), proc.stderr


@pytest.mark.parametrize("argv", [["baseline"], ["baseline", "prune"], ["ops"],
                                  ["ops", "build"], ["ops", "predict"], ["baseline", "show"]])
def test_usage_errors_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: accelgrid" in capsys.readouterr().err
