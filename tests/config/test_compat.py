"""accelgrid.config.compat: version pairings known not to work (PEP 440 comparisons)."""

from accelgrid.config.compat import incompatibilities


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


def test_local_labels_are_ignored() -> None:
    assert incompatibilities({"torch": "2.5.1+xpu", "torchao": "0.11.0"}, "xpu") == []
    assert incompatibilities({"torch": "2.4.1+xpu", "transformers": "5.0.0+local"}) == [
        "transformers 5.0.0+local with torch 2.4.1+xpu: transformers 5.x needs torch >= 2.6"]


def test_prereleases_count_as_their_release() -> None:
    # Pairings are about releases: a 2.11 nightly pairs like 2.11, a 0.17 nightly like 0.17.
    assert incompatibilities({"torch": "2.11.0.dev20260101", "torchao": "0.17.0"}) == []
    assert incompatibilities({"torch": "2.11.0.dev20260101", "torchao": "0.16.0"}) == [
        "torchao 0.16.0 with torch 2.11.0.dev20260101: torchao 0.16 pairs with torch 2.8–2.10"]
    assert incompatibilities({"torch": "2.5.1", "torchao": "0.17.0.dev20260101"}) == [
        "torchao 0.17.0.dev20260101 with torch 2.5.1: torchao >= 0.17 needs torch >= 2.11"]
    assert incompatibilities({"torch": "2.13.0rc1", "torchao": "0.18.0.dev20260101"}) == []
