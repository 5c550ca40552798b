#!/usr/bin/env python3
"""Extract, per torch release, the aten ops intel/torch-xpu-ops implements for XPU and the
ops it sends to the CPU on purpose (its built-in fallback list), from a git clone of
torch-xpu-ops (bare or not). Writes src/accelgrid/data/xpu_ops.json.

    python tools/extract_xpu_ops.py PATH/TO/torch-xpu-ops.git [--out FILE]

Branch ``release/X.Y`` is what torch X.Y's XPU build uses. Per branch head it reads:

* ``yaml/xpu_functions.yaml`` (``supported:`` / ``autograd:`` lists, ``add.Tensor`` style),
  up to 2.5;
* from 2.6 ``yaml/native/native_functions.yaml`` instead (CMake generates the
  registrations from it alone; names only the older file still lists, such as
  ``std.correction_out``, are stale): entries whose ``dispatch:`` has a
  dense ``XPU`` key (alone or in a list such as ``XPU, NestedTensorXPU``), plus entries
  whose ``structured_delegate`` is such an entry (codegen registers those for XPU too);
* hand-written ``TORCH_LIBRARY_IMPL(aten, XPU, m)`` blocks under ``src/`` (``m.impl(...)``
  with a literal name), outside the fallback file;
* the fallback list: ``std::vector<std::string> fallback_list = {...}`` in the file named
  ``XPUFallback.*`` (``src/aten/XPUFallback.template`` on 2.4,
  ``src/ATen/native/xpu/XPUFallback.template`` later, ``XPUFallback.cpp`` once codegen
  moved into PyTorch).

Where a branch no longer has ``yaml/`` (its XPU registrations moved into PyTorch's own
native_functions.yaml, which this repository does not hold), the kernel list is read from
the last commit on that branch that still had it; the entry says so (``native_commit``).
Output is deterministic: sorted names, no timestamps.

``--nightly DATE[@COMMIT][=SERIES]`` (repeatable) writes, instead, the same lists read from
the last commit of ``main`` on or before DATE (or from COMMIT, where the observation names
the torch-xpu-ops commit it ran), for upstream observations made on a nightly of that date
(``SERIES``: the release that nightly led to); to
src/accelgrid/data/xpu_ops_nightly.json by default.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

XPU_FUNCTIONS = "yaml/xpu_functions.yaml"
NATIVE_FUNCTIONS = "yaml/native/native_functions.yaml"
LIBRARY_IMPL = "TORCH_LIBRARY_IMPL(aten, XPU"
_RELEASE = re.compile(r"^(?:refs/heads/|refs/remotes/origin/)release/(\d+)\.(\d+)$")
_FALLBACK_LIST = re.compile(r"fallback_list\s*=\s*\{(.*?)\};", re.S)
_IMPL = re.compile(r'm\.impl\(\s*(?:TORCH_SELECTIVE_NAME\(\s*)?"(?:aten::)?([A-Za-z0-9_.]+)"')
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster
DATA = Path(__file__).resolve().parents[1] / "src" / "accelgrid" / "data"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def show(repo: Path, rev: str, path: str) -> str | None:
    """A file's text at ``rev``, or None where it does not exist."""
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"],
                          capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def release_branches(repo: Path, first: tuple[int, int], last: tuple[int, int]
                     ) -> dict[str, str]:
    """{"2.4": ref} for each release/X.Y branch in [first, last]; local branches win over
    origin's (a bare mirror has the former, a plain clone the latter)."""
    found: dict[str, str] = {}
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/release",
               "refs/remotes/origin/release").split()
    for ref in sorted(refs, key=lambda r: r.startswith("refs/heads/")):
        m = _RELEASE.match(ref)
        if m and first <= (int(m[1]), int(m[2])) <= last:
            found[f"{m[1]}.{m[2]}"] = ref
    return dict(sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split(".")))))


def xpu_functions(text: str) -> set[str]:
    data = yaml.load(text, Loader=_Loader) or {}
    names: set[str] = set()
    for key in ("supported", "autograd"):
        for item in data.get(key) or []:
            names.add(item["func"] if isinstance(item, dict) else str(item))
    return {n.strip() for n in names}


def native_functions(text: str) -> set[str]:
    entries = yaml.load(text, Loader=_Loader) or []
    direct: set[str] = set()
    for e in entries:
        keys = (k.strip() for key in (e.get("dispatch") or {}) for k in str(key).split(","))
        if "XPU" in keys:  # dense XPU only: SparseXPU / NestedTensorXPU are other layouts
            direct.add(_func_name(e["func"]))
    delegated = {_func_name(e["func"]) for e in entries
                 if e.get("structured_delegate") in direct}
    return direct | delegated


def _func_name(schema: str) -> str:
    return schema.split("(", 1)[0].strip()


def fallback_list(text: str) -> list[str]:
    m = _FALLBACK_LIST.search(text)
    if not m:
        return []
    body = "\n".join(line.split("//", 1)[0] for line in m[1].splitlines())
    return re.findall(r'"([^"]+)"', body)


def library_impls(text: str) -> set[str]:
    """Literal op names registered in ``TORCH_LIBRARY_IMPL(aten, XPU, m) { ... }`` blocks."""
    names: set[str] = set()
    start = text.find(LIBRARY_IMPL)
    while start != -1:
        open_at = text.find("{", start)
        depth, i = 0, open_at
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        names.update(_IMPL.findall(text[open_at:i]))
        start = text.find(LIBRARY_IMPL, i)
    return names


def extract_branch(repo: Path, ref: str) -> dict[str, Any]:
    head = git(repo, "rev-parse", ref).strip()
    date = git(repo, "log", "-1", "--format=%cs", head).strip()
    files = git(repo, "ls-tree", "-r", "--name-only", head).splitlines()
    entry: dict[str, Any] = {"branch": ref.split("/", 2)[-1] if ref.startswith("refs/heads/")
                             else ref.split("/", 3)[-1], "commit": head, "date": date}
    native: set[str] = set()
    sources: list[str] = []
    yaml_rev = head
    if XPU_FUNCTIONS not in files and NATIVE_FUNCTIONS not in files:
        # The yaml was removed on this branch: read it from the commit before the removal.
        removed = git(repo, "log", "-1", "--format=%H", head, "--", XPU_FUNCTIONS,
                      NATIVE_FUNCTIONS).strip()
        if removed:
            yaml_rev = git(repo, "rev-parse", f"{removed}^").strip()
            entry["native_commit"] = yaml_rev
            entry["native_date"] = git(repo, "log", "-1", "--format=%cs", yaml_rev).strip()
            entry["note"] = (f"yaml/ removed in {removed[:12]}: XPU kernel registrations moved "
                             "into PyTorch's native_functions.yaml; the native list is from "
                             f"{yaml_rev[:12]}, kernels added after that are not in it")
    # From 2.6 CMake generates the XPU registrations from native_functions.yaml alone; a
    # name only the older xpu_functions.yaml still lists (std.correction_out) is stale.
    has_native = show(repo, yaml_rev, NATIVE_FUNCTIONS) is not None
    for path, parse in ((XPU_FUNCTIONS, xpu_functions), (NATIVE_FUNCTIONS, native_functions)):
        text = show(repo, yaml_rev, path)
        if text is not None and not (has_native and path == XPU_FUNCTIONS):
            native |= parse(text)
            sources.append(path if yaml_rev == head else f"{path}@{yaml_rev[:12]}")
    fallback_files = [f for f in files if Path(f).name.startswith("XPUFallback.")
                      and "fallback_list" in (show(repo, head, f) or "")]
    fallback: set[str] = set()
    for path in fallback_files:
        fallback.update(fallback_list(show(repo, head, path) or ""))
    grep = subprocess.run(["git", "-C", str(repo), "grep", "-l", "-F", LIBRARY_IMPL, head, "--",
                           "src"], capture_output=True, text=True).stdout
    for hit in sorted(grep.splitlines()):
        path = hit.split(":", 1)[1]
        if path in fallback_files:
            continue
        names = library_impls(show(repo, head, path) or "")
        if names:
            native |= names
            sources.append(path)
    entry["native"] = sorted(native)
    entry["fallback"] = sorted(fallback)
    entry["sources"] = sources + fallback_files
    return entry


def extract_nightlies(repo: Path, dates: list[str]) -> dict[str, Any]:
    """main's lists as of each ``DATE[@COMMIT][=SERIES]``: ``{"nightlies": {DATE: entry}}``."""
    ref = next((r for r in ("refs/heads/main", "refs/remotes/origin/main")
                if subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", r],
                                  capture_output=True).returncode == 0), None)
    if ref is None:
        raise SystemExit(f"{repo}: no main branch")
    out: dict[str, Any] = {}
    for spec in dates:
        when, _, series = spec.partition("=")
        date, _, commit = when.partition("@")
        if commit:
            commit = git(repo, "rev-parse", commit).strip()
        else:
            commit = git(repo, "rev-list", "-1", f"--before={date} 23:59:59 +0000",
                         ref).strip()
        if not commit:
            raise SystemExit(f"{repo}: main has no commit on or before {date}")
        entry = extract_branch(repo, commit)
        entry["branch"] = "main"
        if series:
            entry["series"] = series
        out[date] = entry
    return {"schema": 1, "repository": "intel/torch-xpu-ops",
            "generated_by": "tools/extract_xpu_ops.py --nightly",
            "nightlies": dict(sorted(out.items()))}


def extract(repo: Path, first: str = "2.4", last: str = "2.14") -> dict[str, Any]:
    bounds = tuple(tuple(int(x) for x in v.split(".")) for v in (first, last))
    series = {s: extract_branch(repo, ref)
              for s, ref in release_branches(repo, bounds[0], bounds[1]).items()}
    return {"schema": 1, "repository": "intel/torch-xpu-ops",
            "generated_by": "tools/extract_xpu_ops.py", "series": series}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", type=Path, help="a git clone of intel/torch-xpu-ops")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: src/accelgrid/data/xpu_ops.json "
                             "(xpu_ops_nightly.json with --nightly)")
    parser.add_argument("--first", default="2.4", help="oldest series (default 2.4)")
    parser.add_argument("--last", default="2.14", help="newest series (default 2.14)")
    parser.add_argument("--nightly", action="append", metavar="DATE[@COMMIT][=SERIES]",
                        help="main as of DATE instead of the release branches (repeatable)")
    args = parser.parse_args(argv)
    if args.nightly:
        out = args.out or DATA / "xpu_ops_nightly.json"
        data = extract_nightlies(args.repo, args.nightly)
        out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        for d, e in data["nightlies"].items():
            print(f"{d}: main {e['commit'][:12]} ({e['date']}) {len(e['native'])} native, "
                  f"{len(e['fallback'])} fallback")
        print(f"wrote {out}")
        return 0
    args.out = args.out or DATA / "xpu_ops.json"
    data = extract(args.repo, args.first, args.last)
    if not data["series"]:
        print(f"{args.repo}: no release/X.Y branches between {args.first} and {args.last}",
              file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    for s, e in data["series"].items():
        print(f"{s}: {e['branch']} {e['commit'][:12]} {len(e['native'])} native, "
              f"{len(e['fallback'])} fallback")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
