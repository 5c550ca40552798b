"""The warm run's cheaper checks keep their answers (issue 36, "the plan must not cost the
everyday loop"): missing_files from one listing per folder says what lexists says, and
installed_version from the metadata's headers says what importlib.metadata says."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from accelgrid.base.versions import installed_version
from accelgrid.host import install


def _env(tmp_path: Path, files: list[str]) -> tuple[Path, Path]:
    """A venv-shaped folder with one distribution whose RECORD names ``files`` (made)."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    info = site / "demo-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    rows = [*files, "demo-1.0.dist-info/METADATA", "demo-1.0.dist-info/RECORD"]
    with open(info / "RECORD", "w", newline="") as fh:
        csv.writer(fh).writerows([r, "sha256=x", "1"] for r in rows)
    for name in files:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("x = 1\n")
    return tmp_path / "env", site


FILES = ["demo/__init__.py", "demo/sub/deep.py", "demo/sub/other.py", "demo.py",
         "demo/data/a,b.txt"]   # a comma: csv quotes the row, the listing still finds it


def test_a_whole_env_has_nothing_missing(tmp_path: Path) -> None:
    env, _ = _env(tmp_path, FILES)
    assert install.missing_files(env) is None


@pytest.mark.parametrize("gone", FILES)
def test_each_removed_file_is_missing(tmp_path: Path, gone: str) -> None:
    env, site = _env(tmp_path, FILES)
    (site / gone).unlink()
    assert install.missing_files(env) == f"demo-1.0: 1 of {len(FILES) + 2} files missing, " \
        f"e.g. {gone}"


def test_a_removed_folder_misses_every_file_in_it(tmp_path: Path) -> None:
    env, site = _env(tmp_path, FILES)
    for name in ("deep.py", "other.py"):
        (site / "demo" / "sub" / name).unlink()
    (site / "demo" / "sub").rmdir()
    assert install.missing_files(env, limit=2) == \
        f"demo-1.0: 2 of {len(FILES) + 2} files missing, e.g. demo/sub/deep.py, demo/sub/other.py"
    assert install.incomplete(env) == ["demo"]


def test_a_dangling_link_is_there_as_lexists_says(tmp_path: Path) -> None:
    env, site = _env(tmp_path, FILES)
    (site / "demo.py").unlink()
    os.symlink(site / "nowhere.py", site / "demo.py")
    assert install.missing_files(env) is None


def test_a_path_out_of_site_packages_is_checked(tmp_path: Path) -> None:
    # Scripts: ../../../bin/NAME in a RECORD.
    env, site = _env(tmp_path, [*FILES, "../../../bin/demo-tool"])
    assert install.missing_files(env) is None
    (env / "bin" / "demo-tool").unlink()
    missing = install.missing_files(env)
    assert missing is not None and missing.endswith("e.g. ../../../bin/demo-tool")


def test_a_name_the_listing_lacks_is_asked_again(tmp_path: Path) -> None:
    # A name missing from a folder's listing goes to lexists before it counts as missing
    # (a case-insensitive file system lists Demo.py for demo.py): here, made after the
    # listing was taken.
    _, site = _env(tmp_path, FILES)
    listed = install._Listing(str(site))
    assert listed.has("demo/__init__.py") and not listed.has("demo/late.py")
    (site / "demo" / "late.py").write_text("")
    assert listed.has("demo/late.py")


def test_installed_version_is_importlibs_for_every_installed_distribution() -> None:
    names = sorted({d.metadata["Name"] for d in importlib.metadata.distributions()
                    if d.metadata["Name"]})
    assert len(names) > 20
    assert {n: installed_version(n) for n in names} == \
        {n: importlib.metadata.version(n) for n in names}
    assert installed_version("no-such-distribution-here") is None


def _dist(tmp_path: Path, metadata: str) -> None:
    info = tmp_path / "planted-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata)


@pytest.mark.parametrize("metadata, expected", [
    # The description's lines are not headers.
    ("Name: planted\nVersion: 2.0\n\nVersion: 9.9\n", "2.0"),
    ("Name: planted\nSummary: s\n\nVersion: 9.9\n", None),
    # Header names are case-insensitive; the value as the email parser leaves it.
    ("Name: planted\nversion:  2.0.post1 \n", "2.0.post1 "),
])
def test_installed_version_reads_the_headers_only(tmp_path: Path, monkeypatch,
                                                  metadata: str, expected: str | None) -> None:
    _dist(tmp_path, metadata)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert installed_version("planted") == expected == importlib.metadata.version("planted")


# --- what a check found good, kept by stat key (host.statcache) -------------------------

@pytest.fixture
def not_racy(monkeypatch) -> None:
    """Keys of files made a moment ago are kept (the store's racy window closed)."""
    from accelgrid.host import statcache

    monkeypatch.setattr(statcache, "RACY_S", 0.0)


def _remembered(env: Path) -> bool:
    store = json.loads((env / install.PRESENT_STORE).read_text())
    return any(k.endswith("demo-1.0.dist-info") for k in store["entries"])


def _again(env: Path) -> str | None:
    time.sleep(0.01)   # past the store's start: the keys kept are older than it
    return install.missing_files(env, remember=True)


@pytest.mark.parametrize("gone", FILES)
def test_a_file_removed_since_the_env_was_remembered_whole_is_missing(
        tmp_path: Path, gone: str, not_racy) -> None:
    env, site = _env(tmp_path, FILES)
    time.sleep(0.01)
    assert install.missing_files(env, remember=True) is None and _remembered(env)
    assert _again(env) is None
    (site / gone).unlink()
    assert _again(env) == f"demo-1.0: 1 of {len(FILES) + 2} files missing, e.g. {gone}"
    assert not _remembered(env)


def test_a_file_renamed_or_a_folder_replaced_is_missing(tmp_path: Path, not_racy) -> None:
    env, site = _env(tmp_path, FILES)
    time.sleep(0.01)
    assert install.missing_files(env, remember=True) is None
    (site / "demo" / "sub" / "deep.py").rename(site / "demo" / "sub" / "deep2.py")
    missing = _again(env)
    assert missing is not None and missing.endswith("e.g. demo/sub/deep.py")
    (site / "demo" / "sub" / "deep2.py").rename(site / "demo" / "sub" / "deep.py")
    assert _again(env) is None
    shutil.rmtree(site / "demo" / "sub")
    (site / "demo" / "sub").mkdir()   # the same name, empty: another inode
    missing = _again(env)
    assert missing is not None and missing.startswith("demo-1.0: 2 of")


def test_nothing_just_made_is_remembered(tmp_path: Path) -> None:
    """Within the racy window (a change in the same tick of a coarse clock would not
    show), a whole distribution is checked every time."""
    env, _ = _env(tmp_path, FILES)
    assert install.missing_files(env, remember=True) is None
    assert not (env / install.PRESENT_STORE).exists() or not _remembered(env)


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"version": 0, "entries": {}}'])
def test_an_unreadable_store_is_an_empty_one(tmp_path: Path, text: str, not_racy) -> None:
    env, site = _env(tmp_path, FILES)
    (env / install.PRESENT_STORE).write_text(text)
    (site / "demo.py").unlink()
    missing = _again(env)
    assert missing is not None and missing.endswith("e.g. demo.py")


def test_an_env_that_cannot_keep_a_store_is_checked_all_the_same(
        tmp_path: Path, not_racy) -> None:
    env, site = _env(tmp_path, FILES)
    (env / install.PRESENT_STORE).mkdir()   # not a file: cannot be written
    assert _again(env) is None
    (site / "demo.py").unlink()
    missing = _again(env)
    assert missing is not None and missing.endswith("e.g. demo.py")
