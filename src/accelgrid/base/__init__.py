"""The base layer: what every other layer stands on, standard library (and ``packaging``)
only: the runner <-> plugin contract, errors and exit codes, JSON in and out, the outcome
vocabulary, versions, process lifetime, text shown on one line, secret redaction, the
flags torch reads as integers. Runs inside cells."""
