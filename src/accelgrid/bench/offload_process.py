"""One process per configuration of ``accelgrid bench offload``: :func:`isolated` runs a
measurement (``module:function`` of a task) in a fresh Python process and returns its
result, or how the process died, with its peak host memory.

Every measurement runs in a fresh Python process that exits when it is done: whatever a
configuration leaves in host memory (pinned blocks cached by torch's host allocator,
CPU optimizer states kept by reference cycles of torchao's gradient hooks, freed memory
glibc's per-thread arenas keep) goes back to the system with it, so run 13 of 20 sees
the memory run 1 saw. A process the kernel's OOM killer ends is that row's outcome.
It reports its own peak resident set with its result (each row's host memory, so growth
from one configuration to the next shows in the records): VmHWM, the high-water mark of
its own address space; not ru_maxrss, which a child forked from the bench starts at the
bench's own size (Linux keeps it across exec). None where /proc has no VmHWM.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# The child: target(task), its VmHWM added, into the result file.
_CHILD = (
    "import importlib, json, re, sys\n"
    "module, name = sys.argv[1].rsplit(':', 1)\n"
    "task = json.loads(open(sys.argv[2], encoding='utf-8').read())\n"
    "result = getattr(importlib.import_module(module), name)(task)\n"
    "try:\n"
    "    status = open('/proc/self/status', encoding='utf-8').read()\n"
    "    result['host_rss_peak_kib'] = int(re.search(r'VmHWM:\\s*(\\d+)', status)[1])\n"
    "except (OSError, TypeError):\n"
    "    result['host_rss_peak_kib'] = None\n"
    "with open(sys.argv[3], 'w', encoding='utf-8') as fh:\n"
    "    json.dump(result, fh)\n"
)


def _children_peak_kib() -> int:
    """The largest ``ru_maxrss`` of this process's waited-for children, in KiB (Linux):
    an upper bound of each one's own peak."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def isolated(task: dict[str, Any], target: str) -> dict[str, Any]:
    """``target(task)`` (``module:function``, returning a JSON-able dict) in a new Python
    process (its own process group, stopped with the caller); its result, or
    ``{"error": ...}`` saying how the process died: a signal (SIGKILL: most likely the
    kernel's OOM killer), an exit status with the last line it printed. Either way with
    ``host_rss_peak_gib``, the process's peak resident set (its own figure; None where it
    gave none), and for one that died ``host_rss_peak_at_most_gib``: its peak was at most
    the largest ``ru_maxrss`` of this process's children so far."""
    import json
    import tempfile

    from ..base import lifetime

    with tempfile.TemporaryDirectory(prefix="accelgrid-offload-") as tmp:
        task_path, result_path = Path(tmp) / "task.json", Path(tmp) / "result.json"
        task_path.write_text(json.dumps(task), encoding="utf-8")
        done = lifetime.run_group([sys.executable, "-c", _CHILD, target, str(task_path),
                                   str(result_path)])
        for line in done.stdout.splitlines():  # its progress lines, as they would be
            print(line, file=sys.stderr, flush=True)
        if done.returncode == 0 and result_path.is_file():
            try:
                result = json.loads(result_path.read_text(encoding="utf-8"))
            except ValueError as exc:
                result = {"error": f"its result could not be read: {exc}"}
            kib = result.pop("host_rss_peak_kib", None)
            return {**result, "host_rss_peak_gib": None if kib is None else kib / 2**20}
    return {**_died(done), "host_rss_peak_gib": None,
            "host_rss_peak_at_most_gib": _children_peak_kib() / 2**20}


def _died(done: Any) -> dict[str, Any]:
    """How a configuration's process that left no result ended."""
    import signal

    if done.returncode < 0:
        sig = -done.returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
        why = " (most likely the kernel's OOM killer: host memory ran out)" \
            if sig == signal.SIGKILL else ""
        return {"error": f"killed by {name}{why}", "killed": True}
    last = [ln for ln in done.stdout.splitlines() if ln.strip()][-1:] or ["no output"]
    return {"error": f"its process exited with {done.returncode}: {last[0][:200]}"}
