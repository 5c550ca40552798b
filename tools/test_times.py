#!/usr/bin/env python3
"""Where the project's own tests spend their time: per-file totals from pytest's JUnit XML.

    pytest -p no:randomly --junitxml=quick.xml            # the README's command, once
    python tools/test_times.py quick.xml [more.xml ...]   # a Markdown table, largest first

Each row: the test file, its test count, the sum of its tests' times and that sum's share
of the whole. On a shared machine compare shares, not seconds (docs/design/testing.md); the
numbers are the tests' own times (setup, call, teardown), so with xdist the sum exceeds
the run's wall time by about the worker count.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def per_file(paths: list[Path]) -> tuple[Counter, Counter]:
    """(seconds, tests) per test file (``tests/test_x.py``) over the JUnit files."""
    seconds: Counter = Counter()
    count: Counter = Counter()
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            # classname "tests.test_x" (or "tests.test_x.TestClass"): the file is its module.
            parts = (case.get("classname") or "").split(".")
            name = "/".join(parts[:2]) + ".py" if parts[0] == "tests" else parts[0] + ".py"
            seconds[name] += float(case.get("time") or 0)
            count[name] += 1
    return seconds, count


def table(seconds: Counter, count: Counter) -> str:
    total = sum(seconds.values()) or 1.0
    lines = ["| file | tests | seconds | share |", "|---|---:|---:|---:|"]
    for name, secs in seconds.most_common():
        lines.append(f"| {name} | {count[name]} | {secs:.1f} | {100 * secs / total:.1f} % |")
    lines.append(f"| all | {sum(count.values())} | {sum(seconds.values()):.1f} | 100 % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", nargs="+", type=Path, help="pytest --junitxml files")
    args = parser.parse_args(argv)
    try:
        seconds, count = per_file(args.junit)
    except (OSError, ET.ParseError) as exc:
        print(f"test_times: {exc}", file=sys.stderr)
        return 2
    print(table(seconds, count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
