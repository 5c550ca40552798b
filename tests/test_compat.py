from accelgrid.compat import incompatibilities, version_tuple


def test_version_tuple() -> None:
    assert version_tuple("2.5.1+xpu") == (2, 5, 1)
    assert version_tuple("2.13") == (2, 13)
    assert version_tuple("0.18.0.dev20260101") == (0, 18, 0)


def test_known_bad_pairings() -> None:
    assert incompatibilities({"torch": "2.4.1", "transformers": "5.0.0"}) == [
        "transformers 5.0.0 with torch 2.4.1: transformers 5.x needs torch >= 2.6"]
    assert incompatibilities({"torch": "2.5.1", "torchao": "0.17.0"}) == [
        "torchao 0.17.0 with torch 2.5.1: torchao >= 0.17 needs torch >= 2.11"]
    # accelerate >= 1.13 on torch 2.6 only matters for xpu.
    pins = {"torch": "2.6.0", "accelerate": "1.13.0"}
    assert incompatibilities(pins, "cuda") == []
    assert len(incompatibilities(pins, "xpu")) == 1


def test_good_pairings() -> None:
    assert incompatibilities({"torch": "2.4.1", "torchao": "0.8.0", "transformers": "4.57.6",
                              "accelerate": "1.12.0"}, "xpu") == []
    assert incompatibilities({"torch": "2.13.0", "torchao": "0.18.0",
                              "transformers": "5.24.0"}) == []
