"""Issue 16, results the grid reads (in CI: artifacts of other jobs): each damaged cell
becomes an errored or partial column with the reason, every other cell's grid is still
written, nothing raises, and grid.json is RFC 8259 JSON (no NaN, no Infinity).

Classes: env.json fields of the wrong type, records whose nodeid/outcome/fields have the
wrong type, files that are folders, FIFOs, devices or symlink loops, nesting, huge lines,
invalid UTF-8, NaN/Infinity, numbers Python refuses; summary.json, collected.json,
junit.xml (which the grid never needs); baselines given to --baseline; ops-raw."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid import cli, results
from accelgrid.base import contract, errors, jsonio
from accelgrid.report import compare

GOOD = {"suites/smoke/t.py::a": "passed", "suites/smoke/t.py::b": "failed"}
NAME = "xpu-2.5"


def _strict_json(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not RFC 8259 JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def _env(folder: Path, **fields) -> None:
    env = json.loads((folder / contract.ENV_FILE).read_text())
    env.update(fields)
    (folder / contract.ENV_FILE).write_text(json.dumps(env))


def _records(cell: Path, *lines: str | bytes) -> None:
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    (cell / contract.TESTS_FILE).write_bytes(data)


def _replace(cell: Path, name: str, how: str) -> None:
    path = cell / name
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "folder":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "loop":
        path.symlink_to(name)
    elif how == "zero":
        path.symlink_to("/dev/zero")
    elif how == "dangling":
        path.symlink_to("nowhere")


REC = '{"nodeid": "suites/smoke/t.py::a", "outcome": "passed"}'
DEEP = "[" * 100_000 + "]" * 100_000

def _no_env_and_a_record_of_a_bad_cell(cell: Path) -> None:
    (cell / contract.ENV_FILE).unlink()
    _records(cell, '{"nodeid": "x::y", "outcome": "passed", "cell": "../../x"}')


def _a_running_file_of_garbage(cell: Path) -> None:
    (cell / "running").mkdir()
    (cell / "running" / "gw0.json").write_text("[[[")


def _an_unreadable_baseline(path: Path) -> None:
    path.write_text('{"tests": {"suites/smoke/t.py::a": "passed"}}')
    path.chmod(0)


# (id, damage, expected status, text the column's reason must hold); what a damage
# returns (write_text's count) is ignored.
Damage = Callable[[Path], object]
CASES: list[tuple[str, Damage, str, str]] = [
    # env.json: fields of the wrong type
    ("env-host-string", lambda c: _env(c, host="box"), "partial", "env.json: host is a string"),
    ("env-host-list", lambda c: _env(c, host=["a"]), "partial", "env.json: host is a list"),
    ("env-python-string", lambda c: _env(c, python="3.11"), "partial", "python is a string"),
    ("env-python-number", lambda c: _env(c, python=3.11), "partial", "python is a number"),
    ("env-project-list", lambda c: _env(c, project=[1]), "partial", "project is a list"),
    ("env-project-commit-dict", lambda c: _env(c, project={"commit": {}}), "partial",
     "project.commit is a mapping"),
    ("env-host-name-list", lambda c: _env(c, host={"name": ["x"]}), "partial",
     "host.name is a list"),
    ("env-cell-list", lambda c: _env(c, cell=["x"]), "partial", "env.json: cell is a list"),
    ("env-cell-number", lambda c: _env(c, cell=5), "partial", "env.json: cell is a number"),
    ("env-cell-path", lambda c: _env(c, cell="../../etc/passwd"), "partial",
     "cell '../../etc/passwd' is not a cell name"),
    ("env-cell-5000", lambda c: _env(c, cell="c" * 5000), "partial", "is not a cell name"),
    ("env-torch-string", lambda c: _env(c, torch="2.5"), "partial", "torch is a string"),
    ("env-torch-devices-number", lambda c: _env(c, torch={"devices": 3}), "partial",
     "torch.devices is a number"),
    ("env-torch-devices-strings", lambda c: _env(c, torch={"devices": ["gpu", 3]}), "ok", ""),
    ("env-torch-version-list", lambda c: _env(c, torch={"version": [2, 5]}), "partial",
     "torch.version is a list"),
    ("env-torch-count-string", lambda c: _env(c, torch={"device_count": "2"}), "partial",
     "torch.device_count is a string"),
    ("env-torch-error-dict", lambda c: _env(c, torch={"error": {}}), "partial",
     "torch.error is a mapping"),
    ("env-flags-list", lambda c: _env(c, env=["A=1"]), "partial", "env.json: env is a list"),
    ("env-flags-values", lambda c: _env(c, env={"A": {"b": 1}, "B": "1"}), "partial",
     "env has values that are not text"),
    ("env-packages-string", lambda c: _env(c, packages="torch"), "partial",
     "packages is a string"),
    ("env-start-number", lambda c: _env(c, start=5, status=["x"]), "partial",
     "env.json: start is a number"),
    # the fields cellresults.ReadEnv types that readers take as they are (selection: the
    # grid's column; run_id: JUnit's and the history's run)
    ("env-selection-string", lambda c: _env(c, selection="t.py"), "partial",
     "env.json: selection is a string"),
    ("env-run-id-number", lambda c: _env(c, run_id=7), "partial", "env.json: run_id is a number"),
    ("env-exitstatus-bool", lambda c: _env(c, exitstatus=True), "partial",
     "env.json: exitstatus is a boolean"),
    ("env-passes-mapping", lambda c: _env(c, passes={"name": "single"}), "partial",
     "env.json: passes is a mapping"),
    ("env-is-list", lambda c: (c / contract.ENV_FILE).write_text("[1, 2]"), "partial",
     "env.json holds a list, not a mapping"),
    ("env-is-string", lambda c: (c / contract.ENV_FILE).write_text('"x"'), "partial",
     "env.json holds a string"),
    ("env-folder", lambda c: _replace(c, contract.ENV_FILE, "folder"), "partial",
     "env.json is a folder, not a file"),
    ("env-fifo", lambda c: _replace(c, contract.ENV_FILE, "fifo"), "partial",
     "env.json not a regular file"),
    ("env-zero", lambda c: _replace(c, contract.ENV_FILE, "zero"), "partial",
     "env.json is a symlink out of"),  # issue 27: not followed out of the folder
    ("env-loop", lambda c: _replace(c, contract.ENV_FILE, "loop"), "partial",
     "env.json unreadable: Too many levels of symbolic links"),
    ("env-deep", lambda c: (c / contract.ENV_FILE).write_text(DEEP), "partial",
     "env.json unreadable: nested too deeply"),
    ("env-latin1",
     lambda c: (c / contract.ENV_FILE).write_bytes('{"cell": "caf\xe9"}'.encode("latin-1")),
     "partial", "env.json unreadable: not UTF-8"),
    ("env-nan", lambda c: (c / contract.ENV_FILE).write_text('{"cell": "xpu-2.5", "start": NaN, '
                                                       '"torch": {"device_count": Infinity}}'),
     "partial", "env.json: start is a number"),
    ("env-5000-digits", lambda c: (c / contract.ENV_FILE).write_text('{"x": ' + "9" * 5000 + "}"),
     "partial", "env.json unreadable: not JSON this reader accepts"),
    ("env-truncated", lambda c: (c / contract.ENV_FILE).write_text('{"cell": "xp'), "partial",
     "env.json unreadable: not JSON"),
    ("env-secret-left", lambda c: _env(c, env={"TORCH_HUB_AUTH": "s3cret",
                                               "ACCELGRID_TORCH_INDEX": "https://u:pw@h/whl"}),
     "ok", ""),
    # tests.jsonl: records of the wrong shape
    ("rec-outcome-list", lambda c: _records(c, REC, '{"nodeid": "x::y", "outcome": ["passed"]}'),
     "partial", "outcome of x::y is a list, not a word; record skipped"),
    ("rec-outcome-dict", lambda c: _records(c, REC, '{"nodeid": "x::y", "outcome": {}}'),
     "partial", "outcome of x::y is a mapping"),
    ("rec-outcome-null", lambda c: _records(c, REC, '{"nodeid": "x::y", "outcome": null}'),
     "partial", "outcome of x::y is a null"),
    ("rec-nodeid-list", lambda c: _records(c, REC, '{"nodeid": ["x"], "outcome": "passed"}'),
     "partial", "nodeid is a list, not a test id; record skipped"),
    ("rec-nodeid-dict", lambda c: _records(c, REC, '{"nodeid": {"a": 1}, "outcome": "passed"}'),
     "partial", "nodeid is a mapping"),
    ("rec-nodeid-number", lambda c: _records(c, REC, '{"nodeid": 7, "outcome": "passed"}'),
     "partial", "nodeid is a number"),
    ("rec-nodeid-empty", lambda c: _records(c, REC, '{"nodeid": " ", "outcome": "passed"}'),
     "partial", "nodeid is empty"),
    ("rec-nodeid-huge", lambda c: _records(c, REC, json.dumps({"nodeid": "n" * 70000,
                                                               "outcome": "passed"})),
     "partial", "nodeid is too long"),
    ("rec-duration-nan", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "passed", '
                                               '"duration": NaN}'),
     "partial", "duration 'nan' of x::y is not a number of seconds; dropped"),
    ("rec-duration-inf", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "passed", '
                                               '"duration": -Infinity}'),
     "partial", "duration '-inf' of x::y"),
    ("rec-duration-string", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "passed", '
                                                  '"duration": "1s"}'),
     "partial", "duration '1s' of x::y"),
    ("rec-duration-negative", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "passed", '
                                                    '"duration": -3}'),
     "partial", "duration '-3' of x::y"),
    ("rec-message-dict", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "failed", '
                                               '"message": {"a": 1}}'),
     "partial", "message of x::y is a mapping; dropped"),
    ("rec-longrepr-list", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "failed", '
                                                '"longrepr": ["a"]}'),
     "partial", "longrepr of x::y is a list; dropped"),
    ("rec-issue-number", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "xfailed", '
                                               '"issue": 5}'),
     "partial", "issue of x::y is a number; dropped"),
    ("rec-worker-list", lambda c: _records(c, '{"nodeid": "x::y", "outcome": "passed", '
                                              '"worker": ["gw0"]}'),
     "partial", "worker of x::y is a list"),
    ("rec-array-line", lambda c: _records(c, REC, "[1, 2]"), "partial",
     "not a record with nodeid, outcome"),
    ("rec-deep-line", lambda c: _records(c, REC, DEEP), "partial",
     "tests.jsonl:2: unreadable line (nested too deeply)"),
    ("rec-5000-digits", lambda c: _records(c, REC, '{"nodeid": "x", "outcome": "passed", "n": '
                                                   + "9" * 5000 + "}"),
     "partial", "unreadable line (not JSON this reader accepts"),
    ("rec-huge-line", lambda c: _records(c, REC, json.dumps({
        "nodeid": "x::big", "outcome": "failed", "longrepr": "L" * (jsonio.MAX_LINE_BYTES + 5)}),
        REC.replace("::a", "::c")),
     # Issue 27: a failure of any size stays a failure (its outcome kept, text not read).
     "partial", f"tests.jsonl:2: record longer than {jsonio.MAX_LINE_BYTES} bytes; its "
     "outcome kept"),
    ("rec-invalid-utf8", lambda c: _records(c, b'{"nodeid": "x::y", "outcome": "failed", '
                                               b'"message": "caf\xe9"}'),
     "partial", "tests.jsonl:1: invalid UTF-8 replaced"),
    ("rec-binary", lambda c: _records(c, REC, bytes(range(256))), "partial",
     "tests.jsonl:2: unreadable line"),
    ("rec-truncated", lambda c: _records(c, REC, '{"nodeid": "x::y", "outc'), "partial",
     "tests.jsonl:2: unreadable line (not JSON"),
    ("rec-cell-path", _no_env_and_a_record_of_a_bad_cell, "partial", "env.json missing"),
    ("rec-all-broken", lambda c: _records(c, '{"nodeid": 1, "outcome": 2}', "[]"), "errored",
     "tests.jsonl holds no test records"),
    ("rec-many-broken", lambda c: _records(c, REC, *(["[]"] * 500)), "partial",
     "tests.jsonl: 480 more problems"),
    # tests.jsonl: not a regular file
    ("tests-folder", lambda c: _replace(c, contract.TESTS_FILE, "folder"), "errored",
     "tests.jsonl is a folder, not a file"),
    ("tests-fifo", lambda c: _replace(c, contract.TESTS_FILE, "fifo"), "errored",
     "tests.jsonl not a regular file"),
    ("tests-zero", lambda c: _replace(c, contract.TESTS_FILE, "zero"), "errored",
     "tests.jsonl is a symlink out of"),
    ("tests-loop", lambda c: _replace(c, contract.TESTS_FILE, "loop"), "errored",
     "tests.jsonl unreadable: Too many levels of symbolic links"),
    ("tests-dangling", lambda c: _replace(c, contract.TESTS_FILE, "dangling"), "errored",
     "tests.jsonl missing"),
    # files the grid does not need: damaged, they change nothing
    ("summary-folder", lambda c: _replace(c, contract.SUMMARY_FILE, "folder"), "ok", ""),
    ("summary-nan", lambda c: (c / contract.SUMMARY_FILE).write_text('{"total": NaN}'), "ok", ""),
    ("collected-garbage", lambda c: (c / contract.COLLECTED_FILE).write_bytes(b"\xff\x00"),
     "ok", ""),
    ("collected-loop", lambda c: _replace(c, contract.COLLECTED_FILE, "loop"), "ok", ""),
    ("junit-garbage", lambda c: (c / contract.JUNIT_FILE).write_text("<testsuite"), "ok", ""),
    ("junit-folder", lambda c: _replace(c, contract.JUNIT_FILE, "folder"), "ok", ""),
    ("running-garbage", _a_running_file_of_garbage, "ok", ""),
]
IDS = [c[0] for c in CASES]


def _grid(tmp_path: Path, damage: Damage, baseline: Path | None = None):
    art = tmp_path / "artifacts"
    good = write_cell(art, "cpu-2.13", GOOD)
    bad = write_cell(art, NAME, GOOD)
    damage(bad)
    out = tmp_path / "grid"
    args = ["grid", str(good), str(bad), "--out", str(out)]
    if baseline is not None:
        args += ["--baseline", str(baseline)]
    code = cli.main(args)
    model = _strict_json((out / "grid.json").read_text())
    cols = {c["path"]: c for c in model["columns"]}
    assert (out / "grid.md").is_file() and (out / "grid.html").is_file()
    return code, model, cols[str(good)], cols[str(bad)]


@pytest.mark.parametrize("case", IDS)
def test_a_damaged_cell_is_shown_with_the_reason_and_the_rest_is_written(tmp_path, case):
    _, damage, status, reason = CASES[IDS.index(case)]
    code, model, good, bad = _grid(tmp_path, damage)
    assert code == 0
    assert good["status"] == "ok" and good["counts"]["passed"] == 1 and good["total"] == 2
    assert bad["status"] == status, bad["reason"]
    if reason:
        assert reason in (bad["reason"] or ""), bad["reason"]
    if status == "errored":
        assert bad["error"] and bad["total"] == 0
    text = json.dumps(model)
    for secret in ("s3cret", "u:pw@"):
        assert secret not in text


def test_grid_json_is_strict_json_with_nan_and_infinity_durations(tmp_path) -> None:
    # Durations written by an older version (or by hand) as NaN/Infinity, and a Python
    # float NaN put in the model after reading: grid.json stays RFC 8259.
    from accelgrid import report

    art = tmp_path / "a"
    cell = write_cell(art, "cpu-2.13", {"t.py::a": "passed"},
                      extra={"t.py::a": {"duration": float("nan")}})
    text = (cell / contract.TESTS_FILE).read_text()
    assert "NaN" in text  # json.dumps writes it; RFC 8259 has no such thing
    model = report.build_model([cell])
    model["rows"][0]["cells"]["cpu-2.13"]["duration"] = float("inf")
    # A NaN planted where grid.json has an int: the writer must still write RFC 8259.
    model["columns"][0]["device_count"] = float("nan")  # type: ignore[typeddict-item]
    paths = report.write(model, tmp_path / "out")
    grid = _strict_json(paths["json"].read_text())
    assert grid["rows"][0]["cells"]["cpu-2.13"]["duration"] is None
    assert "NaN" not in paths["html"].read_text().split("<script")[1]


def test_every_json_writer_refuses_nan(tmp_path) -> None:
    jsonio.write_json(tmp_path / "a.json", {"x": float("nan"), "y": [float("inf")]})
    assert _strict_json((tmp_path / "a.json").read_text()) == {"x": None, "y": [None]}
    results.append_record(tmp_path / "t.jsonl", {"nodeid": "a", "duration": float("-inf")})
    assert _strict_json((tmp_path / "t.jsonl").read_text()) == {"nodeid": "a", "duration": None}
    compare.write(tmp_path / "b.json", {"tests": {}, "x": float("nan")})
    assert _strict_json((tmp_path / "b.json").read_text())["x"] is None


def test_symlink_loops_and_odd_paths_in_an_artifacts_folder(tmp_path, capsys) -> None:
    art = tmp_path / "artifacts"
    good = write_cell(art, "cpu-2.13", GOOD)
    (art / "loop").symlink_to(art)                 # a folder that contains itself
    (art / "self").symlink_to("self")              # a symlink to itself
    (art / "results-x").mkdir()
    (art / "results-x" / "tests.jsonl").symlink_to("tests.jsonl")
    (art / "fifo").mkdir()
    os.mkfifo(art / "fifo" / "env.json")
    out = tmp_path / "grid"
    assert cli.main(["grid", str(art), "--out", str(out)]) == 0
    written = (out / "grid.json").read_bytes()
    model = _strict_json(written.decode())
    cols = {c["name"]: c for c in model["columns"]}
    assert cols["cpu-2.13"]["status"] == "ok"
    # An argument that is no folder (absent, then a symlink to itself) is bad input: one
    # line, exit 2, the grid written before left as it was.
    capsys.readouterr()
    assert cli.main(["grid", str(art), str(tmp_path / "self-arg"), "--out", str(out)]) == 2
    (tmp_path / "self-arg").symlink_to("self-arg")
    assert cli.main(["grid", str(art), str(tmp_path / "self-arg"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"accelgrid grid: {tmp_path / 'self-arg'}: no such file or folder"] * 2
    assert (out / "grid.json").read_bytes() == written
    assert str(good) in {c["path"] for c in model["columns"]}


# --- baselines given to --baseline ------------------------------------------------------
# Issue 27: a baseline that cannot be read as a known schema never turns the gate off:
# exit 2, one line naming the file and what is wrong, never "all as expected".
BASELINE_CASES: list[tuple[str, Damage, str]] = [
    ("deep", lambda p: p.write_text(DEEP), "nested too deeply"),
    ("latin1", lambda p: p.write_bytes(b'{"t.py::a": "pass\xe9d"}'), "not UTF-8"),
    ("folder", lambda p: p.mkdir(), "is a folder"),
    ("nan-values", lambda p: p.write_text('{"suites/smoke/t.py::a": NaN}'),
     "expected {nodeid: outcome}"),
    ("list-values", lambda p: p.write_text('{"suites/smoke/t.py::a": ["passed"]}'),
     "expected {nodeid: outcome}"),
    ("5000-digits", lambda p: p.write_text('{"tests": ' + "9" * 5000 + "}"),
     "not JSON this reader accepts"),
    ("loop", lambda p: p.symlink_to(p.name), "Too many levels of symbolic links"),
    ("dev-zero", lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    ("fifo", lambda p: os.mkfifo(p), "not a regular file"),
    ("top-level-list", lambda p: p.write_text("[]"), "expected {nodeid: outcome}"),
    ("tests-null", lambda p: p.write_text('{"tests": null}'), "expected {nodeid: outcome}"),
    ("truncated", lambda p: p.write_text('{"tests": {'), "not JSON"),
    ("empty", lambda p: p.write_text(""), "empty file"),
    ("whitespace", lambda p: p.write_text("  \n"), "not JSON"),
    ("unreadable", _an_unreadable_baseline, "Permission denied"),
    ("schema-99", lambda p: p.write_text(
        '{"schema": 99, "tests": {"suites/smoke/t.py::a": "passed"}}'),
     "unknown baseline schema 99"),
    ("schema-0", lambda p: p.write_text(
        '{"schema": 0, "tests": {"suites/smoke/t.py::a": "passed"}}'),
     "unknown baseline schema 0"),
    ("schema-string", lambda p: p.write_text(
        '{"schema": "1", "tests": {"suites/smoke/t.py::a": "passed"}}'),
     'unknown baseline schema "1"'),
    ("schema-true", lambda p: p.write_text(
        '{"schema": true, "tests": {"suites/smoke/t.py::a": "passed"}}'),
     "unknown baseline schema true"),
    ("schema-no-tests", lambda p: p.write_text('{"schema": 1, "cell": "xpu-2.5"}'),
     'no "tests"'),
    ("no-tests", lambda p: p.write_text('{"schema": 1, "tests": {}}'), "holds no tests"),
    ("unknown-outcome", lambda p: p.write_text('{"tests": {"suites/smoke/t.py::a": "pased"}}'),
     'unknown outcome "pased"'),
    ("tests-string", lambda p: p.write_text('{"schema": 1, "tests": "passed"}'),
     "expected {nodeid: outcome}"),
]
BASELINE_IDS = [c[0] for c in BASELINE_CASES]


@pytest.mark.parametrize("case", BASELINE_IDS)
def test_a_damaged_baseline_exits_2_naming_the_file(tmp_path, capsys, case) -> None:
    _, damage, note = BASELINE_CASES[BASELINE_IDS.index(case)]
    if case == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a mode-0 file")
    base = tmp_path / "baselines"
    base.mkdir()
    compare.write(base / "cpu-2.13.json", {"tests": {"suites/smoke/t.py::a": "passed",
                                                     "suites/smoke/t.py::b": "passed"}})
    damage(base / f"{NAME}.json")
    art = tmp_path / "artifacts"
    good, bad = write_cell(art, "cpu-2.13", GOOD), write_cell(art, NAME, GOOD)
    out = tmp_path / "grid"
    code = cli.main(["grid", str(good), str(bad), "--out", str(out), "--baseline", str(base)])
    err = capsys.readouterr().err.strip()
    assert code == errors.EXIT_INVALID, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(base / f"{NAME}.json") in err and note in err, err
    assert not (out / "grid.json").exists()  # no grid that reads as a verdict


@pytest.mark.parametrize("how", ["missing", "file"])
def test_a_baseline_folder_that_is_not_one_exits_2(tmp_path, capsys, how) -> None:
    cell = write_cell(tmp_path / "artifacts", NAME, GOOD)
    base = tmp_path / "baselines"
    if how == "file":
        base.write_text("{}")
    code = cli.main(["grid", str(cell), "--out", str(tmp_path / "g"), "--baseline", str(base)])
    err = capsys.readouterr().err.strip()
    assert code == errors.EXIT_INVALID and len(err.splitlines()) == 1, err
    assert str(base) in err and ("does not exist" if how == "missing" else "not a folder") in err


def test_a_good_plain_mapping_baseline_still_gates(tmp_path, capsys) -> None:
    """The short hand-written form is a known schema: it compares (exit 3 on b)."""
    base = tmp_path / "baselines"
    base.mkdir()
    (base / f"{NAME}.json").write_text(json.dumps({"suites/smoke/t.py::a": "passed",
                                                   "suites/smoke/t.py::b": "passed"}))
    cell = write_cell(tmp_path / "artifacts", NAME, GOOD)
    code = cli.main(["grid", str(cell), "--out", str(tmp_path / "g"), "--baseline", str(base)])
    assert code == errors.EXIT_REGRESSION, capsys.readouterr().err


@pytest.mark.parametrize("case", ["deep", "latin1", "loop", "5000-digits", "fifo"])
def test_baseline_show_and_list_with_a_damaged_file(tmp_path, capsys, case) -> None:
    _, damage, _ = BASELINE_CASES[BASELINE_IDS.index(case)]
    base = tmp_path / "baselines"
    base.mkdir()
    damage(base / f"{NAME}.json")
    assert cli.main(["baseline", "show", NAME, "--dir", str(base)]) == errors.EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("accelgrid baseline: "), err
    assert cli.main(["baseline", "list", "--dir", str(base)]) == 0
    assert f"{NAME}: unreadable (" in capsys.readouterr().out


# --- ops-raw (accelgrid ops grid) -----------------------------------------------------------
OPS_GOOD = {"nodeid": "suites/s/t.py::w", "workload": "w", "device_type": "xpu",
            "ops": {"aten::add.Tensor": {"status": "native", "count": 2, "phases": {"fwd": 2}}},
            "missing": []}
OPS_CASES: list[tuple[str, object]] = [
    ("ops-list", {**OPS_GOOD, "ops": ["aten::add"]}),
    ("ops-info-string", {**OPS_GOOD, "ops": {"aten::add": "native"}}),
    ("ops-status-list", {**OPS_GOOD, "ops": {"aten::add": {"status": ["native"]}}}),
    ("ops-status-unknown", {**OPS_GOOD, "ops": {"aten::mul": {"status": "weird", "count": 1}}}),
    ("ops-count-string", {**OPS_GOOD, "ops": {"aten::add": {"status": "native", "count": "2"}}}),
    ("ops-phases-list", {**OPS_GOOD, "ops": {"aten::add": {"status": "native", "phases": [1]}}}),
    ("ops-phase-count-nan", {**OPS_GOOD, "ops": {"aten::add": {"status": "native",
                                                               "phases": {"fwd": "x"}}}}),
    ("missing-string", {**OPS_GOOD, "missing": "aten::foo"}),
    ("missing-dicts", {**OPS_GOOD, "missing": [{"op": "x"}]}),
    ("workload-list", {**OPS_GOOD, "workload": ["w"]}),
    ("device-type-dict", {**OPS_GOOD, "device_type": {"x": 1}}),
    ("record-list", [1, 2]),
    ("nodeid-missing", {k: v for k, v in OPS_GOOD.items() if k != "nodeid"}),
    ("deep", "DEEP"),
]
OPS_IDS = [c[0] for c in OPS_CASES]


@pytest.mark.parametrize("case", OPS_IDS)
def test_a_damaged_ops_record_is_skipped_and_the_rest_counted(tmp_path, capsys, case) -> None:
    _, bad = OPS_CASES[OPS_IDS.index(case)]
    art = tmp_path / "artifacts"
    cells = []
    for name in ("xpu-2.5", "xpu-2.13"):
        cell = write_cell(art, name, GOOD)
        (cell / "ops-raw").mkdir()
        line = DEEP if bad == "DEEP" else json.dumps(bad)
        (cell / "ops-raw" / "gw0.jsonl").write_text(json.dumps(OPS_GOOD) + "\n" + (
            line + "\n" if name == "xpu-2.5" else ""))
        cells.append(cell)
    out = tmp_path / "out"
    assert cli.main(["ops", "grid", *map(str, cells), "--out", str(out)]) == 0
    view = _strict_json((out / "ops-grid.json").read_text())
    assert view["ops"]["aten::add.Tensor"] == {"xpu-2.5": "native", "xpu-2.13": "native"}
    if case == "ops-status-unknown":
        assert view["ops"]["aten::mul"]["xpu-2.5"] == "weird"


def test_an_ops_raw_file_that_is_a_folder(tmp_path) -> None:
    cell = write_cell(tmp_path, "xpu-2.5", GOOD)
    (cell / "ops-raw" / "gw0.jsonl").mkdir(parents=True)
    (cell / "ops-raw" / "gw1.jsonl").write_text(json.dumps(OPS_GOOD) + "\n")
    assert cli.main(["ops", "build", str(cell)]) == 0
    assert _strict_json((cell / "ops.json").read_text())["counts"]["native"] == 1
