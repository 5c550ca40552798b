#!/usr/bin/env python3
"""Turn the seed's hand-made ops x examples table into src/accelgrid/data/seed_000_ops.json.

    python tools/extract_seed_table.py PATH/TO/seeds/000_e09c196a69be0f3f.txt [--out FILE]

The table is tab-separated: a header ``op`` + one column per example, then per row the
op, its status (``explicit``: on torch-xpu-ops' built-in fallback list; ``manual``: not
implemented and not on the list) and the model each example ran. The seed was posted as
Markdown, which ate the leading underscore of ``aten::_foreach_*`` names (its own
``aten::_foreach_norm.Scalar`` row kept it, and there is no ``aten::foreach_*`` op): such
names are restored in ``op`` and kept as written in ``as_written``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

OBSERVED_ON = "pytorch/pytorch@21144ce, ATS-M"


def parse(text: str) -> list[dict]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op\t"))
    header = lines[start].split("\t")
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("aten::"):
            break
        cells = line.split("\t")
        written = cells[0]
        op = written.replace("aten::foreach_", "aten::_foreach_", 1)
        examples = {header[j - 1]: cells[j] for j in range(2, len(cells)) if cells[j].strip()}
        rows.append({"op": op, "as_written": written, "status": cells[1],
                     "examples": examples})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seed", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1]
                        / "src" / "accelgrid" / "data" / "seed_000_ops.json")
    args = parser.parse_args(argv)
    raw = args.seed.read_bytes()
    data = {
        "source": {"file": f"seeds/{args.seed.name}",
                   "sha256": hashlib.sha256(raw).hexdigest(),
                   "observed_on": OBSERVED_ON,
                   "author": "dvrogozh (a comment in the seed's thread)"},
        "statuses": {"explicit": "on torch-xpu-ops' built-in fallback list: runs on the CPU",
                     "manual": "not implemented and not on the list: needs "
                               "PYTORCH_ENABLE_XPU_FALLBACK=1 to run at all"},
        "normalized": "aten::foreach_* restored to aten::_foreach_* (Markdown ate the "
                      "underscore); as_written keeps the seed's text",
        "rows": parse(raw.decode("utf-8")),
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{len(data['rows'])} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
