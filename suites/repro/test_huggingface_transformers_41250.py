"""huggingface/transformers#41250: config attributes are validated (``@strict``), and
``label2id`` must have ``str`` keys. ``examples/pytorch/text-classification/run_glue.py``
builds ``label2id`` from ``datasets``' ``unique("label")``, which gives ``int`` keys for
local files with integer labels, and assigns it to the model's config: with transformers
5.17.0 (huggingface_hub 1.33.0) that raises ``StrictDataclassFieldValidationError``;
5.24.0 (huggingface_hub 2.4.0) accepts it.

The test asserts what run_glue needs: integer label ids are accepted as ``label2id``.
"""

from __future__ import annotations

import pytest

from accelgrid.testing import not_run

pytestmark = pytest.mark.upstream("huggingface/transformers#41250")


def test_config_accepts_integer_label2id() -> None:
    try:
        from transformers import BertConfig
    except ImportError as exc:
        not_run(f"transformers is not installed in this cell ({exc})")
    config = BertConfig(num_labels=2)
    label_to_id = {0: 0, 1: 1}   # run_glue: {v: i for i, v in enumerate(label_list)}
    try:
        config.label2id = label_to_id
    except Exception as exc:  # noqa: BLE001 - the validation error's class moved between hubs
        pytest.fail(f"the config refused run_glue's label2id {label_to_id}: "
                    f"{type(exc).__name__}: {exc}")
    assert config.label2id == label_to_id
