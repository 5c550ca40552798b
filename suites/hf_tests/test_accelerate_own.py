"""Stands for accelerate's own tests: the suite's conftest collects the selected files of
the checkout ACCELGRID_ACCELERATE_SRC names in this file's place (nothing here runs)."""
