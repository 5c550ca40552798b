"""Which ops of the seed's ops x examples table a cell's captured ops contain.

The seed (``shared/seeds/000_*``) lists aten ops that fell back to the CPU or were
missing on XPU while running the Hugging Face examples; ``accelgrid/data/
seed_000_ops.json`` holds its rows (op, status, examples that hit it). This reads an
op-capture cell's raw records (``results/<cell>/ops-raw/*.jsonl``, one line per test)
and says, per seed row, whether any captured op has the same base op
(:func:`accelgrid.testing.opcapture.base_op`: ``aten::`` and the overload stripped, an in-place
``foo_`` counted as ``foo``), and whether the workload standing in for each of the
row's examples (``test_workload[<example>]`` and its variants ``[<example>-...]``) hit it.

    python suites/hf_examples/seed_coverage.py results/cpu-2.13-op-capture
    python suites/hf_examples/seed_coverage.py results/cpu-2.13-op-capture --json

Exit status 1 when some seed row was captured by no test. Needs only the standard
library and ``accelgrid`` (``src/`` on the path is enough; it is added when run from a
checkout).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

try:
    from accelgrid.ops.xpu_prediction import load_seed
    from accelgrid.testing.opcapture import base_op
except ImportError:  # run as a script from a checkout without accelgrid installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from accelgrid.ops.xpu_prediction import load_seed
    from accelgrid.testing.opcapture import base_op

# The seed's column names -> the workload ids of suites/hf_examples/workloads.py.
EXAMPLE_TO_WORKLOAD = {"image-detection": "object-detection"}

# Seed ops that the seed's XPU build reached only through the composite kernel of
# another op, one it had no XPU kernel for (torch-xpu-ops release/2.4, data/xpu_ops.json:
# neither native nor on the fallback list). A device with a kernel for the outer op, the
# CPU among them, runs that kernel and never calls the inner one, so the stand-in
# workload shows the outer op instead. base op -> [(outer base op, why)].
REACHED_VIA: dict[str, list[tuple[str, str]]] = {
    "native_batch_norm": [(
        "native_group_norm",
        "GroupNorm: native_group_norm's CompositeExplicitAutograd kernel (math_group_norm) "
        "called at::native_batch_norm in torch of mid-2024 (torch 2.13's uses var_mean)",
    )],
    "addcmul": [(
        "native_group_norm",
        "GroupNorm: the same math_group_norm applied weight and bias with addcmul",
    )],
    "sigmoid": [(
        "silu_backward",
        "SiLU backward: silu_backward's CompositeImplicitAutograd kernel "
        "(math_silu_backward) computes sigmoid(x)",
    )],
}


def workload_for(example: str) -> str:
    return EXAMPLE_TO_WORKLOAD.get(example, example)


def read_records(results_dir: Path) -> list[dict[str, Any]]:
    """Every line of ``<results_dir>/ops-raw/*.jsonl``, of the cell's latest run: a run
    narrowed by pytest arguments writes ``runs/<id>/``, named by ``last-run.json``."""
    last = results_dir / "last-run.json"
    if last.is_file():
        results_dir = results_dir / json.loads(last.read_text()).get("folder", ".")
    raw = results_dir / "ops-raw"
    files = sorted(raw.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no {raw}/*.jsonl: run the cell with op capture first")
    records = []
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def captured_by_workload(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, set[str]]]:
    """base op -> workload id -> the captured ``aten::op.overload`` names."""
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for rec in records:
        workload = rec.get("workload") or "?"
        for name in rec.get("ops", {}):
            seen[base_op(name)][workload].add(name)
    return seen


def _matches(workload: str, wanted: str) -> bool:
    """``translation`` and its variants (``translation-foreach``) stand in for it."""
    return workload == wanted or workload.startswith(wanted + "-")


def coverage(seed: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> list[dict]:
    """One entry per seed row: its base op, whether captured at all, by which workloads,
    and for the row's examples whether their stand-in workload hit the op itself
    (``examples_hit``), only the op the seed's XPU build reached it through
    (``examples_via``: example -> outer op, see :data:`REACHED_VIA`), or neither
    (``examples_missed``)."""
    seen = captured_by_workload(records)
    rows = []
    for row in seed["rows"]:
        base = base_op(row["op"])
        by = seen.get(base, {})
        examples_hit, examples_via, examples_missed = [], {}, []
        for example in row["examples"]:
            wanted = workload_for(example)
            if any(_matches(w, wanted) for w in by):
                examples_hit.append(example)
                continue
            outer = [
                o for o, _ in REACHED_VIA.get(base, ())
                if any(_matches(w, wanted) for w in seen.get(o, {}))
            ]
            if outer:
                examples_via[example] = outer[0]
            else:
                examples_missed.append(example)
        rows.append({
            "op": row["op"],
            "base_op": base,
            "status": row["status"],
            "captured": bool(by),
            "workloads": sorted(by),
            "captured_as": sorted({n for names in by.values() for n in names}),
            "examples_hit": examples_hit,
            "examples_via": examples_via,
            "examples_missed": examples_missed,
        })
    return rows


def render(rows: list[dict]) -> str:
    lines = [
        "| seed op | captured | by workloads | seed examples whose stand-in hit it only via | "
        "seed examples whose stand-in missed it |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        via = ", ".join(f"{ex} (`{outer}`)" for ex, outer in r["examples_via"].items())
        lines.append(
            f"| `{r['op']}` | {'yes' if r['captured'] else '**no**'} | "
            f"{', '.join(r['workloads']) or '-'} | {via or '-'} | "
            f"{', '.join(r['examples_missed']) or '-'} |"
        )
    n = sum(r["captured"] for r in rows)
    missing = [r["op"] for r in rows if not r["captured"]]
    lines.append("")
    lines.append(f"{n} of {len(rows)} seed rows captured.")
    if missing:
        lines.append("Not captured: " + ", ".join(f"`{m}`" for m in missing))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path, help="results/<cell> of an op-capture run")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = coverage(load_seed(), read_records(args.results_dir))
    print(json.dumps(rows, indent=1) if args.json else render(rows))
    return 0 if all(r["captured"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
