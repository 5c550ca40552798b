"""The real ``examples/pytorch/*/run_*.py`` scripts, run offline on tiny local inputs.

For each script: the tiny model of the matching workload (and its tokenizer/processor)
saved into a folder, data files in a format the script reads, and the script's own
arguments. :func:`prepare` lays all of that out; :func:`command` gives the command line.
Hub metrics (``evaluate.load("accuracy")`` etc., loaded unconditionally by most
scripts) are replaced by stand-ins in the working directory: ``evaluate.load(name)``
first looks for ``./name/name.py``. Their numbers are not the real metrics; the run
still exercises the script's evaluation loop on the device.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from accelgrid.base import contract

from .workloads import WORKLOADS, make_tokenizer, needs_torchvision

ENV_SRC = contract.TRANSFORMERS_SRC
MAX_STEPS = 3

STANDIN_METRICS: dict[str, tuple[str, ...]] = {
    "accuracy": ("accuracy",),
    "glue": ("accuracy", "f1"),
    "mse": ("mse",),
    "seqeval": ("overall_precision", "overall_recall", "overall_f1", "overall_accuracy"),
    "squad": ("exact_match", "f1"),
    "squad_v2": ("exact", "f1", "total"),
    "sacrebleu": ("score",),
    "rouge": ("rouge1", "rouge2", "rougeL", "rougeLsum"),
    "mean_iou": ("mean_iou", "mean_accuracy", "overall_accuracy"),
}
# Per-class arrays (length ``num_labels``) a script reads from a metric's result:
# run_semantic_segmentation.py pops these from mean_iou's and calls ``.tolist()``.
STANDIN_ARRAYS: dict[str, tuple[str, ...]] = {
    "mean_iou": ("per_category_accuracy", "per_category_iou"),
}

_STANDIN = '''"""accelgrid offline stand-in for the Hub metric {name!r} (not the real metric)."""
import datasets
import evaluate
import numpy as np

KEYS = {keys!r}
ARRAYS = {arrays!r}


class StandIn(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="offline stand-in", citation="", inputs_description="",
            features=datasets.Features({{"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}}),
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Stand-in compute."""
        # A docstring is required: evaluate.Module.__init__ appends the inputs description
        # to compute's __doc__ (None + str fails).
        # Exact-match rate where inputs are flat and comparable, else 0.0.
        try:
            pairs = list(zip(list(predictions), list(references)))
            score = sum(bool(p == r) for p, r in pairs) / max(len(pairs), 1)
        except Exception:
            score = 0.0
        out = {{k: float(score) for k in KEYS}}
        out.update({{k: np.full(int(kwargs.get("num_labels", 1)), score) for k in ARRAYS}})
        return out

    def _compute(self, predictions=None, references=None):
        return self.compute(predictions=predictions, references=references)
'''


@dataclasses.dataclass(frozen=True)
class ScriptSpec:
    """One example script: where it lives, which workload's model it trains, how to
    write its data (returns the script-specific arguments) and what it needs."""

    path: str
    workload: str
    write_data: Callable[[Path], list[str]]
    trainer: bool = True
    needs: tuple[str, ...] = ()
    # A reason the script cannot run offline at all (reported as not-run).
    blocker: str | None = None
    extra_saves: Callable[[Path], None] | None = None
    # The metrics file the final evaluation writes: the detection/segmentation scripts
    # evaluate with ``metric_key_prefix="test"``.
    eval_file: str = "eval_results.json"


# --------------------------------------------------------------------------- data


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _words(rng: np.random.Generator, lo: int = 4, hi: int = 9) -> list[str]:
    from .workloads import WORDS

    return [str(w) for w in rng.choice(WORDS, size=int(rng.integers(lo, hi)))]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _splits(data: Path, make: Callable[[np.random.Generator], dict], n: int = 8) -> list[str]:
    rng = _rng()
    train = _jsonl(data / "train.json", [make(rng) for _ in range(n)])
    valid = _jsonl(data / "validation.json", [make(rng) for _ in range(4)])
    return ["--train_file", train, "--validation_file", valid]


def _image(rng: np.random.Generator, size: int = 40) -> Any:
    from PIL import Image

    return Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8))


def _image_folder(root: Path, classes: int = 3, per_class: int = 3) -> str:
    rng = _rng()
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            _image(rng).save(root / f"class{c}" / f"{i}.png")
    return str(root)


def _parquet_splits(
    root: Path, rows: Callable[[int], dict], features: Any, splits: tuple[str, ...] = (),
) -> str:
    """A local dataset folder whose parquet files keep ``features`` (ClassLabel names
    included), loadable offline as ``load_dataset(folder)``; ``splits``: extra
    4-row splits besides train (8 rows) and validation (4)."""
    import datasets

    for split, n in (("train", 8), ("validation", 4), *((x, 4) for x in splits)):
        ds = datasets.Dataset.from_dict(rows(n), features=features)
        (root / "data").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return str(root)


def data_glue(data: Path) -> list[str]:
    return _splits(data, lambda r: {
        "sentence1": " ".join(_words(r)), "sentence2": " ".join(_words(r)),
        "label": int(r.integers(0, 2)),
    }) + ["--max_seq_length", "32"]


def data_ner(data: Path) -> list[str]:
    tags = ["O", "B-X", "I-X", "B-Y", "I-Y"]

    def row(r: np.random.Generator) -> dict:
        words = _words(r)
        return {"tokens": words, "ner_tags": [tags[int(i)] for i in r.integers(0, 5, len(words))]}

    return _splits(data, row) + ["--max_seq_length", "32"]


def data_qa(data: Path) -> list[str]:
    rng = _rng()

    def row(i: int) -> dict:
        words = _words(rng, 8, 14)
        a = int(rng.integers(0, len(words) - 2))
        return {
            "id": str(i), "title": "t", "context": " ".join(words),
            "question": " ".join(_words(rng, 3, 6)),
            "answers": {"text": [words[a]], "answer_start": [len(" ".join(words[:a])) + (a > 0)]},
        }

    data.mkdir(parents=True, exist_ok=True)
    # run_qa.py reads json files through ``field="data"`` (SQuAD layout).
    for name, rng_ids in (("train", range(8)), ("validation", range(8, 12))):
        (data / f"{name}.json").write_text(json.dumps({"data": [row(i) for i in rng_ids]}))
    return [
        "--train_file", str(data / "train.json"), "--validation_file",
        str(data / "validation.json"), "--max_seq_length", "48", "--doc_stride", "16",
    ]


def data_swag(data: Path) -> list[str]:
    def row(r: np.random.Generator) -> dict:
        d = {"sent1": " ".join(_words(r)), "sent2": " ".join(_words(r, 2, 4))}
        d.update({f"ending{i}": " ".join(_words(r, 2, 5)) for i in range(4)})
        return {**d, "label": int(r.integers(0, 4))}

    return _splits(data, row) + ["--max_seq_length", "32"]


def data_summarization(data: Path) -> list[str]:
    def row(r: np.random.Generator) -> dict:
        words = _words(r, 6, 14)
        return {"text": " ".join(words), "summary": " ".join(words[:3])}

    return _splits(data, row) + [
        "--text_column", "text", "--summary_column", "summary", "--source_prefix",
        "summarize: ", "--max_source_length", "32", "--max_target_length", "16",
    ]


def data_translation(data: Path) -> list[str]:
    def row(r: np.random.Generator) -> dict:
        words = _words(r)
        return {"translation": {"en": " ".join(words), "ro": " ".join(words[::-1])}}

    return _splits(data, row) + [
        "--source_lang", "en", "--target_lang", "ro", "--max_source_length", "32",
        "--max_target_length", "32",
    ]


def data_clm(data: Path) -> list[str]:
    rng = _rng()
    data.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", 40), ("validation", 20)):
        (data / f"{name}.txt").write_text("\n".join(" ".join(_words(rng)) for _ in range(n)))
    return [
        "--train_file", str(data / "train.txt"), "--validation_file",
        str(data / "validation.txt"), "--block_size", "16",
    ]


def data_image_classification(data: Path) -> list[str]:
    return [
        "--train_dir", _image_folder(data / "train"), "--validation_dir",
        _image_folder(data / "validation", per_class=2), "--remove_unused_columns", "False",
    ]


def data_mim(data: Path) -> list[str]:
    # Model patch 4, image 32: masks are drawn in 8 px patches. run_mim.py passes the
    # folders to load_dataset as data_files, which datasets resolves as file patterns
    # (a bare folder is "Unable to find"), hence the globs.
    return [
        "--dataset_name", "imagefolder", "--train_dir", _image_folder(data / "train") + "/**",
        "--validation_dir", _image_folder(data / "validation", per_class=2) + "/**",
        "--mask_patch_size", "8", "--remove_unused_columns", "False",
        "--label_names", "bool_masked_pos",
    ]


def data_clip(data: Path) -> list[str]:
    rng = _rng()
    (data / "images").mkdir(parents=True, exist_ok=True)

    def row(i: int) -> dict:
        path = data / "images" / f"{i}.png"
        _image(rng).save(path)
        return {"image_path": str(path), "caption": " ".join(_words(rng))}

    return [
        "--train_file", _jsonl(data / "train.json", [row(i) for i in range(8)]),
        "--validation_file", _jsonl(data / "validation.json", [row(i) for i in range(8, 12)]),
        "--image_column", "image_path", "--caption_column", "caption",
        "--max_seq_length", "12", "--remove_unused_columns", "False",
    ]


def data_object_detection(data: Path) -> list[str]:
    """cppe-5 layout: ``image`` and ``objects`` {id, area, bbox (COCO x, y, w, h),
    category (ClassLabel)}."""
    import datasets

    rng = _rng()
    names = ["a", "b", "c"]
    features = datasets.Features({
        "image_id": datasets.Value("int64"), "image": datasets.Image(),
        "width": datasets.Value("int32"), "height": datasets.Value("int32"),
        "objects": datasets.Sequence({
            "id": datasets.Value("int64"), "area": datasets.Value("float32"),
            "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
            "category": datasets.ClassLabel(names=names),
        }),
    })

    def rows(n: int) -> dict:
        out: dict[str, list] = {k: [] for k in ("image_id", "image", "width", "height", "objects")}
        for i in range(n):
            k = int(rng.integers(1, 4))
            boxes = [[float(x) for x in (*rng.integers(0, 30, 2), *rng.integers(8, 30, 2))]
                     for _ in range(k)]
            out["image_id"].append(i)
            out["image"].append(_image(rng, 64))
            out["width"].append(64)
            out["height"].append(64)
            out["objects"].append({
                "id": list(range(k)), "area": [b[2] * b[3] for b in boxes], "bbox": boxes,
                "category": [int(c) for c in rng.integers(0, 3, k)],
            })
        return out

    return [
        # The script's final evaluation reads a "test" split (cppe-5 has one).
        "--dataset_name", _parquet_splits(data / "detection", rows, features, ("test",)),
        "--image_square_size", "64", "--eval_do_concat_batches", "False",
        "--remove_unused_columns", "False",
    ]


def data_instance_segmentation(data: Path) -> list[str]:
    """ade20k-mini layout: ``image`` and an ``annotation`` PNG (R: semantic class,
    G: instance id), plus the ``semantic_class_to_id`` mapping the script reads."""
    import datasets
    from PIL import Image

    rng = _rng()
    mapping = {"background": 0, "a": 1, "b": 2}
    features = datasets.Features({
        "image": datasets.Image(), "annotation": datasets.Image(),
        "semantic_class_to_id": {k: datasets.Value("int64") for k in mapping},
    })

    def rows(n: int) -> dict:
        out: dict[str, list] = {"image": [], "annotation": [], "semantic_class_to_id": []}
        for _ in range(n):
            ann = np.zeros((64, 64, 3), dtype=np.uint8)
            for inst in (1, 2):
                y, x = rng.integers(0, 40, 2)
                ann[y:y + 16, x:x + 16, 0] = int(rng.integers(1, 3))
                ann[y:y + 16, x:x + 16, 1] = inst
            out["image"].append(_image(rng, 64))
            out["annotation"].append(Image.fromarray(ann))
            out["semantic_class_to_id"].append(mapping)
        return out

    return [
        "--dataset_name", _parquet_splits(data / "segmentation", rows, features),
        "--image_height", "64", "--image_width", "64", "--do_reduce_labels", "False",
        "--remove_unused_columns", "False", "--eval_do_concat_batches", "False",
    ]


# run_semantic_segmentation.py reads the label names with
# ``hf_hub_download(repo_id=<--dataset_name>, "id2label.json", repo_type="dataset")``, so
# the dataset name must be a valid repo id as well as a loadable folder: a relative path
# "namespace/name" (the script runs with cwd=root) whose id2label.json is put where an
# earlier download would have cached it, which offline mode resolves without the Hub.
SEMANTIC_REPO = "data/semantic"
_CACHE_REVISION = "0" * 40


def _seed_hub_cache(hf_home: Path, repo_id: str, filename: str, text: str) -> None:
    """``filename`` of dataset ``repo_id`` in the huggingface_hub cache layout
    (``refs/main`` → ``snapshots/<revision>/``), as ``hf_hub_download`` leaves it."""
    repo = hf_home / "hub" / f"datasets--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(_CACHE_REVISION)
    (repo / "snapshots" / _CACHE_REVISION).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / _CACHE_REVISION / filename).write_text(text)


def data_semantic_segmentation(data: Path) -> list[str]:
    import datasets
    from PIL import Image

    rng = _rng()
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Image()})

    def rows(n: int) -> dict:
        return {
            "image": [_image(rng, 32) for _ in range(n)],
            "label": [Image.fromarray(rng.integers(0, 3, (32, 32), dtype=np.uint8))
                      for _ in range(n)],
        }

    root = data.parent
    _parquet_splits(root / SEMANTIC_REPO, rows, features)
    labels = json.dumps({"0": "background", "1": "a", "2": "b"})
    _seed_hub_cache(root / "hf_home", SEMANTIC_REPO, "id2label.json", labels)
    return ["--dataset_name", SEMANTIC_REPO, "--remove_unused_columns", "False"]


def data_speech(data: Path) -> list[str]:
    """An audiofolder of 0.1 s, 16 kHz mono WAVs (written with the stdlib, so writing
    needs no audio codec; the script's decoding does)."""
    import wave

    rng = _rng()
    folder = data / "speech" / "train"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(12):
        pcm = (rng.standard_normal(1600) * 3000).astype("<i2").tobytes()
        with wave.open(str(folder / f"{i}.wav"), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(16000)
            f.writeframes(pcm)
    return [
        "--dataset_name", str(data / "speech"),
        "--dataset_config_names", "default", "--dataset_split_names", "train",
        "--validation_split_percentage", "25", "--max_train_steps", str(MAX_STEPS),
        "--num_warmup_steps", "0", "--logging_steps", "1", "--saving_steps", "100",
        "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--max_duration_in_seconds", "1", "--min_duration_in_seconds", "0.01",
        "--audio_column_name", "audio", "--preprocessing_num_workers", "1",
    ]


def _clip_tokenizer(model_dir: Path) -> None:
    # run_clip.py loads a tokenizer and an image processor from the same folder.
    make_tokenizer("gpt2").save_pretrained(str(model_dir))


_AUDIO_NEEDS = ("torchcodec",)  # datasets >= 4 decodes audio with torchcodec (and FFmpeg)

SCRIPTS: dict[str, ScriptSpec] = {
    "run_image_classification": ScriptSpec(
        "image-classification/run_image_classification.py", "image-classification",
        data_image_classification, needs=("torchvision",),
    ),
    "run_object_detection": ScriptSpec(
        "object-detection/run_object_detection.py", "object-detection",
        # torchmetrics' MeanAveragePrecision(iou_type="bbox") imports torchvision.
        data_object_detection,
        needs=("albumentations", "torchmetrics", "pycocotools", "torchvision"),
        eval_file="test_results.json",
    ),
    "run_translation": ScriptSpec(
        "translation/run_translation.py", "translation", data_translation,
    ),
    "run_ner": ScriptSpec("token-classification/run_ner.py", "token-classification", data_ner),
    "run_glue": ScriptSpec("text-classification/run_glue.py", "text-classification", data_glue),
    "run_summarization": ScriptSpec(
        "summarization/run_summarization.py", "summarization", data_summarization,
        needs=("nltk",),
    ),
    "run_instance_segmentation": ScriptSpec(
        "instance-segmentation/run_instance_segmentation.py", "instance-segmentation",
        # torchmetrics' MeanAveragePrecision(iou_type="segm") imports torchvision.
        data_instance_segmentation,
        needs=("albumentations", "torchmetrics", "pycocotools", "torchvision"),
        eval_file="test_results.json",
    ),
    "run_swag": ScriptSpec("multiple-choice/run_swag.py", "multiple-choice", data_swag),
    "run_qa": ScriptSpec("question-answering/run_qa.py", "question-answering", data_qa),
    "run_wav2vec2_pretraining_no_trainer": ScriptSpec(
        "speech-pretraining/run_wav2vec2_pretraining_no_trainer.py", "speech-pretraining",
        data_speech, trainer=False, needs=_AUDIO_NEEDS,
    ),
    "run_semantic_segmentation": ScriptSpec(
        "semantic-segmentation/run_semantic_segmentation.py", "semantic-segmentation",
        data_semantic_segmentation, needs=("albumentations",),
    ),
    "run_clip": ScriptSpec(
        "contrastive-image-text/run_clip.py", "contrastive-image-text", data_clip,
        needs=("torchvision",), extra_saves=_clip_tokenizer,
    ),
    "run_mim": ScriptSpec(
        "image-pretraining/run_mim.py", "image-pretraining", data_mim, needs=("torchvision",),
    ),
    "run_clm": ScriptSpec("language-modeling/run_clm.py", "language-modeling", data_clm),
}


def missing_modules(spec: ScriptSpec, *, loading_only: bool = False) -> list[str]:
    """Modules the script needs that are not installed; ``loading_only``: just those
    needed to load its data (audio decoding)."""
    needs = ["datasets"] + [m for m in spec.needs if m in _AUDIO_NEEDS]
    if not loading_only:
        needs = ["datasets", "evaluate", *spec.needs]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    # torchcodec imports without FFmpeg but fails on the first decode (it dlopens
    # libavutil.so.56-60, FFmpeg 4-8); the script decodes, the input check does not.
    if not loading_only and "torchcodec" in needs and "torchcodec" not in missing:
        import ctypes.util

        if ctypes.util.find_library("avutil") is None:
            missing.append("FFmpeg shared libraries (libavutil, for torchcodec)")
    return missing


def save_model(spec: ScriptSpec, model_dir: Path) -> None:
    """The workload's tiny model and its tokenizer/processor, as a local checkpoint."""
    workload = WORKLOADS[spec.workload]()
    workload.model.save_pretrained(str(model_dir))
    if workload.processing_class is not None:
        workload.processing_class.save_pretrained(str(model_dir))
    if spec.extra_saves is not None:
        spec.extra_saves(model_dir)


def write_standin_metrics(cwd: Path) -> None:
    for name, keys in STANDIN_METRICS.items():
        (cwd / name).mkdir(parents=True, exist_ok=True)
        (cwd / name / f"{name}.py").write_text(_STANDIN.format(
            name=name, keys=keys, arrays=STANDIN_ARRAYS.get(name, ()),
        ))


def trainer_flags(device: str) -> list[str]:
    """Flags common to the Trainer scripts; version-dependent ones only where the
    installed TrainingArguments has them (5.x dropped ``overwrite_output_dir``)."""
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    flags = [
        "--do_train", "--do_eval", "--max_steps", str(MAX_STEPS),
        "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--skip_memory_metrics", "False", "--report_to", "none", "--save_strategy", "no",
        "--seed", "0", "--dataloader_num_workers", "0", "--logging_steps", "1",
    ]
    if "overwrite_output_dir" in fields:
        flags.append("--overwrite_output_dir")
    if device == "cpu":
        flags.append("--use_cpu" if "use_cpu" in fields else "--no_cuda")
    return flags


def prepare(spec: ScriptSpec, root: Path, device: str, src: Path
            ) -> tuple[list[str], dict[str, str]]:
    """Lay out model, data, stand-in metrics under ``root``; return (argv, env) to run
    the script of the checkout ``src`` (the one found for the installed version, not
    ``ACCELGRID_TRANSFORMERS_SRC`` itself, which may be a folder of checkouts) with
    ``cwd=root``."""
    model_dir = root / "model"
    save_model(spec, model_dir)
    write_standin_metrics(root)
    args = spec.write_data(root / "data")
    argv = [sys.executable, str(src / "examples" / "pytorch" / spec.path),
            "--model_name_or_path", str(model_dir), "--output_dir", str(root / "out")]
    if spec.trainer:
        argv += trainer_flags(device)
    argv += args
    env = dict(os.environ)
    env.update({
        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1", "HF_HOME": str(root / "hf_home"),
        # run_summarization.py only checks that punkt exists (it tokenizes sentences
        # only with --predict_with_generate, which is not used).
        "NLTK_DATA": str(root / "nltk_data"), "WANDB_DISABLED": "true",
        "PYTHONUNBUFFERED": "1",
    })
    (root / "nltk_data" / "tokenizers" / "punkt").mkdir(parents=True, exist_ok=True)
    if device == "cpu":
        env["ACCELERATE_USE_CPU"] = "true"  # for the accelerate (no_trainer) script
    return argv, env


def _arg(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def load_inputs(spec: ScriptSpec, argv: list[str], cache_dir: Path) -> dict[str, int]:
    """Load the prepared checkpoint and data the way the script does (Auto classes from
    the folder, ``load_dataset`` on the files, offline); return each split's size."""
    import datasets
    import transformers

    model_dir = Path(_arg(argv, "--model_name_or_path") or "")
    transformers.AutoConfig.from_pretrained(str(model_dir))
    if (model_dir / "tokenizer_config.json").exists():
        transformers.AutoTokenizer.from_pretrained(str(model_dir))
    if (model_dir / "preprocessor_config.json").exists():
        auto = (transformers.AutoFeatureExtractor if spec.workload == "speech-pretraining"
                else transformers.AutoImageProcessor)
        try:
            auto.from_pretrained(str(model_dir))
        except ImportError as exc:
            if (missing := needs_torchvision(exc)) is None:
                raise
            raise missing from exc
    if train := _arg(argv, "--train_file"):
        ext = train.rsplit(".", 1)[1]
        kwargs = {"field": "data"} if spec.workload == "question-answering" else {}
        files = {"train": train, "validation": _arg(argv, "--validation_file")}
        kwargs["cache_dir"] = str(cache_dir)
        ds = datasets.load_dataset({"txt": "text"}.get(ext, ext), data_files=files, **kwargs)
    elif train := _arg(argv, "--train_dir"):
        files = {
            "train": train, "validation": _arg(argv, "--validation_dir") or "",
        }
        files = {k: v if v.endswith("**") else f"{v}/**" for k, v in files.items()}
        ds = datasets.load_dataset("imagefolder", data_files=files, cache_dir=str(cache_dir))
    else:
        # A relative dataset name is a folder under the scripts' working directory (root).
        ds = datasets.load_dataset(str(model_dir.parent / (_arg(argv, "--dataset_name") or "")),
                                   cache_dir=str(cache_dir))
    return {split: len(rows) for split, rows in ds.items()}
