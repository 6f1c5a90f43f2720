"""`zoo.export`: a checkpoint others load (Hugging Face, keras-hub), or an
export for a runtime without the zoo: TensorFlow SavedModel, ONNX, LiteRT.

Each goes through Keras' own `model.export`; the zoo adds the checks before
any work, the folder layout, the tokenizer, and for a `BertClassifier` on
TensorFlow a SavedModel signature that takes the sentences themselves.

The folder that `export_for_runtime` writes:

    PATH/saved_model.pb, variables/, assets/    format="tf_saved_model"
    PATH/model.onnx                             format="onnx"
    PATH/model.tflite                           format="litert"
    PATH/<tokenizer files>                      beside model.onnx / model.tflite,
    PATH/assets.extra/<tokenizer files>         in a SavedModel

The tokenizer files are those `zoo.export(..., format="huggingface")` writes
(transformers' `AutoTokenizer.from_pretrained` reads them), for a GPT-2,
BERT or Llama-family tokenizer.
"""

import shutil
import tempfile
import warnings
from pathlib import Path

import keras

RUNTIME_FORMATS = ("tf_saved_model", "onnx", "litert")
FILE_NAMES = {"onnx": "model.onnx", "litert": "model.tflite"}
TEXT_ENDPOINT = "classify_text"
# What each format cannot carry of a quantized model. An int8 model exports
# to a SavedModel and to ONNX (integer kernels and their scales, tested); the
# LiteRT converter refuses Keras' int8 x int8 matrix products; int4 and float8
# go to a SavedModel only.
QUANTIZED_REFUSALS = {
    ("litert", "int8"): "LiteRT's converter cannot read Keras' int8 matrix products (quantize the float "
                        "export with LiteRT's own post-training quantization instead)",
    ("litert", "int4"): "LiteRT's converter cannot read Keras' int4 kernels",
    ("litert", "float8"): "LiteRT has no float8 kernels",
    ("onnx", "int4"): "the ONNX export of Keras' packed int4 kernels is not supported here",
    ("onnx", "float8"): "the ONNX export of Keras' float8 layers is not supported here",
}
# The GGUF type an export without `outtype` writes a quantized model's matrices in: its own bits
# (a float8 model, whose matrix products alone are quantized, is refused as by the other formats).
GGUF_OUTTYPES = {"int8": "q8_0", "int4": "q4_0"}


class ExportError(ValueError):
    """A model or format that cannot be exported, said in one line."""


def export(model, path, format="huggingface", overwrite=False, outtype=None, ollama=False):
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
            "gguf": one GGUF file for llama.cpp, Ollama and LM Studio, as
            llama.cpp's `convert_hf_to_gguf.py` writes it (architecture
            "gpt2" for GPT-2; "llama", "qwen2" or "qwen3" for the Llama
            family; "gemma3" for Gemma 3), tokenizer and chat template inside; `path` is the file
            (`*.gguf`) or a folder that gets `model.gguf`. A model whose
            tokenizer llama.cpp cannot hold (a character or word tokenizer,
            none) is refused. Needs the `gguf` extra.
        overwrite: replace the files of an existing folder (or GGUF file).
        outtype: for "gguf": "f32", "f16", "bf16", "q8_0" or "q4_0", the
            type of the weight matrices (norms and biases stay f32). None
            (the default) follows the model: "q8_0" for an int8 model,
            "q4_0" for an int4 one, "f16" otherwise.
        ollama: for "gguf": also write an Ollama `Modelfile` beside the file
            (`FROM`, the chat template as Ollama's Go template where it is a
            known format, stop tokens and sampling parameters).

    A quantized model (`model.quantize`) is refused by the two checkpoint
    formats: both hold float weights, and a dequantized copy would pass the quantization
    error on as if it were the model's. "gguf" writes an int8 or int4 one
    (and refuses float8, as they do): each int8 or int4 matrix is read
    dequantized, exactly as the model computes with it, then quantized again
    into `outtype`'s blocks (llama.cpp's q8_0 and q4_0 scale 32 values along
    the input, Keras a whole output unit or a group).

    Returns:
        The folder, a `pathlib.Path`. `from_pretrained(path)` loads it back
        with the same weights, logits and token ids.

    Example:
    ```python
    zoo.export(lm, "my_gpt2", format="huggingface")
    lm2 = zoo.from_pretrained("my_gpt2")
    ```
    """
    from zoo.checkpoints import FORMATS, huggingface, keras_hub
    from zoo.models import BertSentenceEncoder, quantization_mode

    if format in RUNTIME_FORMATS:
        return export_for_runtime(model, path, format, overwrite=overwrite)
    if format not in FORMATS:
        raise ValueError(f"format={format!r}; expected one of {', '.join(map(repr, FORMATS + RUNTIME_FORMATS))}.")
    mode = quantization_mode(model)
    tokenizer = getattr(model, "tokenizer", None)
    if format == "gguf" and (mode is None or mode in GGUF_OUTTYPES):
        outtype = GGUF_OUTTYPES.get(mode, "f16") if outtype is None else outtype
        return _export_gguf(model, Path(path), tokenizer, outtype, ollama, overwrite)
    if mode is not None:
        raise ValueError(
            f"export writes float weights, and this {type(model).__name__} is quantized ({mode}); expected a "
            "float model: export it before quantizing (or load its float file), and quantize after loading."
        )
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not overwrite:
        raise FileExistsError(f"{folder}: exists and is not empty; pass overwrite=True to replace its files.")
    if isinstance(model, BertSentenceEncoder):  # its pooling has no weights: the backbone is the checkpoint
        model = model.backbone
    driver = keras_hub if format == "keras-hub" else huggingface
    driver.export(model, folder, tokenizer)
    return folder


def _export_gguf(model, path, tokenizer, outtype, ollama, overwrite):
    """`path` (a `.gguf` file, or a folder that gets `model.gguf`) and, with
    `ollama`, its `Modelfile`; see `zoo.export`."""
    from zoo.checkpoints import gguf
    from zoo.models import BertSentenceEncoder

    if isinstance(model, BertSentenceEncoder):
        model = model.backbone
    file = path if path.suffix.lower() == ".gguf" else path / "model.gguf"
    if file.exists() and not overwrite:
        raise FileExistsError(f"{file}: exists; pass overwrite=True (zoo export: --overwrite) to replace it.")
    gguf.export(model, file, tokenizer, outtype)
    if ollama:
        from zoo.checkpoints import ollama as modelfile

        modelfile.write_modelfile(file, tokenizer)
    return file


def export_for_runtime(model, path, format, overwrite=False):
    """Write `model` for a runtime; see `zoo.export`."""
    from zoo.models import quantization_mode

    if format not in RUNTIME_FORMATS:
        raise ExportError(f"format={format!r}; expected one of {', '.join(map(repr, RUNTIME_FORMATS))}.")
    if not isinstance(model, keras.Model) or not model.inputs:
        raise ExportError(
            f"a zoo model built with zoo.build or loaded with zoo.load is needed; got a {type(model).__name__}."
        )
    mode = quantization_mode(model)
    if (format, mode) in QUANTIZED_REFUSALS:
        raise ExportError(
            f"this {type(model).__name__} is quantized ({mode}) and {QUANTIZED_REFUSALS[format, mode]}; "
            "expected a float or int8 model for this format."
        )
    _check_converter(format)
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not overwrite:
        raise FileExistsError(
            f"{folder}: exists and is not empty; pass overwrite=True (zoo export: --overwrite) to replace its files."
        )
    if keras.backend.backend() != "tensorflow":
        return _export_on_tensorflow(model, folder, format)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _call_once(model)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        if format == "tf_saved_model":
            _saved_model(model, staging)
            tokenizer_folder = staging / "assets.extra"
        else:
            model.export(str(staging / FILE_NAMES[format]), format=format, verbose=False)
            tokenizer_folder = staging
        _write_tokenizer(model, tokenizer_folder, folder)
        if folder.exists():
            shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _export_on_tensorflow(model, folder, format):
    """Keras exports for these runtimes convert TensorFlow graphs (its JAX
    and torch exports need other converters and fix the lengths): the model
    is saved and exported by a Python process on the TensorFlow backend."""
    import os
    import subprocess
    import sys

    from zoo.saving import save

    with tempfile.TemporaryDirectory() as scratch:
        saved = Path(scratch) / "model.keras"
        save(model, saved)
        done = subprocess.run(
            [sys.executable, "-m", "zoo.deployment", str(saved), str(folder), format],
            env={**os.environ, "KERAS_BACKEND": "tensorflow"}, capture_output=True, text=True,
        )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        raise ExportError(f"the export on the TensorFlow backend failed: {lines[-1]}")
    return folder


def _call_once(model):
    """Keras exports a model that has run; one just loaded from a file has
    not: it runs once on a (1, 2) batch of ones (id 1, segment 1, position 1)."""
    import numpy as np

    model({tensor.name: np.ones((1, 2), tensor.dtype) for tensor in model.inputs}, training=False)


def _check_converter(format):
    """Refuse before any work when the format's converter is not installed."""
    import importlib.util

    needed = {"onnx": ("tf2onnx", "onnx"), "litert": ("tensorflow",), "tf_saved_model": ("tensorflow",)}[format]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise ExportError(
            f"format={format!r} needs {', '.join(missing)}, which is not installed; expected the export extra: "
            "pip install -e '.[export]'."
        )


def _input_signature(model):
    import tensorflow as tf

    return [{tensor.name: tf.TensorSpec(tensor.shape, tensor.dtype, name=tensor.name) for tensor in model.inputs}]


def _saved_model(model, folder):
    """The SavedModel: `serve` (Keras' endpoint, ids in, outputs out) and, for
    a BertClassifier carrying a WordPiece tokenizer on TensorFlow,
    `classify_text` (sentences in; probabilities and labels out)."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", model.__call__, input_signature=_input_signature(model))
    text_endpoint = _text_endpoint(model)
    if text_endpoint is not None:
        import tensorflow as tf

        if not model.tokenizer.built:  # one loaded from a file has not run yet
            model.tokenizer(["a"])
        archive.track(model.tokenizer)
        archive.add_endpoint(
            TEXT_ENDPOINT, text_endpoint, input_signature=[tf.TensorSpec([None], tf.string, name="sentences")]
        )
    archive.write_out(str(folder), verbose=False)


def _text_endpoint(model):
    """sentences -> {"probabilities", "labels"}, packed as `zoo.classify`
    packs them (`[CLS] tokens [SEP]`, cut to the window, [PAD] = 0), or
    None where the SavedModel cannot carry the tokenizer."""
    from zoo.text.tokens import special_id
    from zoo.models import BertClassifier

    tokenizer = getattr(model, "tokenizer", None)
    if not isinstance(model, BertClassifier) or tokenizer is None:
        return None
    if keras.backend.backend() != "tensorflow" or not _is_graph_tokenizer(tokenizer):
        warnings.warn(
            f"the SavedModel gets no '{TEXT_ENDPOINT}' signature: it needs the TensorFlow backend "
            "(KERAS_BACKEND=tensorflow) and a keras-hub WordPiece tokenizer; its tokenizer files are in "
            "assets.extra.",
            stacklevel=4,
        )
        return None
    import tensorflow as tf

    cls_id, sep_id = special_id(tokenizer, "cls"), special_id(tokenizer, "sep")
    window = model.backbone.max_sequence_length

    def classify_text(sentences):
        ids = tf.cast(tokenizer(sentences), "int32")[:, : window - 2]  # ragged (N, None)
        rows = tf.shape(ids.row_lengths())[0]
        cls = tf.fill([rows, 1], tf.constant(cls_id, "int32"))
        sep = tf.fill([rows, 1], tf.constant(sep_id, "int32"))
        packed = tf.concat([cls, ids, sep], axis=1)  # ragged (N, None)
        token_ids = packed.to_tensor(0)
        padding_mask = tf.sequence_mask(packed.row_lengths(), tf.shape(token_ids)[1], dtype="int32")
        logits = model(
            {"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids), "padding_mask": padding_mask},
            training=False,
        )
        probabilities = tf.nn.softmax(tf.cast(logits, "float32"), axis=-1)
        return {"probabilities": probabilities, "labels": tf.argmax(probabilities, axis=-1, output_type="int32")}

    return classify_text


def _is_graph_tokenizer(tokenizer):
    import keras_hub

    return isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer)


def _write_tokenizer(model, folder, destination):
    """The tokenizer files of the Hugging Face export, where the family has
    them, into `folder` (the staging copy of `destination`)."""
    from zoo.checkpoints import registry

    tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None), "tokenizer", None)
    if tokenizer is None:
        return
    try:
        family = registry.for_model(model)
    except ValueError:
        family = None
    backbone = getattr(model, "backbone", model)
    problem = "no Hugging Face tokenizer format for this family" if family is None else (
        family.tokenizer_problem(tokenizer, "huggingface", backbone)
    )
    if problem is not None:
        warnings.warn(f"{destination}: tokenizer files not written: {problem}.", stacklevel=4)
        return
    folder.mkdir(parents=True, exist_ok=True)
    family.write_huggingface_tokenizer(tokenizer, folder, model)


def _main(argv):
    """python -m zoo.deployment MODEL.keras FOLDER FORMAT: what
    `_export_on_tensorflow` runs, with KERAS_BACKEND=tensorflow."""
    from zoo.saving import load

    model_file, folder, format = argv
    export_for_runtime(load(model_file), folder, format, overwrite=True)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
