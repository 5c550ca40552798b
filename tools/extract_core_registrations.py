#!/usr/bin/env python3
"""Rebuild src/accelgrid/data/xpu_core_ops.json: per torch series, the aten ops PyTorch
registers for XPU outside its native_functions.yaml (``m.impl`` inside
``TORCH_LIBRARY_IMPL(aten, XPU, m)``: oneDNN convolution, ``tensordot.out``, matmul
before 2.6), each with the source it comes from and how far that source is this
release's own.

    python tools/extract_core_registrations.py FILES_DIR [--spec tools/core_registrations.json]
        [--out FILE] [--check]

FILES_DIR/<commit>/<path> holds each source the spec names, as stored at that commit
(``git show <commit>:<path>`` in a pytorch clone, or the code index's stored version).
The spec (tools/core_registrations.json) names the sources, where each is placed among
the releases (``not_before``, from its content against the per-release yaml facts) and
any evidence-only entries. The per-release yaml facts come from
src/accelgrid/data/torch_registrations.json (tools/extract_torch_registrations.py).

Checks, each a one-line error: a named file missing; an ``m.impl`` op that the yaml of a
series it is applied to does not know (a registration for a missing schema fails at
load, so the placement would be wrong). Per series the output says its ``basis``:
``snapshot`` (a source placed in or before this series: the nearest known, not
necessarily this release's file), ``carried back`` (only later or unplaceable sources)
and ``evidence`` entries with their reason; ``per_release`` stays false while no source
is a release's own file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from accelgrid.ops.xpu_prediction import torch_ops

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "accelgrid" / "data"
_BLOCK = re.compile(r"TORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*XPU\s*,\s*\w+\s*\)\s*\{")
_IMPL = re.compile(r"\.impl\s*\(\s*(?:TORCH_SELECTIVE_NAME\s*\(\s*)?\"([^\"]+)\"")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def registrations(text: str) -> dict[str, list[str]]:
    """``{namespace: [op, ...]}`` of every ``TORCH_LIBRARY_IMPL(ns, XPU, m) {...}`` block
    in C++ source ``text``; commented-out blocks do not count; ``aten::`` prefixes go."""
    text = _strip_comments(text)
    out: dict[str, list[str]] = {}
    for m in _BLOCK.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        ns = m[1]
        for name in _IMPL.findall(text[m.end():i]):
            name = name.split("::", 1)[1] if name.startswith(f"{ns}::") else name
            out.setdefault(ns, []).append(name)
    return {ns: sorted(set(v)) for ns, v in sorted(out.items())}


def _version(series: str) -> tuple[int, ...]:
    return tuple(int(x) for x in series.split("."))


def _series_ops(torch_data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Every series' ``{op: code}`` (:func:`accelgrid.ops.xpu_prediction.torch_ops`)."""
    return {s: torch_ops(torch_data, s) or {} for s in torch_data["series"]}


def build(files_dir: Path, spec: dict[str, Any], torch_data: dict[str, Any]) -> dict[str, Any]:
    per_series = _series_ops(torch_data)
    order = sorted(per_series, key=_version)
    sources = []
    for src in spec["sources"]:
        f = files_dir / src["commit"] / src["path"]
        if not f.is_file():
            raise SystemExit(f"{f}: missing (the stored {src['repo']}:{src['path']} at "
                             f"{src['commit'][:12]})")
        regs = registrations(f.read_text(encoding="utf-8", errors="replace"))
        sources.append(dict(src) | {"id": f"{src['repo']}@{src['commit'][:12]}:{src['path']}",
                                    "aten": regs.get("aten", []),
                                    "other": {k: v for k, v in regs.items() if k != "aten"}})
    series_out: dict[str, Any] = {}
    for s in order:
        ops: dict[str, str] = {}
        bases = []
        for src in sources:
            nb = src["not_before"]
            placed = nb is not None and _version(nb) <= _version(s)
            for op in src["aten"]:
                if op not in per_series[s]:
                    raise SystemExit(f"{src['id']}: m.impl({op!r}) is not in torch {s}'s "
                                     "native_functions.yaml: the source cannot apply there")
                ops.setdefault(op, src["id"])
            if src["aten"]:
                how = ("snapshot (placed not before " + nb + ")" if placed else
                       "carried back (placed not before " + nb + ")" if nb else
                       "carried back (not placeable)")
                bases.append(f"{src['id']}: {how}")
        for ev in spec.get("evidence", []):
            if s in ev["series"]:
                for op in ev["ops"]:
                    if op not in per_series[s]:
                        raise SystemExit(f"evidence op {op!r} is not in torch {s}'s yaml")
                    ops.setdefault(op, "evidence")
                bases.append(f"evidence for {', '.join(ev['ops'])}: {ev['why']}")
        series_out[s] = {"per_release": False, "ops": dict(sorted(ops.items())),
                         "basis": bases}
    return {
        "schema": 2,
        "about": ("XPU kernels PyTorch registers outside its native_functions.yaml "
                  "(m.impl in TORCH_LIBRARY_IMPL(aten, XPU, m)), per torch series, each op "
                  "with the source it comes from; per_release false: no series' own "
                  "release file was reachable, basis says what stands in for it"),
        "generated_by": "tools/extract_core_registrations.py",
        "spec_about": spec["about"],
        "sources": [{k: v for k, v in src.items()} for src in sources],
        "evidence": spec.get("evidence", []),
        "series": series_out,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files_dir", type=Path, help="FILES_DIR/<commit>/<path> per named source")
    ap.add_argument("--spec", type=Path, default=ROOT / "tools" / "core_registrations.json")
    ap.add_argument("--torch", type=Path, default=DATA / "torch_registrations.json",
                    help="per-release yaml facts (tools/extract_torch_registrations.py)")
    ap.add_argument("--out", type=Path, default=DATA / "xpu_core_ops.json")
    ap.add_argument("--check", action="store_true",
                    help="compare with --out instead of writing it (exit 1 if it differs)")
    args = ap.parse_args(argv)
    for p in (args.spec, args.torch):
        if not p.is_file():
            raise SystemExit(f"{p}: no such file")
    doc = build(args.files_dir, json.loads(args.spec.read_text(encoding="utf-8")),
                json.loads(args.torch.read_text(encoding="utf-8")))
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the sources'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(doc['series'])} series, "
          f"{len(doc['sources'])} sources)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
