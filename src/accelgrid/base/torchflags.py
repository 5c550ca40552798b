"""The environment flags torch (and the Intel graphics compiler it loads) parse as integers
when torch loads: anything but ``0``/``1`` can break ``import torch``.

Both sides of a cell need the list: the matrix checks refuse any other value
(:func:`accelgrid.config.flags.flag_value_problem`), and env.json records their values
(:data:`accelgrid.results.provenance.RECORDED_VALUES`). Standard library only.
"""

from __future__ import annotations

# Flags torch / the Intel graphics compiler parse as integers when torch loads.
INTEGER_FLAGS = frozenset(
    {
        "PYTORCH_DEBUG_XPU_FALLBACK",
        "PYTORCH_ENABLE_XPU_FALLBACK",
        "PYTORCH_ENABLE_MPS_FALLBACK",
        "OverrideDefaultFP64Settings",
        "IGC_EnableDPEmulation",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "TORCH_SHOW_CPP_STACKTRACES",
    }
)
