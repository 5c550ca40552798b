"""Benchmarks behind ``accelgrid bench``: library functions, no option parsing.

- :mod:`.devices`: a whole cell on 1, 2, 4, ... of the host's devices (multi-GPU scaling)
- :mod:`.offload`: torchao's CPUOffloadOptimizer on a CUDA/XPU device (memory, step time)
- :mod:`.harness`: what each needs besides its measurement (stopping on a signal, the
  machine's description, writing the outputs), re-exported here; the checkout's
  benchmarks of accelgrid itself use it too (tools/selfbench)

Each ``run(...)`` prints its progress, writes its JSON/Markdown outputs and returns the
report; invalid arguments raise :class:`~accelgrid.base.errors.InvalidInput`. The options live
in :mod:`accelgrid.cli.bench`. Submodules are imported on use (``from accelgrid.bench
import devices``), so importing this package costs next to nothing (the harness: stdlib).
"""

from .harness import (
    STOP_GRACE_S,
    STOP_SIGNALS,
    Stopped,
    load_average,
    machine,
    stoppable,
    write_outputs,
)

__all__ = ["STOP_GRACE_S", "STOP_SIGNALS", "Stopped", "load_average", "machine", "stoppable",
           "write_outputs"]
