#!/usr/bin/env python3
"""Extract, per torch series, PyTorch's own dispatch facts for every aten op from the
``native_functions.yaml`` each torch wheel ships (``torchgen/packaged/ATen/native/``).
Writes src/accelgrid/data/torch_registrations.json; the yaml itself is never committed.

    pip download --no-deps --only-binary=:all: --platform macosx_11_0_arm64 \\
        --python-version 3.12 torch==2.5.1 -d WHEELS      # one small wheel per series
    python tools/extract_torch_registrations.py WHEELS/torch-*.whl [--out FILE] [--check]

Per op (``func:`` name with its overload, ``add.Tensor``; the default overload has none)
it keeps a code of letters, the facts :mod:`accelgrid.xpu_registrations` reads:

  X  a dense ``XPU`` dispatch key (PyTorch registers an XPU kernel itself, from 2.6)
  E  ``CompositeExplicitAutograd``: runs on any backend without a kernel of its own
  F  ``CompositeExplicitAutogradNonFunctional``: likewise
  I  ``CompositeImplicitAutograd``, or no ``dispatch:`` and no ``structured_delegate``
     (codegen's default): decomposes into other ops
  B  backend keys only (CPU, CUDA, MPS, Meta, Sparse*, Quantized*, NestedTensor*)
  C  among them a dense ``CPU`` key: the op has a CPU kernel of its own, so torch-xpu-ops'
     CPU fallback of it has something to run (with E, F, I or a delegate that has one)

and ``>NAME`` after the letters for a ``structured_delegate``. The first series is stored
whole, each later one as its changes against the one before (``set``/``drop``), so the
file says what changed per release. Provenance per series: the wheel's file name, its
sha256 and the torch version in it. Output is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

YAML_IN_WHEEL = "torchgen/packaged/ATen/native/native_functions.yaml"
_WHEEL = re.compile(r"^torch-(\d+)\.(\d+)\.(\d+)[^-]*-")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
COMPOSITE = {"CompositeExplicitAutograd": "E", "CompositeExplicitAutogradNonFunctional": "F",
             "CompositeImplicitAutograd": "I"}


def op_code(entry: dict[str, Any]) -> str:
    """The letters (and ``>delegate``) for one native_functions.yaml entry."""
    keys = {k.strip() for spec in (entry.get("dispatch") or {}) for k in str(spec).split(",")}
    delegate = entry.get("structured_delegate")
    letters = ""
    if "XPU" in keys:
        letters += "X"
    for key, letter in COMPOSITE.items():
        if key in keys:
            letters += letter
    if not keys and not delegate:
        letters += "I"  # no dispatch entry: CompositeImplicitAutograd by default
    if keys - {"XPU", *COMPOSITE}:
        letters += "B"
    if "CPU" in keys:
        letters += "C"
    return letters + (f">{delegate}" if delegate else "")


def read_wheel(path: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    """(series, {op: code}, provenance) from one torch wheel."""
    m = _WHEEL.match(path.name)
    if not m:
        raise SystemExit(f"{path}: not a torch wheel file name (torch-X.Y.Z-...whl)")
    with zipfile.ZipFile(path) as z:
        try:
            text = z.read(YAML_IN_WHEEL)
        except KeyError:
            raise SystemExit(f"{path}: no {YAML_IN_WHEEL} inside") from None
    entries = yaml.load(text, Loader=_Loader)
    ops = {}
    for e in entries:
        name = e["func"].split("(", 1)[0].strip()
        ops[name] = op_code(e)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    prov = {"wheel": path.name, "sha256": digest, "torch": ".".join(m.groups()),
            "file": YAML_IN_WHEEL, "entries": str(len(entries))}
    return f"{m[1]}.{m[2]}", ops, prov


def _key(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split("."))


def build(wheels: list[Path]) -> dict[str, Any]:
    per: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for w in wheels:
        series, ops, prov = read_wheel(w)
        if series in per:
            raise SystemExit(f"two wheels for series {series}: {per[series][1]['wheel']}, "
                             f"{w.name}")
        per[series] = (ops, prov)
    out: dict[str, Any] = {
        "schema": 1,
        "about": "PyTorch's own dispatch facts per aten op and torch series, from the "
                 "native_functions.yaml inside each series' torch wheel (codes: "
                 "tools/extract_torch_registrations.py)",
        "generated_by": "tools/extract_torch_registrations.py",
        "series": {},
    }
    prev: dict[str, str] | None = None
    for series in sorted(per, key=_key):
        ops, prov = per[series]
        entry: dict[str, Any] = {"source": prov}
        if prev is None:
            entry["ops"] = dict(sorted(ops.items()))
        else:
            entry["set"] = {k: v for k, v in sorted(ops.items()) if prev.get(k) != v}
            entry["drop"] = sorted(set(prev) - set(ops))
        out["series"][series] = entry
        prev = ops
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheels", nargs="+", type=Path, help="torch wheels, one per series")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1]
                    / "src" / "accelgrid" / "data" / "torch_registrations.json")
    ap.add_argument("--check", action="store_true",
                    help="compare with --out instead of writing it (exit 1 if it differs)")
    args = ap.parse_args(argv)
    text = json.dumps(build(args.wheels), indent=1) + "\n"
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the wheels'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(args.wheels)} series)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
