"""What the commands do beyond one cell's run: nox sessions per cell, container images,
reproductions and bisection, a shell in a cell's environment, the rendered CI files and
GitHub Actions' output. No option parsing here (that is ``cli``)."""
