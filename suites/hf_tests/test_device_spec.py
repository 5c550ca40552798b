"""The device spec transformers' tests run through: each hook transformers took from it is
the device's own function (accelgrid.devices.backends), hooks the device lacks are left out, and
seeding through the spec repeats a draw (a spec whose seed hook does nothing fails here)."""

from __future__ import annotations

import pytest

from accelgrid.devices import backends
from accelgrid.testing import hf_spec

from .conftest import device_spec

TABLE_OF = {"MANUAL_SEED_FN": "BACKEND_MANUAL_SEED", "EMPTY_CACHE_FN": "BACKEND_EMPTY_CACHE",
            "DEVICE_COUNT_FN": "BACKEND_DEVICE_COUNT"}


@pytest.fixture(scope="module")
def testing_utils(device: str):
    pytest.importorskip("transformers", reason="transformers is not installed in this cell")
    path, how = device_spec()
    if path is None:
        pytest.fail(how)
    from transformers import testing_utils
    if testing_utils.torch_device != device:
        pytest.fail(f"transformers.testing_utils.torch_device is {testing_utils.torch_device!r}"
                    f", not the cell's {device!r} ({how}; was testing_utils imported before "
                    "TRANSFORMERS_TEST_DEVICE_SPEC was set?)")
    return testing_utils


def test_spec_hooks_are_the_devices_own(testing_utils, device: str) -> None:
    given = device_spec()[0]
    assert set(TABLE_OF) == set(hf_spec.HOOKS)
    for hook, api in hf_spec.HOOKS.items():
        table = getattr(testing_utils, TABLE_OF[hook])
        if backends.claims(api, device):
            assert table.get(device) is backends.resolve(api, device), (
                f"{hook} in {given} is not {device}'s own {api}")
        else:
            assert device not in table or table[device] is None, (hook, table.get(device))


def test_seeding_through_the_spec_repeats_a_draw(testing_utils, device: str) -> None:
    import torch

    testing_utils.backend_manual_seed(device, 1234)
    first = torch.rand(64, device=device)
    torch.rand(64, device=device)   # moves the generator on
    testing_utils.backend_manual_seed(device, 1234)
    again = torch.rand(64, device=device)
    assert torch.equal(first, again), "the spec's MANUAL_SEED_FN does not seed the device"
