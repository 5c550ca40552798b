"""accelgrid.devices.backends on the real torch: the tables name APIs this torch has, devices the
tables do not list get the default, an unclaimed feature is NotClaimed, and a claimed API
that the torch build lacks (pytorch/pytorch#127929: torch.xpu.memory_allocated missing in
torch 2.4) is MissingAPI with its exact dotted name."""

from __future__ import annotations

import pytest

from accelgrid.devices import backends

torch = pytest.importorskip("torch")

STRING_IMPLS = [(api, dev) for api, table in backends.TABLES.items()
                for dev, impl in table.items() if isinstance(impl, str)]


@pytest.mark.parametrize(("api", "device"), STRING_IMPLS,
                         ids=[f"{a}-{d}" for a, d in STRING_IMPLS])
def test_every_table_path_is_this_torchs_attribute(api: str, device: str) -> None:
    """Every dotted path resolves, to the attribute it names, on this torch (its cpu build
    has the torch.cuda / torch.xpu / torch.mps modules too): a typo in a table fails here,
    not as a "missing API" on the device that uses it."""
    path = backends.TABLES[api][device]
    assert isinstance(path, str)
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    assert backends.resolve(api, device if device != "default" else "hpu") is obj


@pytest.mark.parametrize(("device", "kind"), [
    ("cuda", "cuda"), ("cuda:1", "cuda"), ("xpu:0", "xpu"), ("cpu", "cpu"), ("mps", "mps")])
def test_device_type(device: str, kind: str) -> None:
    assert backends.device_type(device) == kind
    assert backends.device_type(torch.device(device)) == kind


def test_resolve_picks_the_devices_entry_then_the_default() -> None:
    assert backends.resolve("manual_seed", "cuda:1") is torch.cuda.manual_seed
    assert backends.resolve("manual_seed", "xpu") is torch.xpu.manual_seed
    assert backends.resolve("manual_seed", "cpu") is torch.manual_seed    # cpu: the default
    assert backends.resolve("manual_seed", "hpu") is torch.manual_seed    # unlisted: default
    assert backends.resolve("synchronize", "cpu") is torch.cpu.synchronize
    assert backends.dispatch("device_count", "mps") == 1                   # a callable entry
    assert backends.dispatch("is_bf16_supported", "cpu") is True


@pytest.mark.parametrize(("api", "device"), [("device_name", "cpu"), ("Stream", "mps"),
                                             ("synchronize", "hpu"), ("memory_allocated", "cpu")])
def test_a_feature_the_device_does_not_claim(api: str, device: str) -> None:
    assert not backends.claims(api, device)
    with pytest.raises(backends.NotClaimed, match=f"^{device} does not claim {api}$"):
        backends.resolve(api, device)


def test_claims_follows_the_table_not_the_torch_build() -> None:
    assert backends.claims("Stream", "cuda:0") and backends.claims("Event", "mps")
    assert backends.claims("manual_seed", "hpu")          # through the default entry
    assert not backends.claims("device_count", "hpu")


def test_a_claimed_api_missing_from_the_torch_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytorch/pytorch#127929 as torch 2.4 had it: torch.xpu without memory_allocated."""
    monkeypatch.delattr(torch.xpu, "memory_allocated")
    assert backends.claims("memory_allocated", "xpu")
    with pytest.raises(backends.MissingAPI,
                       match=r"^torch\.xpu\.memory_allocated is missing in this torch build$"):
        backends.dispatch("memory_allocated", "xpu")
    assert backends.resolve("memory_allocated", "cuda") is torch.cuda.memory_allocated


def test_a_missing_module_is_a_missing_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """An old build without the device's module at all (torch.xpu before 2.4)."""
    monkeypatch.setitem(backends.TABLES["manual_seed"], "xpu", "torch.no_such_device.manual_seed")
    with pytest.raises(backends.MissingAPI, match="torch.no_such_device.manual_seed is missing"):
        backends.resolve("manual_seed", "xpu")
    with pytest.raises(KeyError):
        backends.resolve("no_such_api", "cpu")
