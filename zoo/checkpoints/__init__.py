"""Real checkpoints in and out: `from_pretrained(path, task)`, and the drivers
that `zoo.export(model, path, format)` writes them with.

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
* `gguf`: one GGUF file of llama.cpp, Ollama and LM Studio (architectures
  `gpt2`, `llama`, `qwen2`, `qwen3`, `gemma3`), read and written through the
  Hugging Face layout (`ollama` writes a Modelfile beside it);
* each family's weight map, in its folder beside its models
  (`zoo.models.gpt.weight_map` for GPT-2, `bert`, `llama` for Llama,
  Mistral, Qwen2, Qwen3, SmolLM2 and TinyLlama, `gemma` for Gemma 3's
  text models, `transformer` for Marian's opus-mt and BART): its config in and
  out, tensor names, tokenizer and keras-hub weight copy; `registry` finds the one of a checkpoint or a
  model.

A handle (`hf://ORG/NAME[@REVISION]`, a keras-hub preset name, `kaggle://...`)
is fetched into its hub's cache first (`hub`), then read as a folder.

Every file is checked before any weight is placed: a missing file, another
architecture, a tensor missing or of the wrong shape, an unreadable
(truncated) weights file, or a tokenizer with more tokens than the
embedding table raises one `CheckpointError` naming the file. Nothing loads
partially.
"""

from pathlib import Path

from zoo.checkpoints import gguf, huggingface, keras_hub, registry
from zoo.checkpoints.hub import checkpoint_folder, is_handle
from zoo.models.tensor_names import CheckpointError, TensorName, assign_tensors, read_json, tensors_of

FORMATS = ("keras-hub", "huggingface", "gguf")

__all__ = [
    "FORMATS",
    "CheckpointError",
    "TensorName",
    "assign_huggingface_tensors",
    "checkpoint_folder",
    "checkpoint_format",
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
            models (`model_type` "gemma3_text": 270M, 1B), or Marian's
            opus-mt translation models (`model_type` "marian": an
            `EncoderDecoder` carrying `tokenizer` and `source_tokenizer`,
            `zoo.tokenizers.MarianTokenizer`s), or BART's (`model_type` "bart":
            facebook/bart-base, bart-large-cnn; an `EncoderDecoder` carrying
            one `zoo.tokenizers.HuggingFaceTokenizer`); or a GGUF file
            (`*.gguf`: llama.cpp's `gpt2`, `llama`, `qwen2`, `qwen3` and `gemma3`
            architectures, any weight type `gguf` dequantizes, the
            tokenizer and chat template rebuilt from its metadata; the
            `gguf` extra); or a handle of
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
        `zoo.tokenizers.HuggingFaceTokenizer` of a Llama-family folder's
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
    if gguf.is_gguf_file(path):
        model = gguf.load(Path(path), task, num_classes, dtype)
        if quantize is not None:
            model.quantize(quantize)
        return model
    folder = checkpoint_folder(path, revision)
    driver = keras_hub if checkpoint_format(folder) == "keras-hub" else huggingface
    model = driver.load(folder, task, num_classes, dtype)
    if quantize is not None:
        model.quantize(quantize)
    return model


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
    if name not in registry.KERAS_HUB_BACKBONES:
        known = ", ".join(n.split(">")[1] for n in registry.KERAS_HUB_BACKBONES)
        raise ValueError(f"from_keras_hub converts a keras-hub backbone of {known}; got {type(backbone).__name__}.")
    return registry.KERAS_HUB_BACKBONES[name].from_keras_hub(backbone, dtype=dtype, **overrides)


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
    return registry.for_model(backbone).keras_hub_incompatibilities(backbone)


def huggingface_names(model):
    """(architecture, [TensorName, ...]): the transformers class name of a zoo
    model and its table, zoo variable <-> transformers tensor, in checkpoint
    order (what `export` writes)."""
    return registry.for_model(model).huggingface_names(model)


def huggingface_tensors(model):
    """{transformers tensor name: float32 NumPy array} of a zoo model, in transformers' shapes."""
    return tensors_of(huggingface_names(model)[1])


def assign_huggingface_tensors(names, tensors):
    """Writes `tensors` {name: array} into the zoo variables of a `huggingface_names` table."""
    assign_tensors(names, tensors)
