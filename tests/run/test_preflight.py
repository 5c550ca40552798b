"""The preflight (accelgrid.run.preflight) runs once per run: one `nox -s CELL` (what
`accelgrid run CELL` runs) asks whether the device is here once, resolves the cell's
hardware once and validates the registry once, and hands them down to the run and its env
(before: 2, 4 and 3 times)."""

from __future__ import annotations

import ast
import json
import runpy
import sys
from collections import Counter
from pathlib import Path

import pytest

from accelgrid import results
from accelgrid.base import contract
from accelgrid.config import known_issues
from accelgrid.config.matrix import load_matrix
from accelgrid.host import detect
from accelgrid.run import cell as run_cell_module
from accelgrid.run import preflight
from accelgrid.run.request import RunRequest

# An entry the run must apply (so the registry it validated once is the one handed down).
REGISTRY = ("schema: 1\nissues:\n  acme/widgets#1:\n    title: planted\n"
            "    scope: {devices: [cpu]}\n"
            "    tests: [suites/payload/test_payload.py::test_fails]\n    expect: failed\n")
PAYLOAD = "def test_fails():\n    assert False, 'the planted upstream bug'\n"


def _count_checks(monkeypatch) -> Counter:
    """Counts of the preflight's questions: (hardware, cell name), (device, device name)
    and registry."""
    calls: Counter = Counter()
    resolve, load, absent = (detect.resolve_hardware, known_issues.load_registry,
                             detect.absent_reason)

    def counting_resolve(cell, *args, **kwargs):
        calls["hardware", cell.name] += 1
        return resolve(cell, *args, **kwargs)

    def counting_absent(device, *args, **kwargs):
        calls["device", device] += 1
        return absent(device, *args, **kwargs)

    def counting_load(*args, **kwargs):
        calls["registry"] += 1
        return load(*args, **kwargs)

    monkeypatch.setattr(detect, "resolve_hardware", counting_resolve)
    monkeypatch.setattr(known_issues, "load_registry", counting_load)
    monkeypatch.setattr(detect, "absent_reason", counting_absent)
    monkeypatch.delenv(known_issues.ENV_DISABLE, raising=False)
    return calls


def test_a_direct_run_checks_once_before_its_passes(mini_project, monkeypatch) -> None:
    """A run's caller makes its preflight once (the request's required field); the run and
    its env reuse it, asking nothing again."""
    proj = mini_project()
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    (proj / "known_issues.yaml").write_text(REGISTRY)
    calls = _count_checks(monkeypatch)
    seen: dict[str, dict[str, str]] = {}

    def no_passes(run: run_cell_module.CellRun) -> int:
        seen["env"] = run.env
        return 0

    monkeypatch.setattr(run_cell_module, "run_steps", no_passes)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    checked = preflight.check(cell, proj)
    assert calls == {("hardware", "cpu-2.13"): 1, "registry": 1}
    with pytest.raises(TypeError):   # no request without its preflight
        RunRequest(cell, sys.executable, proj, proj / "results")  # type: ignore[call-arg]
    request = RunRequest(cell, sys.executable, proj, proj / "results", checked)
    assert run_cell_module.run_cell(request) == 0
    assert calls == {("hardware", "cpu-2.13"): 1, "registry": 1}
    # The registry read once is the one the env hands the plugin.
    entries = json.loads(Path(seen["env"][contract.KNOWN_ISSUES]).read_text())["issues"]
    assert [e["id"] for e in entries] == ["acme/widgets#1"]


# The modules that make a run's preflight: each makes it once, for the run it opens (a
# session, `accelgrid env`, the head start). Below them nothing asks again.
PREFLIGHT_MAKERS = {"accelgrid.commands.sessions", "accelgrid.commands.cellshell",
                    "accelgrid.run.headstart.prestart"}


def _preflight_makers(sources: dict[str, str]) -> set[str]:
    """The modules (name -> source) that call ``preflight.check``."""
    return {name for name, text in sources.items()
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "check" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "preflight"}


def _sources() -> dict[str, str]:
    src = Path(preflight.__file__).resolve().parents[2]
    return {".".join(p.relative_to(src).with_suffix("").parts): p.read_text()
            for p in (src / "accelgrid").rglob("*.py")}


def test_only_the_doors_make_a_preflight() -> None:
    """No fallback below the callers (`checked or preflight.check(...)`): the run, its env
    and the registry's entries take the one they are handed."""
    sources = _sources()
    assert _preflight_makers(sources) == PREFLIGHT_MAKERS
    # A planted fallback in the run's env is seen.
    planted = dict(sources)
    planted["accelgrid.run.cellenv"] += ("\n\ndef _again(cell, root, checked=None):\n"
                                         "    return checked or preflight.check(cell, root)\n")
    assert _preflight_makers(planted) == PREFLIGHT_MAKERS | {"accelgrid.run.cellenv"}


@pytest.mark.slow  # a real cell run through nox
def test_one_nox_session_checks_hardware_and_registry_once(mini_project, monkeypatch,
                                                           tmp_path: Path) -> None:
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_payload.py").write_text(PAYLOAD)
    (proj / "known_issues.yaml").write_text(REGISTRY)
    calls = _count_checks(monkeypatch)
    out = tmp_path / "results"
    monkeypatch.setenv(contract.RESULTS_DIR, str(out))
    monkeypatch.chdir(proj)
    # nox in this process (as `accelgrid run` runs the project's own noxfile), so the
    # counters see the registration, the session, the run and its env.
    monkeypatch.setattr(sys, "argv", ["nox", "-f", str(proj / "noxfile.py"), "-s", "cpu-2.13",
                                      "--no-venv"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_module("nox", run_name="__main__", alter_sys=True)
    assert ended.value.code == 0
    assert calls["hardware", "cpu-2.13"] == 1
    assert calls["registry"] == 1
    assert calls["device", "cpu"] == 1     # the registration's, handed to the session
    folder = results.last_run(out / "cpu-2.13")[1]
    recs, _ = results.read_records(folder / contract.TESTS_FILE)
    assert [r["outcome"] for r in recs] == ["xfailed"]
