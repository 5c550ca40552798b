"""The suite's own not-run rules: a test that cannot run here says why instead of failing,
and only for the reasons meant (anything else still fails)."""

from __future__ import annotations

import pytest

from .workloads import MissingModelClass, _image_backend_or_not_run

# transformers 5.17.0's message, first sentence as raised (no torchvision installed).
TORCHVISION_MISSING = ("SegformerImageProcessor requires the Torchvision library but it was "
                       "not found in your environment. Check out the instructions on the")


def _raising(exc: BaseException):
    def build(*_args, **_kwargs):
        raise exc
    return _image_backend_or_not_run(build)


def test_missing_torchvision_is_not_run() -> None:
    with pytest.raises(MissingModelClass, match=r"needs torchvision here, which this cell does "
                                                r"not install \(SegformerImageProcessor requires"):
        _raising(ImportError(TORCHVISION_MISSING))()


@pytest.mark.parametrize("exc", [ImportError("No module named 'scipy'"),
                                 RuntimeError("torchvision::nms does not exist")])
def test_other_errors_still_fail(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        _raising(exc)()
