"""BERT checkpoints: `BertBackbone` and its tasks <-> transformers'
`BertModel`, `BertForMaskedLM`, `BertForPreTraining`,
`BertForSequenceClassification` and keras-hub's `BertBackbone`,
`BertMaskedLM`, `BertTextClassifier`.

Config in and out, the tensor-name table, the tokenizer (`vocab.txt`,
read by keras-hub's `BertTokenizer` as transformers sets it up) and the
keras-hub weight copy, heads included. transformers' `nn.Linear` weights
are (out, in), the transpose of a Keras `Dense` kernel; its separate
query, key and value matrices are column blocks of the zoo's fused
(d, 3d) kernel.

keras-hub lowercases by Unicode case folding, so an uncased BERT reads
"ß" as "ss" and a ligature "ﬁ" as "fi", where transformers keeps them.
"""

import json
import warnings

import numpy as np

from zoo.models import keras_hub_layers
from zoo.models.tensor_names import (
    CheckpointError,
    TensorName,
    check_vocabulary,
    fused_linear,
    linear,
    read_architecture,
    read_json,
    require_files,
    to_numpy,
    write_text,
)

NAME = "BERT"
MODEL_TYPES = ("bert",)
TASKS = ("masked_lm", "classifier", "sentence_encoder")
DEFAULT_TASK = "sentence_encoder"
HEADS_WITH_WEIGHTS = ("masked_lm", "classifier")
ARCHITECTURES = {
    "BertModel": None,
    "BertForMaskedLM": "masked_lm",
    "BertForPreTraining": "masked_lm",  # the masked-LM head; the next-sentence head is not used
    "BertForSequenceClassification": "classifier",
}
ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu", "relu": "relu"}
KERAS_HUB_BACKBONES = ("keras_hub>BertBackbone",)
KERAS_HUB_TASKS = {"keras_hub>BertMaskedLM": "masked_lm", "keras_hub>BertTextClassifier": "classifier"}
KERAS_HUB_TOKENIZERS = {"keras_hub>BertTokenizer": ("vocabulary.txt",)}
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")


def build_backbone(zoo_config, dtype=None):
    from zoo.models.bert.model import BertBackbone

    return BertBackbone(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    from zoo.models.bert.model import BertClassifier, BertMaskedLM, BertSentenceEncoder

    if task == "masked_lm":
        return BertMaskedLM(backbone)
    if task == "classifier":
        return BertClassifier(backbone, num_classes=num_classes)
    if task == "sentence_encoder":
        return BertSentenceEncoder(backbone)
    return backbone


# --- Hugging Face: config ------------------------------------------------------------------


def from_huggingface_config(config, config_file):
    """transformers' BERT config -> (architecture, head, zoo config)."""
    architecture, get = read_architecture(config, config_file, ARCHITECTURES)

    if get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{config_file}: position_embedding_type {config['position_embedding_type']!r} is not supported; "
            "expected 'absolute'."
        )
    activation = get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{config_file}: activation {activation!r} is not supported; expected one of {', '.join(ACTIVATIONS)}."
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
        activation=ACTIVATIONS[activation],
    )
    return architecture, ARCHITECTURES[architecture], zoo_config


def checkpoint_classes(config):
    """The class count of a `BertForSequenceClassification` config, None when it does not say."""
    return len(config.get("id2label") or {}) or config.get("num_labels")


def check_huggingface_export(backbone):
    if backbone.get_config()["activation"] not in ("gelu_approximate", "gelu", "relu"):
        raise ValueError(
            f"activation {backbone.get_config()['activation']!r} has no transformers name; expected a GELU or ReLU."
        )


def to_huggingface_config(model):
    from zoo.models.bert.model import BertClassifier

    config = getattr(model, "backbone", model).get_config()
    architecture, _ = huggingface_names(model)
    hf_config = {
        "architectures": [architecture],
        "model_type": "bert",
        "vocab_size": config["vocabulary_size"],
        "hidden_size": config["hidden_dim"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "intermediate_size": config["intermediate_dim"],
        "hidden_act": {"gelu_approximate": "gelu_new"}.get(config["activation"], config["activation"]),
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
    if isinstance(model, BertClassifier):
        classes = model.num_classes
        hf_config["id2label"] = {str(i): f"LABEL_{i}" for i in range(classes)}
        hf_config["label2id"] = {f"LABEL_{i}": i for i in range(classes)}
    return hf_config


# --- Hugging Face: tensor names ------------------------------------------------------------


def _layer_norm(name, norm):
    return [TensorName(name + ".weight", norm.gamma), TensorName(name + ".bias", norm.beta)]


def backbone_names(backbone, prefix="", pooler=True):
    p = prefix
    d = backbone.hidden_dim
    names = [
        TensorName(f"{p}embeddings.word_embeddings.weight", backbone.embedding.token_embedding.embeddings),
        TensorName(f"{p}embeddings.position_embeddings.weight", backbone.embedding.position_embedding.position_embeddings),
        TensorName(f"{p}embeddings.token_type_embeddings.weight", backbone.segment_embedding.embeddings),
        *_layer_norm(f"{p}embeddings.LayerNorm", backbone.embeddings_norm),
    ]
    for i, block in enumerate(backbone.blocks):
        layer = f"{p}encoder.layer.{i}."
        parts = [f"{layer}attention.self.{part}" for part in ("query", "key", "value")]
        names += [
            *fused_linear(parts, block.self_attention.query_key_value_dense, (d, d, d)),
            *linear(f"{layer}attention.output.dense", block.self_attention.output_dense),
            *_layer_norm(f"{layer}attention.output.LayerNorm", block.self_attention_add_norm.layer_norm),
            *linear(f"{layer}intermediate.dense", block.feed_forward.intermediate_dense),
            *linear(f"{layer}output.dense", block.feed_forward.output_dense),
            *_layer_norm(f"{layer}output.LayerNorm", block.feed_forward_add_norm.layer_norm),
        ]
    if pooler:
        names += linear(f"{p}pooler.dense", backbone.pooler)
    return names


def huggingface_names(model):
    """(architecture, table) of the export: `BertModel` for a backbone or
    sentence encoder, `BertForMaskedLM` (no pooler), `BertForSequenceClassification`."""
    from zoo.models.bert.model import BertClassifier, BertMaskedLM, BertSentenceEncoder

    if isinstance(model, BertMaskedLM):
        head = [
            *linear("cls.predictions.transform.dense", model.transform.dense),
            *_layer_norm("cls.predictions.transform.LayerNorm", model.transform.norm),
            TensorName("cls.predictions.bias", model.output_bias.bias),
        ]
        return "BertForMaskedLM", backbone_names(model.backbone, "bert.", pooler=False) + head
    if isinstance(model, BertClassifier):
        return "BertForSequenceClassification", backbone_names(model.backbone, "bert.") + linear(
            "classifier", model.classifier
        )
    if isinstance(model, BertSentenceEncoder):
        model = model.backbone
    return "BertModel", backbone_names(model)


def _prefix(checkpoint_names):
    return "bert." if any(n.startswith("bert.") for n in checkpoint_names) else ""


def checkpoint_name(name):
    """Old checkpoints call the LayerNorm parameters gamma and beta."""
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def import_names(model, checkpoint_names, with_head):
    """The table in the checkpoint's layout (with or without `bert.` and a pooler), and the head's when mapped."""
    prefix = _prefix(checkpoint_names)
    names = backbone_names(
        getattr(model, "backbone", model), prefix=prefix, pooler=f"{prefix}pooler.dense.weight" in checkpoint_names
    )
    if with_head:
        _, export = huggingface_names(model)
        names += [n for n in export if n.name.startswith(("cls.", "classifier."))]
    return names


def head_problem(model, task, checkpoint_shape):
    """Why the checkpoint's head cannot go into `model`'s (another class count); None when it can."""
    shape = checkpoint_shape("classifier.weight") if task == "classifier" else None
    if shape is not None and shape[0] != model.num_classes:
        return f"the checkpoint's classifier has {shape[0]} classes, not {model.num_classes}"
    return None


def ignorable(name):
    """The position-id buffer, and heads the table does not map (another task, another class count)."""
    return name.endswith("embeddings.position_ids") or name.startswith(("cls.", "classifier."))


def tied_copies(model, checkpoint_names):
    return [("cls.predictions.decoder.weight", f"{_prefix(checkpoint_names)}embeddings.word_embeddings.weight")]


# --- Hugging Face: tokenizer ---------------------------------------------------------------


def read_huggingface_tokenizer(folder, vocabulary_size, weights_file):
    import keras_hub

    require_files(folder, "vocab.txt", why="BERT's WordPiece vocabulary (vocab.txt)")
    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    while tokens and tokens[-1] == "":
        tokens.pop()
    check_vocabulary(len(tokens), vocabulary_size, folder / "vocab.txt", weights_file)
    settings = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    lowercase = bool(settings.get("do_lower_case", True))  # transformers' BertTokenizer default
    strip_accents = settings.get("strip_accents")
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)  # transformers' rule
    try:
        return keras_hub.tokenizers.BertTokenizer(vocabulary=tokens, lowercase=lowercase, strip_accents=strip_accents)
    except ValueError as error:
        raise CheckpointError(f"{folder / 'vocab.txt'}: {error}") from None


def tokenizer_problem(tokenizer, format, backbone):
    """Why `tokenizer` cannot be written (in either `format`) as BERT's tokenizer files; None when it can."""
    import keras_hub

    if tokenizer is None:
        return "the model has no tokenizer (set model.tokenizer)"
    if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; BERT needs a WordPiece tokenizer"
    missing = [t for t in SPECIAL_TOKENS if t not in tokenizer.get_vocabulary()]
    if missing:
        return f"the WordPiece vocabulary lacks {missing}, which BERT tokenizers need"
    return None


def write_huggingface_tokenizer(tokenizer, folder, model):
    write_text(folder / "vocab.txt", "".join(f"{t}\n" for t in tokenizer.get_vocabulary()))
    settings = {
        "tokenizer_class": "BertTokenizer",
        "model_max_length": getattr(model, "backbone", model).max_sequence_length,
        "do_lower_case": bool(tokenizer.lowercase),
        "strip_accents": bool(tokenizer.strip_accents),
        "tokenize_chinese_chars": bool(getattr(tokenizer, "split_on_cjk", True)),
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")


# --- keras-hub -----------------------------------------------------------------------------


MASKED_LM_HEAD_NOTE = (
    "keras-hub's masked-LM head computes an exact GELU and a LayerNorm epsilon of 1e-5; the zoo's head "
    "uses the backbone's (tanh-approximate GELU, 1e-12): the logits agree to about 1e-3, not exactly"
)


def from_keras_hub(backbone, dtype=None, **overrides):
    """keras-hub's `BertBackbone` -> the zoo `BertBackbone` with the same weights."""
    from zoo.models.bert.model import BertBackbone

    model = BertBackbone(
        **{
            **keras_hub_layers.block_sizes(backbone, dtype),
            "activation": "gelu_approximate",  # what keras-hub's BERT computes
            "num_segments": backbone.num_segments,
            "layer_norm_epsilon": 1e-12,
            **overrides,
        }
    )
    keras_hub_layers.copy_embeddings(model, backbone)
    model.segment_embedding.embeddings.assign(to_numpy(backbone.segment_embedding.embeddings))
    keras_hub_layers.copy_layer_norm(model.embeddings_norm, backbone.embeddings_layer_norm)
    for target, source in zip(model.blocks, backbone.transformer_layers):
        keras_hub_layers.copy_block(target, source, backbone.hidden_dim)
    keras_hub_layers.copy_dense(model.pooler, backbone.pooled_dense)
    return model


def keras_hub_incompatibilities(backbone):
    """(refusals, approximations): keras-hub's BERT has a fixed epsilon and the tanh-approximate GELU."""
    return keras_hub_layers.epsilon_and_gelu(backbone.get_config(), expected_epsilon=1e-12)


def to_keras_hub(backbone):
    """The zoo `BertBackbone` -> keras-hub's `BertBackbone` with the same weights."""
    import keras_hub

    config = backbone.get_config()
    hub = keras_hub.models.BertBackbone(num_segments=config["num_segments"], **keras_hub_layers.hub_sizes(backbone))
    keras_hub_layers.copy_embeddings_back(hub, backbone)
    hub.segment_embedding.embeddings.assign(to_numpy(backbone.segment_embedding.embeddings))
    keras_hub_layers.copy_layer_norm(hub.embeddings_layer_norm, backbone.embeddings_norm)
    for target, source in zip(hub.transformer_layers, backbone.blocks):
        keras_hub_layers.copy_block_back(target, source, config["hidden_dim"])
    keras_hub_layers.copy_dense(hub.pooled_dense, backbone.pooler)
    return hub


def copy_keras_hub_head(model, hub_task, task, where):
    """The keras-hub task's head weights into the zoo task's."""
    if task == "classifier":
        model.classifier.kernel.assign(to_numpy(hub_task.output_dense.kernel))
        model.classifier.bias.assign(to_numpy(hub_task.output_dense.bias))
    elif task == "masked_lm":
        head = hub_task.masked_lm_head
        keras_hub_layers.copy_dense(model.transform.dense, head._intermediate_dense)
        keras_hub_layers.copy_layer_norm(model.transform.norm, head._intermediate_layer_norm)
        model.output_bias.bias.assign(to_numpy(head._bias))
        warnings.warn(f"{MASKED_LM_HEAD_NOTE}.", stacklevel=4)


def keras_hub_tokenizer(tokenizer, backbone):
    """The model's WordPiece tokenizer as keras-hub's BertTokenizer (same vocabulary)."""
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.BertTokenizer):
        return tokenizer
    return keras_hub.tokenizers.BertTokenizer(
        vocabulary=tokenizer.get_vocabulary(), lowercase=tokenizer.lowercase, strip_accents=tokenizer.strip_accents
    )


def keras_hub_task(model, hub_backbone, hub_tokenizer, folder):
    """keras-hub's BertTextClassifier / BertMaskedLM with the zoo head's weights; None for a backbone."""
    import keras_hub

    from zoo.models.bert.model import BertClassifier, BertMaskedLM

    models = keras_hub.models
    length = hub_backbone.max_sequence_length
    if isinstance(model, BertClassifier):
        preprocessor = hub_tokenizer and models.BertTextClassifierPreprocessor(hub_tokenizer, sequence_length=length)
        hub = models.BertTextClassifier(
            hub_backbone, num_classes=model.num_classes, preprocessor=preprocessor,
            dropout=model.get_config().get("dropout", 0.1),
        )
        keras_hub_layers.copy_dense(hub.output_dense, model.classifier)
        return hub
    if isinstance(model, BertMaskedLM):
        preprocessor = hub_tokenizer and models.BertMaskedLMPreprocessor(hub_tokenizer, sequence_length=length)
        hub = models.BertMaskedLM(hub_backbone, preprocessor=preprocessor)
        head = hub.masked_lm_head
        keras_hub_layers.copy_dense(head._intermediate_dense, model.transform.dense)
        keras_hub_layers.copy_layer_norm(head._intermediate_layer_norm, model.transform.norm)
        head._bias.assign(np.asarray(to_numpy(model.output_bias.bias)))
        warnings.warn(
            f"{folder}: keras-hub's masked-LM head computes an exact GELU and a LayerNorm epsilon of 1e-5 on the "
            "same weights; its logits agree with the zoo's to about 1e-3.",
            stacklevel=4,
        )
        return hub
    return None
