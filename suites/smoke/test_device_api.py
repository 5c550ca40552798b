"""Device API sanity, through accelgrid's device dispatch tables (accelgrid.devices.backends).

A device that claims an API but lacks it in this torch build fails with the API's exact
name (pytorch/pytorch#127929: torch.xpu.memory_allocated & co. missing in torch 2.4);
a feature the device does not claim is skipped with the reason, and so is a check that
cannot apply to the device (nothing to synchronise on the cpu).

Each check is a ``check_*`` function that a test runs on the cell's device; the
``test_*_catches_*`` tests plant a fault (a wrong kernel, a no-op synchronize, a no-op
wait_stream, ...) with monkeypatch and assert that the same check fails, so a check that
cannot fail does not go unnoticed.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import torch

from accelgrid.devices import backends
from accelgrid.testing import device_type, skip_on

BF16_EPS = torch.finfo(torch.bfloat16).eps  # 2**-7: one ulp of bf16 at 1.0
FP32_EPS = torch.finfo(torch.float32).eps  # 2**-23


def call(api: str, device: str, *args, **kwargs):
    """dispatch() with NotClaimed -> skip, MissingAPI -> fail naming the API."""
    try:
        fn = backends.resolve(api, device)
    except backends.NotClaimed as exc:
        pytest.skip(str(exc))
    except backends.MissingAPI as exc:
        pytest.fail(f"{api} on {device}: {exc}", pytrace=False)
    return fn(*args, **kwargs)


def reference_matmul(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a @ b, |a| @ |b|) in float64 on the CPU by an explicit sum of products, not by a
    matmul kernel, so no kernel under test computes its own reference."""
    a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
    return (a64[:, :, None] * b64[None, :, :]).sum(1), (
        a64.abs()[:, :, None] * b64.abs()[None, :, :]
    ).sum(1)


def fp32_matmul_unit_roundoff(kind: str) -> float:
    """The unit roundoff of an fp32 matmul's products and sums here: fp32's, unless
    TF32 (``high``) or bf16 (``medium``) matmuls are allowed."""
    precision = torch.get_float32_matmul_precision()
    if kind == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        precision = "high" if precision == "highest" else precision
    return {"highest": FP32_EPS / 2, "high": 2.0**-11, "medium": BF16_EPS / 2}[precision]


def assert_within(got: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    err = (got.double().cpu() - ref).abs()
    bad = ~(err <= bound)  # "not within": a NaN result is off too
    if bad.any():
        i = int(torch.where(err.isnan(), math.inf, err - bound).argmax())
        pytest.fail(
            f"{what}: {int(bad.sum())} of {ref.numel()} elements off the float64 reference; "
            f"worst: {got.flatten()[i].item():.6g} vs {ref.flatten()[i].item():.6g} "
            f"(error {err.flatten()[i].item():.3g}, bound {bound.flatten()[i].item():.3g})",
            pytrace=False,
        )


# Clock cycles a spin kernel runs per second of busy work: no GPU clocks its SMs faster
# than 3 GHz, so a spin of seconds * SPIN_HZ cycles lasts at least ``seconds`` (longer on a
# slower clock, which only widens the window).
SPIN_HZ = 3e9


def busy_work(device: str, seconds: float = 0.05) -> None:
    """Queue at least ``seconds`` of device work on the current stream of ``device``, so
    that work issued after it is still pending when the host looks.

    Where the device module has a spin kernel (``torch.cuda._sleep(cycles)``: one thread
    busy-waiting on the SM clock, what PyTorch's own stream tests use) it spins a fixed
    number of cycles, which no timing on the host can get wrong; else it queues matmuls
    sized by the fastest of a few timed on a warm one (the first in a fresh process can be
    many times slower, and sized by it the queue drained before the host looked). Waits
    with the device module's own synchronize, not the dispatch table's under test."""
    module = getattr(torch, device_type(device))
    spin = getattr(module, "_sleep", None)
    if spin is not None:
        spin(int(seconds * SPIN_HZ))
        return
    sync = module.synchronize
    x = torch.randn(2048, 2048, device=device)
    (x @ x) * 1e-3  # warm-up: library handles, kernel selection, both kernels loaded
    sync()
    one = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        x @ x
        sync()
        one = min(one, time.perf_counter() - t0)
    for _ in range(max(1, math.ceil(seconds / max(one, 1e-6)))):
        x = (x @ x) * 1e-3  # keeps values finite


# --- the checks ------------------------------------------------------------------------


def check_available(device: str) -> None:
    kind = device_type(device)
    module = getattr(torch, kind, None)
    assert module is not None, f"torch.{kind} does not exist in torch {torch.__version__}"
    is_available = getattr(module, "is_available", None)
    assert is_available is not None, f"torch.{kind}.is_available is missing"
    assert is_available(), f"torch.{kind}.is_available() is False on this host"
    accelerator = getattr(getattr(torch, "accelerator", None), "current_accelerator", None)
    if kind != "cpu" and accelerator is not None:  # torch >= 2.6
        current = accelerator()
        assert current is not None and current.type == kind, (
            f"torch.accelerator.current_accelerator() is {current}, not {kind}"
        )
    t = torch.ones(4, device=device)
    assert t.device.type == kind and float(t.sum()) == 4.0, f"a tensor on {device}: {t}"


def check_device_count(device: str) -> None:
    """Every index below device_count() holds a tensor, and has a name where names are
    claimed; the index device_count() does not exist."""
    count = call("device_count", device)
    assert count >= 1, f"{device}: device_count() == {count}"
    kind = device_type(device)
    for i in range(count):
        t = torch.full((2,), float(i), device=f"{kind}:{i}")
        assert t.device.index == i and t.sum().item() == 2.0 * i, f"{kind}:{i}: {t}"
        if backends.claims("device_name", device):
            name = call("device_name", device, i)
            assert isinstance(name, str) and name.strip(), f"{kind}:{i}: device name {name!r}"
    with pytest.raises((RuntimeError, AssertionError, ValueError)):
        torch.empty(1, device=f"{kind}:{count}")


def check_matmul(device: str) -> None:
    """An fp32 matmul on the device against a float64 reference computed by an explicit
    sum on the CPU: every element within 2·K·u·(|A|·|B|) (the rounding error bound of a
    K-term dot product; u is fp32's unit roundoff, or TF32's / bf16's where those
    matmul precisions are allowed)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 48, generator=gen)
    b = torch.randn(48, 32, generator=gen)
    got = a.to(device) @ b.to(device)
    assert got.device.type == device_type(device) and got.dtype == torch.float32
    ref, scale = reference_matmul(a, b)
    k = a.shape[1]
    bound = 2 * k * fp32_matmul_unit_roundoff(device_type(device)) * scale
    assert_within(got, ref, bound, f"fp32 matmul on {device}")
    x = torch.empty(1024, device=device).fill_(3.0)
    assert x.device.type == device_type(device) and float(x.sum()) == 3072.0


def check_synchronize(device: str) -> None:
    """A device->host copy into pinned memory, issued behind ~50 ms of device work, has
    landed once synchronize() returns (and had not before: the premise that synchronize
    had something to wait for)."""
    kind = device_type(device)
    if kind == "cpu":
        pytest.skip(
            "cpu ops finish before they return: torch.cpu.synchronize has nothing "
            "to wait for, so a missing one cannot be caught on the cpu"
        )
    try:
        host = torch.zeros(1 << 20, pin_memory=True)
    except RuntimeError as exc:
        pytest.skip(f"no pinned host memory for an asynchronous copy on {kind}: {exc}")
    Event = backends.resolve("Event", device) if backends.claims("Event", device) else None
    src = torch.empty(1 << 20, device=device)
    # Everything issued behind the busy work, once before it and waited for: in a fresh
    # process the first launch of a kernel loads it (CUDA's lazy loading, the default
    # since CUDA 12.2), and that load waited for the queued work, so the copy was done
    # before the host looked (the device-alone pass on an H200, 13 of 13 runs; with
    # CUDA_MODULE_LOADING=EAGER, or this warm-up, it held: docs/measured/h200-2026-12-01b/).
    # Zeros: the host copy stays unwritten.
    src.fill_(0.0)
    host.copy_(src, non_blocking=True)
    if Event is not None:
        Event().record()
    getattr(torch, kind).synchronize()
    began = Event(enable_timing=True) if Event is not None else None
    if began is not None:
        began.record()
    busy_work(device)
    src.fill_(7.0)
    host.copy_(src, non_blocking=True)
    if Event is not None:
        done = Event(enable_timing=True)
        done.record()
        if done.query():
            done.synchronize()
            pytest.fail(f"premise: the copy was done before synchronize (too fast): the "
                        f"busy work and the copy took {began.elapsed_time(done):.1f} ms "
                        "on the device", pytrace=False)
    call("synchronize", device)
    assert bool((host == 7.0).all()), (
        f"after synchronize() the device->host copy had not landed: "
        f"{int((host != 7.0).sum())} of {host.numel()} elements still unwritten"
    )


def check_stream_wait(device: str) -> None:
    """Work on a side stream, made visible to the current stream by wait_stream() alone:
    the current stream reads the side stream's result right after the wait, with nothing
    synchronised in between; then the side stream's events time it."""
    Stream = call_resolve("Stream", device)
    Event = call_resolve("Event", device)
    module = getattr(torch, device_type(device))
    side = Stream()
    result = torch.zeros(1 << 20, device=device)
    call("synchronize", device)
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    with module.stream(side):
        start.record(side)
        busy_work(device)
        result.fill_(5.0)
        end.record(side)
    module.current_stream().wait_stream(side)
    seen = result.clone()  # on the current stream: after the side stream's fill, or not
    host = seen.cpu()  # waits for the current stream only
    assert bool((host == 5.0).all()), (
        f"after wait_stream() the current stream read {int((host != 5.0).sum())} of "
        f"{host.numel()} elements before the side stream wrote them"
    )
    end.synchronize()
    assert start.elapsed_time(end) > 0.0, "the side stream's events timed no work"


def call_resolve(api: str, device: str) -> Any:
    try:
        return backends.resolve(api, device)
    except backends.NotClaimed as exc:
        pytest.skip(str(exc))
    except backends.MissingAPI as exc:
        pytest.fail(str(exc), pytrace=False)


def check_seeded_determinism(device: str) -> None:
    def draw() -> torch.Tensor:
        call("manual_seed", device, 1234)
        return torch.randn(1000, device=device).cpu()

    first, second = draw(), draw()
    assert torch.equal(first, second), "same seed gave different random numbers"
    call("manual_seed", device, 4321)
    assert not torch.equal(first, torch.randn(1000, device=device).cpu())


def check_bf16_autocast(device: str) -> None:
    """Under autocast(bfloat16) a matmul runs in bf16 and returns bf16; against the
    float64 product of the bf16-rounded inputs (explicit sum on the CPU) each element is
    within one bf16 ulp (BF16_EPS relative: the output's rounding is half of that; a
    CPU kernel measured 0.97 of half) plus the fp32 accumulation bound
    K·2**-24·(|A|·|B|). The former check allowed 3e-2 relative plus 0.3: 4 ulps and more."""
    if backends.claims("is_bf16_supported", device) and not call("is_bf16_supported", device):
        pytest.skip(f"{device} reports no bf16 support")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=gen)
    b = torch.randn(64, 64, generator=gen)
    with torch.autocast(device_type=device_type(device), dtype=torch.bfloat16):
        got = a.to(device) @ b.to(device)
    assert got.dtype == torch.bfloat16, f"autocast left matmul in {got.dtype}"
    ref, scale = reference_matmul(a.bfloat16(), b.bfloat16())
    k = a.shape[1]
    bound = BF16_EPS * ref.abs() + k * FP32_EPS / 2 * scale
    assert_within(got.float(), ref, bound, f"bf16 autocast matmul on {device}")


# --- the checks on the cell's device ------------------------------------------------------


def test_device_available(device: str) -> None:
    check_available(device)


@skip_on("cpu", reason="cpu is one logical device by definition (torch.cpu.device_count() "
                        "is always 1): no count to check")
def test_device_count_and_name(device: str) -> None:
    check_device_count(device)


def test_allocation_and_matmul_match_cpu(device: str) -> None:
    check_matmul(device)


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
    check_synchronize(device)


def test_streams_and_events(device: str) -> None:
    check_stream_wait(device)


def test_seeded_determinism(device: str) -> None:
    check_seeded_determinism(device)


def test_bf16_autocast(device: str) -> None:
    check_bf16_autocast(device)


# Flags that make a card without native fp64 (ATS-M) emulate it: matrix.yaml sets them for
# ATS-M runners (devices.xpu.hardware.ats-m) and in the fp64-emulation profile.
FP64_FLAGS = ("OverrideDefaultFP64Settings", "IGC_EnableDPEmulation")
# Whether torch-xpu-ops builds its kernels with fp64 *conversion* emulation
# (-fsycl-fp64-conv-emu, intel/torch-xpu-ops#511; regressed in #1742, restored in #2664),
# per release as cmake/BuildFlags.cmake of release/X.Y has it: absent in 2.4; 2.5-2.9 on
# whenever the compiler supports the flag; from 2.10 only when the AOT targets include
# dg2 or ats-m (the PyPI +xpu wheels' targets decide). Conversions only: fp64 arithmetic
# still needs native fp64 or the driver's emulation (the flags above).
FP64_CONV_EMU = {"2.4": "no", **{f"2.{m}": "yes" for m in range(5, 10)},
                 **{f"2.{m}": "if the AOT targets include dg2/ats-m" for m in range(10, 15)}}


def fp64_mechanism(flags: dict[str, str], has_fp64: bool | None,
                   arch_list: list[str] | None, torch_version: str) -> dict[str, Any]:
    """What a float64 result on xpu depends on, for the test record: the device's own fp64
    (``has_fp64``), the driver emulation flags in effect, the archs torch was built for
    (``torch.xpu.get_arch_list()``) and the release's build-time conversion emulation."""
    series = ".".join(torch_version.split("+")[0].split(".")[:2])
    on = {k: v for k, v in flags.items() if v.strip() not in ("", "0")}
    if has_fp64 and not on:
        how = "native fp64"
    elif has_fp64:
        how = "driver fp64 emulation (" + ", ".join(f"{k}={v}" for k, v in on.items()) + ")"
    else:
        how = "no fp64 on the device"
    return {"mechanism": how, "has_fp64": has_fp64, "flags": flags,
            "arch_list": arch_list, "build_fp64_conv_emu": FP64_CONV_EMU.get(series, "unknown")}


@skip_on(float64=False, reason="no float64 on this device (torch.float64 tensors are refused "
                              "on the MPS device)")
def test_float64_math(device: str, request: pytest.FixtureRequest) -> None:
    """float64 on the device, matching the CPU to double precision. Records (test record
    ``properties``) the fp64 emulation flags in effect and, on xpu, whether the device
    reports fp64 (``get_device_properties().has_fp64``) and the mechanism the result
    depends on (:func:`fp64_mechanism`), so cells with and without the flags show their
    effect (``=0`` counts as off); skipped where the device has no fp64."""
    import os

    flags = {name: os.environ[name] for name in FP64_FLAGS if name in os.environ}
    request.node.user_properties.append(("fp64_flags", flags))
    if device == "xpu":
        has_fp64 = bool(torch.xpu.get_device_properties(0).has_fp64)
        request.node.user_properties.append(("has_fp64", has_fp64))
        arch_list = list(torch.xpu.get_arch_list()) if hasattr(torch.xpu, "get_arch_list") \
            else None
        request.node.user_properties.append(
            ("fp64_mechanism", fp64_mechanism(flags, has_fp64, arch_list, torch.__version__)))
        flags = {k: v for k, v in flags.items() if v.strip() not in ("", "0")}
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


def test_fp64_mechanism_record() -> None:
    flags = {"OverrideDefaultFP64Settings": "1", "IGC_EnableDPEmulation": "1"}
    rec = fp64_mechanism(flags, True, ["dg2-g10"], "2.5.1+xpu")
    assert rec["mechanism"] == ("driver fp64 emulation (OverrideDefaultFP64Settings=1, "
                                "IGC_EnableDPEmulation=1)")
    assert (rec["build_fp64_conv_emu"], rec["arch_list"]) == ("yes", ["dg2-g10"])
    off = {"OverrideDefaultFP64Settings": "0", "IGC_EnableDPEmulation": "0"}
    assert fp64_mechanism(off, True, None, "2.13.0+xpu")["mechanism"] == "native fp64"
    assert fp64_mechanism(off, False, None, "2.13.0")["build_fp64_conv_emu"] == \
        "if the AOT targets include dg2/ats-m"
    assert fp64_mechanism({}, False, None, "2.4.1")["mechanism"] == "no fp64 on the device"
    assert fp64_mechanism({}, False, None, "2.4.1")["build_fp64_conv_emu"] == "no"


# --- each check fails on a planted fault ----------------------------------------------------


def _fails(check: Any, device: str, match: str) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception), match=match):
        check(device)


def test_available_check_catches_an_unavailable_device(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(getattr(torch, device_type(device)), "is_available", lambda: False)
    _fails(check_available, device, r"is_available\(\) is False")


@skip_on("cpu", reason="the count check does not run on the cpu (one logical device)")
def test_count_check_catches_a_phantom_device(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = backends.resolve("device_count", device)
    monkeypatch.setitem(backends.TABLES["device_count"], device_type(device), lambda: real() + 1)
    with pytest.raises(RuntimeError):  # the phantom index cannot hold a tensor
        check_device_count(device)


def test_fp32_check_catches_a_kernel_off_by_1e_4(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1e-4 relative: inside the 1e-3 the former check allowed, far outside fp32's bound."""
    real = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: real(a, b) * (1 + 1e-4))
    _fails(check_matmul, device, "fp32 matmul")


# Its premise (a copy still in flight when synchronize is called) broke once in five runs
# with 12 workers sharing an H200 (docs/measured/h200-2026-12-01/workers-per-device/), when the
# busy work was matmuls sized by timing; it stays in the device-alone pass.
@pytest.mark.device_alone
@skip_on("cpu", reason="the synchronize check does not run on the cpu (nothing to wait for)")
def test_synchronize_check_catches_a_no_op_synchronize(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = backends.resolve("synchronize", device)
    monkeypatch.setitem(backends.TABLES["synchronize"], device_type(device), lambda: None)
    _fails(check_synchronize, device, "had not landed")
    real()


def test_stream_check_catches_a_no_op_wait_stream(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Stream = call_resolve("Stream", device)
    monkeypatch.setattr(Stream, "wait_stream", lambda self, other: None)
    _fails(check_stream_wait, device, "before the side stream wrote them")
    call("synchronize", device)


def test_seed_check_catches_a_seed_that_is_ignored(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(backends.TABLES["manual_seed"], device_type(device), lambda seed: None)
    _fails(check_seeded_determinism, device, "same seed gave different random numbers")


def test_bf16_check_catches_a_result_two_ulps_off(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 bf16 ulps (1.6e-2 relative): inside the 3e-2 the former check allowed."""
    real = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: real(a, b) * (1 + 2 * BF16_EPS))
    _fails(check_bf16_autocast, device, "bf16 autocast matmul")


# --- the bounds, from both sides, and non-finite results ----------------------------------

JUST = 0.1  # "just past" a bound is 1.1x it, "just inside" 0.9x


# The bounds as the checks' docstrings state them, computed here on their own (a float64
# matmul on the CPU, fp32's and bf16's unit roundoff written out), not with the checks'
# helpers: a plant derived from those would move with a fault in them.
U_FP32 = 2.0**-24   # fp32's unit roundoff (matmul precision "highest")
EPS_BF16 = 2.0**-7  # one bf16 ulp at 1.0


def _exact(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
    return a64 @ b64, a64.abs() @ b64.abs()


def _fp32_bound(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """check_matmul's reference and bound: 2·K·u·(|A|·|B|)."""
    if torch.get_float32_matmul_precision() != "highest" or (
            device_type(str(a.device)) == "cuda" and torch.backends.cuda.matmul.allow_tf32):
        pytest.skip("the plant is built for fp32 matmuls at 'highest' precision")
    ref, scale = _exact(a, b)
    return ref, 2 * a.shape[1] * U_FP32 * scale


def _planted_matmul(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, value: Any) -> None:
    """Tensor @ returns the real product, but with element (3, 5) replaced by
    ``value(ref, bound)`` for products of ``dtype`` (other products are left alone)."""
    real = torch.Tensor.__matmul__

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        got = real(a, b)
        if got.dtype != dtype or got.dim() != 2:
            return got
        got = got.clone()
        got[3, 5] = value(a, b)
        return got

    monkeypatch.setattr(torch.Tensor, "__matmul__", matmul)


@pytest.mark.parametrize(("times", "fails"), [(1 + JUST, True), (1 - JUST, False)],
                         ids=["just-past", "just-inside"])
def test_fp32_check_holds_its_bound(device: str, monkeypatch: pytest.MonkeyPatch,
                                    times: float, fails: bool) -> None:
    """One element off the float64 reference by 1.1x the check's bound fails, 0.9x passes
    (fp32 rounding of the planted value is 1/96 of the bound at most)."""
    def value(a: torch.Tensor, b: torch.Tensor) -> float:
        ref, bound = _fp32_bound(a, b)
        return float(ref[3, 5] + times * bound[3, 5])

    _planted_matmul(monkeypatch, torch.float32, value)
    if fails:
        _fails(check_matmul, device, "fp32 matmul")
    else:
        check_matmul(device)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_fp32_check_catches_a_non_finite_result(device: str, monkeypatch: pytest.MonkeyPatch,
                                                value: float) -> None:
    _planted_matmul(monkeypatch, torch.float32, lambda a, b: value)
    _fails(check_matmul, device, "fp32 matmul")


def _bf16_candidate(a: torch.Tensor, b: torch.Tensor, lo: float, hi: float) -> tuple:
    """An element and a bf16 value whose error against check_bf16_autocast's reference is
    between ``lo`` and ``hi`` times its bound there (bf16 values are an ulp apart, about
    one bound: the plant searches the grid instead of scaling)."""
    ref, scale = _exact(a.bfloat16(), b.bfloat16())
    bound = EPS_BF16 * ref.abs() + a.shape[1] * U_FP32 * scale
    for f in torch.linspace(0.5, 1.5, 21).tolist():
        v = (ref + f * bound).bfloat16().double()
        ratio = (v - ref).abs() / bound
        hits = ((ratio > lo) & (ratio < hi)).nonzero()
        if len(hits):
            i, j = hits[0].tolist()
            return (i, j), float(v[i, j])
    raise AssertionError(f"no bf16 value between {lo} and {hi} of the bound")


@pytest.mark.parametrize(("lo", "hi", "fails"), [(1.0, 1 + JUST, True), (1 - JUST, 1.0, False)],
                         ids=["just-past", "just-inside"])
def test_bf16_check_holds_its_bound(device: str, monkeypatch: pytest.MonkeyPatch,
                                    lo: float, hi: float, fails: bool) -> None:
    real = torch.Tensor.__matmul__

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        got = real(a, b)
        if got.dtype != torch.bfloat16:
            return got
        (i, j), v = _bf16_candidate(a.cpu(), b.cpu(), lo, hi)
        got = got.clone()
        got[i, j] = v
        return got

    monkeypatch.setattr(torch.Tensor, "__matmul__", matmul)
    if fails:
        _fails(check_bf16_autocast, device, "bf16 autocast matmul")
    else:
        check_bf16_autocast(device)


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_bf16_check_catches_a_non_finite_result(device: str, monkeypatch: pytest.MonkeyPatch,
                                                value: float) -> None:
    _planted_matmul(monkeypatch, torch.bfloat16, lambda a, b: value)
    _fails(check_bf16_autocast, device, "bf16 autocast matmul")


# --- the checks' own inputs: precision, claims, wrong values --------------------------------


@pytest.mark.parametrize(("kind", "precision", "tf32", "u"), [
    # torch.set_float32_matmul_precision's documentation: "highest" computes in float32
    # (24-bit significand: unit roundoff 2**-24), "high" in TensorFloat32 (10 stored bits:
    # 2**-11), "medium" in bfloat16 (8 bits: 2**-8). Setting
    # torch.backends.cuda.matmul.allow_tf32 moves the precision to "high" (torch 2.13,
    # measured here): CUDA's TF32 needs no case of its own beyond that.
    ("cpu", "highest", False, 2.0**-24),
    ("cpu", "high", None, 2.0**-11),
    ("cpu", "medium", None, 2.0**-8),
    ("cuda", "highest", False, 2.0**-24),
    ("cuda", "highest", True, 2.0**-11),
    ("cuda", "medium", None, 2.0**-8),
    ("xpu", "high", None, 2.0**-11),
])
def test_fp32_unit_roundoff_follows_the_float32_precision_setting(kind: str, precision: str,
                                                         tf32: bool | None, u: float) -> None:
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(precision)
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        assert fp32_matmul_unit_roundoff(kind) == u
    finally:
        torch.set_float32_matmul_precision(saved)


def test_available_check_catches_a_tensor_with_wrong_values(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.ones on the device returns the right device but wrong values (a broken fill
    kernel): the check fails on the values alone."""
    real = torch.ones
    monkeypatch.setattr(torch, "ones", lambda *a, **k: real(*a, **k) * 0.5)
    _fails(check_available, device, "a tensor on")


def test_available_check_catches_another_current_accelerator(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch >= 2.6 on an accelerator: torch.accelerator must name the cell's device type."""
    kind = device_type(device)
    if kind == "cpu" or getattr(torch, "accelerator", None) is None:
        pytest.skip("torch.accelerator names an accelerator: none on the cpu")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cpu"))
    _fails(check_available, device, "current_accelerator")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: None)
    _fails(check_available, device, "current_accelerator")


def test_fp32_check_catches_a_result_in_another_dtype(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fp32 matmul that returns float64 (right values, wrong dtype) fails."""
    real = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__",
                        lambda a, b: real(a.double(), b.double()) if a.dtype == torch.float32
                        else real(a, b))
    _fails(check_matmul, device, "")


def test_fp32_check_catches_a_fill_that_writes_another_value(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = torch.Tensor.fill_
    monkeypatch.setattr(torch.Tensor, "fill_", lambda self, v: real(self, v * 2))
    _fails(check_matmul, device, "")


def test_bf16_check_skips_only_where_the_device_reports_no_bf16(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device that claims is_bf16_supported and reports False skips the check; one that
    reports True, or claims no such API (the cpu), runs it: a check that skipped there
    would pass every plant above unseen."""
    kind = device_type(device)
    if backends.claims("is_bf16_supported", device) and not call("is_bf16_supported", device):
        pytest.skip(f"{device} reports no bf16 support")
    try:
        check_bf16_autocast(device)
    except pytest.skip.Exception as exc:
        pytest.fail(f"the bf16 check skipped on {device}: {exc}")
    monkeypatch.setitem(backends.TABLES["is_bf16_supported"], kind, lambda: True)
    try:
        check_bf16_autocast(device)
    except pytest.skip.Exception as exc:
        pytest.fail(f"the bf16 check skipped where bf16 is reported: {exc}")
    monkeypatch.setitem(backends.TABLES["is_bf16_supported"], kind, lambda: False)
    with pytest.raises(pytest.skip.Exception, match="reports no bf16 support"):
        check_bf16_autocast(device)


def test_assert_within_names_the_worst_element() -> None:
    """Two elements off: the message names the count and the one furthest past its bound
    (a NaN counts as the furthest)."""
    ref = torch.zeros(4, dtype=torch.float64)
    bound = torch.full((4,), 1e-3, dtype=torch.float64)
    got = torch.tensor([0.0, 0.5, 0.0, 0.25])
    with pytest.raises(pytest.fail.Exception, match=r"2 of 4 elements.*worst: 0\.5 vs 0"):
        assert_within(got, ref, bound, "x")
    got[2] = math.nan
    with pytest.raises(pytest.fail.Exception, match=r"3 of 4 elements.*worst: nan"):
        assert_within(got, ref, bound, "x")
    assert_within(torch.full((4,), 9e-4), ref, bound, "x")


def test_bf16_check_allows_the_accumulation_term_where_it_dominates(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the element of smallest |reference| the fp32 accumulation term
    K·2**-24·(|A|·|B|) is most of the bound: an error of 0.9x the bound there passes (a
    bound that dropped or shrank that term would fail it)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=gen).bfloat16()
    b = torch.randn(64, 64, generator=gen).bfloat16()
    ref, scale = _exact(a, b)
    accumulation = a.shape[1] * U_FP32 * scale
    bound = EPS_BF16 * ref.abs() + accumulation
    i, j = divmod(int(ref.abs().argmin()), ref.shape[1])
    assert accumulation[i, j] > 0.5 * bound[i, j]
    v = (ref[i, j] + 0.9 * bound[i, j]).to(torch.bfloat16).double()
    assert 0.8 < float((v - ref[i, j]).abs() / bound[i, j]) < 1.0
    real = torch.Tensor.__matmul__

    def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        got = real(x, y)
        if got.dtype != torch.bfloat16:
            return got
        got = got.clone()
        got[i, j] = float(v)
        return got

    monkeypatch.setattr(torch.Tensor, "__matmul__", matmul)
    check_bf16_autocast(device)
