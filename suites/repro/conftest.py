"""The repro suite: one minimal reproduction per upstream issue, each file marked with its
issue (``@pytest.mark.upstream("owner/repo#N")``; the marker is registered by accelgrid's
plugin). ``--upstream=owner/repo#N`` keeps only that issue's tests (used by
``accelgrid repro``). Every test asserts the *correct* behaviour: it fails where the bug
is present (the issue reproduces) and passes where it is fixed.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--upstream", action="append", default=[], metavar="OWNER/REPO#N",
                     help="run only the reproductions of this upstream issue (repeatable)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("upstream", default=None) or ())
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        ids = {m.args[0] for m in item.iter_markers("upstream") if m.args}
        (keep if ids & wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
