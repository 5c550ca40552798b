"""Secret redaction (accelgrid.base.redact) by a variable's name.

tests/results/test_secrets.py follows credentials through every output; tests/run/test_faults.py
checks the shapes.
"""

from __future__ import annotations

from accelgrid.base import redact


def test_secrets_never_written() -> None:
    env = {"HF_TOKEN": "hf_abc", "PIP_INDEX_URL": "https://user:pw@mirror.example/simple",
           "MY_API_KEY": "k", "DB_PASSWORD": "p", "AWS_CREDENTIALS": "c", "GH_SECRET_X": "s",
           "PYTORCH_DEBUG_XPU_FALLBACK": "1"}
    red = redact.redact(env)
    for name in ("MY_API_KEY", "DB_PASSWORD", "AWS_CREDENTIALS", "GH_SECRET_X"):
        assert red[name] == redact.REDACTED
