"""env.json's "env" (accelgrid.results.provenance.recorded_env): no secret is written.
tests/base/test_redact.py redacts the same variables by name."""

from __future__ import annotations

from accelgrid.base import redact
from accelgrid.results import provenance


def test_secrets_never_written() -> None:
    env = {"HF_TOKEN": "hf_abc", "PIP_INDEX_URL": "https://user:pw@mirror.example/simple",
           "MY_API_KEY": "k", "DB_PASSWORD": "p", "AWS_CREDENTIALS": "c", "GH_SECRET_X": "s",
           "PYTORCH_DEBUG_XPU_FALLBACK": "1"}
    out = provenance.recorded_env(env)
    assert out["HF_TOKEN"] == redact.REDACTED
    assert "pw" not in out["PIP_INDEX_URL"] and "user" not in out["PIP_INDEX_URL"]
    assert out["PYTORCH_DEBUG_XPU_FALLBACK"] == "1"
    assert "MY_API_KEY" not in out  # not a recorded prefix at all
