"""tox plugin for ci/tox.ini (tox loads a toxfile.py beside its config by itself).

Written by `accelgrid ci render`; do not edit the copy in ci/.

tox-gh-actions 3.5.0 has no ``fail_on_no_env`` (only its tox 3 line had it): an env var
value with no mapping in [gh-actions:env] is skipped, so ``DEVICE=tpu TORCH=2.13`` runs
every torch 2.13 env and ``DEVICE=tpu`` alone runs tox's default ``py`` env. With
``fail_on_no_env = true`` in [gh-actions], this plugin makes both an error instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tox.plugin import impl
from tox.report import HandledError

if TYPE_CHECKING:
    from tox.config.sets import ConfigSet
    from tox.session.state import State

# The variables [gh-actions:env] maps (ci/tox.ini).
FILTERS = ("DEVICE", "TORCH", "PROFILE")

if os.environ.get("GITHUB_ACTIONS") == "true":
    # An empty value (an empty workflow_dispatch input) is an unset one: no filter. Values
    # lose surrounding blanks. Done before tox-gh-actions reads the environment (its hook
    # runs after this module is imported).
    for _var in FILTERS:
        if _var in os.environ:
            if os.environ[_var].strip():
                os.environ[_var] = os.environ[_var].strip()
            else:
                del os.environ[_var]
    # A cell without a profile in its name runs the default profile (cpu-2.13), so an
    # unset PROFILE means "default" rather than "every profile".
    if not os.environ.get("PROFILE") and (os.environ.get("DEVICE") or os.environ.get("TORCH")):
        os.environ["PROFILE"] = "default"


def _fail_on_no_env(state: State) -> bool:
    from tox_gh_actions.plugin import load_config_section

    for loader in load_config_section(state.conf, "gh-actions").loaders:
        if "fail_on_no_env" in loader.found_keys():
            value = loader.load_raw("fail_on_no_env", None, None)
            return str(value).strip().lower() in ("1", "true", "yes")
    return False


@impl(trylast=True)  # after tox-gh-actions has narrowed env_list
def tox_add_core_config(core_conf: ConfigSet, state: State) -> None:
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return  # tox-gh-actions does nothing outside GitHub Actions either
    env = getattr(state.conf.options, "env", None)
    if env is not None and not env.is_default_list:
        return  # -e / TOXENV pick the envs; tox-gh-actions stands aside
    try:
        from tox_gh_actions.plugin import load_config
    except ImportError as exc:
        raise HandledError("tox-gh-actions is not installed: DEVICE, TORCH and PROFILE "
                           "would select nothing (pip install tox-gh-actions==3.5.0)") from exc
    if not _fail_on_no_env(state):
        return
    for var, mapping in load_config(state.conf)["env"].items():
        value = os.environ.get(var)
        if value is not None and value not in mapping:
            raise HandledError(f"{var}={value!r} matches no tox env (known: "
                               f"{', '.join(mapping)}); unset {var} not to filter on it")
    if not core_conf["env_list"].envs:
        raise HandledError("tox-gh-actions selected no env: no env has all of the DEVICE, "
                           "TORCH and PROFILE given (or none of them is set)")
