"""``accelgrid publish`` replacing a site: built beside ``--out`` and swapped in, deleting
only what an earlier publish listed in its manifest, refusing a folder it did not write,
and a real ``accelgrid publish`` stopped by SIGTERM/SIGINT at many moments leaving the old
site or the new one, never a mix."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.report_cases import write_cell

from accelgrid.cli import main
from accelgrid.report.site import MANIFEST


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


GENERATED = (re.compile(rb'"generated": "([^"]+)"'), re.compile(rb"; generated ([^;]+);"))


def _one_build(root: Path) -> dict[str, bytes]:
    """The site's files with the time it was generated taken out, once checked to be one
    time in grid.json and index.html (two builds' halves would show two)."""
    seen = _snapshot(root)
    times = {m.group(1) for rx, name in zip(GENERATED, ("grid.json", "index.html"), strict=True)
             for m in [rx.search(seen.get(name, b""))] if m}
    assert len(times) == 1, times
    for rx, name in zip(GENERATED, ("grid.json", "index.html"), strict=True):
        seen[name] = rx.sub(b"GENERATED", seen[name])
    return seen


def _leftovers(out: Path) -> list[str]:
    """Temporary folders a publish left beside the site."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def _results(root: Path, cells: list[str], tests: int = 6, suites: int = 2) -> list[Path]:
    return [write_cell(root, cell, {f"suites/s{i % suites}/test_x.py::t{i}":
                                    "failed" if i % 7 == 3 else "passed" for i in range(tests)})
            for cell in cells]


def _publish(folders: list[Path], out: Path) -> int:
    return main(["publish", *map(str, folders), "--out", str(out)])


def test_a_folder_of_user_files_is_refused_and_untouched(tmp_path: Path, capsys) -> None:
    """An index.html is no proof of a site: without the manifest nothing is replaced."""
    folders = _results(tmp_path / "r", ["cpu-2.13"])
    mine = tmp_path / "mine"
    (mine / "cells").mkdir(parents=True)
    (mine / "index.html").write_text("my own page")
    (mine / "cells" / "cpu-2.13.html").write_text("my notes")
    (mine / "thesis.tex").write_text("keep me")
    before = _snapshot(mine)
    capsys.readouterr()
    assert _publish(folders, mine) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(mine) in err and MANIFEST in err
    assert _snapshot(mine) == before and _leftovers(mine) == []
    # A file as --out, and a manifest that is not one, are refused the same way.
    (tmp_path / "file").write_text("x")
    assert _publish(folders, tmp_path / "file") == 2
    (mine / MANIFEST).write_text(json.dumps({"files": ["../thesis.tex"]}))
    assert _publish(folders, mine) == 2
    assert (mine / "index.html").read_text() == "my own page"


def test_an_empty_folder_is_published_into(tmp_path: Path) -> None:
    folders = _results(tmp_path / "r", ["cpu-2.13"])
    out = tmp_path / "site"
    out.mkdir()
    assert _publish(folders, out) == 0
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert listed == sorted(set(_snapshot(out)) - {MANIFEST})
    assert "index.html" in listed and "cells/cpu-2.13.html" in listed
    assert _leftovers(out) == []


def test_a_second_publish_replaces_only_the_files_of_the_first(tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert _publish(_results(tmp_path / "a", ["cpu-2.13", "cpu-2.5"]), out) == 0
    first = json.loads((out / MANIFEST).read_text())["files"]
    assert "cells/cpu-2.5.html" in first
    # The user's own files in the site: a CNAME, a folder, one inside a folder of the site's.
    (out / "CNAME").write_text("grid.example.org")
    (out / "notes").mkdir()
    (out / "notes" / "a.md").write_text("a")
    (out / "cells" / "README").write_text("cells are generated")
    (out / "empty").mkdir()
    assert _publish(_results(tmp_path / "b", ["cpu-2.13", "cuda-2.11"]), out) == 0
    second = json.loads((out / MANIFEST).read_text())["files"]
    assert not (out / "cells" / "cpu-2.5.html").exists()  # the first one's, gone
    assert (out / "cells" / "cuda-2.11.html").is_file() and "cells/cuda-2.11.html" in second
    assert (out / "CNAME").read_text() == "grid.example.org"
    assert (out / "notes" / "a.md").read_text() == "a"
    assert (out / "cells" / "README").read_text() == "cells are generated"
    assert (out / "empty").is_dir()
    # The manifest lists the site's files, never the user's, so they stay theirs next time.
    assert set(_snapshot(out)) - {MANIFEST} == set(second) | {"CNAME", "notes/a.md",
                                                              "cells/README"}
    assert _leftovers(out) == []


def test_a_user_file_where_the_new_site_writes_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    assert _publish(_results(tmp_path / "a", ["cpu-2.13"]), out) == 0
    (out / "cells" / "cuda-2.11.html").write_text("written by hand")
    before = _snapshot(out)
    capsys.readouterr()
    assert _publish(_results(tmp_path / "b", ["cpu-2.13", "cuda-2.11"]), out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda-2.11.html" in err
    assert _snapshot(out) == before and _leftovers(out) == []


def test_publish_through_a_symlink_replaces_the_folder_it_names(tmp_path: Path) -> None:
    real = tmp_path / "real"
    assert _publish(_results(tmp_path / "a", ["cpu-2.13"]), real) == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _publish(_results(tmp_path / "b", ["cuda-2.11"]), link) == 0
    assert link.is_symlink() and (real / "cells" / "cuda-2.11.html").is_file()
    assert not (real / "cells" / "cpu-2.13.html").exists()


def _start(folders: list[Path], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "accelgrid", "publish", *map(str, folders),
                             "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_publish_stopped_at_any_moment_leaves_the_old_site_or_the_new(tmp_path: Path) -> None:
    """A real ``accelgrid publish`` of 4 cells x 3,000 tests (about 1 s here), signalled at
    moments spread over its whole run: each time the site is byte for byte the old one or
    the new one, nothing is left beside it, and a caught signal is one line with the
    shell's code. The moment the temporary site appears is hit every time (a poll), so at
    least that stop is a caught one, mid-build, with the old site kept."""
    cells = ["cpu-2.13", "cpu-2.5", "cuda-2.11", "xpu-2.13"]
    old_results = _results(tmp_path / "a", cells, tests=3000, suites=60)
    new_results = _results(tmp_path / "b", cells[:3], tests=3000, suites=60)
    out = tmp_path / "site"
    assert _publish(old_results, out) == 0
    backup = tmp_path / "backup"
    shutil.copytree(out, backup, symlinks=True)
    old = _one_build(out)
    began = time.monotonic()
    done = _start(new_results, out)
    assert done.wait(timeout=120) == 0, done.stderr.read() if done.stderr else ""
    whole = time.monotonic() - began
    new = _one_build(out)
    assert new != old and "cells/xpu-2.13.html" not in new

    def stop(sig: signal.Signals, after: float | None) -> tuple[int, str, str]:
        """Publish over the old site; signal it ``after`` s from its start, or (None) as
        soon as its temporary site exists."""
        shutil.rmtree(out)
        shutil.copytree(backup, out, symlinks=True)
        proc = _start(new_results, out)
        if after is None:
            while proc.poll() is None and not any(
                    p.name.startswith(".site.accelgrid-new-") for p in tmp_path.iterdir()):
                time.sleep(0.0005)
        else:
            time.sleep(after)
        if proc.poll() is None:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        seen = _one_build(out)
        state = "old" if seen == old else "new" if seen == new else "MIXED"
        assert state != "MIXED", f"{sig.name} after {after} s (of {whole:.2f} s): " \
                                 f"{sorted(set(seen) ^ set(old))[:5]}"
        assert _leftovers(out) == [], f"{sig.name} after {after} s"
        assert "Traceback" not in err, err
        if proc.returncode == 128 + sig:
            assert err.count("\n") == 1 and f"stopped by {sig.name}" in err, err
        elif proc.returncode == -sig:
            pass   # Python's default: while it starts (nothing read) or exits (site written)
        else:
            assert proc.returncode == 0 and state == "new", (proc.returncode, err)
        return proc.returncode, state, err

    rc, state, _ = stop(signal.SIGTERM, None)
    assert (rc, state) == (143, "old")
    rc, state, _ = stop(signal.SIGINT, None)
    assert (rc, state) == (130, "old")
    for fraction in (0.15, 0.4, 0.6, 0.75, 0.9, 1.0):
        stop(signal.SIGTERM, whole * fraction)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_swap_waits_for_it(tmp_path: Path, sig: signal.Signals) -> None:
    """The two renames of the swap are never cut apart: a signal raised inside them (as one
    arriving there would be) is delivered once the new site is in place."""
    from accelgrid.base.lifetime import Stopped, stoppable
    from accelgrid.report import site

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers belong to the main thread")
    out = tmp_path / "site"
    assert _publish(_results(tmp_path / "a", ["cpu-2.13"]), out) == 0
    renames: list[str] = []
    real_rename = os.rename   # the one site calls (site's os is this module)

    def rename(src: str | Path, dst: str | Path) -> None:
        real_rename(src, dst)
        renames.append(Path(dst).name)
        if len(renames) == 1:
            signal.raise_signal(sig)   # between the old site moved away and the new moved in

    with pytest.MonkeyPatch.context() as mp, pytest.raises(Stopped) as stopped, stoppable():
        mp.setattr(os, "rename", rename)
        site.publish(_results(tmp_path / "b", ["cuda-2.11"]), out)
    assert stopped.value.signum == sig
    assert len(renames) == 2 and (out / "cells" / "cuda-2.11.html").is_file()
    assert not (out / "cells" / "cpu-2.13.html").exists() and _leftovers(out) == []
