"""The files a user writes, read and checked: ``matrix.yaml`` (the matrix model and its
cells), ``known_issues.yaml`` (the registry), their JSON schemas and the version pairings
known not to work."""
