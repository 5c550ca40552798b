"""The contract between the runner (outside a cell) and what runs inside it.

The run (:mod:`accelgrid.run`) starts pytest in the cell's interpreter and talks to the
in-cell plugin (:mod:`accelgrid.testing.pytest_plugin`,
:mod:`accelgrid.testing.known_issues_runtime`,
:mod:`accelgrid.results.provenance`) only through environment variables and the files of the
results folder: every name either side reads or writes is defined here, once (the
variables, the passes and their hand-off, the markers the passes select by, the attributes
the plugins set on pytest's reports, the results folder's files). Standard library only:
this module is imported inside the cell.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

# --- set by the runner for each pytest it starts ---------------------------------------
CELL = "ACCELGRID_CELL"                # cell name; the plugin is inert without it
# The in-cell pytest plugin, by module name (its entry point, the root conftest and the
# runner's PYTEST_PLUGINS name it so): here, so the runner names it without importing
# accelgrid.testing, which imports pytest.
PLUGIN = "accelgrid.testing.pytest_plugin"
DEVICE = "ACCELGRID_DEVICE"            # cpu | cuda | xpu | mps | a spec file's DEVICE_NAME
DEVICE_SPEC = "ACCELGRID_DEVICE_SPEC"  # the spec file of a device outside the four
                                       # (matrix devices.<d>.spec; accelgrid.devices.spec)
TORCH = "ACCELGRID_TORCH"              # the cell's torch series, e.g. "2.13"
TORCH_CHANNEL = "ACCELGRID_TORCH_CHANNEL"  # PyTorch's channel it came from: release, nightly, test
PROFILE = "ACCELGRID_PROFILE"          # the cell's env profile
RESULTS = "ACCELGRID_RESULTS"          # the cell's results folder (recording is on)
COMMIT = "ACCELGRID_COMMIT"            # the project's git commit, for provenance
DIRTY = "ACCELGRID_DIRTY"              # "1" when the checkout had local changes
PASS = "ACCELGRID_PASS"                # which pass of the cell this pytest is (PASSES)
DEVICE_INDEX = "ACCELGRID_DEVICE_INDEX"  # host index of the device a worker is pinned to
                                         # (all-devices pass: the run's, comma-separated)
RECORDER_PID = "ACCELGRID_RECORDER_PID"  # set by the cell's pytest (its pid): a pytest a test
                                         # starts inherits it and records nothing
KNOWN_ISSUES = "ACCELGRID_KNOWN_ISSUES"  # JSON file of the registry entries for the cell
CAPTURE_OPS = "ACCELGRID_CAPTURE_OPS"  # "1": record aten ops per test (op-capture profile)
RUN_ID = "ACCELGRID_RUN_ID"            # this run's id (uuid hex): in every record, env.json
PYTEST_ARGS = "ACCELGRID_PYTEST_ARGS"  # JSON list: the user's pytest arguments for the run
SELECTION = "ACCELGRID_SELECTION"      # JSON list: those of them that narrow the run (paths,
                                       # -k, -m, -x, ...); [] for a run of the whole cell
GATE = "ACCELGRID_GATE"                # a file: the pass starts beside the others (start-up,
                                       # collection) and runs its tests once it exists
SET_VARS = "ACCELGRID_SET_VARS"        # comma-separated names of the variables the runner
                                       # set for the cell (matrix, profile, hardware, its
                                       # own): env.json records their values, and of any other
                                       # variable under a recorded prefix only its name
PLAN_INPUTS = "ACCELGRID_PLAN_INPUTS"  # JSON: the cell's pinned names, its matrix entry's
                                       # digest, its flags' names (results.plan)

# Passes of a cell run (accelgrid.run.passes): one xdist run on the host's device(s), or one
# worker pinned per device plus a pass for tests that need every device (beside the pinned
# one where processes can share a device, else after it).
PASS_SINGLE = "single"
PASS_PINNED = "pinned"
PASS_ALL_DEVICES = "all-devices"
# A cpu cell's tests see no accelerator (devices.hidden_accelerators()); the ones marked
# sees_accelerators run after them in this pass, which sees the host's.
PASS_HOST_ACCELERATORS = "host-accelerators"
# Where several workers share a device, the tests marked device_alone run after them in
# this pass: one worker per device, nothing else on it (timing premises, peak memory).
PASS_DEVICE_ALONE = "device-alone"

# Attributes the in-cell plugins set on pytest's test reports (xdist carries a report's
# attributes to the controller, whose plugin records them).
REPORT_ISSUE = "accelgrid_issue"  # the registry entry that mapped the outcome
                                  # (known_issues_runtime)
REPORT_CPU_S = "accelgrid_cpu_s"  # the test process's CPU seconds over the test (WorkerMarker)

# Markers the passes select by (pytest -m), registered by the plugin.
MULTI_DEVICE_MARK = "multi_device"          # needs every device of the run at once
SEES_ACCELERATORS_MARK = "sees_accelerators"  # in a cpu cell: runs where accelerators show
DEVICE_ALONE_MARK = "device_alone"          # needs its device to itself: after the shared
                                            # workers


class Handoff(NamedTuple):
    """A later pass's share of the cell: the tests marked ``mark`` that the passes in
    ``left_by`` deselect, which they list in ``file`` of the results folder for it."""

    mark: str
    file: str
    left_by: tuple[str, ...]


# The pass hand-off, one table for both sides: the plugin of a pass in ``left_by`` writes
# the file (pytest_deselected), the run gives the later pass only those tests.
HANDOFF: dict[str, Handoff] = {
    PASS_ALL_DEVICES: Handoff(MULTI_DEVICE_MARK, "multi_device.json", (PASS_PINNED,)),
    PASS_HOST_ACCELERATORS: Handoff(SEES_ACCELERATORS_MARK, "host_accelerators.json",
                                    (PASS_SINGLE,)),
    PASS_DEVICE_ALONE: Handoff(DEVICE_ALONE_MARK, "device_alone.json",
                               (PASS_PINNED, PASS_SINGLE)),
}

# --- set by the user (or CI) -----------------------------------------------------------
RESULTS_DIR = "ACCELGRID_RESULTS_DIR"  # where results/<cell>/ folders go
MATRIX = "ACCELGRID_MATRIX"            # the matrix file a run uses instead of <root>/matrix.yaml
                                       # (`accelgrid --matrix F run` sets it for nox, so the
                                       # noxfile and the registry read the same file)
WORKERS = "ACCELGRID_WORKERS"          # xdist workers per cell
ENVDIR = "ACCELGRID_ENVDIR"            # where cell envs live (nox's --envdir; else .nox
                                       # beside the noxfile)


NOX_ENVDIR = ".nox"   # nox's default --envdir, beside the noxfile


def envdir_option() -> str:
    """nox's envdir as the noxfile gives it: ``$ACCELGRID_ENVDIR``, else ``.nox``."""
    return os.environ.get(ENVDIR) or NOX_ENVDIR


def envs_folder(root: Path) -> Path:
    """The folder of the cell envs of the project at ``root`` (:func:`envdir_option`).
    Caches of the runner's own live there too."""
    return root / envdir_option()


WORKERS_PER_DEVICE = "ACCELGRID_WORKERS_PER_DEVICE"  # workers sharing each device (else
                                                     # chosen from the host: runner)
TORCH_INDEX = "ACCELGRID_TORCH_INDEX"  # overrides the device's torch wheel index
WHEEL = "ACCELGRID_WHEEL"              # outside accelgrid's checkout: the accelgrid wheel
                                       # (a file) cell envs install instead of
                                       # accelgrid==<the runner's version> from the index
SHARD = "ACCELGRID_SHARD"              # K/N: run only shard K of the cell's N (results.shards)
SHARD_DURATIONS = "ACCELGRID_SHARD_DURATIONS"  # a results folder or {nodeid: s} JSON to balance by
SKIP_DETECT = "ACCELGRID_SKIP_DETECT"  # run a cell even when its device is not detected
SKIP_RUNTIME_CHECK = "ACCELGRID_SKIP_RUNTIME_CHECK"  # "1": run without the runtime bundle check
DEVICES = "ACCELGRID_DEVICES"          # a subset of the host's devices, e.g. "0,2"
WORKER_TEARDOWN = "ACCELGRID_WORKER_TEARDOWN"  # "1": xdist workers end with Python's full
                                               # teardown (else os._exit when ended)
SERIAL_PASSES = "ACCELGRID_SERIAL_PASSES"  # "1": a cell's passes run one after another,
                                           # never beside each other (devices not shared)
HOST_ROOT = "ACCELGRID_HOST_ROOT"      # where detection reads sys/ and dev/ (tests: a fake tree)
HARDWARE = "ACCELGRID_HARDWARE"        # the runner's hardware family, e.g. ats-m (else detected)
DRIVER = "ACCELGRID_DRIVER"            # the runner's driver stack, e.g. lts or rolling
NO_KNOWN_ISSUES = "ACCELGRID_NO_KNOWN_ISSUES"  # "1": raw outcomes, registry off
# transformers checkout(s) for the real example scripts (hf_examples): a checkout, a folder
# of checkouts named by version (v5.17.0 or 5.17.0), or a path with {version}; a cell uses
# the one at its installed transformers, and runs no script (not-run) without one.
TRANSFORMERS_SRC = "ACCELGRID_TRANSFORMERS_SRC"
# transformers and accelerate checkouts for their own tests (hf_tests), found the same way.
ACCELERATE_SRC = "ACCELGRID_ACCELERATE_SRC"
HF_TRANSFORMERS_TESTS = "ACCELGRID_HF_TRANSFORMERS_TESTS"  # the selection: model names or paths
HF_ACCELERATE_TESTS = "ACCELGRID_HF_ACCELERATE_TESTS"      # under tests/, comma-separated
CONTAINER_ENGINE = "ACCELGRID_CONTAINER_ENGINE"  # docker | podman | buildah
CONTAINER_BASE = "ACCELGRID_CONTAINER_BASE"      # base image instead of the matrix's
# A registry holding images by their hash tag (REGISTRY/accelgrid/<cell>:<hash12>): pulled
# before a build is tried (CI sets it from the repository variable of that name).
IMAGE_REGISTRY = "ACCELGRID_IMAGE_REGISTRY"
SOURCE_COMMIT = "ACCELGRID_SOURCE_COMMIT"  # inside an image: the commit it was built from
SOURCE_DIRTY = "ACCELGRID_SOURCE_DIRTY"
IMAGE = "ACCELGRID_IMAGE"                  # inside an image: its tag
HISTORY = "ACCELGRID_HISTORY"              # the history database (else results/history.sqlite)
EXPECT = "ACCELGRID_EXPECT"                # cells a grid must have results of (--expect)
VERIFY = "ACCELGRID_VERIFY"                # "full": hash every pinned file, not the top-level
ACCEPT_INPUTS = "ACCELGRID_ACCEPT_INPUTS"  # "1": --no-venv runs on inputs not the cell's pins

# --- the files of a run's results folder (written in the cell, read back outside) --------
TESTS_FILE = "tests.jsonl"
COLLECTED_FILE = "collected.json"
PLAN_FILE = "plan.json"                  # each pass's inputs and pytest's own counts (results.plan)
RUNNING_DIR = "running"
ENV_FILE = "env.json"
JUNIT_FILE = "junit.xml"
SUMMARY_FILE = "summary.json"
PYTEST_LOG_FILE = "pytest.log"            # pytest's whole output, every pass (-rA: captured output)
# (and the lists of the pass hand-off: HANDOFF's files)
RUNS_DIR = "runs"                        # results/<cell>/runs/<run-id>/: runs with a selection
LAST_RUN_FILE = "last-run.json"           # results/<cell>/last-run.json: the latest run's folder
LOCK_FILE = ".lock"                       # results/<cell>/.lock: flock of the run in progress
# a run's folder: flock around shared writes (jsonio.locked)
UPDATE_LOCK_FILE = ".update.lock"
FULL_TEXT_DIR = "full-text"           # a run's folder: whole texts of record fields cut short
HARDWARE_FILE = "hardware.json"       # the runner's hardware family, driver and GPUs
KNOWN_ISSUES_FILE = "known_issues.json"  # the cell's registry entries, for the plugin
OPS_RAW_DIR = "ops-raw"               # the captured ops, one JSON-lines file per worker
OPS_FILE = "ops.json"                 # the cell's op coverage (accelgrid.ops.aggregate)
# Any of these makes a folder a cell's results folder.
CELL_FILES = (TESTS_FILE, ENV_FILE, COLLECTED_FILE, SUMMARY_FILE)


# Where `accelgrid repro` writes (<results>/repro/<issue>/<cell>/): a grid of the cells'
# results leaves it out (else each reproduced cell would be a second column, cpu-2.13#2);
# naming <results>/repro/<issue> shows those runs.
REPRO_DIR = "repro"


RESULTS_FOLDER = "results"

PREFIX = "ACCELGRID_"  # every variable above; recorded in env.json
