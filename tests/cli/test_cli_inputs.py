"""Bad inputs to the commands that write from results, and Ctrl-C, as a user meets them:
one line, a non-zero exit, nothing written or overwritten (issue 36: a mistyped path
passed the gate as "all as expected" and overwrote results/grid.*)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A real cell folder, a grid written from it, and that grid.json's bytes."""
    cell = write_cell(tmp_path / "results", "cpu-2.13", {"suites/s/t.py::a": "passed"})
    out = tmp_path / "out"
    assert main(["grid", str(cell), "--out", str(out)]) == 0
    return cell, out, (out / "grid.json").read_bytes()


@pytest.mark.parametrize("case", ["missing", "empty folder", "folder of other files"])
def test_grid_of_a_path_with_no_run_exits_2_and_overwrites_nothing(
        tmp_path: Path, made, case: str, capsys) -> None:
    cell, out, before = made
    bad = tmp_path / "results" / "nope"
    if case != "missing":
        bad.mkdir()
    if case == "folder of other files":
        (bad / "notes.txt").write_text("x")
        (bad / "sub").mkdir()
    baselines = tmp_path / "baselines"
    assert main(["baseline", "update", str(cell), "--dir", str(baselines)]) == 0
    capsys.readouterr()
    # Alone, and beside a good cell: the mistyped one is never taken for "no cells".
    for args in ([str(bad)], [str(cell), str(bad)]):
        assert main(["grid", *args, "--baseline", str(baselines), "--out", str(out)]) == 2
        err = capsys.readouterr()
        why = "no such file or folder" if case == "missing" else "holds no cell run"
        assert err.err.splitlines() == [f"accelgrid grid: {bad}: {why} (no tests.jsonl, "
                                        "env.json or summary.json under it)"
                                        if why != "no such file or folder" else
                                        f"accelgrid grid: {bad}: {why}"]
        assert "all as expected" not in err.out
    assert (out / "grid.json").read_bytes() == before


def test_history_add_publish_and_baseline_refuse_a_missing_path(tmp_path: Path, made,
                                                                capsys) -> None:
    cell, _, _ = made
    gone = tmp_path / "gone"
    db, site, base = tmp_path / "h.sqlite", tmp_path / "site", tmp_path / "b"
    assert main(["history", "add", str(cell), str(gone), "--db", str(db)]) == 2
    assert main(["publish", str(cell), str(gone), "--out", str(site)]) == 2
    assert main(["baseline", "update", str(gone), "--dir", str(base)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.endswith(f"{gone}: no such file or folder")
                                 for line in err)
    assert not db.exists() and not site.exists() and not base.exists()


def test_a_path_too_long_for_the_os_is_one_line(tmp_path: Path, made) -> None:
    """100,000 characters: the OS refuses the name (ENAMETOOLONG); said in one line."""
    long = "x" * 100_000
    proc = subprocess.run([sys.executable, "-m", "accelgrid", "grid", long, "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("accelgrid grid: xxxx") and "cannot be read" in proc.stderr
    assert len(proc.stderr) < 400


# The command (sys.argv[0] is accelgrid) with a stop sent as main(), its first moments over,
# imports what it runs on (accelgrid.cli.parser, the first of them).
STOPPED_WHILE_LOADING = (
    "import os, signal, sys; sys.argv = ['accelgrid', 'grid', 'x']\n"
    "class Stop:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'accelgrid.cli.parser':\n"
    "            os.kill(os.getpid(), signal.{signal})\n"
    "sys.meta_path.insert(0, Stop())\n"
    "from accelgrid import cli\n"
    "sys.exit(cli.main())\n")


def test_ctrl_c_while_accelgrid_starts_is_one_line_130(tmp_path: Path) -> None:
    """SIGINT during the imports and the parse (before a command runs): one line, 130."""
    proc = subprocess.run([sys.executable, "-c", STOPPED_WHILE_LOADING.format(signal="SIGINT")],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "accelgrid: interrupted\n")
    # Through main(): a SIGINT while the command's group is imported.
    code = ("import os, signal, sys; from accelgrid.cli import parser; orig = parser.build_parser\n"
            "def slow(word):\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    return orig(word)\n"
            "parser.build_parser = slow\n"
            "from accelgrid import cli; sys.exit(cli.main(['grid', 'x']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "accelgrid: interrupted\n")


def test_sigterm_while_accelgrid_starts_is_one_line_143() -> None:
    """SIGTERM during the imports, as SIGINT: one line, the shell's code (128 + 15)."""
    proc = subprocess.run([sys.executable, "-c", STOPPED_WHILE_LOADING.format(signal="SIGTERM")],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (143, "accelgrid: stopped by SIGTERM\n")


def test_importing_the_cli_does_nothing_until_main() -> None:
    """The command's first moments (the starting handlers, a warm run's early launch) are
    main()'s first work, not the import's: a program importing accelgrid.cli, even named
    accelgrid, keeps its signals and starts nothing; nor does the import load argparse."""
    code = ("import signal, sys; sys.argv = ['accelgrid', 'run', 'cpu-2.13', '--', '-k', 'x']\n"
            "import accelgrid.cli\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,\n"
            "      signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,\n"
            "      sorted(m for m in ('argparse', 'accelgrid.run.headstart.relaunch',\n"
            "                         'accelgrid.cli.parser') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.split("\n")[0] == "True True []"


def test_a_stop_once_the_command_is_over_leaves_its_exit_code(capsys) -> None:
    """SIGTERM/SIGINT after the command returned land in the interpreter's shutdown, which
    has put the default handlers back: held there, the process exits with the command's
    code (0 here), not killed by the signal (-15, no line). A program calling main() (this
    pytest) keeps its signals: its children would inherit a held SIGTERM."""
    code = ("import os, signal, sys; sys.argv = ['accelgrid']; from accelgrid import cli\n"
            "rc = cli.main(['cells', '--device', 'cpu'])\n"
            "os.kill(os.getpid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert "cpu-2.13" in proc.stdout
    assert main(["cells", "--device", "cpu"]) == 0
    capsys.readouterr()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.SIGTERM not in held and signal.SIGINT not in held


def test_ctrl_c_at_moments_of_a_real_grid(tmp_path: Path, made) -> None:
    """A real `accelgrid grid` sent SIGINT at several moments: never a traceback; exit 130
    (or 0 where it had already finished, or -SIGINT where the signal came while Python was
    ending, after the command, with the default handler back)."""
    cell, _, _ = made
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for delay in (0.5, 0.8, 1.2, 1.6):  # past the interpreter's own start-up
        proc = subprocess.Popen([sys.executable, "-m", "accelgrid", "grid", str(cell),
                                 "--out", str(tmp_path / f"o{delay}")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1].endswith("interrupted"), err


def test_a_folder_of_accelgrid_pages_among_the_results_is_passed_over(tmp_path: Path, made,
                                                                      capsys) -> None:
    """`accelgrid grid results/*` where results/ also holds `ops predict --out
    results/predicted` (or an earlier grid's --out): those are no typo and no cell."""
    cell, _, _ = made
    predicted = tmp_path / "results" / "predicted"
    predicted.mkdir()
    (predicted / "ops-predicted.json").write_text("{}")
    out = tmp_path / "o2"
    assert main(["grid", str(cell), str(predicted), "--out", str(out)]) == 0
    names = [c["name"] for c in json.loads((out / "grid.json").read_text())["columns"]]
    assert names == ["cpu-2.13"]
    assert main(["grid", str(predicted), "--out", str(out)]) == 2  # nothing but pages
    assert "no results folders found in" in capsys.readouterr().err
