"""The ``accelgrid`` command line (also ``python -m accelgrid``)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from . import install
from . import matrix as cells_mod
from .matrix import DEFAULT_MATRIX, Matrix, load_matrix
from .validation import ValidationFailed

EXIT_INVALID = 2

DESCRIPTION = """\
accelgrid: a reproducible test matrix for PyTorch device backends.

matrix.yaml declares devices (cpu, cuda, xpu, mps), torch versions with their package
pins, env-flag profiles and include/exclude rules; each combination is a cell
(`cpu-2.13`, `xpu-2.5-fallback-debug`). Cells run as nox sessions (`nox -s cpu-2.13`)
and leave results under results/<cell>/, which `accelgrid grid` turns into grids.
"""

EPILOG = """\
examples:
  accelgrid validate                     check matrix.yaml
  accelgrid cells --device xpu           list the xpu cells
  accelgrid plan xpu-2.5                 what that cell installs, sets and runs
  accelgrid run cpu-2.13 -- -k smoke     run a cell (via nox), pytest args after --
  accelgrid grid results/*               grids from results folders
"""


def _matrix(args: argparse.Namespace) -> Matrix:
    return load_matrix(args.matrix)


def _cmd_validate(args: argparse.Namespace) -> int:
    path = args.path or args.matrix
    matrix = load_matrix(path)
    print(f"{path}: valid, {len(matrix.cells)} cells")
    return 0


def _cmd_cells(args: argparse.Namespace) -> int:
    matrix = _matrix(args)
    picked = cells_mod.select(matrix.cells, device=args.device, torch=args.torch,
                              profile=args.profile)
    if args.json:
        print(json.dumps([c.as_dict() for c in picked], indent=2))
        return 0
    if not picked:
        print("no cell matches those filters", file=sys.stderr)
        return 1
    width = max(len(c.name) for c in picked)
    for c in picked:
        print(f"{c.name:<{width}}  {c.device:<4} torch {c.pins['torch']:<7} "
              f"{c.profile:<15} {','.join(c.suites)}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    matrix = _matrix(args)
    cell = matrix.cell(args.cell)
    plan = install.plan(cell, torch_index=os.environ.get("ACCELGRID_TORCH_INDEX"))
    data = {**cell.as_dict(), "install": plan.as_dict()}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"cell        {cell.name}")
    print(f"device      {cell.device} (runner labels: {', '.join(cell.runner_labels)})")
    print(f"python      {cell.python}")
    print(f"torch       {cell.torch_requirement} from "
          f"{'the default index' if plan.index == 'default' else plan.index}")
    for n, step in enumerate(plan.steps, 1):
        print(f"install {n}   {step.description}: {' '.join(step.args)}")
    if plan.env:
        print("uv env      " + " ".join(f"{k}={v}" for k, v in plan.as_dict()["env"].items()))
    print("env         " + (" ".join(f"{k}={v}" for k, v in cell.env.items()) or "(none)"))
    pairs = zip(cell.suites, cell.suite_paths, strict=True)
    print(f"suites      {', '.join(f'{s} ({p})' for s, p in pairs)}")
    print(f"pytest      -n {cell.workers} --timeout={cell.test_seconds} --timeout-method=thread")
    print(f"timeout     {cell.cell_minutes} min for the cell, {cell.test_seconds} s per test")
    print(f"results     results/{cell.name}/")
    if cell.container_base:
        print(f"container   {cell.container_family} on {cell.container_base}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    matrix = _matrix(args)
    cell = matrix.cell(args.cell)
    if args.container:
        from . import containers

        return containers.main([
            *(["--matrix", args.matrix] if args.matrix != DEFAULT_MATRIX else []),
            "run", cell.name, *(["--", *args.pytest_args] if args.pytest_args else [])])
    cmd = [sys.executable, "-m", "nox", "-f", str(matrix.root / "noxfile.py"), "-s", cell.name]
    if args.no_venv:
        cmd.append("--no-venv")
    if args.pytest_args:
        cmd += ["--", *args.pytest_args]
    return subprocess.call(cmd, cwd=matrix.root)


def _cmd_grid(args: argparse.Namespace) -> int:
    from . import grid
    from .baseline import EXIT_REGRESSION

    folders = [Path(p) for p in args.results]
    model = grid.build(folders, baseline_dir=Path(args.baseline) if args.baseline else None)
    paths = grid.write(model, Path(args.out))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(paths["md"].read_text(encoding="utf-8"))
    for note in model["notes"]:
        print(f"note: {note}", file=sys.stderr)
    for col in model["columns"]:
        state = f"errored: {col['error']}" if col["error"] else ", ".join(
            f"{n} {o}" for o, n in col["counts"].items() if n)
        if col["status"] == "partial":
            state += f" (partial: {col['reason']})"
        print(f"{col['name']}: {state}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    if not model["columns"]:
        print("no results folders found in " + " ".join(args.results), file=sys.stderr)
        return 1
    base = model["baseline"]
    if base:
        print("vs baselines: " + (", ".join(f"{n} {k}" for k, n in base["counts"].items()
                                            if n and k != "unchanged") or "all as expected"))
        regressions = [c for c in base["changes"] if c["change"] == "regression"]
        for c in regressions[:50]:
            print(f"REGRESSION {c['cell']}: {c['nodeid']}: {c['expected']} -> {c['outcome']}")
        if regressions:
            return EXIT_REGRESSION  # CI gates on this
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"accelgrid.bench_{args.what}")
    return module.main(args.rest)


# Commands implemented in their own module's ``main(argv)``: name -> (module, help).
DELEGATED = {
    "ci": ("accelgrid.ci", "render the GitHub Actions workflow and tox config from the matrix"),
    "baseline": ("accelgrid.baseline", "update or show the expected outcomes per cell"),
    "repro": ("accelgrid.repro", "reproduce a known upstream issue in the cells of its scope"),
    "bisect": ("accelgrid.bisect", "find the first torch version where a test's outcome changes"),
    "container": ("accelgrid.containers", "build a cell's container image"),
    "ops": ("accelgrid.ops", "op coverage: capture, classify and grid aten ops per cell"),
}


def _cmd_delegated(args: argparse.Namespace) -> int:
    module_name, _ = DELEGATED[args.command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(f"accelgrid {args.command}: not available in this version", file=sys.stderr)
        return EXIT_INVALID
    return module.main([*(["--matrix", args.matrix] if args.matrix != DEFAULT_MATRIX else []),
                        *args.rest])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelgrid", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", default=DEFAULT_MATRIX,
                        help="the matrix file (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a matrix file; errors name file, line and key")
    p.add_argument("path", nargs="?", help="matrix file (default: --matrix)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("cells", help="list cells (filter with --device/--torch/--profile)")
    p.add_argument("--device", action="append", help="only this device (repeatable)")
    p.add_argument("--torch", action="append", help="only this torch series, e.g. 2.13")
    p.add_argument("--profile", action="append", help="only this env profile")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_cells)

    p = sub.add_parser("plan", help="print what a cell will do, without doing it")
    p.add_argument("cell")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("run", help="run a cell through its nox session")
    p.add_argument("cell")
    p.add_argument("--no-venv", action="store_true",
                   help="use the current interpreter and its installed torch; install nothing")
    p.add_argument("--container", action="store_true",
                   help="run the cell inside its container image (accelgrid container run)")
    p.set_defaults(func=_cmd_run, pytest_args=[])
    p.epilog = "Arguments after -- go to pytest: accelgrid run cpu-2.13 --no-venv -- -x"

    p = sub.add_parser("grid", help="grids (grid.md/.html/.json) from results folders")
    p.add_argument("results", nargs="+",
                   help="results/<cell>/ folders, or folders holding them (artifacts)")
    p.add_argument("--out", default="results", help="where to write the grids (%(default)s)")
    p.add_argument("--baseline", metavar="DIR",
                   help="compare with DIR/<cell>.json; exit 3 on any regression")
    p.set_defaults(func=_cmd_grid)

    p = sub.add_parser("bench", help="benchmarks: overhead (runner vs bare pytest), "
                       "offload, grid, ops (capture cost)")
    p.add_argument("what", choices=["overhead", "offload", "grid", "ops"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")
    p.set_defaults(func=_cmd_bench)

    for name, (_, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER,
                       help=f"options of `accelgrid {name}` (see `accelgrid {name} --help`)")
        p.set_defaults(func=_cmd_delegated)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Delegated commands own every argument after their name (their own --help too).
    split = next((i for i, a in enumerate(argv) if a in DELEGATED or a == "bench"), None)
    if split is not None:
        args, _ = parser.parse_known_args(argv[: split + 1 + (argv[split] == "bench")])
        args.rest = argv[split + 1 + (argv[split] == "bench"):]
    else:
        # Everything after the first -- is pytest's (accelgrid run CELL [options] -- ARGS).
        cut = argv.index("--") if "--" in argv else len(argv)
        args = parser.parse_args(argv[:cut])
        if cut < len(argv):
            if args.command != "run":
                parser.error(f"`--` arguments are only for `run`, not `{args.command}`")
            args.pytest_args = argv[cut + 1:]
    try:
        return args.func(args)
    except ValidationFailed as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    except KeyError as exc:  # unknown cell names
        print(exc.args[0] if exc.args else exc, file=sys.stderr)
        return EXIT_INVALID
