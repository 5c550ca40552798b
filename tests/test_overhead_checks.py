"""The warm run's cheaper checks keep their answers (issue 36, "the plan must not cost the
everyday loop"): missing_files from one listing per folder says what lexists says, and
installed_version from the metadata's headers says what importlib.metadata says."""

from __future__ import annotations

import csv
import importlib.metadata
import os
import sys
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
    assert install.missing_files(env).endswith("e.g. ../../../bin/demo-tool")


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
