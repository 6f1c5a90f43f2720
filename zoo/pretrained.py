"""Real checkpoints in and out: `from_pretrained(path, task)` and `export(model, path, format)`.

    lm = zoo.from_pretrained("gpt2_base_en", task="causal_lm")     # a keras-hub preset folder
    bert = zoo.from_pretrained("bert-base-uncased", task="classifier", num_classes=2)  # a Hugging Face folder
    zoo.export(lm, "my_gpt2", format="huggingface")                # transformers loads it

Two on-disk formats, GPT-2 and BERT in each:

* a keras-hub preset (`save_to_preset`): `config.json` with a
  `registered_name` of `keras_hub>GPT2Backbone` / `keras_hub>BertBackbone`,
  `model.weights.h5`, `tokenizer.json` and `assets/tokenizer/...`, and
  optionally a task (`task.json`, `task.weights.h5`: `GPT2CausalLM`,
  `BertMaskedLM`, `BertTextClassifier`). keras-hub loads it
  (`Backbone.from_preset`, `Tokenizer.from_preset`) and `zoo.convert`
  maps the weights into the zoo's layers.
* a Hugging Face `transformers` folder: `config.json` (`model_type` "gpt2"
  or "bert"), `model.safetensors` (or sharded with
  `model.safetensors.index.json`) and the tokenizer files (`vocab.json` +
  `merges.txt` for GPT-2, `vocab.txt` for BERT). The tensors are read with
  `safetensors` and placed through `zoo.convert.huggingface_names`, the
  same table the export writes with; the tokenizers are keras-hub's
  `GPT2Tokenizer` and `BertTokenizer` on the folder's vocabulary, set as
  transformers sets them (`do_lower_case`, `strip_accents` from
  `tokenizer_config.json`). They give transformers' ids, with one known
  difference: keras-hub lowercases by Unicode case folding, so an uncased
  BERT reads "ß" as "ss" and a ligature "ﬁ" as "fi", where transformers
  keeps them.

Every file is checked before any weight is placed: a missing file, another
architecture, a tensor missing or of the wrong shape, an unreadable
(truncated) weights file, or a tokenizer with more tokens than the
embedding table raises one `CheckpointError` naming the file. Nothing loads
partially.
"""

import json
import warnings
from pathlib import Path

import numpy as np

from zoo.saving import ModelFileError

FORMATS = ("keras-hub", "huggingface")
TASKS = {"gpt": ("causal_lm",), "bert": ("masked_lm", "classifier", "sentence_encoder")}

# Hugging Face architectures read, by family, and the head each one carries.
HF_ARCHITECTURES = {
    "GPT2LMHeadModel": "causal_lm",
    "GPT2Model": None,
    "BertModel": None,
    "BertForMaskedLM": "masked_lm",
    "BertForPreTraining": "masked_lm",  # the masked-LM head; the next-sentence head is not used
    "BertForSequenceClassification": "classifier",
}
HF_ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu", "relu": "relu"}
KERAS_HUB_BACKBONES = {"keras_hub>GPT2Backbone": "gpt", "keras_hub>BertBackbone": "bert"}
KERAS_HUB_TASKS = {
    "keras_hub>GPT2CausalLM": "causal_lm",
    "keras_hub>BertMaskedLM": "masked_lm",
    "keras_hub>BertTextClassifier": "classifier",
}
GPT2_END_TOKEN = "<|endoftext|>"


class CheckpointError(ModelFileError):
    """A checkpoint folder that cannot be loaded as it is; the message names the file."""


# --- Reading ----------------------------------------------------------------------


def _read_json(path):
    if not path.is_file():
        raise CheckpointError(f"{path}: does not exist; expected a JSON file of the checkpoint.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error}).") from None


def _require(folder, *names, why):
    for name in names:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: does not exist; expected {why}.")


def checkpoint_format(path):
    """ "keras-hub" or "huggingface" for a checkpoint folder, from its
    `config.json`; a CheckpointError for anything else."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(
            f"{folder}: not a folder; expected a keras-hub preset or a Hugging Face checkpoint folder "
            "(config.json beside the weights)."
        )
    config = _read_json(folder / "config.json")
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


def from_pretrained(path, task="auto", num_classes=None, dtype=None, quantize=None):
    """Load a GPT-2 or BERT checkpoint folder as a zoo model with its tokenizer.

    Args:
        path: a keras-hub preset folder (`save_to_preset`) or a Hugging Face
            checkpoint folder (`config.json`, `model.safetensors` and the
            tokenizer files), of GPT-2 or BERT.
        task: "causal_lm" (GPT-2); "masked_lm", "classifier" or
            "sentence_encoder" (BERT); None for the backbone; "auto" (the
            default) for the checkpoint's own head: GPT-2 -> "causal_lm",
            BERT -> "masked_lm" or "classifier" when the checkpoint has that
            head, else "sentence_encoder". A head the checkpoint does not
            have starts from fresh weights (a warning says so).
        num_classes: for "classifier": the number of classes; the
            checkpoint's when None (2 when it has no classifier). A count
            other than the checkpoint's gives a fresh classifier layer.
        dtype: the model's dtype policy, e.g. "mixed_bfloat16".
        quantize: None, or "int8", "int4" or "float8": the loaded model is
            then quantized (`model.quantize(quantize)`, see
            docs/quantization.md); the mode is checked before anything is
            read.

    Returns:
        The zoo model (`GPTCausalLM`, `BertMaskedLM`, `BertClassifier`,
        `BertSentenceEncoder`, or a backbone) with the checkpoint's weights,
        and its tokenizer (keras-hub's `GPT2Tokenizer` or `BertTokenizer`)
        as `model.tokenizer`.

    Raises:
        CheckpointError: naming the file, for a folder that is not a GPT-2 /
            BERT checkpoint or is incomplete, inconsistent or truncated.

    Example:
    ```python
    lm = zoo.from_pretrained("gpt2", task="causal_lm")  # huggingface-cli download gpt2 --local-dir gpt2
    ids = lm.tokenizer("The meaning of life is")
    ```
    """
    from zoo.models import check_quantization_mode

    if quantize is not None:
        check_quantization_mode(quantize)
    folder = Path(path)
    kind = checkpoint_format(folder)
    if kind == "keras-hub":
        model = _from_keras_hub_preset(folder, task, num_classes, dtype)
    else:
        model = _from_huggingface(folder, task, num_classes, dtype)
    if quantize is not None:
        model.quantize(quantize)
    return model


def _resolve_task(family, task, head, where):
    if task == "auto":
        return head or ("causal_lm" if family == "gpt" else "sentence_encoder")
    if task is not None and task not in TASKS[family]:
        family_name = "GPT-2" if family == "gpt" else "BERT"
        raise ValueError(
            f"task={task!r} does not fit {where}, a {family_name} checkpoint; expected one of "
            f"{', '.join(map(repr, TASKS[family]))}, None (the backbone) or 'auto'."
        )
    return task


def _build_task(backbone, task, num_classes):
    from zoo.models import BertClassifier, BertMaskedLM, BertSentenceEncoder, GPTCausalLM

    if task is None:
        return backbone
    if task == "causal_lm":
        return GPTCausalLM(backbone)
    if task == "masked_lm":
        return BertMaskedLM(backbone)
    if task == "classifier":
        return BertClassifier(backbone, num_classes=num_classes)
    return BertSentenceEncoder(backbone)


def _fresh_head_warning(where, task, reason):
    warnings.warn(f"{where}: {reason}; the {task} head starts from fresh weights.", stacklevel=4)


def _check_vocabulary(tokenizer_size, vocabulary_size, tokenizer_file, weights_file):
    if tokenizer_size > vocabulary_size:
        raise CheckpointError(
            f"{tokenizer_file}: the tokenizer has {tokenizer_size} tokens but the embedding table in "
            f"{weights_file} has {vocabulary_size} rows; expected at most {vocabulary_size} tokens."
        )


# --- keras-hub presets ------------------------------------------------------------------


def _from_keras_hub_preset(folder, task, num_classes, dtype):
    import h5py
    import keras_hub

    from zoo.convert import from_keras_hub

    config = _read_json(folder / "config.json")
    name = config.get("registered_name")
    if name not in KERAS_HUB_BACKBONES:
        raise CheckpointError(
            f"{folder / 'config.json'}: a keras-hub preset of {name}; expected one of "
            f"{', '.join(KERAS_HUB_BACKBONES)}."
        )
    family = KERAS_HUB_BACKBONES[name]
    weights_files = [folder / "model.weights.h5"]
    if (folder / "model.weights.json").is_file():  # sharded
        weights_files = [folder / f for f in _read_json(folder / "model.weights.json").get("weight_map", {}).values()]
    task_config = _read_json(folder / "task.json") if (folder / "task.json").is_file() else None
    head = KERAS_HUB_TASKS.get(task_config.get("registered_name")) if task_config else None
    if head in ("masked_lm", "classifier"):  # GPT2CausalLM's head is the tied embedding: no weights of its own
        weights_files.append(folder / "task.weights.h5")
    for file in dict.fromkeys(weights_files):
        if not file.is_file():
            raise CheckpointError(f"{file}: does not exist; expected the preset's weights (save_to_preset).")
        try:
            with h5py.File(file, "r"):
                pass
        except OSError as error:
            raise CheckpointError(f"{file}: unreadable weights file, truncated or corrupted ({error}).") from None
    _require(folder, "tokenizer.json", why="the preset's tokenizer (save_to_preset of a task with a preprocessor)")
    tokenizer = _keras_hub_tokenizer(folder)

    task = _resolve_task(family, task, head, folder)
    try:
        if head and head == task:
            hub_task_class = getattr(keras_hub.models, task_config["registered_name"].split(">")[1])
            hub_task = hub_task_class.from_preset(str(folder), preprocessor=None)
            hub_backbone = hub_task.backbone
        else:
            hub_task = None
            hub_backbone = keras_hub.models.Backbone.from_preset(str(folder))
    except Exception as error:  # keras-hub's own message, with the folder
        raise CheckpointError(f"{folder}: keras-hub could not load the preset: {type(error).__name__}: {error}") from None
    _check_vocabulary(
        tokenizer.vocabulary_size(), hub_backbone.vocabulary_size, folder / "assets" / "tokenizer", weights_files[0]
    )
    backbone = from_keras_hub(hub_backbone, dtype=dtype)

    if task == "classifier":
        hub_classes = hub_task.num_classes if hub_task is not None else None
        num_classes = num_classes or hub_classes or 2
    model = _build_task(backbone, task, num_classes)
    if task in ("masked_lm", "classifier"):
        if hub_task is None:
            _fresh_head_warning(folder, task, f"the preset has no keras-hub {task} task")
        elif task == "classifier" and hub_task.num_classes != num_classes:
            _fresh_head_warning(
                folder, task, f"the preset's classifier has {hub_task.num_classes} classes, not {num_classes}"
            )
        elif task == "classifier":
            model.classifier.kernel.assign(np.asarray(hub_task.output_dense.kernel.numpy()))
            model.classifier.bias.assign(np.asarray(hub_task.output_dense.bias.numpy()))
        else:
            _copy_masked_lm_head(model, hub_task.masked_lm_head)
    model.tokenizer = tokenizer
    return model


def _keras_hub_tokenizer(folder):
    import keras_hub

    config = _read_json(folder / "tokenizer.json")
    assets = folder / "assets" / "tokenizer"
    expected = {
        "keras_hub>GPT2Tokenizer": ("vocabulary.json", "merges.txt"),
        "keras_hub>BertTokenizer": ("vocabulary.txt",),
    }.get(config.get("registered_name"))
    if expected is None:
        raise CheckpointError(
            f"{folder / 'tokenizer.json'}: a {config.get('registered_name')}; expected a keras_hub>GPT2Tokenizer "
            "or keras_hub>BertTokenizer."
        )
    _require(assets, *expected, why="the tokenizer's vocabulary (keras-hub's save_to_preset writes it)")
    try:
        return keras_hub.tokenizers.Tokenizer.from_preset(str(folder))
    except Exception as error:
        raise CheckpointError(f"{assets}: keras-hub could not load the tokenizer: {error}") from None


def _copy_masked_lm_head(model, hub_head):
    from zoo.convert import _copy_dense, _copy_norm

    _copy_dense(model.transform.dense, hub_head._intermediate_dense)
    _copy_norm(model.transform.norm, hub_head._intermediate_layer_norm)
    model.output_bias.bias.assign(np.asarray(hub_head._bias.numpy()))
    warnings.warn(
        "keras-hub's masked-LM head computes an exact GELU and a LayerNorm epsilon of 1e-5; the zoo's head "
        "uses the backbone's (tanh-approximate GELU, 1e-12): the logits agree to about 1e-3, not exactly.",
        stacklevel=4,
    )


# --- Hugging Face folders -------------------------------------------------------------


def _hf_config(folder):
    config_file = folder / "config.json"
    config = _read_json(config_file)
    model_type = config.get("model_type")
    if model_type not in ("gpt2", "bert"):
        raise CheckpointError(
            f"{config_file}: model_type {model_type!r} is not supported; expected 'gpt2' or 'bert'."
        )
    architectures = config.get("architectures") or ["GPT2LMHeadModel" if model_type == "gpt2" else "BertModel"]
    architecture = architectures[0]
    family = "gpt" if model_type == "gpt2" else "bert"
    if architecture not in HF_ARCHITECTURES or architecture.startswith("GPT2") != (family == "gpt"):
        known = [a for a in HF_ARCHITECTURES if a.startswith("GPT2") == (family == "gpt")]
        raise CheckpointError(
            f"{config_file}: architecture {architecture!r} is not supported; expected one of {', '.join(known)}."
        )

    def get(key, default=KeyError):
        if key in config and config[key] is not None:
            return config[key]
        if default is KeyError:
            raise CheckpointError(f"{config_file}: no {key!r}; expected the transformers config of {architecture}.")
        return default

    if family == "gpt":
        activation = get("activation_function", "gelu_new")
        for key, expected in (("add_cross_attention", False), ("scale_attn_by_inverse_layer_idx", False),
                              ("tie_word_embeddings", True), ("scale_attn_weights", True)):
            if bool(config.get(key, expected)) != expected:
                raise CheckpointError(f"{config_file}: {key}={config[key]} is not supported; expected {expected}.")
        zoo_config = dict(
            vocabulary_size=get("vocab_size"),
            num_layers=get("n_layer"),
            num_heads=get("n_head"),
            hidden_dim=get("n_embd"),
            intermediate_dim=get("n_inner", 4 * get("n_embd")),
            max_sequence_length=get("n_positions"),
            dropout=float(get("resid_pdrop", 0.1)),
            norm_first=True,
            layer_norm_epsilon=float(get("layer_norm_epsilon", 1e-5)),
        )
    else:
        activation = get("hidden_act", "gelu")
        if get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(
                f"{config_file}: position_embedding_type {config['position_embedding_type']!r} is not supported; "
                "expected 'absolute'."
            )
        zoo_config = dict(
            vocabulary_size=get("vocab_size"),
            num_layers=get("num_hidden_layers"),
            num_heads=get("num_attention_heads"),
            hidden_dim=get("hidden_size"),
            intermediate_dim=get("intermediate_size"),
            max_sequence_length=get("max_position_embeddings"),
            num_segments=get("type_vocab_size", 2),
            dropout=float(get("hidden_dropout_prob", 0.1)),
            layer_norm_epsilon=float(get("layer_norm_eps", 1e-12)),
        )
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"{config_file}: activation {activation!r} is not supported; expected one of {', '.join(HF_ACTIVATIONS)}."
        )
    zoo_config["activation"] = HF_ACTIVATIONS[activation]
    return family, architecture, config, zoo_config


def _safetensors_files(folder):
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"], None
    if index.is_file():
        weight_map = _read_json(index).get("weight_map") or {}
        return sorted({folder / f for f in weight_map.values()}), weight_map
    other = [n for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack") if (folder / n).is_file()]
    hint = (
        f" (the folder has {other[0]}: save it again with `save_pretrained(..., safe_serialization=True)`)"
        if other
        else ""
    )
    raise CheckpointError(f"{folder / 'model.safetensors'}: does not exist; expected the weights in safetensors{hint}.")


class _Tensors:
    """The tensors of one or several safetensors files, by name, read on demand."""

    def __init__(self, files):
        from safetensors import safe_open

        self.handles, self.where = [], {}
        for file in files:
            if not file.is_file():
                raise CheckpointError(f"{file}: does not exist; expected a weights shard named in the index.")
            try:
                handle = safe_open(str(file), framework="np")
                keys = list(handle.keys())
                shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in keys}
            except Exception as error:  # safetensors' SafetensorError, OSError
                raise CheckpointError(f"{file}: unreadable safetensors file, truncated or corrupted ({error}).") from None
            self.handles.append(handle)
            for key in keys:
                self.where[key] = (file, handle, shapes[key])

    def names(self):
        return list(self.where)

    def shape(self, name):
        return self.where[name][2]

    def file(self, name):
        return self.where[name][0]

    def get(self, name):
        file, handle, _ = self.where[name]
        try:
            return handle.get_tensor(name)
        except Exception as error:
            raise CheckpointError(f"{file}: cannot read tensor {name!r}, truncated or corrupted ({error}).") from None


def _normalise_names(tensors):
    """Old BERT checkpoints call LayerNorm parameters gamma/beta: {checkpoint name: transformers name}."""
    renamed = {}
    for name in tensors.names():
        new = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[new] = name
    return renamed


def _hf_tokenizer(folder, family, vocabulary_size, weights_file):
    import keras_hub

    if family == "gpt":
        _require(folder, "vocab.json", "merges.txt", why="GPT-2's byte-pair vocabulary (vocab.json and merges.txt)")
        vocabulary = _read_json(folder / "vocab.json")
        if not isinstance(vocabulary, dict) or GPT2_END_TOKEN not in vocabulary:
            raise CheckpointError(f"{folder / 'vocab.json'}: expected a {{token: id}} object holding {GPT2_END_TOKEN!r}.")
        merges = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [m for m in merges if m.strip() and not m.startswith("#version")]
        if any(len(m.split(" ")) != 2 for m in merges):
            bad = next(m for m in merges if len(m.split(" ")) != 2)
            raise CheckpointError(f"{folder / 'merges.txt'}: line {bad!r} is not a merge; expected 'a b' per line.")
        _check_vocabulary(max(vocabulary.values()) + 1, vocabulary_size, folder / "vocab.json", weights_file)
        return keras_hub.tokenizers.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    _require(folder, "vocab.txt", why="BERT's WordPiece vocabulary (vocab.txt)")
    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    while tokens and tokens[-1] == "":
        tokens.pop()
    _check_vocabulary(len(tokens), vocabulary_size, folder / "vocab.txt", weights_file)
    settings = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    lowercase = bool(settings.get("do_lower_case", True))  # transformers' BertTokenizer default
    strip_accents = settings.get("strip_accents")
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)  # transformers' rule
    try:
        return keras_hub.tokenizers.BertTokenizer(vocabulary=tokens, lowercase=lowercase, strip_accents=strip_accents)
    except ValueError as error:
        raise CheckpointError(f"{folder / 'vocab.txt'}: {error}") from None


def _from_huggingface(folder, task, num_classes, dtype):
    from zoo.convert import assign_huggingface_tensors
    from zoo.models import BertBackbone, GPTBackbone

    family, architecture, hf_config, zoo_config = _hf_config(folder)
    files, _ = _safetensors_files(folder)
    tensors = _Tensors(files)
    renamed = _normalise_names(tensors)
    tokenizer = _hf_tokenizer(folder, family, zoo_config["vocabulary_size"], files[0])

    head = HF_ARCHITECTURES[architecture]
    task = _resolve_task(family, task, head, folder)
    if task == "classifier":
        checkpoint_classes = None
        if head == "classifier":
            checkpoint_classes = len(hf_config.get("id2label") or {}) or hf_config.get("num_labels")
        num_classes = num_classes or checkpoint_classes or 2
    backbone = (GPTBackbone if family == "gpt" else BertBackbone)(**zoo_config, dtype=dtype)
    model = _build_task(backbone, task, num_classes)

    # The table of the checkpoint's own architecture, with the checkpoint's prefix.
    prefix = {"gpt": "transformer.", "bert": "bert."}[family]
    has_prefix = any(name.startswith(prefix) for name in renamed)
    names = _names_for(model, backbone, family, prefix if has_prefix else "", renamed)
    mapped_head = head is not None and head == task
    if task == "classifier" and mapped_head:
        shape = tensors.shape(renamed["classifier.weight"]) if "classifier.weight" in renamed else None
        if shape is not None and shape[0] != num_classes:
            _fresh_head_warning(folder, task, f"the checkpoint's classifier has {shape[0]} classes, not {num_classes}")
            mapped_head = False
    if task in ("masked_lm", "classifier") and not mapped_head and head != task:
        _fresh_head_warning(folder, task, f"the checkpoint is a {architecture} without a {task} head")
    if mapped_head:
        names += _head_names(model, task)

    # Check everything before assigning anything.
    weights_file = files[0] if len(files) == 1 else folder / "model.safetensors.index.json"
    wanted = {entry.name for entry in names}
    missing = [n for n in wanted if n not in renamed]
    if missing:
        raise CheckpointError(
            f"{weights_file}: {len(missing)} tensor(s) of {architecture} missing, e.g. {sorted(missing)[:3]}; "
            "expected a complete checkpoint."
        )
    for entry in names:
        found = tensors.shape(renamed[entry.name])
        if tuple(found) != entry.hf_shape():
            raise CheckpointError(
                f"{tensors.file(renamed[entry.name])}: tensor {renamed[entry.name]!r} has shape {tuple(found)}; "
                f"expected {entry.hf_shape()} from config.json."
            )
    unexpected = [n for n in renamed if n not in wanted and not _ignorable(n, family)]
    if unexpected:
        raise CheckpointError(
            f"{weights_file}: {len(unexpected)} tensor(s) that {architecture} does not have, e.g. "
            f"{sorted(unexpected)[:3]}; expected a {architecture} checkpoint."
        )
    values = {entry.name: tensors.get(renamed[entry.name]) for entry in names}
    _check_tied(tensors, renamed, family, prefix if has_prefix else "", values)
    assign_huggingface_tensors(names, values)
    model.tokenizer = tokenizer
    return model


def _names_for(model, backbone, family, prefix, renamed):
    from zoo.convert import _bert_names, _gpt2_names

    if family == "gpt":
        return _gpt2_names(backbone, prefix=prefix)
    pooler = f"{prefix}pooler.dense.weight" in renamed
    return _bert_names(backbone, prefix=prefix, pooler=pooler)


def _head_names(model, task):
    from zoo.convert import huggingface_names

    _, names = huggingface_names(model)
    if task == "masked_lm":
        return [n for n in names if n.name.startswith("cls.")]
    if task == "classifier":
        return [n for n in names if n.name.startswith("classifier.")]
    return []


def _ignorable(name, family):
    """Buffers and tied copies transformers writes, and heads the task does not use."""
    if family == "gpt":
        return name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight"
    # A head is in the table when it is mapped; one that is not (another task, another class count) is unused.
    return name.endswith("embeddings.position_ids") or name.startswith(("cls.", "classifier."))


def _check_tied(tensors, renamed, family, prefix, values):
    """An LM head stored beside the embedding must be the same matrix: the zoo ties them."""
    pairs = {"gpt": ("lm_head.weight", f"{prefix}wte.weight"),
             "bert": ("cls.predictions.decoder.weight", f"{prefix}embeddings.word_embeddings.weight")}[family]
    head, embedding = pairs
    if head in renamed and embedding in values:
        if tensors.shape(renamed[head]) != tensors.shape(renamed[embedding]) or not np.array_equal(
            tensors.get(renamed[head]), values[embedding]
        ):
            raise CheckpointError(
                f"{tensors.file(renamed[head])}: {head!r} differs from {embedding!r}; the zoo ties the output "
                "layer to the token embedding, as GPT-2 and BERT do."
            )


# --- Export -----------------------------------------------------------------------------


def export(model, path, format="huggingface", overwrite=False):
    """Write a zoo GPT-2 / BERT model as a checkpoint folder others load.

    Args:
        model: a zoo `GPTCausalLM` / `GPTBackbone` (GPT-2) or a
            `BertMaskedLM`, `BertClassifier`, `BertSentenceEncoder` or
            `BertBackbone`, typically from `from_pretrained` or fine-tuned
            here. Its `tokenizer` (keras-hub's GPT2Tokenizer /
            BytePairTokenizer, BertTokenizer / WordPieceTokenizer) is
            written beside the weights. A model without one (or with
            another kind) gets weights and config only, and a warning says
            the tokenizer files were not written: other tools can load
            the weights, `from_pretrained` needs the tokenizer files added.
        path: the folder to write (created; an existing non-empty folder
            only with `overwrite=True`).
        format: "huggingface": `config.json` with transformers' keys,
            `model.safetensors` with transformers' tensor names and shapes,
            and the tokenizer files (`vocab.json` + `merges.txt`, or
            `vocab.txt`) - `transformers`' `from_pretrained(path)` loads it.
            "keras-hub": keras-hub's `save_to_preset` of the matching
            keras-hub model (`GPT2CausalLM`, `BertMaskedLM`,
            `BertTextClassifier`, or the backbone) with the same weights -
            `keras_hub.models.GPT2CausalLM.from_preset(path)` loads it.
        overwrite: replace the files of an existing folder.

    A quantized model (`model.quantize`) is refused: both formats hold
    float weights, and a dequantized copy would pass the quantization
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
    from zoo.models import BertSentenceEncoder, quantization_mode

    if format not in FORMATS:
        raise ValueError(f"format={format!r}; expected one of {', '.join(map(repr, FORMATS))}.")
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
    target = model.backbone if isinstance(model, BertSentenceEncoder) else model
    if format == "huggingface":
        _export_huggingface(target, folder, tokenizer)
    else:
        _export_keras_hub(target, folder, tokenizer)
    return folder


def _family(model):
    from zoo.models import BertBackbone, GPTBackbone

    backbone = getattr(model, "backbone", model)
    if isinstance(backbone, GPTBackbone):
        return "gpt", backbone
    if isinstance(backbone, BertBackbone):
        return "bert", backbone
    raise ValueError(
        f"export writes zoo GPT and BERT models (GPT-2 and BERT checkpoints); got a {type(model).__name__}."
    )


def _tokenizer_problem(family, tokenizer):
    """Why `tokenizer` cannot be written as this family's tokenizer files; None when it can."""
    import keras_hub

    if tokenizer is None:
        return "the model has no tokenizer (set model.tokenizer)"
    if family == "gpt":
        if not isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
            return f"model.tokenizer is a {type(tokenizer).__name__}; GPT-2 needs a byte-pair tokenizer"
        if GPT2_END_TOKEN not in tokenizer.vocabulary:
            return f"the byte-pair vocabulary has no {GPT2_END_TOKEN!r}, which GPT-2 tokenizers need"
        return None
    if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; BERT needs a WordPiece tokenizer"
    missing = [t for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]") if t not in tokenizer.get_vocabulary()]
    if missing:
        return f"the WordPiece vocabulary lacks {missing}, which BERT tokenizers need"
    return None


def _write(path, text):
    from zoo.files import write_text

    write_text(path, text)


def _export_huggingface(model, folder, tokenizer):
    from safetensors.numpy import save_file

    from zoo.convert import huggingface_names, huggingface_tensors
    from zoo.files import atomic_path

    family, backbone = _family(model)
    config = backbone._zoo_config
    if family == "gpt" and (not config.get("use_bias", True) or not config.get("norm_first", True)):
        raise ValueError("A GPT-2 checkpoint has biases and pre-LN blocks; this GPT has use_bias=False or norm_first=False.")
    activation = {"gelu_approximate": "gelu_new", "gelu": "gelu", "relu": "relu"}.get(config["activation"])
    if activation is None:
        raise ValueError(f"activation {config['activation']!r} has no transformers name; expected a GELU or ReLU.")
    architecture, _ = huggingface_names(model)
    tensors = huggingface_tensors(model)
    if family == "gpt":
        hf_config = {
            "architectures": [architecture],
            "model_type": "gpt2",
            "vocab_size": config["vocabulary_size"],
            "n_positions": config["max_sequence_length"],
            "n_ctx": config["max_sequence_length"],
            "n_embd": config["hidden_dim"],
            "n_layer": config["num_layers"],
            "n_head": config["num_heads"],
            "n_inner": config["intermediate_dim"],
            "activation_function": activation,
            "resid_pdrop": config["dropout"],
            "embd_pdrop": config["dropout"],
            "attn_pdrop": config["dropout"],
            "layer_norm_epsilon": config["layer_norm_epsilon"],
            "initializer_range": config.get("initializer_range", 0.02),
            "scale_attn_weights": True,
            "tie_word_embeddings": True,
            "use_cache": True,
        }
    else:
        hf_config = {
            "architectures": [architecture],
            "model_type": "bert",
            "vocab_size": config["vocabulary_size"],
            "hidden_size": config["hidden_dim"],
            "num_hidden_layers": config["num_layers"],
            "num_attention_heads": config["num_heads"],
            "intermediate_size": config["intermediate_dim"],
            "hidden_act": activation,
            "hidden_dropout_prob": config["dropout"],
            "attention_probs_dropout_prob": config["dropout"],
            "max_position_embeddings": config["max_sequence_length"],
            "type_vocab_size": config["num_segments"],
            "initializer_range": config.get("initializer_range", 0.02),
            "layer_norm_eps": config["layer_norm_epsilon"],
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            "tie_word_embeddings": True,
        }
        if architecture == "BertForSequenceClassification":
            classes = model._zoo_config["num_classes"]
            hf_config["id2label"] = {str(i): f"LABEL_{i}" for i in range(classes)}
            hf_config["label2id"] = {f"LABEL_{i}": i for i in range(classes)}
    problem = _tokenizer_problem(family, tokenizer)
    if problem is None:
        _check_vocabulary(_tokenizer_size(tokenizer), config["vocabulary_size"], "model.tokenizer", "the model")
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "config.json", json.dumps(hf_config, indent=2) + "\n")
    with atomic_path(folder / "model.safetensors") as temporary:
        save_file(tensors, str(temporary), metadata={"format": "pt"})  # transformers reads "pt" checkpoints
    if problem is not None:
        warnings.warn(f"{folder}: tokenizer files not written: {problem}.", stacklevel=3)
        return
    if family == "gpt":
        vocabulary = {token: int(i) for token, i in tokenizer.vocabulary.items()}
        _write(folder / "vocab.json", json.dumps(vocabulary, ensure_ascii=False))
        _write(folder / "merges.txt", "#version: 0.2\n" + "".join(f"{m}\n" for m in tokenizer.merges))
        settings = {
            "tokenizer_class": "GPT2Tokenizer",
            "model_max_length": config["max_sequence_length"],
            "bos_token": GPT2_END_TOKEN,
            "eos_token": GPT2_END_TOKEN,
            "unk_token": GPT2_END_TOKEN,
            "add_prefix_space": bool(getattr(tokenizer, "add_prefix_space", False)),
        }
    else:
        _write(folder / "vocab.txt", "".join(f"{t}\n" for t in tokenizer.get_vocabulary()))
        settings = {
            "tokenizer_class": "BertTokenizer",
            "model_max_length": config["max_sequence_length"],
            "do_lower_case": bool(tokenizer.lowercase),
            "strip_accents": bool(tokenizer.strip_accents),
            "tokenize_chinese_chars": bool(getattr(tokenizer, "split_on_cjk", True)),
            "unk_token": "[UNK]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "cls_token": "[CLS]",
            "mask_token": "[MASK]",
        }
    _write(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")


def _tokenizer_size(tokenizer):
    if hasattr(tokenizer, "vocabulary") and isinstance(tokenizer.vocabulary, dict):
        return max(tokenizer.vocabulary.values()) + 1
    return tokenizer.vocabulary_size()


def _hub_tokenizer(family, tokenizer):
    """The zoo model's tokenizer as keras-hub's GPT2Tokenizer / BertTokenizer (same vocabulary)."""
    import keras_hub

    if family == "gpt":
        if isinstance(tokenizer, keras_hub.tokenizers.GPT2Tokenizer):
            return tokenizer
        return keras_hub.tokenizers.GPT2Tokenizer(vocabulary=dict(tokenizer.vocabulary), merges=list(tokenizer.merges))
    if isinstance(tokenizer, keras_hub.tokenizers.BertTokenizer):
        return tokenizer
    return keras_hub.tokenizers.BertTokenizer(
        vocabulary=tokenizer.get_vocabulary(), lowercase=tokenizer.lowercase, strip_accents=tokenizer.strip_accents
    )


def _export_keras_hub(model, folder, tokenizer):
    import keras_hub

    from zoo.convert import _copy_dense, _copy_norm, keras_hub_incompatibilities, to_keras_hub
    from zoo.models import BertClassifier, BertMaskedLM, GPTCausalLM

    family, backbone = _family(model)
    refusals, approximations = keras_hub_incompatibilities(backbone)
    if refusals:
        raise ValueError(f"Cannot write this model as a keras-hub preset: {'; '.join(refusals)}.")
    for note in approximations:
        warnings.warn(f"{folder}: {note}.", stacklevel=3)
    problem = _tokenizer_problem(family, tokenizer)
    hub_tokenizer = None
    if problem is None:
        _check_vocabulary(_tokenizer_size(tokenizer), backbone.vocabulary_size, "model.tokenizer", "the model")
        hub_tokenizer = _hub_tokenizer(family, tokenizer)
    hub_backbone = to_keras_hub(backbone)
    models = keras_hub.models
    if isinstance(model, GPTCausalLM):
        preprocessor = hub_tokenizer and models.GPT2CausalLMPreprocessor(
            hub_tokenizer, sequence_length=backbone.max_sequence_length
        )
        hub = models.GPT2CausalLM(hub_backbone, preprocessor=preprocessor)
    elif isinstance(model, BertClassifier):
        preprocessor = hub_tokenizer and models.BertTextClassifierPreprocessor(
            hub_tokenizer, sequence_length=backbone.max_sequence_length
        )
        hub = models.BertTextClassifier(
            hub_backbone, num_classes=model.num_classes, preprocessor=preprocessor,
            dropout=model._zoo_config.get("dropout", 0.1),
        )
        _copy_dense(hub.output_dense, model.classifier)
    elif isinstance(model, BertMaskedLM):
        preprocessor = hub_tokenizer and models.BertMaskedLMPreprocessor(
            hub_tokenizer, sequence_length=backbone.max_sequence_length
        )
        hub = models.BertMaskedLM(hub_backbone, preprocessor=preprocessor)
        head = hub.masked_lm_head
        _copy_dense(head._intermediate_dense, model.transform.dense)
        _copy_norm(head._intermediate_layer_norm, model.transform.norm)
        head._bias.assign(np.asarray(model.output_bias.bias.numpy()))
        warnings.warn(
            f"{folder}: keras-hub's masked-LM head computes an exact GELU and a LayerNorm epsilon of 1e-5 on the "
            "same weights; its logits agree with the zoo's to about 1e-3.",
            stacklevel=3,
        )
    else:
        hub = None
    folder.mkdir(parents=True, exist_ok=True)
    if hub is not None:
        hub.save_to_preset(str(folder))
    else:
        hub_backbone.save_to_preset(str(folder))
        if hub_tokenizer is not None:
            hub_tokenizer.save_to_preset(str(folder))
    if problem is not None:
        warnings.warn(f"{folder}: tokenizer files not written: {problem}.", stacklevel=3)
