"""The command tree (accelgrid.cli): parsing, `--` passthrough, exit codes, help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelgrid import cli, ops
from accelgrid.cli import parser as cli_parser
from accelgrid.cli import run as cli_run

ROOT = Path(__file__).resolve().parents[2]


def _command_words() -> set[str]:
    """The top-level command words the parser knows."""
    subparsers = cli_parser.build_parser()._subparsers
    assert subparsers is not None
    choices = subparsers._group_actions[0].choices
    assert choices is not None
    return set(choices)


# Every command word: none of them may be taken for a command when it follows `--`.
WORDS = sorted({*_command_words(),
                "ci", "baseline", "repro", "bisect", "container", "ops", "bench", "grid"})


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accelgrid", *args], capture_output=True,
                          text=True, cwd=ROOT)


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    """``accelgrid plan`` in this process (what a plan prints does not need the entry point,
    which other tests here run; a process per plan cost a second of CPU each)."""
    code = cli.main(["--matrix", str(ROOT / "matrix.yaml"), "plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_help_explains_commands() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    for word in ("validate", "cells", "plan", "run", "grid", "bench", "matrix.yaml"):
        assert word in proc.stdout


def test_cells_json_and_filters() -> None:
    proc = _cli("cells", "--json", "--device", "cuda", "--torch", "2.11", "--profile", "default")
    data = json.loads(proc.stdout)
    assert [c["name"] for c in data] == ["cuda-2.11"]
    assert data[0]["pins"]["torchao"] == "0.17.0"
    assert _cli("cells", "--device", "tpu").returncode == 1


def test_plan_prints_everything_without_doing_it(capsys) -> None:
    code, out, _ = _plan(capsys, "xpu-2.5-fallback-debug")
    assert code == 0
    assert "torch==2.5.1+xpu from https://download.pytorch.org/whl/xpu" in out
    assert "PYTORCH_DEBUG_XPU_FALLBACK=1" in out
    assert "self-hosted, linux, x64, intel-gpu" in out
    assert "60 min for the cell" in out
    assert ("runtime     Intel GPU dependencies for PyTorch 2.5 (intel-for-pytorch-gpu-dev-0.5) "
            "0.5.3, sourced: source /opt/intel/oneapi/pytorch-gpu-dev-0.5/oneapi-vars.sh") in out
    assert "(GPU driver only)" in _plan(capsys, "xpu-2.13")[1]
    assert "runtime" not in _plan(capsys, "cpu-2.13")[1]
    unknown = _cli("plan", "xpu-2.55")  # the entry point: its exit code and stderr
    assert unknown.returncode == 2 and "did you mean 'xpu-2.5'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


CAPTURE = "aten ops per test and how the device runs each (capture)"
DEBUG = "every CPU fallback by op (PYTORCH_DEBUG_XPU_FALLBACK=1)"
FELL_BACK = "unimplemented ops fall back instead of failing, recorded as missing-but-fell-back"
# Every xpu profile of matrix.yaml: a cell of it, and what `plan` says it records.
XPU_RECORDS = {
    "default": ("xpu-2.13", []),
    "fp64-emulation": ("xpu-2.5-fp64-emulation",
                       ["outcomes with FP64 emulated in software (IGC_EnableDPEmulation=1)"]),
    "fp64-no-emulation": ("xpu-2.13-fp64-no-emulation", []),  # flags "0": off
    "fallback-debug": ("xpu-2.13-fallback-debug", [CAPTURE, DEBUG]),
    "cpu-fallback": ("xpu-2.13-cpu-fallback",
                     ["unimplemented ops fall back instead of failing, not named (that needs "
                      "capture and PYTORCH_DEBUG_XPU_FALLBACK=1)"]),
    "fallback-survey": ("xpu-2.13-fallback-survey", [CAPTURE, DEBUG, FELL_BACK]),
    "op-capture": (None, [CAPTURE]),  # no xpu cell in the matrix: checked on its env
    "compile": ("xpu-2.13-compile", []),  # the compile suite alone, no flags
}


def test_every_xpu_profile_has_its_records_line(capsys) -> None:
    from accelgrid.config.matrix import load_matrix

    matrix = load_matrix(ROOT / "matrix.yaml")
    xpu_profiles = {n for n, p in matrix.profiles.items() if p.applies_to("xpu")}
    assert xpu_profiles == set(XPU_RECORDS)
    for profile, (cell, extra) in XPU_RECORDS.items():
        expected = ["test outcomes and provenance", *extra]
        if cell is None:
            env = {**matrix.devices["xpu"].env, **matrix.profiles[profile].env}
            assert ops.records(env) == expected
            continue
        assert matrix.cell(cell).profile == profile
        assert ops.records(matrix.cell(cell).env) == expected
        code, out, _ = _plan(capsys, cell)
        assert code == 0 and f"records     {'; '.join(expected)}\n" in out
        assert json.loads(_plan(capsys, cell, "--json")[1])["records"] == expected


def test_run_takes_options_after_the_cell_and_pytest_args_after_dashes() -> None:
    proc = _cli("run", "cpu-2.11", "--no-venv", "--", "-k", "matmul")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    # --no-venv reached nox; torch is 2.13 here
    assert "cpu-2.11: the env's inputs are not the matrix's: torch: wanted torch==2.11.0" in out
    bad = _cli("cells", "--", "-x")
    assert bad.returncode == 2 and "not taken by `accelgrid cells`" in bad.stderr


def test_run_container_refuses_a_cell_without_image() -> None:
    proc = _cli("run", "mps-2.13", "--container")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "mps-2.13" in proc.stderr



@pytest.mark.parametrize("word", WORDS)
def test_every_argument_after_dashes_reaches_pytest(word, monkeypatch) -> None:
    # Before the command tree, `accelgrid run cpu-2.13 -- -k ops` silently dropped `-k ops`.
    calls: list[list[str]] = []

    def fake_nox(argv: list[str], root: Path, env: object = None, ahead: object = None) -> int:
        calls.append(argv)
        return 0

    monkeypatch.setattr(cli_run, "nox", fake_nox)
    assert cli.main(["--matrix", str(ROOT / "matrix.yaml"), "run", "cpu-2.13", "--", "-k",
                     word, word, "--", "-x"]) == 0
    (cmd,) = calls
    assert cmd[cmd.index("--") + 1:] == ["-k", word, word, "--", "-x"]
    assert cmd[cmd.index("-s") + 1] == "cpu-2.13"


def test_container_run_takes_pytest_args_and_render_does_not() -> None:
    args = cli_parser.parse(["container", "run", "cpu-2.13", "--", "-k", "ops"])
    assert args.pytest_args == ["-k", "ops"] and args.func.__module__ == "accelgrid.cli.container"
    with pytest.raises(SystemExit) as exc:
        cli_parser.parse(["container", "render", "cpu-2.13", "--", "-k", "ops"])
    assert exc.value.code == 2


def test_matrix_option_is_taken_before_and_after_the_command(tmp_path) -> None:
    other = tmp_path / "m.yaml"
    assert cli_parser.parse(["--matrix", str(other), "cells"]).matrix == str(other)
    assert cli_parser.parse(["cells", "--matrix", str(other)]).matrix == str(other)
    assert cli_parser.parse(["ci", "check", "--matrix", str(other)]).matrix == str(other)
    assert cli_parser.parse(["cells"]).matrix == "matrix.yaml"


@pytest.mark.parametrize("argv", [
    [], ["validate"], ["cells"], ["plan"], ["run"], ["grid"], ["baseline"], ["ops"],
    ["repro"], ["bisect"], ["ci"], ["ci", "check"], ["container"], ["container", "run"],
    ["bench"], ["schema"], ["bench", "offload"], ["baseline", "update"], ["ops", "build"],
])
def test_every_command_has_help(argv) -> None:
    proc = _cli(*argv, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: accelgrid")


@pytest.mark.parametrize("name, source", [("matrix", "matrix.yaml"),
                                          ("known-issues", "known_issues.yaml")])
def test_schema_prints_the_schema_the_yaml_file_names(name, source) -> None:
    import jsonschema
    import yaml

    proc = _cli("schema", name)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    jsonschema.validators.validator_for(schema).check_schema(schema)
    modeline = (ROOT / source).read_text().splitlines()[0]
    assert modeline.startswith("# yaml-language-server: $schema=")
    assert json.loads((ROOT / modeline.split("=", 1)[1]).read_text()) == schema
    jsonschema.validate(yaml.safe_load((ROOT / source).read_text()), schema)
    assert _cli("schema", "nope").returncode == 2


def test_version() -> None:
    from accelgrid import __version__

    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"accelgrid {__version__}"


@pytest.mark.parametrize("argv, code, message", [
    (["plan", "nope"], 2, "accelgrid plan: unknown cell 'nope'"),
    (["run", "nope"], 2, "accelgrid run: unknown cell 'nope'"),
    (["repro", "--cell", "cpu-2.13"], 2, "accelgrid repro: name an issue"),
    (["repro", "pytorch/ao#1"], 2, "accelgrid repro: "),
    (["bisect", "x::y", "--device", "tpu"], 2, "accelgrid bisect: unknown device 'tpu'"),
    (["container", "render", "mps-2.13"], 2, "accelgrid container: cell mps-2.13"),
    (["--matrix", "/nonexistent/m.yaml", "cells"], 2, "/nonexistent/m.yaml"),
    (["cells", "--device", "tpu"], 1, "no cell matches"),
])
def test_errors_are_one_line_with_their_exit_code(argv, code, message) -> None:
    proc = _cli(*argv)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    proc = subprocess.run(f"{sys.executable} -m accelgrid cells --json | head -c 10",
                          shell=True, capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.parametrize("command", ["cells", "cells --json", "plan cpu-2.0 --json", "schema"])
def test_a_reader_that_leaves_early_ends_every_listing_quietly(tmp_path, command) -> None:
    # Output well over a pipe's buffer (600 cells), so the write really meets a closed
    # pipe: exit 0, nothing on stderr (`accelgrid cells --json | head`).
    proj = tmp_path / "p"
    (proj / "suites" / "smoke").mkdir(parents=True)
    series = [f"2.{i}" for i in range(30)]
    profiles = [f"p{i}" for i in range(20)]
    (proj / "matrix.yaml").write_text(
        'schema: 1\ndefaults: {torch: "2.0", suites: [smoke], profile: p0}\n'
        "devices:\n  cpu: {index: default, detect: {always: true}, "
        "runner: {labels: [ubuntu-24.04], hosted: true}}\n"
        "torch:\n" + "".join(f'  "{s}": {{torch: "{s}.0"}}\n' for s in series)
        + "profiles:\n" + "".join(f"  {p}: {{}}\n" for p in profiles)
        + "suites:\n  smoke: {path: suites/smoke}\n"
        + f"matrix:\n  device: [cpu]\n  torch: [{', '.join(map(repr, series))}]\n"
        + f"  profile: [{', '.join(profiles)}]\n")
    script = (f"{sys.executable} -m accelgrid --matrix {proj / 'matrix.yaml'} {command} "
              "| head -n 1 >/dev/null; exit ${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_plan_says_whether_the_cell_can_run_here(capsys) -> None:
    assert "this host   the device is present" in _plan(capsys, "cpu-2.13")[1]
    mps = _plan(capsys, "mps-2.13")[1]
    assert "this host   mps needs a Darwin host" in mps


@pytest.mark.parametrize("src", ["this-checkout", "none", "another-checkout"])
def test_run_starts_nox_here_unless_another_checkout(tmp_path: Path, src: str) -> None:
    """nox runs in the CLI's process (one interpreter and one import of accelgrid less),
    unless the project is another checkout of accelgrid, whose noxfile imports its own
    src/accelgrid: then in a process of its own. Its exit code and output come back."""
    proj = tmp_path / "proj"
    proj.mkdir()
    if src == "this-checkout":
        (proj / "src").symlink_to(ROOT / "src")
    elif src == "another-checkout":
        (proj / "src" / "accelgrid").mkdir(parents=True)
        (proj / "src" / "accelgrid" / "__init__.py").write_text("")
    (proj / "noxfile.py").write_text(
        "import os\nimport nox\n\n\n@nox.session(python=False)\ndef where(session):\n"
        "    print('nox pid', os.getpid(), flush=True)\n    session.error('stop here')\n")
    code = ("import os, sys\nfrom pathlib import Path\nfrom accelgrid.cli import run\n"
            "print('cli pid', os.getpid(), flush=True)\n"
            f"rc = run.nox(['-f', 'noxfile.py', '-s', 'where'], Path({str(proj)!r}))\n"
            "print('cwd after', os.getcwd(), flush=True)\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 1, proc.stdout + proc.stderr   # the session failed: nox's 1
    lines = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert (lines["cli pid"] == lines["nox pid"]) == (src != "another-checkout")
    assert lines["cwd after"] == str(tmp_path)   # the working folder is put back
    assert "stop here" in proc.stderr


# --- one group per command ------------------------------------------------------------
def _registered(group: str) -> list[str]:
    import argparse
    import importlib

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(f"accelgrid.cli.{group}").register(sub, cli._common.common_parser())
    return list(sub.choices)


@pytest.mark.parametrize("group", list(cli_parser.GROUPS))
def test_command_table_matches_what_each_group_registers(group: str) -> None:
    assert list(cli_parser.GROUPS[group]) == _registered(group)


@pytest.mark.parametrize("argv,command", [
    (["run", "cpu-2.13", "-k", "x"], "run"), (["--matrix", "m.yaml", "grid"], "grid"),
    (["--matrix=m.yaml", "plan", "x"], "plan"), (["-h", "run"], None), ([], None),
    (["--version"], None)])
def test_command_word(argv: list[str], command: str | None) -> None:
    assert cli_parser.command_word(argv) == command


def test_a_command_loads_only_its_group() -> None:
    """`accelgrid run` imports no report, container, CI or bench code (nor jinja2 and
    pytest, which only those and the cells need); `accelgrid --help` still lists all."""
    code = ("import sys; from accelgrid.cli import parser; "
            "a = parser.parse(['run', 'cpu-2.13', '--', '-k', 'x']); "
            "print(a.cell, a.pytest_args if hasattr(a, 'pytest_args') else '', "
            "sorted(m for m in ('jinja2', 'pytest', 'accelgrid.report', "
            "'accelgrid.commands.containers', 'accelgrid.commands.ci', 'accelgrid.bench', "
            "'accelgrid.host.install') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert proc.stdout.split()[0] == "cpu-2.13"
    assert proc.stdout.rstrip().endswith("[]"), proc.stdout
    help_text = _cli("--help").stdout
    assert all(word in help_text for words in cli_parser.GROUPS.values() for word in words)


@pytest.mark.parametrize("argv", [["run", "no-such-cell", "--", "-x"],
                                  ["cells", "--device", "cpu"]])
def test_run_ends_without_the_interpreters_teardown(argv: list[str]) -> None:
    """`accelgrid run` (quick_exit) ends once the command returned: the exit handlers run
    and the output is all there, with the command's exit code, but no module's objects are
    torn down one by one (0.04-0.06 s of a warm selected run). Other commands end as
    usual."""
    code = ("import atexit, sys\n"
            "class Torn:\n"
            "    def __del__(self): print('torn down', flush=True)\n"
            "kept = Torn()\n"
            "atexit.register(lambda: print('handler ran'))\n"
            f"sys.argv = ['accelgrid', '--matrix', {str(ROOT / 'matrix.yaml')!r}, *{argv!r}]\n"
            "from accelgrid import cli\n"
            "sys.exit(cli.main())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    quick = argv[0] == "run"
    assert proc.returncode == (2 if quick else 0), proc.stderr
    assert "handler ran" in proc.stdout
    assert ("torn down" in proc.stdout) is not quick
    if quick:
        assert proc.stderr.startswith("accelgrid run: unknown cell 'no-such-cell'")
