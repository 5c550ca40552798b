"""Inputs as planned (issue 36, item 2): the env's torch and pins against the matrix, and
the pinned distributions' files against their RECORD hashes (accelgrid.host.inputs), on a
tiny real venv with wheels built here; the slow tests run real cell sessions."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from accelgrid.host import inputs, install

UV = Path(sys.executable).parent / "uv"


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real wheel of ``files`` (with the wheel spec's RECORD hashes)."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                          f"Version: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        rows.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*rows, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


TINY = {"tiny/__init__.py": "from .core import VALUE\n", "tiny/core.py": "VALUE = 42\n",
        "tiny/__pycache__/core.cpython-311.pyc": "shipped",
        "tiny/sub/__init__.py": "", "tiny/sub/deep.py": "DEEP = 1\n", "single.py": "X = 1\n"}


@pytest.fixture
def venv(tmp_path: Path):
    """A real venv and a function installing wheels into it with uv (offline, no cache:
    nothing here touches uv's cache)."""
    if not UV.exists():
        pytest.skip("uv (a dependency) not installed")
    env = tmp_path / "env"
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(env)], check=True,
                   capture_output=True, timeout=120)
    python = str(env / "bin" / "python")

    def add(*wheels: Path, extra: tuple[str, ...] = ()) -> None:
        done = subprocess.run([str(UV), "pip", "install", "-q", "--offline", "--python",
                               python, *extra, *map(str, wheels)], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "UV_NO_CACHE": "1"})
        assert done.returncode == 0, done.stderr

    return env, python, add


def _site(env: Path) -> Path:
    [site] = env.glob("lib/python*/site-packages")
    return site


def _replace(path: Path, text: str) -> None:
    """Delete and re-create (never edit in place: uv may have linked the file)."""
    path.unlink()
    path.write_text(text)


# --- which pins a cell has ---------------------------------------------------------------

def test_pins_are_torch_as_planned_and_the_exact_pins(mini_project) -> None:
    from accelgrid.config.matrix import load_matrix

    proj = mini_project()
    text = (proj / "matrix.yaml").read_text().replace(
        "\ndevices:", "\ntools: [pytest==9.2.0, Numpy_Thing==1.2, ranged>=1.0, star==1.*]"
        "\ndevices:", 1)
    (proj / "matrix.yaml").write_text(text)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    got = inputs.pins(cell, "torch==2.13.0+cpu")
    assert got == [inputs.Pin("torch", "torch==2.13.0+cpu", "cpu"),
                   inputs.Pin("pytest", "pytest==9.2.0"),
                   inputs.Pin("numpy-thing", "Numpy_Thing==1.2")]
    # Without a build tag, the version alone; a nightly range, the range; a local wheel,
    # its file's exact version and build.
    assert inputs.pins(cell, "torch==2.13.0")[0] == inputs.Pin("torch", "torch==2.13.0")
    assert inputs.pins(cell, "torch>=2.16.0.dev0,<2.16.0a0")[0].local is None
    wheel = "/w/torch-2.4.0a0+git1234-cp311-cp311-linux_x86_64.whl"
    assert inputs.pins(cell, wheel)[0] == inputs.Pin("torch", "torch==2.4.0a0+git1234",
                                                     "git1234")


def test_the_planned_torch_carries_the_plans_build_tag(mini_project) -> None:
    from accelgrid.config.matrix import load_matrix

    matrix = load_matrix(mini_project() / "matrix.yaml")
    cpu, xpu = matrix.cell("cpu-2.13"), matrix.cell("xpu-2.13")
    assert install.planned_torch(cpu) == install.torch_requirement(cpu)
    assert inputs.pins(xpu, install.planned_torch(xpu))[0].local == (
        xpu.torch_requirement.partition("+")[2] or None)


# --- the comparison, on a real venv -------------------------------------------------------

@pytest.mark.parametrize("installed,pin,local,differs", [
    ("1.0", "tiny==1.0", None, False),
    ("1.0.1", "tiny==1.0", None, True),            # just past: another patch
    ("1.0+cpu", "tiny==1.0+cpu", "cpu", False),
    ("1.0+cpu1", "tiny==1.0+cpu", "cpu", True),     # just past: another build
    ("1.0+cu130", "tiny==1.0", None, False),       # a pin naming no build takes any
    ("1.0", "tiny==1.0+cpu", "cpu", True),          # a build wanted, none found
    ("1.1.dev0", "tiny>=1.1.dev0,<1.1a0", None, False),   # a nightly range
    ("1.1a0", "tiny>=1.1.dev0,<1.1a0", None, True),
])
def test_differences_on_a_real_env(venv, tmp_path, installed, pin, local, differs) -> None:
    env, python, add = venv
    add(_wheel(tmp_path, "tiny", installed, TINY))
    wanted = [inputs.Pin("tiny", pin, local)]
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    assert found["tiny"].version == installed
    assert found["tiny"].dist_info.parent == _site(env)
    diffs = inputs.differences(wanted, found)
    assert diffs == ([inputs.Difference("tiny", pin, installed)] if differs else [])


def test_a_missing_pin_and_the_one_line(venv, tmp_path) -> None:
    env, python, add = venv
    add(_wheel(tmp_path, "tiny", "1.1", TINY))
    wanted = [inputs.Pin("tiny", "tiny==1.0"), inputs.Pin("absent", "absent==2.0")]
    found = inputs.installed(inputs.search_path(python), ["tiny", "absent"])
    line = inputs.one_line("cpu-2.13", inputs.differences(wanted, found))
    assert line == ("cpu-2.13: the env's inputs are not the matrix's: tiny: wanted "
                    "tiny==1.0, found 1.1; absent: wanted absent==2.0, found nothing installed")
    assert "\n" not in line


def test_the_first_distribution_on_the_path_wins(tmp_path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, version in ((first, "2.0"), (second, "1.0")):
        info = folder / f"tiny-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tiny\nVersion: {version}\n")
    assert inputs.installed([str(first), str(second)], ["tiny"])["tiny"].version == "2.0"
    assert inputs.installed([str(second), str(first)], ["tiny"])["tiny"].version == "1.0"


# --- RECORD hashes ------------------------------------------------------------------------

def test_record_hashes_find_a_replaced_top_level_file(venv, tmp_path) -> None:
    env, python, add = venv
    add(_wheel(tmp_path, "tiny", "1.0", TINY))
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    assert inputs.altered_files(found) == [] and inputs.altered_files(found, full=True) == []
    site = _site(env)
    # Just past: one byte more; just inside: the same bytes re-created (a new inode).
    _replace(site / "tiny" / "core.py", "VALUE = 42\n")
    assert inputs.altered_files(found) == []
    _replace(site / "tiny" / "core.py", "VALUE = 42\n\n")
    assert inputs.altered_files(found) == [inputs.Altered("tiny", "tiny/core.py", "differs")]
    _replace(site / "tiny" / "core.py", "")   # emptied
    _replace(site / "single.py", "X = 2\n")
    got = inputs.altered_files(found)
    assert got == [inputs.Altered("tiny", "single.py", "differs"),
                   inputs.Altered("tiny", "tiny/core.py", "differs")]
    assert inputs.altered_files(found, limit=1) == got[:1]
    assert inputs.altered_line("cpu-2.13", got) == (
        "cpu-2.13: single.py of tiny differs from its RECORD hash and 1 more file(s) (tiny)")
    (site / "tiny" / "core.py").unlink()
    assert inputs.Altered("tiny", "tiny/core.py", "missing") in inputs.altered_files(found)


def test_a_deeper_file_is_checked_with_the_full_flag(venv, tmp_path, monkeypatch) -> None:
    env, python, add = venv
    add(_wheel(tmp_path, "tiny", "1.0", TINY))
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    _replace(_site(env) / "tiny" / "sub" / "deep.py", "DEEP = 2\n")
    assert inputs.altered_files(found) == []   # not a top-level file: the everyday check
    want = [inputs.Altered("tiny", "tiny/sub/deep.py", "differs")]
    assert inputs.altered_files(found, full=True) == want
    # A .pyc a wheel ships is Python's to rewrite: never a difference.
    _replace(_site(env) / "tiny" / "__pycache__" / "core.cpython-311.pyc", "rewritten")
    assert inputs.altered_files(found, full=True) == want
    monkeypatch.setenv(inputs.VERIFY, "full")
    assert inputs.full_check()
    monkeypatch.setenv(inputs.VERIFY, "")
    assert not inputs.full_check()


def test_a_reinstall_repairs_what_the_record_check_found(venv, tmp_path) -> None:
    """What the session does: uv pip install --reinstall-package NAME restores the bytes
    (uv alone sees the metadata and changes nothing)."""
    env, python, add = venv
    wheel = _wheel(tmp_path, "tiny", "1.0", TINY)
    add(wheel)
    _replace(_site(env) / "tiny" / "core.py", "")
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    add(wheel)
    assert inputs.altered_files(found) != []
    add(wheel, extra=("--reinstall-package", "tiny"))
    assert inputs.altered_files(found) == []
    assert (_site(env) / "tiny" / "core.py").read_text() == "VALUE = 42\n"


def test_an_in_place_edit_through_uvs_links_is_repaired_from_the_wheel(venv, tmp_path
                                                                        ) -> None:
    """An env hardlinked to uv's cache, a file edited in place: the cache holds the edit
    too, a reinstall brings it back; reinstall(clean_cache=True) takes the wheel afresh.
    (A private cache: nothing here touches the user's.)"""
    env, python, _ = venv
    wheel = _wheel(tmp_path, "tiny", "1.0", TINY)
    uv_env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
              "UV_LINK_MODE": "hardlink", "UV_OFFLINE": "1"}
    steps: list[tuple[tuple[str, ...], dict[str, str]]] = [((str(wheel),), {})]
    assert inputs.reinstall(str(UV), python, [], steps, uv_env) is None
    core = _site(env) / "tiny" / "core.py"
    assert core.stat().st_nlink > 1   # linked to the cache
    with open(core, "a") as fh:       # in place, as an editor's save or a debugging print
        fh.write("print('debugging')\n")
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    edited = [inputs.Altered("tiny", "tiny/core.py", "differs")]
    assert inputs.altered_files(found) == edited
    assert inputs.reinstall(str(UV), python, ["tiny"], steps, uv_env) is None
    assert inputs.altered_files(found) == edited     # the cache gave the edit back
    assert inputs.reinstall(str(UV), python, ["tiny"], steps, uv_env, clean_cache=True) is None
    assert inputs.altered_files(found) == [] and core.read_text() == "VALUE = 42\n"
    # A failing uv: its last lines.
    bad = inputs.reinstall(str(UV), python, ["tiny"], [((str(tmp_path / "no.whl"),), {})],
                           uv_env)
    assert bad and "no.whl" in bad


def test_the_check_of_a_cells_env_costs_little(venv, tmp_path, mini_project) -> None:
    """The whole check (the env's path from its python, the pins, the hashes) on a small
    env; torch's own cost is in docs/guides/running.md."""
    from accelgrid.config.matrix import load_matrix

    env, python, add = venv
    add(_wheel(tmp_path, "torch", "2.13.0+cpu", {"torch/__init__.py": "X = 1\n"}))
    cell = load_matrix(mini_project() / "matrix.yaml").cell("cpu-2.13")
    got = inputs.check(cell, "torch==2.13.0+cpu", python)
    assert got.ok and got.pins == [inputs.Pin("torch", "torch==2.13.0+cpu", "cpu")]
    got = inputs.check(cell, "torch==2.13.0+cu130", python)
    assert got.differences == [inputs.Difference("torch", "torch==2.13.0+cu130", "2.13.0+cpu")]


# --- after the run: env.json -------------------------------------------------------------

@pytest.mark.parametrize("env_json,differs", [
    ({"torch": {"version": "2.13.0+cpu"}, "packages": {"pytest": "9.2.0"}}, []),
    ({"torch": {"version": "2.13.1+cpu"}, "packages": {"pytest": "9.2.0"}}, ["torch"]),
    ({"torch": {"version": "2.13.0+cpu"}, "packages": {"pytest": "9.1.1"}}, ["pytest"]),
    ({"torch": {"pending": True}, "packages": {}}, []),   # nothing recorded: nothing to say
])
def test_env_json_after_the_run(env_json, differs) -> None:
    wanted = [inputs.Pin("torch", "torch==2.13.0+cpu", "cpu"),
              inputs.Pin("pytest", "pytest==9.2.0")]
    assert [d.name for d in inputs.after_run(env_json, wanted)] == differs


def test_accepted_inputs_are_expected_after_the_run_and_nothing_else() -> None:
    wanted = [inputs.Pin("torch", "torch==2.13.0+cpu", "cpu")]
    accepted = [inputs.Difference("torch", "torch==2.13.0+cpu", "2.13.1+cpu")]
    ran = {"torch": {"version": "2.13.1+cpu"}}
    assert inputs.after_run(ran, wanted, accepted) == []
    other = {"torch": {"version": "2.13.2+cpu"}}
    assert [d.found for d in inputs.after_run(other, wanted, accepted)] == ["2.13.2+cpu"]


def test_accepting_takes_an_explicit_yes() -> None:
    assert inputs.accepted({inputs.ACCEPT: "1"})
    assert not inputs.accepted({inputs.ACCEPT: "0"}) and not inputs.accepted({})


# --- uv's link mode -----------------------------------------------------------------------

def test_cell_envs_copy_unless_the_user_chose_a_link_mode(monkeypatch, mini_project) -> None:
    from accelgrid.config.matrix import load_matrix

    cell = load_matrix(mini_project() / "matrix.yaml").cell("cpu-2.13")
    monkeypatch.delenv("UV_LINK_MODE", raising=False)
    assert install.plan(cell, uv_env={}).env == {"UV_LINK_MODE": "copy"}
    monkeypatch.setenv("UV_LINK_MODE", "clone")
    assert install.plan(cell, uv_env={}).env == {}   # uv reads the user's own


def test_the_grid_column_says_it_ran_on_accepted_inputs(tmp_path) -> None:
    from accelgrid.report import model as grid_model
    from accelgrid.results.cellresults import CellResults

    cell = CellResults("cpu-2.13", tmp_path, env={  # type: ignore[typeddict-unknown-key]
        "cell": "cpu-2.13", "inputs": {"accepted_mismatch": [
            "torch: wanted torch==2.13.0+cpu, found 2.13.1+cpu"], "altered": []}})
    column = grid_model._column(cell, "cpu-2.13")
    assert column["status"] == "partial"
    assert column["reason"] == ("ran on other inputs than its pins (accepted): torch: wanted "
                                "torch==2.13.0+cpu, found 2.13.1+cpu")
    plain = grid_model._column(CellResults("cpu-2.13", tmp_path, env={"cell": "cpu-2.13"}),
                               "cpu-2.13")
    assert plain["status"] == "ok"
    json.dumps(column)


# --- real cell sessions (slow): a one-cell project, torch from the local wheels ---------

def _nox(proj: Path, *args: str, **env: str) -> tuple[int, str]:
    """``nox ARGS -s cpu-2.13`` in ``proj``: its exit status and output."""
    done = subprocess.run([sys.executable, "-m", "nox", "-f", str(proj / "noxfile.py"), *args,
                           "-s", "cpu-2.13"], cwd=proj, capture_output=True, text=True,
                          timeout=900, env={**os.environ, **env,
                                            "ACCELGRID_RESULTS_DIR": str(proj / "results")})
    return done.returncode, done.stdout + done.stderr


def _said(out: str, words: str) -> list[str]:
    return [ln for ln in out.splitlines() if words in ln]


def _outcomes(proj: Path) -> list[str]:
    from accelgrid import results
    from accelgrid.base import contract

    folder = results.last_run(proj / "results" / "cpu-2.13")[1]
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    return [r["outcome"] for r in recs]


@pytest.fixture
def torch_project(mini_project):
    proj = mini_project(noxfile=True)
    (proj / "src").symlink_to(Path(__file__).resolve().parents[2] / "src")
    (proj / "suites" / "payload" / "test_torch.py").write_text(
        "import torch\n\ndef test_add():\n    assert (torch.ones(2) + 1).sum() == 4\n")
    return proj


@pytest.mark.slow
def test_a_cell_env_refuses_a_hand_changed_pin_and_repairs_a_replaced_torch_file(
        torch_project, monkeypatch) -> None:
    """Real uv envs: built with copies (no file shares an inode with uv's cache); a pin
    changed by hand, then ``nox -R``: refused in one line before any test; a torch
    top-level file replaced: reinstalled with one line, even under -R, and the tests run."""
    proj = torch_project
    env = {"ACCELGRID_TORCH_INDEX": "default"}   # torch's CPU build from pip's configuration
    monkeypatch.delenv("UV_LINK_MODE", raising=False)
    rc, out = _nox(proj, "--install-only", **env)
    assert rc == 0, out[-3000:]
    envdir = proj / ".nox" / "cpu-2-13"
    python = str(envdir / "bin" / "python")
    [site] = envdir.glob("lib/python*/site-packages")
    functional = site / "torch" / "functional.py"
    assert functional.stat().st_nlink == 1 and (site / "torch" / "__init__.py").stat(
        ).st_nlink == 1   # copies: an edit here never reaches uv's cache

    # 1. A pinned tool changed by hand (as `uv pip install` in the env would): -R refuses.
    done = subprocess.run([str(UV), "pip", "install", "-q", "--python", python,
                           "pytest==9.1.1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rc, out = _nox(proj, "-R", **env)
    said = _said(out, "the env's inputs are not the matrix's")
    assert rc != 0 and len(said) == 1, out[-3000:]
    assert said[0].endswith("cpu-2.13: the env's inputs are not the matrix's: pytest: wanted "
                            "pytest==9.2.0, found 9.1.1: nothing was installed (nox -R / "
                            "--no-install); run without -R to install the pins."), said
    assert not (proj / "results" / "cpu-2.13").exists()   # before any test
    # Without -R the pins are installed again and the cell runs.
    rc, out = _nox(proj, **env)
    assert rc == 0 and _outcomes(proj) == ["passed"], out[-3000:]

    # 2. A torch top-level file replaced (deleted and re-created: emptied), then -R.
    text = functional.read_bytes()
    functional.unlink()
    functional.write_text("")
    rc, out = _nox(proj, "-R", **env)
    said = _said(out, "from its RECORD hash")
    assert rc == 0 and len(said) == 1, out[-3000:]
    assert said[0].endswith("cpu-2.13: torch/functional.py of torch differs from its RECORD "
                            "hash (torch): reinstalling torch"), said
    assert functional.read_bytes() == text and _outcomes(proj) == ["passed"]
    # 3. Whole again: nothing said.
    rc, out = _nox(proj, "-R", **env)
    assert rc == 0 and not _said(out, "RECORD hash") and not _said(out, "inputs"), out[-3000:]


@pytest.mark.slow
def test_no_venv_on_another_torch_is_refused_unless_accepted_and_then_marked(
        torch_project) -> None:
    """--no-venv on this interpreter's torch (2.13.0+cpu) for a cell pinning 2.13.1: the
    series matches, the pin does not. Refused in one line; accepted with
    ACCELGRID_ACCEPT_INPUTS=1, the run records it and its grid column says so."""
    import torch

    from accelgrid import results
    from accelgrid.base import contract
    from accelgrid.report import grid

    proj = torch_project
    have = torch.__version__
    other = ".".join([*have.split("+")[0].split(".")[:2], "99"])
    text = (proj / "matrix.yaml").read_text()
    (proj / "matrix.yaml").write_text(text.replace('"2.13": {torch: "2.13.0"',
                                                   f'"2.13": {{torch: "{other}"', 1))
    rc, out = _nox(proj, "--no-venv")
    said = _said(out, "the env's inputs are not the matrix's")
    assert rc != 0 and len(said) == 1, out[-3000:]
    local = install.cpu_build_tag()
    wanted = f"torch=={other}" + (f"+{local}" if local else "")
    assert f"cpu-2.13: the env's inputs are not the matrix's: torch: wanted {wanted}, " \
           f"found {have} (--no-venv runs on the current interpreter" in said[0], said
    assert not (proj / "results" / "cpu-2.13").exists()

    rc, out = _nox(proj, "--no-venv", ACCELGRID_ACCEPT_INPUTS="1")
    assert rc == 0 and len(_said(out, "running on them (ACCELGRID_ACCEPT_INPUTS=1)")) == 1, \
        out[-3000:]
    assert _outcomes(proj) == ["passed"]
    folder = results.last_run(proj / "results" / "cpu-2.13")[1]
    env = json.loads((folder / contract.ENV_FILE).read_text())
    assert env["torch"]["version"] == have
    assert env["inputs"]["accepted_mismatch"] == [f"torch: wanted {wanted}, found {have}"]
    made = grid([proj / "results" / "cpu-2.13"], proj / "grid")
    [column] = made.model["columns"]
    assert column["reason"] is not None
    assert column["status"] == "partial" and "ran on other inputs than its pins" in \
        column["reason"]


def test_a_file_rewritten_since_it_matched_is_hashed_again(venv, tmp_path, monkeypatch
                                                           ) -> None:
    """The files that matched are kept by stat key (host.statcache); one written since,
    even in place at its size with its times put back (only its ctime tells), is hashed
    again and found."""
    from accelgrid.host import statcache

    monkeypatch.setattr(statcache, "RACY_S", 0.0)
    env, python, add = venv
    add(_wheel(tmp_path, "tiny", "1.0", TINY))
    found = inputs.installed(inputs.search_path(python), ["tiny"])
    kept = tmp_path / "hashed.json"

    def check() -> list[inputs.Altered]:
        time.sleep(0.01)
        store = statcache.Store(kept)
        try:
            return inputs.altered_files(found, store=store)
        finally:
            store.save()

    assert check() == [] and json.loads(kept.read_text())["entries"]
    assert check() == []
    core = _site(env) / "tiny" / "core.py"
    before = os.stat(core)
    with open(core, "r+") as fh:   # this venv's files are its own (no uv cache)
        fh.write("VALUE = 43\n")
    os.utime(core, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(core).st_mtime_ns == before.st_mtime_ns
    assert check() == [inputs.Altered("tiny", "tiny/core.py", "differs")]
    assert check() == [inputs.Altered("tiny", "tiny/core.py", "differs")]   # not kept
    _replace(core, "VALUE = 42\n")
    assert check() == []
