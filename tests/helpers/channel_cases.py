"""The base matrix with nightly- and test-channel cpu cells."""

from __future__ import annotations

NIGHTLY_CPU = "https://download.pytorch.org/whl/nightly/cpu"


TEST_CPU = "https://download.pytorch.org/whl/test/cpu"


def with_channels(text: str, nightly: str = NIGHTLY_CPU, test: str = TEST_CPU) -> str:
    """``text`` (the base matrix) with cpu channel indexes and two cpu cells: cpu-2.16 from
    the nightly channel, cpu-2.17 from the test channel."""
    out = text.replace("  cpu:\n    index: default",
                       f"  cpu:\n    index: default\n    channels: {{nightly: \"{nightly}\", "
                       f"test: \"{test}\"}}", 1)
    out = out.replace('  "2.13": {torch: "2.13.0", transformers: "5.24.0"}\n',
                      '  "2.13": {torch: "2.13.0", transformers: "5.24.0"}\n'
                      '  "2.16": {torch: "2.16.0", transformers: "5.24.0", channel: nightly}\n'
                      '  "2.17": {torch: "2.17.0", transformers: "5.24.0", channel: test}\n', 1)
    out = out.replace("  include:\n", '  include:\n    - {device: cpu, torch: "2.16"}\n'
                      '    - {device: cpu, torch: "2.17"}\n', 1)
    assert out.count("channel") == 3 and 'torch: "2.16"}' in out
    return out
