"""``accelgrid bench``: benchmarks (runner overhead, offload, grid, op capture)."""

from __future__ import annotations

import argparse
import importlib


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    # TEMPORARY: each benchmark still parses its own options (being moved here).
    p = sub.add_parser("bench", help="benchmarks: overhead (runner vs bare pytest), "
                       "offload, grid, ops (capture cost)")
    p.add_argument("what", choices=["overhead", "offload", "grid", "ops"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")
    p.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    return importlib.import_module(f"accelgrid.bench_{args.what}").main(args.rest)
