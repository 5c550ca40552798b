"""An example test: `device` is the cell's device ("cpu", "cuda", "xpu", ...), whatever the cell.

Write yours beside it (docs/guides/writing-a-test.md in accelgrid's repository: fixtures, markers,
tolerances, baselines).
"""

import torch


def test_add_matches_cpu(device: str) -> None:
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    got = (a.to(device) + 1).cpu()
    torch.testing.assert_close(got, a + 1)
