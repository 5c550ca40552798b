"""This host: which packages a cell's environment gets and how they are installed, where
a cell's environment lives, and which devices are present."""
