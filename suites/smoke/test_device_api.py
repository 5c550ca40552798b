"""Device API sanity, through accelgrid's device dispatch tables (accelgrid.backends).

A device that claims an API but lacks it in this torch build fails with the API's exact
name (pytorch/pytorch#127929: torch.xpu.memory_allocated & co. missing in torch 2.4);
a feature the device does not claim is skipped with the reason.
"""

from __future__ import annotations

import pytest
import torch

from accelgrid import backends


def call(api: str, device: str, *args, **kwargs):
    """dispatch() with NotClaimed -> skip, MissingAPI -> fail naming the API."""
    try:
        fn = backends.resolve(api, device)
    except backends.NotClaimed as exc:
        pytest.skip(str(exc))
    except backends.MissingAPI as exc:
        pytest.fail(f"{api} on {device}: {exc}", pytrace=False)
    return fn(*args, **kwargs)


def test_device_available(device: str) -> None:
    if device == "cpu":
        return
    module = getattr(torch, device, None)
    assert module is not None, f"torch.{device} does not exist in torch {torch.__version__}"
    assert module.is_available(), f"torch.{device}.is_available() is False on this host"


def test_device_count_and_name(device: str) -> None:
    count = call("device_count", device)
    assert count >= 1, f"{device}: device_count() == {count}"
    if backends.claims("device_name", device):
        name = call("device_name", device, 0)
        assert isinstance(name, str) and name.strip(), f"empty device name: {name!r}"


def test_allocation_and_matmul_match_cpu(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 48, generator=gen, dtype=torch.float32)
    b = torch.randn(48, 32, generator=gen, dtype=torch.float32)
    on_device = (a.to(device) @ b.to(device)).cpu()
    assert on_device.device.type == "cpu"
    # TF32 / reduced-precision accumulation on GPUs: compare at 1e-3.
    torch.testing.assert_close(on_device, a @ b, rtol=1e-3, atol=1e-3)
    x = torch.empty(1024, device=device).fill_(3.0)
    assert x.device.type == device and float(x.sum()) == 3072.0


def test_memory_stats(device: str) -> None:
    call("synchronize", device)
    call("reset_peak_memory_stats", device)
    before = call("memory_allocated", device)
    x = torch.empty(4 * 1024 * 1024, dtype=torch.uint8, device=device)
    call("synchronize", device)
    during = call("memory_allocated", device)
    peak = call("max_memory_allocated", device)
    assert during - before >= x.numel(), f"memory_allocated grew by {during - before} bytes"
    assert peak >= during
    del x
    call("synchronize", device)
    call("reset_peak_memory_stats", device)
    assert call("max_memory_allocated", device) < peak


def test_synchronize(device: str) -> None:
    x = torch.randn(256, 256, device=device)
    y = x @ x
    call("synchronize", device)
    assert torch.isfinite(y).all()


def test_streams_and_events(device: str) -> None:
    try:
        Stream = backends.resolve("Stream", device)
        Event = backends.resolve("Event", device)
    except backends.NotClaimed as exc:
        pytest.skip(str(exc))
    except backends.MissingAPI as exc:
        pytest.fail(str(exc), pytrace=False)
    stream = Stream()
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    x = torch.randn(512, 512, device=device)
    with getattr(torch, device).stream(stream):
        start.record(stream)
        y = x @ x
        end.record(stream)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    # Work on a side stream must be visible after it is waited for.
    getattr(torch, device).current_stream().wait_stream(stream)
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)


def test_seeded_determinism(device: str) -> None:
    def draw() -> torch.Tensor:
        call("manual_seed", device, 1234)
        return torch.randn(1000, device=device).cpu()

    first, second = draw(), draw()
    assert torch.equal(first, second), "same seed gave different random numbers"
    call("manual_seed", device, 4321)
    assert not torch.equal(first, torch.randn(1000, device=device).cpu())


def test_bf16_autocast(device: str) -> None:
    if backends.claims("is_bf16_supported", device) and not call("is_bf16_supported", device):
        pytest.skip(f"{device} reports no bf16 support")
    a = torch.randn(64, 64, device=device)
    b = torch.randn(64, 64, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = a @ b
    assert out.dtype == torch.bfloat16, f"autocast left matmul in {out.dtype}"
    # bf16 keeps 8 bits of mantissa: relative error of a 64-term dot product stays ~1e-2.
    torch.testing.assert_close(out.float(), a @ b, rtol=3e-2, atol=3e-1)


# Flags that make a card without native fp64 (ATS-M) emulate it: matrix.yaml sets them for
# ATS-M runners (devices.xpu.hardware.ats-m) and in the fp64-emulation profile.
FP64_FLAGS = ("OverrideDefaultFP64Settings", "IGC_EnableDPEmulation")


def test_float64_math(device: str, request: pytest.FixtureRequest) -> None:
    """float64 on the device, matching the CPU to double precision. Records (test record
    ``properties``) the fp64 emulation flags in effect and, on xpu, whether the device
    reports fp64 (``get_device_properties().has_fp64``), so cells with and without the
    flags show their effect; skipped where the device has no fp64."""
    import os

    flags = {name: os.environ[name] for name in FP64_FLAGS if name in os.environ}
    request.node.user_properties.append(("fp64_flags", flags))
    if device == "mps":
        pytest.skip("mps has no float64 (torch.float64 tensors are refused on the MPS device)")
    if device == "xpu":
        has_fp64 = bool(torch.xpu.get_device_properties(0).has_fp64)
        request.node.user_properties.append(("has_fp64", has_fp64))
        if not has_fp64 and not flags:
            pytest.skip(f"{torch.xpu.get_device_name(0)} reports no fp64 (has_fp64=False) and "
                        f"no emulation flags are set ({'=1 '.join(FP64_FLAGS)}=1)")
        assert has_fp64, (f"fp64 emulation flags {flags} are set but the device still reports "
                          "has_fp64=False")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 48, generator=gen, dtype=torch.float64)
    b = torch.randn(48, 32, generator=gen, dtype=torch.float64)
    on_device = (a.to(device) @ b.to(device)).cpu()
    assert on_device.dtype == torch.float64
    torch.testing.assert_close(on_device, a @ b)   # float64's own tolerances
    # 1 + 2**-40 does not survive a float32 detour: the device really computed in fp64.
    x = torch.tensor([1.0 + 2.0**-40], dtype=torch.float64, device=device)
    assert float((x - 1.0).sum().cpu()) == 2.0**-40
