"""Stands for transformers' own tests: the suite's conftest collects the selected files of
the checkout ACCELGRID_TRANSFORMERS_SRC names in this file's place (nothing here runs)."""
