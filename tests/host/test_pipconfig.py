"""Carrying pip's configuration over to uv (accelgrid.host.pipconfig; real pip)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from accelgrid.host import pipconfig


def _pip_settings_with(tmp_path: Path, conf: str, extra_env: dict[str, str]) -> dict:
    cfg = tmp_path / "pip.conf"
    cfg.write_text(conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PIP_CONFIG_FILE": str(cfg), **extra_env})
    code = ("import json, accelgrid.host.pipconfig as e; "
            "print(json.dumps(e.uv_env_from_pip(e.pip_settings(), env={})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    import json

    return json.loads(out)


def test_pip_config_file_becomes_uv_env(tmp_path: Path) -> None:
    uv = _pip_settings_with(tmp_path, "[global]\nindex-url = https://mirror.example/simple\n"
                            "extra-index-url = https://a.example/simple https://b.example/simple\n"
                            "find-links = /srv/wheels\n[install]\nconstraint = /srv/c.txt\n", {})
    assert uv["UV_INDEX_URL"] == "https://mirror.example/simple"
    assert uv["UV_EXTRA_INDEX_URL"] == "https://a.example/simple https://b.example/simple"
    assert uv["UV_FIND_LINKS"] == "/srv/wheels"
    assert uv["UV_CONSTRAINT"] == "/srv/c.txt"
    assert uv["UV_INDEX_STRATEGY"] == "unsafe-best-match"  # pip merges indexes
    assert uv["UV_COMPILE_BYTECODE"] == "1"


def test_pip_env_vars_override_files(tmp_path: Path) -> None:
    uv = _pip_settings_with(tmp_path, "[global]\nfind-links = /from/file\n",
                            {"PIP_FIND_LINKS": "/from/env"})
    assert uv["UV_FIND_LINKS"] == "/from/env"


def test_existing_uv_settings_win() -> None:
    uv = pipconfig.uv_env_from_pip({"find-links": "/a"}, env={"UV_FIND_LINKS": "/mine",
                                                               "UV_INDEX_STRATEGY": "first-index"})
    assert "UV_FIND_LINKS" not in uv and "UV_INDEX_STRATEGY" not in uv
