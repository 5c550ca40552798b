"""Commands that rewrite a set of files (``grid --out``, ``ops predict --out``, ``baseline
update``; ``publish`` in test_publish_replace.py): the old set or the new one whatever the
moment a SIGTERM comes, only files they listed in their manifest replaced, a user's file
where they would write refused (issue 36, item 4)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.report_cases import write_cell

from accelgrid.base import outputs
from accelgrid.cli import main

GRID_FILES = ("grid.json", "grid.md", "grid.html", "junit.xml")


def _cells(root: Path, cells: list[str], tests: int = 4) -> list[Path]:
    return [write_cell(root, cell, {f"suites/s/test_x.py::t{i}":
                                    "failed" if i % 7 == 3 else "passed" for i in range(tests)})
            for cell in cells]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_user_file_where_grid_writes_is_refused_and_others_are_kept(tmp_path: Path,
                                                                      capsys) -> None:
    cells = _cells(tmp_path / "r", ["cpu-2.13"])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["grid", *map(str, cells), "--out", str(mine)]) == 0
    assert (mine / "notes.txt").read_text() == "keep me"
    listed = json.loads((mine / outputs.manifest_name("grid")).read_text())["files"]
    assert listed == sorted(GRID_FILES)
    # A grid.md of the user's (no manifest lists it): nothing is written, one line.
    other = tmp_path / "other"
    other.mkdir()
    (other / "grid.md").write_text("my own grid notes")
    before = _snapshot(other)
    capsys.readouterr()
    assert main(["grid", *map(str, cells), "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grid.md" in err and "did not write" in err
    assert _snapshot(other) == before
    # A second grid replaces the first's files (listed), the user's stay.
    assert main(["grid", *map(str, _cells(tmp_path / "s", ["cuda-2.11"])), "--out",
                 str(mine)]) == 0
    assert "cuda-2.11" in (mine / "grid.md").read_text()
    assert (mine / "notes.txt").read_text() == "keep me"
    assert not [p for p in mine.iterdir() if outputs.is_leftover(p.name)]


def test_ops_predict_refuses_a_user_file_and_marks_its_folder(tmp_path: Path, capsys) -> None:
    captured = Path(__file__).resolve().parents[2] / "docs" / "cuda" / "ops-cuda-2.11.json"
    out = tmp_path / "predicted"
    out.mkdir()
    (out / "ops-predicted.md").write_text("mine")
    capsys.readouterr()
    assert main(["ops", "predict", str(captured), "--series", "2.8", "--out", str(out)]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (out / "ops-predicted.md").read_text() == "mine"
    (out / "ops-predicted.md").unlink()
    assert main(["ops", "predict", str(captured), "--series", "2.8", "--out", str(out)]) == 0
    assert outputs.kinds(out) == ["ops-predicted"]


def _start_grid(cells: list[Path], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "accelgrid", "grid", *map(str, cells),
                             "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_its_handler(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until the process catches SIGTERM (Linux's SigCgt mask), or has ended."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            # Before its exec the child still has this process's handlers: look only once
            # it runs the command.
            started = b"accelgrid" in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        if not started:
            time.sleep(0.002)
            continue
        caught = next(int(line.split()[1], 16) for line in status.splitlines()
                      if line.startswith("SigCgt:"))
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.002)


def test_grid_stopped_while_it_writes_leaves_the_old_set_or_the_new(tmp_path: Path) -> None:
    """A real ``accelgrid grid`` of 4 cells x 3,000 tests, SIGTERM sent the moment its
    first new file appears beside the old set (polled), and at a spread of moments:
    each of grid.json/.md/.html and junit.xml is the old one, or all four are new; no
    temporary file is left; a stop is one line with the shell's code."""
    out = tmp_path / "out"
    assert main(["grid", *map(str, _cells(tmp_path / "old", ["cpu-2.5"])), "--out",
                 str(out)]) == 0
    old = {n: b for n, b in _snapshot(out).items() if n in GRID_FILES}
    big = _cells(tmp_path / "new", ["cpu-2.13", "cuda-2.11", "xpu-2.8", "mps-2.13"],
                 tests=3000)
    outcomes = []
    for delay in (None, 0.3, 0.8, 1.5):
        proc = _start_grid(big, out)
        _wait_for_its_handler(proc)  # a SIGTERM during Python's start kills it outright
        if delay is None:  # the moment the new set is being written
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline and not any(
                    outputs.is_leftover(p.name) for p in out.iterdir()):
                time.sleep(0.0005)
            # Frozen where it was seen writing (its first file has tens of ms to go), so
            # the stop lands before the swap however loaded the host is.
            proc.send_signal(signal.SIGSTOP)
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGCONT)
        else:
            time.sleep(delay)
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        now = {n: b for n, b in _snapshot(out).items() if n in GRID_FILES}
        same = {n for n in GRID_FILES if now.get(n) == old[n]}
        assert same in (set(), set(GRID_FILES)), (delay, sorted(same), err)
        assert set(now) == set(GRID_FILES), (delay, err)
        assert not [p for p in out.iterdir() if outputs.is_leftover(p.name)], (delay, err)
        assert proc.returncode in (0, 143), (proc.returncode, err[-2000:])
        if proc.returncode == 143:  # the stop's line last (notes the grid printed before it)
            assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
                ("accelgrid grid: stopped by SIGTERM", "accelgrid: stopped by SIGTERM")), err
        outcomes.append("new" if not same else "old")
        if not same:  # the next run starts from the old set again
            for name, data in old.items():
                (out / name).write_bytes(data)
    assert "old" in outcomes, outcomes  # at least one stop landed before the swap
