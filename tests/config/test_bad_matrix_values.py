"""Issue 16, matrix values that used to validate and should not: suite folders outside the
project, absurd or fractional workers and timeouts, index URLs with no host (or with
credentials), installer options posing as requirements, a matrix of no cells, flags on a
device that does not read them, over-long names. Each is one variant of
tests/base_matrix.yaml and gives exactly one ``FILE:LINE: key: message`` line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelgrid import cli
from accelgrid.base import errors
from accelgrid.config.matrix import load_matrix
from accelgrid.config.validation import ValidationFailed

TESTS = Path(__file__).resolve().parents[1]
BASE = (TESTS / "base_matrix.yaml").read_text()
CPU = "    runner: {labels: [ubuntu-24.04], hosted: true}\n"
XPU_ENV = "    env: {PYTORCH_DEBUG_XPU_FALLBACK: \"1\"}\n"

# (id, [(old, new), ...] applied to base_matrix.yaml, key path, message)
CASES: list[tuple[str, list[tuple[str, str]], str, str]] = [
    # suite folders
    ("suite-etc", [("smoke: {path: .}", "smoke: {path: /etc}")], "suites.smoke.path",
     "suite folder '/etc' must be relative to the matrix's folder"),
    ("suite-dotdot", [("smoke: {path: .}", "smoke: {path: ../../..}")], "suites.smoke.path",
     "suite folder '../../..' leads outside the project ('..')"),
    ("suite-inner-dotdot", [("smoke: {path: .}", "smoke: {path: suites/../../x}")],
     "suites.smoke.path", "leads outside the project ('..')"),
    ("suite-home", [("smoke: {path: .}", "smoke: {path: ~/tests}")], "suites.smoke.path",
     "must be relative to the matrix's folder"),
    ("suite-windows-drive", [("smoke: {path: .}", "smoke: {path: 'C:/tests'}")],
     "suites.smoke.path", "must be relative to the matrix's folder"),
    ("suite-backslash-dotdot", [("smoke: {path: .}", "smoke: {path: '..\\\\..'}")],
     "suites.smoke.path", "leads outside the project ('..')"),
    ("suite-symlink-out", [("smoke: {path: .}", "smoke: {path: escape}")], "suites.smoke.path",
     "suite folder 'escape' leads outside the project (a symlink)"),
    ("suite-nul", [("smoke: {path: .}", 'smoke: {path: "a\\0b"}')], "suites.smoke.path",
     "holds the control character \\x00"),  # issue 27: refused before the path checks
    ("suite-5000-chars", [("smoke: {path: .}", "smoke: {path: " + "a" * 5000 + "}")],
     "suites.smoke.path", "too long: 5000 characters (at most 255)"),
    ("suite-255-chars-missing", [("smoke: {path: .}", "smoke: {path: " + "a" * 255 + "}")],
     "suites.smoke.path", "does not exist"),
    ("suite-empty", [("smoke: {path: .}", "smoke: {path: ''}")], "suites.smoke.path",
     "must not be empty"),
    ("suite-a-file", [("smoke: {path: .}", "smoke: {path: matrix.yaml}")],
     "suites.smoke.path", "suite folder 'matrix.yaml' does not exist"),
    # workers
    ("workers-10000", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: 10000\n")],
     "defaults.workers", "10000 is above the maximum of 256 (a whole number of workers, 1 to "
                         "256)"),
    ("workers-2.0", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: 2.0\n")],
     "defaults.workers", "expected integer, got 2.0 (a whole number, no decimal point)"),
    ("workers-0", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: 0\n")],
     "defaults.workers", "0 is below the minimum of 1"),
    ("workers-negative", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: -4\n")],
     "defaults.workers", "-4 is below the minimum of 1"),
    ("workers-true", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: true\n")],
     "defaults.workers", "expected integer, got a boolean"),
    ("workers-string", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: '4'\n")],
     "defaults.workers", "expected integer, got a string"),
    ("workers-inf", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: .inf\n")],
     "defaults.workers", "expected integer, got inf"),
    ("workers-nan", [("  suites: [smoke]\n", "  suites: [smoke]\n  workers: .nan\n")],
     "defaults.workers", "expected integer, got nan"),
    ("device-workers-10000", [(CPU, CPU + "    workers: 10000\n")], "devices.cpu.workers",
     "10000 is above the maximum of 256"),
    ("rule-workers-2.5", [('profile: fallback-debug}', 'profile: fallback-debug, workers: 2.5}')],
     "matrix.include[0].workers", "expected integer, got 2.5"),
    # timeouts
    ("cell-minutes-10e12", [("  suites: [smoke]\n", "  suites: [smoke]\n  timeout: "
                             "{cell_minutes: 1000000000000}\n")],
     "defaults.timeout.cell_minutes", "1000000000000 is above the maximum of 1440"),
    ("cell-minutes-0", [("  suites: [smoke]\n", "  suites: [smoke]\n  timeout: "
                         "{cell_minutes: 0}\n")],
     "defaults.timeout.cell_minutes", "0 is below the minimum of 1"),
    ("cell-minutes-1.5", [("  suites: [smoke]\n", "  suites: [smoke]\n  timeout: "
                           "{cell_minutes: 1.5}\n")],
     "defaults.timeout.cell_minutes", "expected integer, got 1.5"),
    ("test-seconds-10e9", [("  suites: [smoke]\n", "  suites: [smoke]\n  timeout: "
                            "{test_seconds: 1000000000}\n")],
     "defaults.timeout.test_seconds", "1000000000 is above the maximum of 86400"),
    ("rule-cell-minutes-10e12", [('profile: fallback-debug}',
                                  'profile: fallback-debug, timeout: {cell_minutes: 99999999}}')],
     "matrix.include[0].timeout.cell_minutes", "99999999 is above the maximum of 1440"),
    # index URLs
    ("index-no-host", [("https://download.pytorch.org/whl/xpu", "http:///")],
     "devices.xpu.index", "'http:///' has no host"),
    ("index-only-port", [("https://download.pytorch.org/whl/xpu", "https://:8080/whl")],
     "devices.xpu.index", "has no host"),
    ("index-bad-port", [("https://download.pytorch.org/whl/xpu", "https://host:99999/whl")],
     "devices.xpu.index", "is not a valid URL: Port out of range 0-65535"),
    ("index-bad-ipv6", [("https://download.pytorch.org/whl/xpu", "https://[::1/whl")],
     "devices.xpu.index", "is not a valid URL: Invalid IPv6 URL"),
    ("index-credentials", [("https://download.pytorch.org/whl/xpu",
                            "https://user:hunter2@mirror.example/whl")], "devices.xpu.index",
     "'https://<redacted>@mirror.example/whl' carries credentials: keep them out of committed "
     "files"),
    ("index-file-no-path", [("https://download.pytorch.org/whl/xpu", "file://")],
     "devices.xpu.index", "is not valid"),
    ("index-ftp", [("https://download.pytorch.org/whl/xpu", "ftp://mirror/whl")],
     "devices.xpu.index", "'ftp://mirror/whl' is not valid: expected 'default' or an index URL"),
    # requirements
    ("tool-option", [("schema: 1\n", "schema: 1\ntools: ['--index-url=http://evil/simple']\n")],
     "tools[0]", "'--index-url=http://evil/simple' is an installer option, not a requirement"),
    ("tool-editable", [("schema: 1\n", "schema: 1\ntools: ['-e .']\n")], "tools[0]",
     "is an installer option"),
    ("tool-garbage", [("schema: 1\n", "schema: 1\ntools: ['pytest ===== ?']\n")], "tools[0]",
     "is not a requirement"),
    ("package-url-credentials", [("needs: [transformers], devices: [xpu]}",
                                  "needs: [transformers], devices: [xpu], packages: "
                                  "['pkg @ https://u:p4ss@host/pkg.whl']}")],
     "suites.hf.packages[0]", "carries credentials"),
    # no cells
    ("no-cells", [("  include:\n    - {device: xpu, torch: \"2.13\", profile: fallback-debug}\n",
                   "  exclude:\n    - {torch: \"2.4\"}\n    - {torch: \"2.13\"}\n")],
     "matrix", "expands to no cells: the exclude rules remove every combination"),
    ("no-cells-by-device", [("  include:\n    - {device: xpu, torch: \"2.13\", profile: "
                             "fallback-debug}\n", "  exclude:\n    - {device: cpu}\n"
                                                  "    - {device: xpu}\n")],
     "matrix", "expands to no cells"),
    # flags on a device that does not read them
    ("xpu-flag-on-cpu-profile", [("    devices: [xpu]\n" + XPU_ENV,
                                  "    devices: [cpu]\n" + XPU_ENV)],
     "profiles.fallback-debug.env.PYTORCH_DEBUG_XPU_FALLBACK",
     "PYTORCH_DEBUG_XPU_FALLBACK is read by xpu only, not by cpu (profile fallback-debug lists "
     "cpu)"),
    ("xpu-fallback-on-cpu", [(XPU_ENV, "    env: {PYTORCH_ENABLE_XPU_FALLBACK: \"1\"}\n"),
                             ("    devices: [xpu]\n", "    devices: [cpu]\n")],
     "profiles.fallback-debug.env.PYTORCH_ENABLE_XPU_FALLBACK", "read by xpu only, not by cpu"),
    ("ze-flag-everywhere", [("  default: {env: {}}", "  default: {env: {ZE_AFFINITY_MASK: '0'}}")],
     "profiles.default.env.ZE_AFFINITY_MASK",
     "ZE_AFFINITY_MASK is read by xpu only, but profile default applies to every device: add "
     "devices: [xpu]"),
    ("igc-on-cpu-and-xpu", [("    devices: [xpu]\n" + XPU_ENV,
                             "    devices: [cpu, xpu]\n    env: {IGC_EnableDPEmulation: '1'}\n")],
     "profiles.fallback-debug.env.IGC_EnableDPEmulation", "read by xpu only, not by cpu"),
    ("sycl-on-cpu", [("    devices: [xpu]\n" + XPU_ENV,
                      "    devices: [cpu]\n    env: {SYCL_CACHE_PERSISTENT: '1'}\n")],
     "profiles.fallback-debug.env.SYCL_CACHE_PERSISTENT", "read by xpu only, not by cpu"),
    ("fp64-override-on-cpu", [("    devices: [xpu]\n" + XPU_ENV, "    devices: [cpu]\n"
                               "    env: {OverrideDefaultFP64Settings: '1'}\n")],
     "profiles.fallback-debug.env.OverrideDefaultFP64Settings", "read by xpu only"),
    ("mps-flag-on-xpu", [(XPU_ENV, "    env: {PYTORCH_ENABLE_MPS_FALLBACK: \"1\"}\n")],
     "profiles.fallback-debug.env.PYTORCH_ENABLE_MPS_FALLBACK",
     "PYTORCH_ENABLE_MPS_FALLBACK is read by mps only, not by xpu"),
    ("cuda-flag-on-xpu", [(XPU_ENV, "    env: {PYTORCH_NO_CUDA_MEMORY_CACHING: \"1\"}\n")],
     "profiles.fallback-debug.env.PYTORCH_NO_CUDA_MEMORY_CACHING", "read by cuda only, not by xpu"),
    ("xpu-flag-in-cpu-device-env", [(CPU, CPU + "    env: {ZE_FLAT_DEVICE_HIERARCHY: FLAT}\n")],
     "devices.cpu.env.ZE_FLAT_DEVICE_HIERARCHY", "read by xpu only, not by cpu (device cpu "
                                                 "lists cpu)"),
    ("env-nul", [(CPU, CPU + '    env: {OMP_NUM_THREADS: "4\\0"}\n')],
     "devices.cpu.env.OMP_NUM_THREADS", "holds the control character \\x00"),
    # names and keys of absurd length
    ("profile-name-100", [("  fallback-debug:", "  " + "p" * 100 + ":"),
                          ("profile: fallback-debug}", "profile: " + "p" * 100 + "}")],
     "profiles." + "p" * 79 + "…", "invalid name '" + "p" * 59 + "…': expected lower-case "
                                   "letters, digits and '-' (at most 64)"),
    ("suite-name-100", [("  hf: {path: .", "  " + "s" * 100 + ": {path: .")],
     "suites." + "s" * 79 + "…", "(at most 64)"),
    ("env-name-200", [(CPU, CPU + "    env: {" + "V" * 200 + ": x}\n")],
     "devices.cpu.env." + "V" * 79 + "…", "invalid name"),
    ("unknown-key-1000", [("schema: 1\n", "schema: 1\n" + "k" * 1000 + ": 1\n")],
     "k" * 79 + "…", "unknown key '" + "k" * 59 + "…'; expected one of"),
    ("binary-value", [("schema: 1\n", "schema: !!binary aGVsbG8=\n")], "schema",
     "'b'hello'' is not one of: 1"),
    ("set-value", [("  suites: [smoke]\n", "  suites: !!set {smoke}\n")], "defaults.suites",
     "expected array, got set"),
]
IDS = [c[0] for c in CASES]


def _write(tmp_path: Path, case: str) -> Path:
    _, subs, _, _ = CASES[IDS.index(case)]
    proj = tmp_path / "proj"
    proj.mkdir()
    text = BASE
    for old, new in subs:
        assert old in text, (case, old)
        text = text.replace(old, new, 1)
    (proj / "matrix.yaml").write_text(text)
    if case == "suite-symlink-out":
        os.symlink(tmp_path, proj / "escape")
    return proj / "matrix.yaml"


@pytest.mark.parametrize("case", IDS)
def test_bad_matrix_value_is_one_line(tmp_path, capsys, case: str) -> None:
    _, _, key, message = CASES[IDS.index(case)]
    path = _write(tmp_path, case)
    with pytest.raises(ValidationFailed) as info:
        load_matrix(path)
    (problem,) = info.value.problems
    assert str(problem).startswith(f"{path}:{problem.line}: {key}: "), str(problem)
    assert isinstance(problem.line, int)
    assert message in str(problem), str(problem)
    assert cli.main(["validate", str(path)]) == errors.EXIT_INVALID
    assert capsys.readouterr().err.strip() == str(problem)


def test_the_repo_matrix_passes_every_new_check(root: Path) -> None:
    matrix = load_matrix(root / "matrix.yaml")
    assert len(matrix.cells) >= 20
    assert all(1 <= c.workers <= 256 and 1 <= c.cell_minutes <= 1440 for c in matrix.cells)
