"""Tiny, offline stand-ins for the Hugging Face ``examples/pytorch`` workloads.

Every builder returns a :class:`Workload` (``model, train_dataset, eval_dataset,
data_collator, processing_class``) built on CPU from a tiny config, with synthetic,
seeded data and a tokenizer/processor made locally, so nothing touches the Hub. The
table :data:`WORKLOADS` maps the example's name to its builder; importers outside pytest
(op coverage) can do ``WORKLOADS["translation"]()`` and feed the result to a Trainer.

Each builder takes ``config_overrides`` (merged into the model config) so a caller can,
for example, switch dropout off to compare a training-mode step across devices.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

SEED = 0
VOCAB_SIZE = 100
N_TRAIN = 8
N_EVAL = 4
BATCH_SIZE = 2

WORDS = (
    "the a cat dog bird fish tree house car road river hill sun moon star cloud rain snow "
    "red blue green small big old new fast slow runs sees eats likes finds over under near "
    "with and but not is was will can one two three four five six seven eight nine ten"
).split()


class MissingModelClass(Exception):
    """The installed transformers lacks a class this workload needs (a ``not-run``)."""


class Workload(NamedTuple):
    """What the Trainer needs for one example; unpacks like a 5-tuple."""

    model: Any
    train_dataset: Any
    eval_dataset: Any
    data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None
    processing_class: Any | None


class ListDataset(torch.utils.data.Dataset):
    """A map-style dataset over a list of feature dicts (no ``datasets`` needed)."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = list(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.rows[idx]


def _tf(*names: str) -> Any:
    """Import names from transformers; a missing one means this version cannot run it."""
    import transformers

    found = []
    for name in names:
        try:
            found.append(getattr(transformers, name))
        except (AttributeError, ImportError) as exc:  # lazy modules raise either
            raise MissingModelClass(
                f"transformers {transformers.__version__} has no {name}"
            ) from exc
    return found[0] if len(found) == 1 else tuple(found)


@contextlib.contextmanager
def _seeded(seed: int = SEED) -> Iterator[np.random.Generator]:
    """Seed torch/numpy/random for model init and restore the global numpy state after,
    because transformers' mask helpers draw from the global numpy RNG."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield np.random.default_rng(seed)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
        torch.random.set_rng_state(torch_state)


def _config(cls: Any, overrides: dict[str, Any] | None, **kwargs: Any) -> Any:
    kwargs.update(overrides or {})
    return cls(**kwargs)


def _sentence(rng: np.random.Generator, lo: int = 4, hi: int = 9) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(lo, hi))))


# --------------------------------------------------------------------------- tokenizers


def make_tokenizer(style: str) -> Any:
    """A word-level fast tokenizer over :data:`WORDS`, with the special tokens and
    post-processing of ``style``: ``bert``, ``roberta``, ``seq2seq`` (text then ``</s>``,
    as Marian/T5) or ``gpt2``. Built from a ``tokenizers`` object, which both
    transformers 4.x and 5.x accept (5.x ignores a bare ``vocab_file=``)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    PreTrainedTokenizerFast = _tf("PreTrainedTokenizerFast")
    specials: dict[str, str]
    if style == "bert":
        order = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        specials = dict(
            pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
            mask_token="[MASK]",
        )
    elif style == "roberta":
        # RoBERTa's embeddings assume padding_idx 1, so <pad> must be id 1.
        order = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        specials = dict(
            bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
            cls_token="<s>", sep_token="</s>", mask_token="<mask>",
        )
    elif style == "seq2seq":
        # T5 convention: pad 0 (also the decoder start token), eos 1.
        order = ["<pad>", "</s>", "<unk>"]
        specials = dict(pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    elif style == "gpt2":
        order = ["<|endoftext|>", "<unk>"]
        specials = dict(
            bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<unk>",
            pad_token="<|endoftext|>",
        )
    else:
        raise ValueError(f"unknown tokenizer style {style!r}")
    vocab = {tok: i for i, tok in enumerate(order + sorted(set(WORDS)))}
    assert len(vocab) <= VOCAB_SIZE
    tok = Tokenizer(WordLevel(vocab, unk_token=specials["unk_token"]))
    tok.pre_tokenizer = Whitespace()
    if style == "bert":
        tok.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
    elif style == "roberta":
        tok.post_processor = TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])],
        )
    elif style == "seq2seq":
        tok.post_processor = TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", vocab["</s>"])]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=64, **specials)
    if style != "bert":
        # Only BERT-style models take token_type_ids; the others reject the kwarg.
        fast.model_input_names = ["input_ids", "attention_mask"]
    return fast


def _bert_config(overrides: dict[str, Any] | None, cls_name: str = "BertConfig", **kw: Any) -> Any:
    base = dict(
        vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64, pad_token_id=0,
    )
    base.update(kw)
    return _config(_tf(cls_name), overrides, **base)


def _images(rng: np.random.Generator, n: int, size: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8) for _ in range(n)]


def _split(rows: list[dict[str, Any]]) -> tuple[ListDataset, ListDataset]:
    return ListDataset(rows[:N_TRAIN]), ListDataset(rows[N_TRAIN:N_TRAIN + N_EVAL])


def _stack_collator(list_keys: Sequence[str] = ()) -> Callable[[list[dict[str, Any]]], dict]:
    """Stack tensors; keys in ``list_keys`` stay per-sample lists (DETR/Mask2Former labels)."""

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        for key in features[0]:
            values = [f[key] for f in features]
            if key in list_keys:
                batch[key] = values
            elif isinstance(values[0], torch.Tensor):
                batch[key] = torch.stack(values)
            else:
                batch[key] = torch.tensor(values)
        return batch

    return collate


# --------------------------------------------------------------------------- vision


def build_image_classification(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_image_classification.py: ViT on 32 px images, 3 classes."""
    ViTConfig, ViTForImageClassification, ViTImageProcessor = _tf(
        "ViTConfig", "ViTForImageClassification", "ViTImageProcessor"
    )
    with _seeded() as rng:
        config = _config(
            ViTConfig, config_overrides, image_size=32, patch_size=8, hidden_size=32,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, num_labels=3,
        )
        model = ViTForImageClassification(config)
        processor = ViTImageProcessor(
            do_resize=True, size={"height": 32, "width": 32}, image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 40), return_tensors="pt")["pixel_values"]
        labels = rng.integers(0, 3, size=n)
        rows = [{"pixel_values": pixels[i], "labels": int(labels[i])} for i in range(n)]
    train, evals = _split(rows)
    return Workload(model, train, evals, _stack_collator(), processor)


def _resnet_backbone(overrides: dict[str, Any] | None = None) -> Any:
    return _config(
        _tf("ResNetConfig"), overrides, num_channels=3, embedding_size=16,
        hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", hidden_act="relu",
        out_features=["stage2"],
    )


def build_object_detection(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_object_detection.py: DETR with a native ResNet backbone (no timm, no download),
    labels as per-image dicts of class ids and normalised (cx, cy, w, h) boxes; the
    Hungarian matcher uses scipy."""
    DetrConfig, DetrForObjectDetection, DetrImageProcessor = _tf(
        "DetrConfig", "DetrForObjectDetection", "DetrImageProcessor"
    )
    with _seeded() as rng:
        config = _config(
            DetrConfig, config_overrides, use_timm_backbone=False,
            use_pretrained_backbone=False, backbone=None, backbone_config=_resnet_backbone(),
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37,
            num_queries=8, num_labels=3,
        )
        model = DetrForObjectDetection(config)
        processor = DetrImageProcessor(
            do_resize=True, size={"height": 64, "width": 64}, do_pad=False,
            image_mean=[0.5] * 3, image_std=[0.5] * 3,
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 64), return_tensors="pt")["pixel_values"]
        rows = []
        for i in range(n):
            k = int(rng.integers(1, 4))
            centre = rng.uniform(0.3, 0.7, size=(k, 2))
            size = rng.uniform(0.1, 0.5, size=(k, 2))
            rows.append({
                "pixel_values": pixels[i],
                "pixel_mask": torch.ones(64, 64, dtype=torch.long),
                "labels": {
                    "class_labels": torch.tensor(rng.integers(0, 3, size=k), dtype=torch.long),
                    "boxes": torch.tensor(np.concatenate([centre, size], 1), dtype=torch.float),
                },
            })
    train, evals = _split(rows)
    return Workload(model, train, evals, _stack_collator(["labels"]), processor)


def build_instance_segmentation(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_instance_segmentation.py: Mask2Former (Swin backbone) on 64 px images; sizes
    must be multiples of 32. Its loss samples points with torch.rand, so it is random.

    Two Swin blocks in the stages whose feature map is larger than the window (16 and 8
    px against 4): every second block is a shifted-window block (``torch.roll``), as in
    the real checkpoint (swin-tiny, depths 2-2-6-2); with one block per stage no shift ran.
    The smaller stages keep one block: at or below the window size Swin does not shift.
    """
    Mask2FormerConfig, Mask2FormerForUniversalSegmentation, Mask2FormerImageProcessor = _tf(
        "Mask2FormerConfig", "Mask2FormerForUniversalSegmentation", "Mask2FormerImageProcessor"
    )
    SwinConfig = _tf("SwinConfig")
    with _seeded() as rng:
        backbone = SwinConfig(
            image_size=64, patch_size=4, num_channels=3, embed_dim=16, depths=[2, 2, 1, 1],
            num_heads=[1, 1, 2, 2], window_size=4,
            out_features=["stage1", "stage2", "stage3", "stage4"],
        )
        config = _config(
            Mask2FormerConfig, config_overrides, backbone_config=backbone,
            use_pretrained_backbone=False, feature_size=32, mask_feature_size=32,
            hidden_dim=32, encoder_feedforward_dim=37, dim_feedforward=37, encoder_layers=2,
            decoder_layers=3, num_attention_heads=2, num_queries=8, num_labels=3,
            train_num_points=64, common_stride=4,
        )
        model = Mask2FormerForUniversalSegmentation(config)
        processor = Mask2FormerImageProcessor(
            do_resize=True, size={"height": 64, "width": 64}, size_divisor=32,
            image_mean=[0.5] * 3, image_std=[0.5] * 3, ignore_index=255,
            do_reduce_labels=False,
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 64), return_tensors="pt")["pixel_values"]
        rows = []
        for i in range(n):
            k = int(rng.integers(1, 3))
            masks = torch.zeros(k, 64, 64)
            for j in range(k):
                y, x = rng.integers(0, 40, size=2)
                h, w = rng.integers(8, 24, size=2)
                masks[j, y:y + h, x:x + w] = 1.0
            rows.append({
                "pixel_values": pixels[i],
                "pixel_mask": torch.ones(64, 64, dtype=torch.long),
                "mask_labels": masks,
                "class_labels": torch.tensor(rng.integers(0, 3, size=k), dtype=torch.long),
            })
    train, evals = _split(rows)
    return Workload(
        model, train, evals, _stack_collator(["mask_labels", "class_labels"]), processor
    )


def build_semantic_segmentation(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_semantic_segmentation.py: SegFormer, per-pixel labels (2-D cross entropy)."""
    SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor = _tf(
        "SegformerConfig", "SegformerForSemanticSegmentation", "SegformerImageProcessor"
    )
    with _seeded() as rng:
        config = _config(
            SegformerConfig, config_overrides, num_channels=3, num_encoder_blocks=2,
            depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
            strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
            decoder_hidden_size=32, num_labels=3, semantic_loss_ignore_index=255,
        )
        model = SegformerForSemanticSegmentation(config)
        processor = SegformerImageProcessor(
            do_resize=True, size={"height": 32, "width": 32}, do_reduce_labels=False,
            image_mean=[0.5] * 3, image_std=[0.5] * 3,
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 32), return_tensors="pt")["pixel_values"]
        maps = torch.tensor(rng.integers(0, 3, size=(n, 32, 32)), dtype=torch.long)
        rows = [{"pixel_values": pixels[i], "labels": maps[i]} for i in range(n)]
    train, evals = _split(rows)
    return Workload(model, train, evals, _stack_collator(), processor)


def build_image_pretraining(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_mim.py: SimMIM-style masked image modelling with Swin and ``bool_masked_pos``.
    Two blocks per stage, so the first stage (8 px against a window of 4) runs a
    shifted-window block (``torch.roll``), as every stage of a real Swin does."""
    SwinConfig, SwinForMaskedImageModeling, ViTImageProcessor = _tf(
        "SwinConfig", "SwinForMaskedImageModeling", "ViTImageProcessor"
    )
    with _seeded() as rng:
        # encoder_stride = patch_size * 2 ** (stages - 1): the decoder's pixel shuffle
        # must restore the input resolution.
        config = _config(
            SwinConfig, config_overrides, image_size=32, patch_size=4, num_channels=3,
            embed_dim=16, depths=[2, 2], num_heads=[1, 2], window_size=4, encoder_stride=8,
        )
        model = SwinForMaskedImageModeling(config)
        processor = ViTImageProcessor(
            do_resize=True, size={"height": 32, "width": 32}, image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 32), return_tensors="pt")["pixel_values"]
        num_patches = (32 // 4) ** 2
        masks = torch.tensor(rng.random((n, num_patches)) < 0.5)
        rows = [{"pixel_values": pixels[i], "bool_masked_pos": masks[i]} for i in range(n)]
    train, evals = _split(rows)
    return Workload(model, train, evals, _stack_collator(), processor)


def build_contrastive_image_text(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_clip.py: CLIP dual encoder, in-batch contrastive loss (``return_loss=True``)."""
    CLIPConfig, CLIPModel, CLIPImageProcessor = _tf("CLIPConfig", "CLIPModel", "CLIPImageProcessor")
    tokenizer = make_tokenizer("gpt2")
    eos = tokenizer.eos_token_id
    with _seeded() as rng:
        tiny = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=37)
        config = _config(
            CLIPConfig, config_overrides, projection_dim=16,
            text_config=dict(vocab_size=VOCAB_SIZE, max_position_embeddings=32,
                             eos_token_id=eos, bos_token_id=eos, pad_token_id=eos, **tiny),
            vision_config=dict(image_size=32, patch_size=8, **tiny),
        )
        model = CLIPModel(config)
        processor = CLIPImageProcessor(
            do_resize=True, size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
        )
        n = N_TRAIN + N_EVAL
        pixels = processor(images=_images(rng, n, 40), return_tensors="pt")["pixel_values"]
        # CLIP pools the text at the eos position, so every caption ends with one.
        captions = [_sentence(rng) + " " + tokenizer.eos_token for _ in range(n)]
        enc = tokenizer(captions, padding="max_length", max_length=12, truncation=True)
        rows = [
            {"pixel_values": pixels[i], "input_ids": enc["input_ids"][i],
             "attention_mask": enc["attention_mask"][i]}
            for i in range(n)
        ]
    base = _stack_collator()

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        # As run_clip.py's collate_fn: ask the model for its contrastive loss.
        return {**base(features), "return_loss": True}

    train, evals = _split(rows)
    return Workload(model, train, evals, collate, processor)


# --------------------------------------------------------------------------- text


def build_text_classification(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_glue.py on MRPC-shaped data: BERT on sentence pairs, 2 labels."""
    BertForSequenceClassification, DataCollatorWithPadding = _tf(
        "BertForSequenceClassification", "DataCollatorWithPadding"
    )
    tokenizer = make_tokenizer("bert")
    with _seeded() as rng:
        model = BertForSequenceClassification(_bert_config(config_overrides, num_labels=2))
        rows = []
        for _ in range(N_TRAIN + N_EVAL):
            enc = tokenizer(_sentence(rng), _sentence(rng), truncation=True, max_length=32)
            rows.append({**enc, "labels": int(rng.integers(0, 2))})
    train, evals = _split(rows)
    return Workload(model, train, evals, DataCollatorWithPadding(tokenizer), tokenizer)


def build_token_classification(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_ner.py: BERT tagging pre-split words; labels on the first sub-token, -100 on
    special tokens (as the example's ``tokenize_and_align_labels``)."""
    BertForTokenClassification, DataCollatorForTokenClassification = _tf(
        "BertForTokenClassification", "DataCollatorForTokenClassification"
    )
    tokenizer = make_tokenizer("bert")
    with _seeded() as rng:
        model = BertForTokenClassification(_bert_config(config_overrides, num_labels=5))
        rows = []
        for _ in range(N_TRAIN + N_EVAL):
            words = _sentence(rng).split()
            tags = rng.integers(0, 5, size=len(words))
            enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=32)
            labels, prev = [], None
            for wid in enc.word_ids():
                labels.append(-100 if wid is None or wid == prev else int(tags[wid]))
                prev = wid
            rows.append({**enc, "labels": labels})
    train, evals = _split(rows)
    return Workload(
        model, train, evals, DataCollatorForTokenClassification(tokenizer), tokenizer
    )


def build_question_answering(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_qa.py on SQuAD-shaped data: BERT with start/end token positions found through
    the fast tokenizer's char-to-token mapping, as the example does via offsets."""
    BertForQuestionAnswering, DataCollatorWithPadding = _tf(
        "BertForQuestionAnswering", "DataCollatorWithPadding"
    )
    tokenizer = make_tokenizer("bert")
    with _seeded() as rng:
        model = BertForQuestionAnswering(_bert_config(config_overrides))
        rows = []
        for _ in range(N_TRAIN + N_EVAL):
            question = _sentence(rng, 3, 6)
            words = _sentence(rng, 8, 16).split()
            a = int(rng.integers(0, len(words) - 2))
            b = a + int(rng.integers(1, 3))
            context = " ".join(words)
            answer_start = len(" ".join(words[:a])) + (1 if a else 0)
            answer_end = len(" ".join(words[:b])) - 1
            enc = tokenizer(question, context, truncation="only_second", max_length=40)
            rows.append({
                **enc,
                "start_positions": enc.char_to_token(0, answer_start, sequence_index=1),
                "end_positions": enc.char_to_token(0, answer_end, sequence_index=1),
            })
    train, evals = _split(rows)
    return Workload(model, train, evals, DataCollatorWithPadding(tokenizer), tokenizer)


def build_multiple_choice(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_swag.py on SWAG-shaped data: RoBERTa scores 4 endings for each context."""
    RobertaConfig, RobertaForMultipleChoice = _tf("RobertaConfig", "RobertaForMultipleChoice")
    tokenizer = make_tokenizer("roberta")
    n_choices = 4
    with _seeded() as rng:
        config = _config(
            RobertaConfig, config_overrides, vocab_size=VOCAB_SIZE, hidden_size=32,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
            max_position_embeddings=64, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
            eos_token_id=2,
        )
        model = RobertaForMultipleChoice(config)
        rows = []
        for _ in range(N_TRAIN + N_EVAL):
            context = _sentence(rng)
            endings = [_sentence(rng, 2, 5) for _ in range(n_choices)]
            enc = tokenizer([context] * n_choices, endings, truncation=True, max_length=32)
            rows.append({**enc, "labels": int(rng.integers(0, n_choices))})

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        # Flatten (example, choice), pad, then fold back to (batch, choices, seq) — as
        # run_swag.py's DataCollatorForMultipleChoice.
        flat = [
            {k: f[k][c] for k in ("input_ids", "attention_mask")}
            for f in features for c in range(n_choices)
        ]
        batch = tokenizer.pad(flat, return_tensors="pt")
        batch = {k: v.view(len(features), n_choices, -1) for k, v in batch.items()}
        batch["labels"] = torch.tensor([f["labels"] for f in features])
        return batch

    train, evals = _split(rows)
    return Workload(model, train, evals, collate, tokenizer)


def _seq2seq_rows(tokenizer: Any, rng: np.random.Generator, summarise: bool) -> list[dict]:
    rows = []
    for _ in range(N_TRAIN + N_EVAL):
        source = _sentence(rng, 6, 14) if summarise else _sentence(rng)
        # A summary is a prefix; a "translation" reverses the words: both learnable.
        target = " ".join(source.split()[:3]) if summarise else " ".join(source.split()[::-1])
        prefix = "summarize: " if summarise else ""
        enc = tokenizer(prefix + source, text_target=target, truncation=True, max_length=32)
        rows.append(dict(enc))
    return rows


def build_translation(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_translation.py: Marian encoder-decoder; labels padded with -100 and
    decoder inputs shifted by DataCollatorForSeq2Seq. ``swish`` (SiLU) feed-forward
    activations like the real Helsinki-NLP/opus-mt checkpoints (MarianConfig's default
    is gelu)."""
    MarianConfig, MarianMTModel, DataCollatorForSeq2Seq = _tf(
        "MarianConfig", "MarianMTModel", "DataCollatorForSeq2Seq"
    )
    tokenizer = make_tokenizer("seq2seq")
    with _seeded() as rng:
        config = _config(
            MarianConfig, config_overrides, vocab_size=VOCAB_SIZE, d_model=32,
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37,
            max_position_embeddings=64, activation_function="swish",
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
        model = MarianMTModel(config)
        rows = _seq2seq_rows(tokenizer, rng, summarise=False)
    train, evals = _split(rows)
    return Workload(
        model, train, evals, DataCollatorForSeq2Seq(tokenizer, model=model), tokenizer
    )


def build_summarization(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_summarization.py: T5 with a ``summarize:`` prefix."""
    T5Config, T5ForConditionalGeneration, DataCollatorForSeq2Seq = _tf(
        "T5Config", "T5ForConditionalGeneration", "DataCollatorForSeq2Seq"
    )
    tokenizer = make_tokenizer("seq2seq")
    with _seeded() as rng:
        config = _config(
            T5Config, config_overrides, vocab_size=VOCAB_SIZE, d_model=32, d_kv=8, d_ff=37,
            num_layers=2, num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
        model = T5ForConditionalGeneration(config)
        rows = _seq2seq_rows(tokenizer, rng, summarise=True)
    train, evals = _split(rows)
    return Workload(
        model, train, evals, DataCollatorForSeq2Seq(tokenizer, model=model), tokenizer
    )


def build_language_modeling(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_clm.py: GPT-2 on concatenated text cut into fixed blocks (labels = inputs)."""
    GPT2Config, GPT2LMHeadModel = _tf("GPT2Config", "GPT2LMHeadModel")
    tokenizer = make_tokenizer("gpt2")
    block = 16
    with _seeded() as rng:
        config = _config(
            GPT2Config, config_overrides, vocab_size=VOCAB_SIZE, n_positions=64, n_embd=32,
            n_layer=2, n_head=2, n_inner=37, bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = GPT2LMHeadModel(config)
        ids: list[int] = []
        while len(ids) < (N_TRAIN + N_EVAL) * block:
            ids += tokenizer(_sentence(rng))["input_ids"] + [tokenizer.eos_token_id]
        rows = [
            {"input_ids": ids[i * block:(i + 1) * block],
             "attention_mask": [1] * block, "labels": ids[i * block:(i + 1) * block]}
            for i in range(N_TRAIN + N_EVAL)
        ]
    train, evals = _split(rows)
    return Workload(model, train, evals, _stack_collator(), tokenizer)


# --------------------------------------------------------------------------- audio


def build_speech_pretraining(config_overrides: dict[str, Any] | None = None) -> Workload:
    """run_wav2vec2_pretraining_no_trainer.py: Wav2Vec2ForPreTraining (conv dims 16) with
    ``mask_time_indices`` and ``sampled_negative_indices`` from transformers' own helpers,
    as the example's collator computes them (here precomputed per sample so the data is
    deterministic: every clip has the same length)."""
    Wav2Vec2Config, Wav2Vec2ForPreTraining, Wav2Vec2FeatureExtractor = _tf(
        "Wav2Vec2Config", "Wav2Vec2ForPreTraining", "Wav2Vec2FeatureExtractor"
    )
    try:
        from transformers.models.wav2vec2.modeling_wav2vec2 import (
            _compute_mask_indices,
            _sample_negative_indices,
        )
    except ImportError as exc:
        raise MissingModelClass(f"wav2vec2 mask helpers missing: {exc}") from exc
    with _seeded() as rng:
        config = _config(
            Wav2Vec2Config, config_overrides, vocab_size=VOCAB_SIZE, hidden_size=32,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
            conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
            num_codevectors_per_group=8, num_codevector_groups=2, codevector_dim=16,
            proj_codevector_dim=16, num_negatives=5, mask_time_prob=0.65, mask_time_length=2,
            feat_extract_norm="group", do_stable_layer_norm=False,
            # No LayerDrop: a skipped layer would leave parameters untouched for 3 steps.
            layerdrop=0.0,
        )
        model = Wav2Vec2ForPreTraining(config)
        extractor = Wav2Vec2FeatureExtractor(
            feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
            return_attention_mask=True,
        )
        n, samples = N_TRAIN + N_EVAL, 1600
        audio = [rng.standard_normal(samples).astype(np.float32) for _ in range(n)]
        values = extractor(audio, sampling_rate=16000, return_tensors="pt")["input_values"]
        frames = int(model._get_feat_extract_output_lengths(samples))
        # Uses the global numpy RNG, seeded by _seeded() and restored after.
        mask = _compute_mask_indices((n, frames), config.mask_time_prob,
                                     config.mask_time_length, min_masks=2)
        negatives = _sample_negative_indices((n, frames), config.num_negatives,
                                             mask_time_indices=mask)
        # _sample_negative_indices offsets indices by batch position; make them per-sample.
        negatives = negatives - (np.arange(n) * frames)[:, None, None]
        rows = [
            {"input_values": values[i],
             "mask_time_indices": torch.tensor(mask[i], dtype=torch.bool),
             "sampled_negative_indices": torch.tensor(negatives[i], dtype=torch.long)}
            for i in range(n)
        ]
    base = _stack_collator()

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = base(features)
        # Restore the flat (batch * frames) indexing the model expects.
        offsets = torch.arange(len(features)).view(-1, 1, 1) * frames
        batch["sampled_negative_indices"] = batch["sampled_negative_indices"] + offsets
        return batch

    train, evals = _split(rows)
    return Workload(model, train, evals, collate, extractor)


def needs_torchvision(exc: BaseException) -> MissingModelClass | None:
    """A not-run for transformers' "requires the Torchvision library" ImportError, else
    None. transformers 5.17.0 raises it for AutoImageProcessor and SegformerImageProcessor
    when torchvision is missing (5.24.0 falls back to PIL), and cells do not install
    torchvision: PyPI's wheels are built against PyPI's torch, not the device indexes'."""
    if not isinstance(exc, ImportError) or "torchvision" not in str(exc).lower():
        return None
    import transformers

    return MissingModelClass(
        f"transformers {transformers.__version__} needs torchvision here, which this cell "
        f"does not install ({str(exc).strip().split('. ', 1)[0]})"
    )


def _image_backend_or_not_run(build: Callable[..., Workload]) -> Callable[..., Workload]:
    @functools.wraps(build)
    def wrapped(*args: Any, **kwargs: Any) -> Workload:
        try:
            return build(*args, **kwargs)
        except ImportError as exc:
            if (missing := needs_torchvision(exc)) is None:
                raise
            raise missing from exc
    return wrapped


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "image-classification": build_image_classification,
    "object-detection": build_object_detection,
    "translation": build_translation,
    "token-classification": build_token_classification,
    "text-classification": build_text_classification,
    "summarization": build_summarization,
    "instance-segmentation": build_instance_segmentation,
    "multiple-choice": build_multiple_choice,
    "question-answering": build_question_answering,
    "speech-pretraining": build_speech_pretraining,
    "semantic-segmentation": build_semantic_segmentation,
    "contrastive-image-text": build_contrastive_image_text,
    "image-pretraining": build_image_pretraining,
    "language-modeling": build_language_modeling,
}

WORKLOADS = {name: _image_backend_or_not_run(build) for name, build in WORKLOADS.items()}

# Workloads whose loss is random by design (so a cross-device comparison of the first
# step is meaningless): Mask2Former samples mask points with torch.rand, whose stream
# differs between CPU and accelerator generators.
RANDOM_LOSS = frozenset({"instance-segmentation"})
