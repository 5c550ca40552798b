"""accelgrid: a reproducible test matrix for PyTorch device backends."""

__version__ = "0.1.0"
