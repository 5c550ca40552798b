"""Hugging Face's own tests in the cell's pytest run: transformers' ``tests/models/...``
from ``ACCELGRID_TRANSFORMERS_SRC`` and accelerate's ``tests/`` from
``ACCELGRID_ACCELERATE_SRC`` (checkouts at the installed versions, found as
:mod:`accelgrid.testing.hf_checkouts` says), through a device spec generated from accelgrid's
device tables (:mod:`accelgrid.testing.hf_spec`).

``test_transformers_own.py`` and ``test_accelerate_own.py`` stand for the checkouts: this
conftest collects the selected upstream files in their place, each as a module of its own
with node ids ``suites/hf_tests/<project>/<path under tests/>::...``, so every upstream test
is one record of the cell (crashes, hangs and xdist sharding as for any other test). The
selection: ``--hf-transformers`` / ``--hf-accelerate`` on the command line, else the cell's
``ACCELGRID_HF_TRANSFORMERS_TESTS`` / ``ACCELGRID_HF_ACCELERATE_TESTS`` (matrix.yaml's
``suites.hf_tests.env``, an include rule's ``env``); ``none`` selects nothing.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelgrid.base import contract
from accelgrid.base.outcomes import NOT_RUN_PREFIX, not_run
from accelgrid.testing import hf_checkouts, hf_spec

from . import hf_ops

PROJECTS = {
    "transformers": hf_checkouts.Project("transformers", contract.TRANSFORMERS_SRC, "tests"),
    # accelerate's newest reachable tree is main before 1.15.0 (1.15.0.dev0):
    # docs/suites/hf_tests.md
    "accelerate": hf_checkouts.Project("accelerate", contract.ACCELERATE_SRC, "tests",
                                       dev_of_release=True),
}
UPSTREAM = ("suites/hf_tests/transformers/", "suites/hf_tests/accelerate/")
STANDS_FOR = {"test_transformers_own.py": "transformers", "test_accelerate_own.py": "accelerate"}
SELECTION_VAR = {"transformers": contract.HF_TRANSFORMERS_TESTS,
                 "accelerate": contract.HF_ACCELERATE_TESTS}
# Markers transformers' own root conftest registers (its conftest is not loaded here).
HF_MARKERS = ("accelerate_tests", "all_flash_attn_test", "flash_attn_3_test",
              "flash_attn_4_test", "flash_attn_test", "fsdp_ci", "is_pipeline_test",
              "is_staging_test", "not_device_test", "tensor_parallel_ci",
              "torch_compile_test", "torch_export_test", "training_ci", "generate")
# Offline, slow tests off unless the caller turned them on (they download checkpoints).
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "RUN_SLOW": "0"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accelgrid hf_tests")
    for project, var in SELECTION_VAR.items():
        group.addoption(f"--hf-{project}", dest=f"hf_{project}", default=None,
                        help=f"{project}'s own test files to run (comma-separated: model "
                             "names or paths under the checkout's tests/; 'none' for none); "
                             f"default: ${var}, set from matrix.yaml")


def pytest_configure(config: pytest.Config) -> None:
    for name in HF_MARKERS:
        config.addinivalue_line("markers", f"{name}: transformers' own marker")
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    for key, value in hf_spec.accelerate_env(_device()).items():
        os.environ.setdefault(key, value)
    # Global plugins, not conftest hooks: the upstream files lie outside this folder, so
    # hooks of this conftest would not see their tests.
    config.pluginmanager.register(Offline(), "accelgrid-hf-offline")
    if not hasattr(config, "workerinput"):   # the controller (or the only process)
        config.pluginmanager.register(hf_ops.Collector(config), "accelgrid-hf-ops")


# What a test that needed the Hugging Face Hub raises offline (huggingface_hub's errors,
# and the OSError transformers raises from them).
HUB_ERRORS = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "GatedRepoError")
HUB_TEXT = ("We couldn't connect to 'https://huggingface.co'", "offline mode is enabled",
            "HF_HUB_OFFLINE")


# Offline, transformers' loaders force local_files_only and then raise only this, naming
# the Hub repo id (feature_extraction_utils, processing_utils: "Can't load feature
# extractor for 'hf-internal-testing/tiny-random-wav2vec2'. ...", seen on the H200).
CANT_LOAD = re.compile(r"Can't load [\w -]+ for '([^']+)'")


def _offline_miss(text: str) -> bool:
    found = CANT_LOAD.search(text)
    return (found is not None and os.environ.get("HF_HUB_OFFLINE") == "1"
            and not Path(found.group(1)).exists())


def needs_hub(exc: BaseException | None) -> str | None:
    """The first line of the error when ``exc`` (or an error it came from) says the test
    needed the Hub, else None."""
    seen = 0
    while exc is not None and seen < 10:
        text = str(exc)
        if type(exc).__name__ in HUB_ERRORS or any(t in text for t in HUB_TEXT) \
                or _offline_miss(text):
            return f"{type(exc).__name__}: {text.strip().splitlines()[0] if text else ''}"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class Offline:
    """An upstream test that fails because it needs the Hub (a checkpoint, a config) is
    not-run, not a failure: the cells run offline (HF_HUB_OFFLINE=1)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        outcome = yield
        report = outcome.get_result()
        if not (report.failed and item.nodeid.startswith(UPSTREAM) and call.excinfo):
            return
        why = needs_hub(call.excinfo.value)
        if why:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), 0, f"Skipped: {NOT_RUN_PREFIX}needs the "
                               f"Hugging Face Hub, and the cell runs offline: {why[:300]}")


def _device() -> str:
    return os.environ.get(contract.DEVICE, "cpu")


def selection(config: pytest.Config, project: str) -> list[str]:
    """The entries selected for ``project``: the option, else the variable."""
    value = config.getoption(f"hf_{project}") or os.environ.get(SELECTION_VAR[project], "")
    entries = [e.strip() for e in value.split(",") if e.strip()]
    return [] if entries == ["none"] else entries


def test_file(project: str, entry: str) -> str:
    """An entry as a path under the checkout: ``bert`` -> ``tests/models/bert/
    test_modeling_bert.py`` (transformers), ``test_cpu`` -> ``tests/test_cpu.py``
    (accelerate); a path (with ``/`` or ``.py``) is taken under ``tests/``."""
    if "/" in entry or entry.endswith(".py"):
        rel = entry.removeprefix("tests/")
        return f"tests/{rel if rel.endswith('.py') else rel + '.py'}"
    if project == "transformers":
        return f"tests/models/{entry}/test_modeling_{entry}.py"
    return f"tests/{entry if entry.startswith('test_') else 'test_' + entry}.py"


def _installed(package: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


_SPEC: dict[str, Any] = {}
SPEC_VAR = "TRANSFORMERS_TEST_DEVICE_SPEC"


def device_spec() -> tuple[str | None, str]:
    """Configure ``transformers.testing_utils`` in this process with the cell's device
    spec: the one the caller names in ``TRANSFORMERS_TEST_DEVICE_SPEC``, else one generated
    into the results folder (recorded there, :mod:`accelgrid.testing.hf_spec`). Returns the spec's
    path and how it was chosen, or None and why it could not be used.

    testing_utils imports the spec as the module named by its path up to ``.py``, which
    works for a bare file name in the working directory only; so the spec is loaded here
    under that name first (import_module finds it in sys.modules), and the variable is
    set only while testing_utils is imported: subprocesses the tests start (accelerate
    launch, scripts) do not inherit a spec they could not import."""
    if "how" in _SPEC:
        return _SPEC["value"], _SPEC["how"]
    import importlib.util

    given = os.environ.get(SPEC_VAR)
    if given:
        path, how = Path(given), f"{SPEC_VAR}={given} (the caller's)"
    else:
        results = os.environ.get(contract.RESULTS)
        folder = Path(results) if results else Path(tempfile.mkdtemp(prefix="accelgrid_hf_"))
        path, _ = hf_spec.write(folder, _device())
        how = f"generated {path}"
    value = str(path)
    problem = None
    if "transformers.testing_utils" in sys.modules:
        problem = ("transformers.testing_utils was imported before the device spec was "
                   "set: its tests would not run through it")
    elif not path.is_file() or ".py" not in value:
        problem = f"{SPEC_VAR}: {value} is not a Python file"
    else:
        # torch._dynamo wraps torch.manual_seed when it loads, and testing_utils loads it:
        # the spec is read after that (as testing_utils itself would), so its hooks are
        # the functions the tests then call.
        import torch._dynamo  # noqa: F401

        loader = importlib.util.spec_from_file_location("accelgrid_hf_device_spec", path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        sys.modules[value[: value.index(".py")]] = module
        os.environ[SPEC_VAR] = value
        try:
            import transformers.testing_utils as tu
        except Exception as exc:   # e.g. a spec without DEVICE_NAME
            problem = f"transformers.testing_utils rejected the spec {value}: {exc}"
        else:
            if tu.torch_device != getattr(module, "DEVICE_NAME", None):
                problem = (f"transformers.testing_utils.torch_device is {tu.torch_device!r}, "
                           f"not the spec's {getattr(module, 'DEVICE_NAME', None)!r}")
        finally:
            if given is None:
                os.environ.pop(SPEC_VAR, None)
    _SPEC.update(value=None if problem else value, how=problem or how)
    return _SPEC["value"], _SPEC["how"]


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    project = STANDS_FOR.get(module_path.name)
    if project is not None and module_path.parent == Path(__file__).parent:
        return Checkout.from_parent(parent, path=module_path, project=project)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.getparent(UpstreamModule)
        if module is not None:
            _upstream_current_test(item, module)


def _upstream_current_test(item: pytest.Item, module: pytest.Module) -> None:
    """transformers' ``run_test_using_subprocess`` re-runs a test as ``python -m pytest
    <the id in PYTEST_CURRENT_TEST>``; pytest sets that from the record's id
    (``suites/hf_tests/transformers/...``), which names no file, so the re-run collected
    nothing (exit 4) on the H200. While the test runs, the variable names its file in the
    checkout."""
    chain = item.listchain()
    real = "::".join([str(module.path), *(n.name for n in chain[chain.index(module) + 1:])])
    original = item.runtest

    def runtest() -> None:
        os.environ["PYTEST_CURRENT_TEST"] = f"{real} (call)"
        original()

    item.runtest = runtest  # type: ignore[method-assign]


class NotRun(pytest.Item):
    """One record saying why a project's tests (or a selected file) did not run."""

    def __init__(self, *, reason: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        not_run(self.reason)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


class FileError(pytest.Item):
    """A selected upstream file that cannot be imported: an error of its own (setup), the
    other files run."""

    def __init__(self, *, error: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.error = error

    def setup(self) -> None:
        raise ImportError(self.error)

    def runtest(self) -> None:  # never reached: setup raises
        raise AssertionError(self.error)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


def _join_tests_package(root: Path) -> None:
    """transformers' and accelerate's tests are both the package ``tests``: one process
    may import both, so a second checkout's ``tests/`` joins the first one's path."""
    pkg = sys.modules.get("tests")
    folder = str(root / "tests")
    if pkg is not None and hasattr(pkg, "__path__") and folder not in list(pkg.__path__):
        pkg.__path__.append(folder)


class UpstreamModule(pytest.Module):
    """One upstream test file; an import failure becomes a :class:`FileError` item."""

    def collect(self) -> Any:
        root = self.path
        while root.name != "tests" and root != root.parent:
            root = root.parent
        _join_tests_package(root.parent)
        try:
            return list(super().collect())
        except BaseException as exc:  # CollectError, ImportError, a SyntaxError, ...
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            # pytest's CollectError carries its formatted report as args[0]; any other
            # error (an OSError's args[0] is its errno) is named with its message.
            text = (exc.args[0] if exc.args and isinstance(exc.args[0], str)
                    and not isinstance(exc, OSError)
                    else "".join(traceback.format_exception(exc)))
            return [FileError.from_parent(self, name="import", error=text[-4000:])]


class Checkout(pytest.File):
    """Stands for one project's checkout: collects its selected files (or one not-run)."""

    def __init__(self, *, project: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.project = project

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        spec = PROJECTS[self.project]
        entries = selection(self.config, self.project)
        if not entries:
            return
        version = _installed(self.project)
        if version is None:
            yield NotRun.from_parent(self, name="checkout",
                                     reason=f"{self.project} is not installed in this cell")
            return
        value = os.environ.get(spec.variable)
        if not value:
            yield NotRun.from_parent(self, name="checkout", reason=(
                f"no {self.project} checkout: set {spec.variable} to one at v{version} "
                "(or a folder of checkouts by version) to run its own tests"))
            return
        src, how = hf_checkouts.find(value, version, spec)
        if src is None:
            yield NotRun.from_parent(self, name="checkout", reason=how)
            return
        if self.project == "transformers":
            spec_path, spec_how = device_spec()
            if spec_path is None:
                yield NotRun.from_parent(self, name="checkout", reason=spec_how)
                return
        for entry in entries:
            rel = test_file(self.project, entry)
            path = src / rel
            nodeid = f"{self.nodeid.rsplit('/', 1)[0]}/{self.project}/{rel.removeprefix('tests/')}"
            if not path.is_file():
                yield NotRun.from_parent(self, name=rel, reason=(
                    f"{rel} is not in the {self.project} checkout {src} ({how})"))
                continue
            yield UpstreamModule.from_parent(self, path=path, nodeid=nodeid)
