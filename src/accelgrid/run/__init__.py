"""A cell's run: preflight, env, passes, selection, the lock, supervision, console.

:mod:`.cell` runs a cell (its docstring tells the whole run); the other modules are its
parts, each one concept."""
