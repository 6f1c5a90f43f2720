"""Real checkpoints in and out: `from_pretrained(path, task)` and `export(model, path, format)`.

    lm = zoo.from_pretrained("gpt2_base_en", task="causal_lm")     # a keras-hub preset folder
    bert = zoo.from_pretrained("bert-base-uncased", task="classifier", num_classes=2)  # a Hugging Face folder
    qwen = zoo.from_pretrained("Qwen2.5-0.5B")                      # a Llama-family Hugging Face folder
    smol = zoo.from_pretrained("hf://HuggingFaceTB/SmolLM2-135M")   # by handle, downloaded and cached
    zoo.export(lm, "my_gpt2", format="huggingface")                # transformers loads it

One driver per format, one file per family:

* `huggingface`: a `transformers` folder (`config.json` with a
  `model_type`, `model.safetensors` or shards, the tokenizer files);
* `keras_hub`: a keras-hub preset (`save_to_preset`: `config.json` with a
  backbone's `registered_name`, `model.weights.h5`, `tokenizer.json` and
  `assets/tokenizer/...`, optionally `task.json`);
* each family's `checkpoints` module, in its folder beside its models
  (`zoo.models.gpt.checkpoints` for GPT-2, `bert`, `llama` for Llama,
  Mistral, Qwen2, Qwen3, SmolLM2 and TinyLlama, `gemma` for Gemma 3's
  text models): its config in and out, tensor names, tokenizer and
  keras-hub weight copy; `families` finds the one of a checkpoint or a
  model.

A handle (`hf://ORG/NAME[@REVISION]`, a keras-hub preset name, `kaggle://...`)
is fetched into its hub's cache first (`hub`), then read as a folder.

Every file is checked before any weight is placed: a missing file, another
architecture, a tensor missing or of the wrong shape, an unreadable
(truncated) weights file, or a tokenizer with more tokens than the
embedding table raises one `CheckpointError` naming the file. Nothing loads
partially.
"""

import importlib
import warnings
from pathlib import Path

from zoo.checkpoints import families, huggingface, keras_hub
from zoo.checkpoints.common import CheckpointError, TensorName, assign_tensors, read_json, tensors_of
from zoo.checkpoints.hub import checkpoint_folder, is_handle

FORMATS = ("keras-hub", "huggingface")

# The families' checkpoint modules moved into the families' folders; the
# old names still import, with a warning, for one release.
_MOVED = {
    "gpt2": "zoo.models.gpt.checkpoints",
    "bert": "zoo.models.bert.checkpoints",
    "llama": "zoo.models.llama.checkpoints",
    "gemma3": "zoo.models.gemma.checkpoints",
}


def __getattr__(name):
    if name in _MOVED:
        warnings.warn(
            f"zoo.checkpoints.{name} is now {_MOVED[name]}; the old name goes in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'zoo.checkpoints' has no attribute {name!r}")

__all__ = [
    "FORMATS",
    "CheckpointError",
    "TensorName",
    "assign_huggingface_tensors",
    "checkpoint_folder",
    "checkpoint_format",
    "export",
    "from_keras_hub",
    "from_pretrained",
    "huggingface_names",
    "huggingface_tensors",
    "is_checkpoint_folder",
    "is_handle",
    "keras_hub_incompatibilities",
    "to_keras_hub",
]


def checkpoint_format(path):
    """ "keras-hub" or "huggingface" for a checkpoint folder, from its
    `config.json`; a CheckpointError for anything else."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(
            f"{folder}: not a folder; expected a keras-hub preset or a Hugging Face checkpoint folder "
            "(config.json beside the weights)."
        )
    config = read_json(folder / "config.json")
    if isinstance(config, dict) and "registered_name" in config:
        return "keras-hub"
    if isinstance(config, dict) and "model_type" in config:
        return "huggingface"
    raise CheckpointError(
        f"{folder / 'config.json'}: neither a keras-hub preset config (`registered_name`) nor a "
        "Hugging Face config (`model_type`)."
    )


def is_checkpoint_folder(path):
    """Whether `path` is a folder with a `config.json` (what `from_pretrained` reads)."""
    try:
        return Path(path).is_dir() and (Path(path) / "config.json").is_file()
    except (TypeError, OSError):
        return False


def from_pretrained(path, task="auto", num_classes=None, dtype=None, quantize=None, revision=None):
    """Load a GPT-2, BERT, Llama-family or Gemma 3 checkpoint, from a folder or by handle, as a zoo model with its tokenizer.

    Args:
        path: a keras-hub preset folder (`save_to_preset`) or a Hugging Face
            checkpoint folder (`config.json`, `model.safetensors` and the
            tokenizer files) of GPT-2, BERT, or the Llama family
            (`model_type` "llama", "mistral", "qwen2", "qwen3": Llama 2 / 3,
            SmolLM2, TinyLlama, Mistral, Qwen2.5, Qwen3), or Gemma 3's text
            models (`model_type` "gemma3_text": 270M, 1B); or a handle of
            one: `hf://ORG/NAME` (the Hugging Face Hub, optionally pinned
            as `hf://ORG/NAME@REVISION`), a keras-hub preset name
            (`gpt2_base_en`) or a `kaggle://` handle, downloaded into the
            hub's cache first (see `zoo.checkpoints.hub`; a local folder of
            the same name wins).
        task: "causal_lm" (GPT-2, Llama family, Gemma 3); "masked_lm", "classifier"
            or "sentence_encoder" (BERT); None for the backbone; "auto" (the
            default) for the checkpoint's own head: GPT-2 and the Llama
            family -> "causal_lm", BERT -> "masked_lm" or "classifier" when
            the checkpoint has that head, else "sentence_encoder". A head
            the checkpoint does not have starts from fresh weights (a
            warning says so).
        num_classes: for "classifier": the number of classes; the
            checkpoint's when None (2 when it has no classifier). A count
            other than the checkpoint's gives a fresh classifier layer.
        dtype: the model's dtype policy, e.g. "mixed_bfloat16".
        quantize: None, or "int8", "int4" or "float8": the loaded model is
            then quantized (`model.quantize(quantize)`, see
            docs/quantization.md); the mode is checked before anything is
            read.
        revision: for an `hf://` handle, the branch, tag or commit to
            load; the repository's default branch when None.

    Returns:
        The zoo model (`GPTCausalLM`, `BertMaskedLM`, `BertClassifier`,
        `BertSentenceEncoder`, `LlamaCausalLM`, or a backbone) with the
        checkpoint's weights, and its tokenizer as `model.tokenizer`:
        keras-hub's `GPT2Tokenizer` / `BertTokenizer`, a
        `zoo.data.HuggingFaceTokenizer` of a Llama-family folder's
        `tokenizer.json`, or a keras-hub preset's own tokenizer.

    Raises:
        CheckpointError: naming the file, for a folder that is not a
            supported checkpoint or is incomplete, inconsistent or truncated;
            naming the handle, for one that cannot be fetched (malformed,
            no such repository or revision, gated, offline with nothing
            cached, the hub unreachable).

    Example:
    ```python
    lm = zoo.from_pretrained("gpt2", task="causal_lm")  # huggingface-cli download gpt2 --local-dir gpt2
    ids = lm.tokenizer("The meaning of life is")
    lm = zoo.from_pretrained("hf://openai-community/gpt2", revision="main")  # downloaded once, then cached
    ```
    """
    from zoo.models import check_quantization_mode

    if quantize is not None:
        check_quantization_mode(quantize)
    folder = checkpoint_folder(path, revision)
    driver = keras_hub if checkpoint_format(folder) == "keras-hub" else huggingface
    model = driver.load(folder, task, num_classes, dtype)
    if quantize is not None:
        model.quantize(quantize)
    return model


def export(model, path, format="huggingface", overwrite=False):
    """Write a zoo model as a checkpoint folder others load, or for a runtime.

    Args:
        model: a zoo `GPTCausalLM` / `GPTBackbone` (GPT-2), a
            `BertMaskedLM`, `BertClassifier`, `BertSentenceEncoder` or
            `BertBackbone`, or a `LlamaCausalLM` / `LlamaBackbone`,
            typically from `from_pretrained` or fine-tuned here. Its
            `tokenizer` is written beside the weights (keras-hub's
            GPT2Tokenizer / BytePairTokenizer, BertTokenizer /
            WordPieceTokenizer, a `HuggingFaceTokenizer`). A model without
            one (or with another kind) gets weights and config only, and a
            warning says the tokenizer files were not written: other tools
            can load the weights, `from_pretrained` needs the tokenizer
            files added.
        path: the folder to write (created; an existing non-empty folder
            only with `overwrite=True`).
        format: "huggingface": `config.json` with transformers' keys,
            `model.safetensors` with transformers' tensor names and shapes,
            and the tokenizer files (`vocab.json` + `merges.txt`,
            `vocab.txt`, or `tokenizer.json` + `tokenizer_config.json` +
            `generation_config.json`) - `transformers`' `from_pretrained(path)`
            loads it. A Llama-family model is written as `model_type`
            "qwen3" when it has Qwen3's query/key norm, "qwen2" when it
            has Qwen2's Q, K and V biases, else "llama".
            "keras-hub": keras-hub's `save_to_preset` of the matching
            keras-hub model (`GPT2CausalLM`, `BertMaskedLM`,
            `BertTextClassifier`, `Llama3CausalLM`, `QwenCausalLM`,
            `Qwen3CausalLM`, or the backbone) with the same weights -
            e.g. `keras_hub.models.GPT2CausalLM.from_preset(path)` loads it.
            "tf_saved_model", "onnx", "litert": any zoo model (every
            family and task), through Keras' `model.export`, for
            `tf.saved_model.load` / TF Serving, `onnxruntime` and the LiteRT
            interpreter; the batch and length dimensions stay dynamic and
            the inputs keep the model's names. The folder holds the
            SavedModel itself, or `model.onnx`, or `model.tflite`, with the
            tokenizer's Hugging Face files beside it (in `assets.extra` of a
            SavedModel). A `BertClassifier` exported on TensorFlow also gets
            a `classify_text` signature: sentences in, the tokenizer inside,
            `probabilities` and `labels` out, as `zoo.classify` gives them.
            An int8 model exports to all three; a float8 one to
            "tf_saved_model" only. These need the `export` extra.
            See docs/deploying.md.
        overwrite: replace the files of an existing folder.

    A quantized model (`model.quantize`) is refused by the two checkpoint
    formats: both hold float weights, and a dequantized copy would pass the quantization
    error on as if it were the model's.

    Returns:
        The folder, a `pathlib.Path`. `from_pretrained(path)` loads it back
        with the same weights, logits and token ids.

    Example:
    ```python
    zoo.export(lm, "my_gpt2", format="huggingface")
    lm2 = zoo.from_pretrained("my_gpt2")
    ```
    """
    from zoo.deployment import RUNTIME_FORMATS, export_for_runtime
    from zoo.models import BertSentenceEncoder, quantization_mode

    if format in RUNTIME_FORMATS:
        return export_for_runtime(model, path, format, overwrite=overwrite)
    if format not in FORMATS:
        raise ValueError(f"format={format!r}; expected one of {', '.join(map(repr, FORMATS + RUNTIME_FORMATS))}.")
    mode = quantization_mode(model)
    if mode is not None:
        raise ValueError(
            f"export writes float weights, and this {type(model).__name__} is quantized ({mode}); expected a "
            "float model: export it before quantizing (or load its float file), and quantize after loading."
        )
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not overwrite:
        raise FileExistsError(f"{folder}: exists and is not empty; pass overwrite=True to replace its files.")
    tokenizer = getattr(model, "tokenizer", None)
    if isinstance(model, BertSentenceEncoder):  # its pooling has no weights: the backbone is the checkpoint
        model = model.backbone
    driver = keras_hub if format == "keras-hub" else huggingface
    driver.export(model, folder, tokenizer)
    return folder


# --- The weight mappings, for models already in memory -------------------------------------------


def from_keras_hub(backbone, dtype=None, **overrides):
    """Convert a keras-hub backbone into the zoo backbone with the same weights.

    Args:
        backbone: a keras-hub `GPT2Backbone` (-> `GPTBackbone`),
            `BertBackbone` (-> `BertBackbone`), or `LlamaBackbone`,
            `Llama3Backbone`, `MistralBackbone`, `QwenBackbone`,
            `Qwen3Backbone` (-> `LlamaBackbone`).
        dtype: the zoo model's dtype policy; the backbone's by default.
        **overrides: zoo constructor arguments that keras-hub does not
            record, e.g. `activation="gelu"` for a BERT whose checkpoint used
            the exact GELU, `dropout`, or a Llama's `max_sequence_length`.

    Returns:
        The zoo backbone. Put a task on it as usual, e.g.
        `zoo.models.GPTCausalLM(from_keras_hub(hub_backbone))`.

    Example:
    ```python
    hub = keras_hub.models.GPT2Backbone.from_preset("gpt2_base_en")
    lm = zoo.models.GPTCausalLM(zoo.checkpoints.from_keras_hub(hub))
    ```
    """
    name = f"keras_hub>{type(backbone).__name__}"
    if name not in families.KERAS_HUB_BACKBONES:
        from zoo.models.llama import checkpoints as llama

        llamas = ", ".join(n.split(">")[1] for n in llama.KERAS_HUB_BACKBONES)
        raise ValueError(
            f"from_keras_hub converts a keras-hub GPT2Backbone or BertBackbone, or a Llama-family backbone "
            f"({llamas}); got {type(backbone).__name__}."
        )
    return families.KERAS_HUB_BACKBONES[name].from_keras_hub(backbone, dtype=dtype, **overrides)


def to_keras_hub(backbone):
    """A zoo backbone -> the family's keras-hub backbone with the same weights
    (the inverse of `from_keras_hub`). A ValueError names what keras-hub's
    model cannot hold (see `keras_hub_incompatibilities`).

    Example:
    ```python
    hub = zoo.checkpoints.to_keras_hub(lm.backbone)
    keras_hub.models.GPT2CausalLM(hub).save_to_preset("my_gpt2")
    ```
    """
    return keras_hub.to_keras_hub(backbone)


def keras_hub_incompatibilities(backbone):
    """(refusals, approximations): lists of sentences saying what keras-hub's
    model of the family cannot hold (a refusal) or computes slightly
    differently (an approximation, e.g. keras-hub's GELU is always the tanh
    approximation)."""
    return families.for_model(backbone).keras_hub_incompatibilities(backbone)


def huggingface_names(model):
    """(architecture, [TensorName, ...]): the transformers class name of a zoo
    model and its table, zoo variable <-> transformers tensor, in checkpoint
    order (what `export` writes)."""
    return families.for_model(model).huggingface_names(model)


def huggingface_tensors(model):
    """{transformers tensor name: float32 NumPy array} of a zoo model, in transformers' shapes."""
    return tensors_of(huggingface_names(model)[1])


def assign_huggingface_tensors(names, tensors):
    """Writes `tensors` {name: array} into the zoo variables of a `huggingface_names` table."""
    assign_tensors(names, tensors)
