"""Commands that read the matrix: ``validate``, ``cells``, ``plan``, ``schema``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from .. import devices, ops, results
from ..base import contract
from ..base.jsonio import dumps
from ..config import validation
from ..config.cells import select
from ..config.matrix import load_matrix
from ..config.model import Cell, Matrix
from ..host import detect, install
from ..run import passes as pass_plan
from ..run import selection
from ._common import matrix_of


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("validate", parents=[common],
                       help="check a matrix file; errors name file, line and key")
    p.add_argument("path", nargs="?", help="matrix file (default: --matrix)")
    p.set_defaults(func=_validate)

    p = sub.add_parser("cells", parents=[common],
                       help="list cells (filter with --device/--torch/--profile)")
    p.add_argument("--device", action="append", help="only this device (repeatable)")
    p.add_argument("--torch", action="append", help="only this torch series, e.g. 2.13")
    p.add_argument("--profile", action="append", help="only this env profile")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cells)

    p = sub.add_parser("plan", parents=[common],
                       help="print what a cell will do, without doing it",
                       epilog="Arguments after -- are the run's pytest arguments: accelgrid "
                              "plan cpu-2.13 -- -k matmul")
    p.add_argument("cell")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-venv", action="store_true",
                   help="as `accelgrid run CELL --no-venv` runs it: on this interpreter")
    p.set_defaults(func=_plan, passthrough="pytest_args")

    p = sub.add_parser("schema", help="print the JSON Schema of matrix.yaml or known_issues.yaml",
                       description="Print a shipped JSON Schema (draft 2020-12), e.g. for an "
                                   "editor: matrix.yaml and known_issues.yaml name theirs in a "
                                   "yaml-language-server modeline.")
    p.add_argument("name", nargs="?", default="matrix", choices=sorted(validation.SCHEMA_FILES),
                   help="which schema (default: %(default)s)")
    p.set_defaults(func=_schema)


def _validate(args: argparse.Namespace) -> int:
    path = args.path or args.matrix
    matrix = load_matrix(path)
    print(f"{path}: valid, {len(matrix.cells)} cells")
    return 0


def _cells(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    picked = select(matrix.cells, device=args.device, torch=args.torch,
                              profile=args.profile)
    if args.json:
        print(dumps([c.as_dict() for c in picked], indent=2))
        return 0
    if not picked:
        print("no cell matches those filters", file=sys.stderr)
        return 1
    width = max(len(c.name) for c in picked)
    for c in picked:
        torch = c.pins["torch"] + ("" if c.channel == "release" else f" ({c.channel})")
        print(f"{c.name:<{width}}  {c.device:<4} torch {torch:<7} "
              f"{c.profile:<15} {','.join(c.suites)}"
              + ("  [local torch wheel: on request only]" if c.manual else ""))
    return 0


def _plan(args: argparse.Namespace) -> int:
    matrix = matrix_of(args)
    cell = matrix.cell(args.cell)
    plan = install.plan(cell, torch_index=os.environ.get(contract.TORCH_INDEX))
    records = ops.records(cell.env)
    data = {**cell.as_dict(), "install": plan.as_dict(), "records": records}
    if not cell.torch_wheel:
        data["install"]["torch_requirement"] = install.torch_requirement(cell)
    data["install"]["torch_download"] = install.expected_download(
        plan, data["install"].get("torch_requirement", cell.torch_requirement), cell.python)
    run_plan = _run_plan(matrix, cell, args.no_venv, args.pytest_args)
    data["passes"] = [
        {"name": p.name, "title": p.title, "env": dict(p.env), "beside": p.beside,
         "gets": contract.HANDOFF[p.name].file if p.name in contract.HANDOFF else None,
         "command": cmd} for p, cmd in zip(run_plan.passes, run_plan.commands, strict=True)]
    if args.json:
        print(dumps(data, indent=2))
        return 0
    print(f"cell        {cell.name}")
    print(f"device      {cell.device} (runner labels: {', '.join(cell.runner_labels)})")
    absent = detect.absent_reason(cell.device, matrix.devices[cell.device].detect)
    blocked = None if absent else detect.runtime_problem(cell)
    print(f"this host   {absent or blocked or 'the device is present: the cell can run here'}")
    print(f"python      {cell.python}")
    if cell.torch_wheel:
        wheel, problem = install.local_wheel(cell)
        print(f"torch       {cell.torch_requirement.removeprefix('torch==')} from a local wheel: "
              f"{wheel or problem} (run on request only: not by nox, nox -t, CI or "
              "accelgrid repro ID without --cell)")
    else:
        requirement = install.torch_requirement(cell)
        print(f"torch       {requirement} from "
              f"{'the default index' if plan.index == 'default' else plan.shown_index}")
        if cell.channel != "release":
            build = ("the newest nightly in that range when the cell runs"
                     if install.resolved_at_run(cell) else "that build")
            print(f"channel     PyTorch's {cell.channel} channel: {build}; the run's env.json "
                  "records the exact build (torch.version)")
        if install.can_fall_back(cell, os.environ.get(contract.TORCH_INDEX)):
            print("            (where that index cannot be reached: torch's CPU build from "
                  "pip's configuration, else the cell stops with one line)")
        size = install.expected_download(plan, requirement, cell.python)
        print(f"download    torch: {size or 'size known once uv resolves it (remote index)'}")
    if cell.runtime:
        print(f"runtime     {cell.runtime.describe()}")
    for n, step in enumerate(plan.steps, 1):
        print(f"install {n}   {step.description}: {' '.join(step.args)}")
    if plan.env:
        print("uv env      " + " ".join(f"{k}={v}" for k, v in plan.as_dict()["env"].items()))
    print("env         " + (" ".join(f"{k}={v}" for k, v in cell.env.items()) or "(none)"))
    print("records     " + "; ".join(records))
    pairs = zip(cell.suites, cell.suite_paths, strict=True)
    print(f"suites      {', '.join(f'{s} ({p})' for s, p in pairs)}")
    for n, p in enumerate(data["passes"], 1):
        print(f"pass {n}      {p['name']}: {p['title']}"
              + (" (beside the pass before it)" if p["beside"] else "")
              + (f"; only the tests an earlier pass leaves in {p['gets']}" if p["gets"] else ""))
        if p["env"]:
            print("  env       " + " ".join(f"{k}={v}" for k, v in p["env"].items()))
        print("  pytest    " + shlex.join(p["command"]))
    if not cell.device_type.accelerator:
        hidden = " ".join(f"{k}={v}" for k, v in devices.hidden_accelerators().items())
        print(f"hidden      accelerators: {hidden} (tests marked sees_accelerators run "
              "in a later pass that sees them; nothing hides mps)")
    print(f"timeout     {cell.cell_minutes} min for the cell, {cell.test_seconds} s per test")
    print(f"results     results/{cell.name}/")
    if cell.container_base:
        print(f"container   {cell.container_family} on {cell.container_base}")
    return 0


def _run_plan(matrix: Matrix, cell: Cell, no_venv: bool, pytest_args: list[str]
              ) -> pass_plan.RunPlan:
    """The run's own plan (:func:`accelgrid.run.passes.plan_run`): its interpreter (the
    cell's env, built or not, or this one with ``no_venv``), its results folder, its
    device count and ``ACCELGRID_WORKERS``, as `accelgrid run` would have them."""
    from ..host import venvs

    root = matrix.root.resolve()   # as the noxfile's ROOT
    python = sys.executable if no_venv else str(venvs.python_in(venvs.env_dir(root, cell)))
    env = {**os.environ, **cell.env}
    folder = results.results_root(root) / cell.name
    if selection.selection(pytest_args):
        folder = folder / contract.RUNS_DIR / "<run-id>"
    return pass_plan.plan_run(cell, python, folder, root, pytest_args,
                              pass_plan.workers_override(), env)


def _schema(args: argparse.Namespace) -> int:
    sys.stdout.write(validation.schema_text(args.name))
    return 0
