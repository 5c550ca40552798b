"""A cell session as named steps over one state (accelgrid.commands.sessions): their
order, and the head start (the run `accelgrid run` started ahead, handed to the session as
``sessions.HEAD_START``) ended in one place, once, before the step after the one that says
the env changes."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from nox.virtualenv import PassthroughEnv

from accelgrid.commands import sessions


def _state(virtualenv: object = None) -> sessions.CellSession:
    # Only what run_steps and steps_of read: a stand-in session, no matrix or cell.
    stand_in: Any = SimpleNamespace(virtualenv=virtualenv)
    return sessions.CellSession(stand_in, cast(Any, None), cast(Any, None), Path("."))


def test_the_steps_in_order() -> None:
    names = [s.__name__ for s in sessions.steps_of(_state())]
    assert names == ["check_host", "plan_env", "build", "check_inputs", "repair_inputs",
                     "stamp", "check_link", "link", "run", "check_run"]
    here = PassthroughEnv.__new__(PassthroughEnv)   # --no-venv
    names = [s.__name__ for s in sessions.steps_of(_state(here))]
    assert names == ["check_host", "accept_inputs", "run", "check_run"]


def test_the_head_start_ends_once_before_the_change(monkeypatch) -> None:
    seen: list[str] = []
    ended: list[list[str]] = []
    held = SimpleNamespace(cancel=lambda: ended.append(list(seen)), take=lambda request: None)
    monkeypatch.setattr(sessions, "HEAD_START", held)

    def step(name: str, changes: bool = False, done: bool = False):
        def run(state: sessions.CellSession) -> sessions.CellSession:
            seen.append(name)
            state.changes_env = state.changes_env or changes
            state.done = done
            return state
        return run

    steps = [step("a"), step("b", changes=True), step("c"), step("d", changes=True), step("e")]
    sessions.run_steps(_state(), steps)
    assert seen == ["a", "b", "c", "d", "e"] and ended == [["a", "b"]]
    # Nothing changes: the run started ahead is left to the session's run to take.
    seen.clear()
    ended.clear()
    sessions.run_steps(_state(), [step("a"), step("b")])
    assert ended == []
    # --install-only: the steps stop once one says so.
    seen.clear()
    sessions.run_steps(_state(), [step("a"), step("b", done=True), step("c")])
    assert seen == ["a", "b"]


def _cancels(source: str) -> list[str]:
    """The functions of ``source`` that call ``HEAD_START.cancel``."""
    return [fn.name for fn in ast.walk(ast.parse(source))
            if isinstance(fn, ast.FunctionDef)
            for node in ast.walk(fn)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "cancel" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "HEAD_START"]


def test_one_place_ends_the_head_start() -> None:
    """The env-building steps never end it themselves: they say the env changes."""
    source = inspect.getsource(sessions)
    assert _cancels(source) == ["run_steps"]
    planted = source + "\n\ndef relink(state):\n    HEAD_START.cancel()\n    return state\n"
    assert _cancels(planted) == ["run_steps", "relink"]


def test_without_a_head_start_the_steps_run_and_nothing_is_ended(monkeypatch) -> None:
    """A session nox started from a shell: no run was started ahead (HEAD_START None)."""
    monkeypatch.setattr(sessions, "HEAD_START", None)
    seen: list[str] = []

    def changes(state: sessions.CellSession) -> sessions.CellSession:
        seen.append("changes")
        state.changes_env = True
        return state

    sessions.run_steps(_state(), [changes, changes])
    assert seen == ["changes", "changes"]
