"""Marian checkpoints (Helsinki-NLP/opus-mt-*): `EncoderDecoder` <->
transformers' `MarianMTModel`.

Marian is the paper's base model with four of the encoder-decoder's flags
set: `position="sinusoidal_halves"` (`MarianSinusoidalPositionalEmbedding`:
the sines in the first half of the channels, no position offset),
`activation="silu"` (`swish`), `final_logits_bias=True`, and
`layer_norm_epsilon=1e-5` (PyTorch's `nn.LayerNorm`); `scale_embedding` is
`scale_embeddings`, and `share_encoder_decoder_embeddings` is
`share_embeddings`. The output layer is tied to the target embedding.

Config in and out, the tensor-name table, the tokenizers (`source.spm`,
`target.spm` and `vocab.json` as two `zoo.data.MarianTokenizer`s: the
model's `source_tokenizer` and `tokenizer`) and the generation settings
of `generation_config.json`. transformers' `q_proj`, `k_proj` and `v_proj`
(out, in) weights are the transposed column blocks [q | k | v] of the
zoo's fused (d, 3d) self-attention kernel; in the cross-attention, `k_proj`
and `v_proj` are the blocks [k | v] of the (d, 2d) key/value kernel. The
sinusoidal tables (`embed_positions`) that older checkpoints store are
computed, not read.

What the zoo's encoder-decoder does not compute is refused with one line:
pre-LN blocks (`normalize_before`), a LayerNorm on the embeddings
(`normalize_embedding`, BART's `layernorm_embedding`), final stack norms
(`add_final_layer_norm`), learned positions, an encoder and a decoder of
different sizes, an untied output layer.
"""

import functools
import json

from zoo.models.tensor_names import (
    CheckpointError,
    TensorName,
    check_vocabulary,
    fused_linear,
    linear,
    read_architecture,
    read_json,
    refuse_config_value,
    require_files,
    write_text,
)

NAME = "Marian"
MODEL_TYPES = ("marian",)
TASKS = ("seq2seq",)
DEFAULT_TASK = "seq2seq"
HEADS_WITH_WEIGHTS = ()  # the output layer is the tied target embedding
ARCHITECTURES = {"MarianMTModel": "seq2seq", "MarianModel": "seq2seq"}
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
KERAS_HUB_BACKBONES = ()
KERAS_HUB_TASKS = {}
KERAS_HUB_TOKENIZERS = {}
# generation_config.json's settings that `zoo.translate` follows.
GENERATION_KEYS = ("num_beams", "max_length", "length_penalty", "bad_words_ids", "decoder_start_token_id",
                   "forced_eos_token_id", "eos_token_id", "pad_token_id")


def build_backbone(zoo_config, dtype=None):
    from zoo.models.transformer.model import EncoderDecoder

    return EncoderDecoder(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    return backbone  # the encoder-decoder's output is already the logits


# --- Hugging Face: config ------------------------------------------------------------------


def from_huggingface_config(config, config_file):
    """transformers' MarianConfig -> (architecture, head, zoo config)."""
    architecture, get = read_architecture(config, config_file, ARCHITECTURES)
    refuse = functools.partial(refuse_config_value, config, config_file)
    for key, expected, why in (
        ("normalize_before", False, "the zoo's Marian is post-LN, as the paper"),
        ("normalize_embedding", False, "the zoo's Marian has no LayerNorm on the embeddings"),
        ("add_final_layer_norm", False, "the zoo's post-LN stacks have no final LayerNorm"),
        ("static_position_embeddings", True, "the zoo's Marian has sinusoidal positions"),
        ("tie_word_embeddings", True, "the zoo ties the output layer to the target embedding"),
        ("add_bias_logits", False, "the logits' bias is `final_logits_bias`"),
    ):
        if key in config and bool(config[key]) != expected:
            refuse(key, why)
    for encoder_key, decoder_key in (("encoder_layers", "decoder_layers"), ("encoder_attention_heads",
                                     "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if get(encoder_key) != get(decoder_key):
            raise CheckpointError(
                f"{config_file}: {encoder_key}={get(encoder_key)} and {decoder_key}={get(decoder_key)} differ; "
                "expected an encoder and a decoder of one size."
            )
    activation = get("activation_function", "swish")
    if activation not in ACTIVATIONS:
        refuse("activation_function", f"expected one of {', '.join(ACTIVATIONS)}")
    shared = bool(get("share_encoder_decoder_embeddings", True))
    vocabulary_size = get("vocab_size")
    zoo_config = dict(
        vocabulary_size=vocabulary_size if shared else get("decoder_vocab_size", vocabulary_size),
        source_vocabulary_size=vocabulary_size,
        num_layers=get("encoder_layers"),
        num_heads=get("encoder_attention_heads"),
        hidden_dim=get("d_model"),
        intermediate_dim=get("encoder_ffn_dim"),
        max_sequence_length=get("max_position_embeddings"),
        dropout=float(get("dropout", 0.1)),
        position="sinusoidal_halves",
        share_embeddings=shared,
        tie_output=True,
        norm_first=False,
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=1e-5,  # nn.LayerNorm's default, which MarianEncoderLayer uses
        scale_embeddings=bool(get("scale_embedding", False)),
        final_logits_bias=True,
    )
    return architecture, ARCHITECTURES[architecture], zoo_config


def check_huggingface_export(backbone):
    config = backbone.get_config()
    problems = [
        (config["position"] != "sinusoidal_halves", f"position={config['position']!r}; Marian's are 'sinusoidal_halves'"),
        (config["norm_first"], "norm_first=True; Marian is post-LN"),
        (not config["tie_output"], "tie_output=False; Marian ties its output layer to the target embedding"),
        (not config["final_logits_bias"], "final_logits_bias=False; Marian has one"),
        (config["activation"] not in ("silu", "relu", "gelu"), f"activation {config['activation']!r} has no Marian name"),
    ]
    reasons = [why for bad, why in problems if bad]
    if reasons:
        raise ValueError(f"This encoder-decoder is not a Marian model: {'; '.join(reasons)}.")


def to_huggingface_config(model):
    config = model.get_config()
    tokenizer = getattr(model, "tokenizer", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = config["vocabulary_size"] - 1 if pad is None else pad
    end = getattr(tokenizer, "end_token_id", None) or 0
    start = getattr(tokenizer, "start_token_id", None)
    sizes = {}
    for side in ("encoder", "decoder"):
        sizes.update({f"{side}_layers": config["num_layers"], f"{side}_attention_heads": config["num_heads"],
                      f"{side}_ffn_dim": config["intermediate_dim"], f"{side}_layerdrop": 0.0})
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": config["source_vocabulary_size"],
        "decoder_vocab_size": config["vocabulary_size"],
        "share_encoder_decoder_embeddings": config["share_embeddings"],
        "d_model": config["hidden_dim"],
        **sizes,
        "max_position_embeddings": config["max_sequence_length"],
        "activation_function": {"silu": "swish"}.get(config["activation"], config["activation"]),
        "dropout": config["dropout"],
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "scale_embedding": config["scale_embeddings"],
        "normalize_before": False,
        "normalize_embedding": False,
        "add_final_layer_norm": False,
        "static_position_embeddings": True,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "init_std": 0.02,
        "pad_token_id": pad,
        "eos_token_id": end,
        "forced_eos_token_id": end,
        "decoder_start_token_id": pad if start is None else start,
        "use_cache": True,
        "torch_dtype": "float32",
    }


# --- Hugging Face: tensor names ------------------------------------------------------------


def _attention(prefix, attention, width, cross):
    if cross:
        names = linear(prefix + "q_proj", attention.query_dense)
        names += fused_linear([prefix + "k_proj", prefix + "v_proj"], attention.key_value_dense, [width] * 2)
    else:
        names = fused_linear([prefix + n for n in ("q_proj", "k_proj", "v_proj")], attention.query_key_value_dense,
                             [width] * 3)
    return names + linear(prefix + "out_proj", attention.output_dense)


def _layer_norm(name, add_norm):
    return [TensorName(name + ".weight", add_norm.layer_norm.gamma), TensorName(name + ".bias", add_norm.layer_norm.beta)]


def _feed_forward(prefix, block):
    ff = block.feed_forward
    return (linear(prefix + "fc1", ff.intermediate_dense) + linear(prefix + "fc2", ff.output_dense)
            + _layer_norm(prefix + "final_layer_norm", block.feed_forward_add_norm))


def huggingface_names(model):
    """(architecture, table): `MarianMTModel`, its tensors in checkpoint order."""
    d = model.hidden_dim
    if model.share_embeddings:
        names = [TensorName("model.shared.weight", model.decoder_embedding.token_embedding.embeddings)]
    else:
        names = [
            TensorName("model.encoder.embed_tokens.weight", model.encoder_embedding.token_embedding.embeddings),
            TensorName("model.decoder.embed_tokens.weight", model.decoder_embedding.token_embedding.embeddings),
        ]
    for i, block in enumerate(model.encoder_blocks):
        p = f"model.encoder.layers.{i}."
        names += _attention(p + "self_attn.", block.self_attention, d, cross=False)
        names += _layer_norm(p + "self_attn_layer_norm", block.self_attention_add_norm)
        names += _feed_forward(p, block)
    for i, block in enumerate(model.decoder_blocks):
        p = f"model.decoder.layers.{i}."
        names += _attention(p + "self_attn.", block.self_attention, d, cross=False)
        names += _layer_norm(p + "self_attn_layer_norm", block.self_attention_add_norm)
        names += _attention(p + "encoder_attn.", block.cross_attention_layer, d, cross=True)
        names += _layer_norm(p + "encoder_attn_layer_norm", block.cross_attention_add_norm)
        names += _feed_forward(p, block)
    bias = model.output_bias.bias
    names.append(TensorName("final_logits_bias", bias, shape=(1, bias.shape[0])))
    return "MarianMTModel", names


def checkpoint_name(name):
    return name


def import_names(model, checkpoint_names, with_head):
    return huggingface_names(model)[1]


def ignorable(name):
    """The sinusoidal tables older checkpoints store, and the tied copies of an embedding (checked equal by `tied_copies`)."""
    return name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
                    "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def tied_copies(model, checkpoint_names):
    """(copy, original) pairs that must be equal."""
    if model.share_embeddings:
        shared = "model.shared.weight"
        return [(copy, shared) for copy in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                                            "lm_head.weight")]
    return [("lm_head.weight", "model.decoder.embed_tokens.weight")]


# --- Hugging Face: tokenizers and generation settings -------------------------------------


def _generation_settings(folder):
    """generation_config.json's settings (config.json's where it has none), as transformers reads them."""
    settings = {}
    for name in ("config.json", "generation_config.json"):
        if (folder / name).is_file():
            values = read_json(folder / name)
            settings.update({key: values[key] for key in GENERATION_KEYS if values.get(key) is not None})
    return settings


def _read_side(folder, side, vocabulary_size, weights_file):
    from zoo.data import DataError, MarianTokenizer

    settings = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    if settings.get("separate_vocabs"):
        raise CheckpointError(
            f"{folder / 'tokenizer_config.json'}: separate_vocabs=True is not supported; expected one vocab.json."
        )
    generation = _generation_settings(folder)
    try:
        tokenizer = MarianTokenizer.from_folder(folder, side, generation.get("decoder_start_token_id"), generation)
    except (DataError, ValueError) as error:
        raise CheckpointError(str(error) if str(folder) in str(error) else f"{folder}: {error}") from None
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, folder / "vocab.json", weights_file)
    return tokenizer


def read_huggingface_tokenizer(folder, vocabulary_size, weights_file):
    """The target side (`target.spm`, `vocab.json`): the model's `tokenizer`, the decoder's."""
    require_files(folder, "source.spm", "target.spm", "vocab.json",
                  why="Marian's tokenizer (source.spm, target.spm and vocab.json)")
    return _read_side(folder, "target", vocabulary_size, weights_file)


def read_huggingface_source_tokenizer(folder, vocabulary_size, weights_file):
    """The source side (`source.spm`, `vocab.json`): the model's `source_tokenizer`, the encoder's."""
    return _read_side(folder, "source", vocabulary_size, weights_file)


def tokenizer_problem(tokenizer, format, backbone):
    from zoo.data import MarianTokenizer

    if format != "huggingface":
        return "keras-hub has no Marian tokenizer"
    if not isinstance(tokenizer, MarianTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; Marian needs a zoo.data.MarianTokenizer"
    return None


def write_huggingface_tokenizer(tokenizer, folder, model):
    """source.spm, target.spm, vocab.json, tokenizer_config.json and generation_config.json."""
    from zoo.files import atomic_path

    source = getattr(model, "source_tokenizer", None) or tokenizer
    for name, side in (("source.spm", source), ("target.spm", tokenizer)):
        with atomic_path(folder / name) as temporary:
            temporary.write_bytes(side.proto)
    write_text(folder / "vocab.json", json.dumps(tokenizer.vocabulary, ensure_ascii=False, indent=2))
    settings = {"tokenizer_class": "MarianTokenizer", "model_max_length": model.max_sequence_length,
                "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>", "separate_vocabs": False}
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")
    generation = dict(tokenizer.generation)
    pad, end = tokenizer.pad_token_id, tokenizer.end_token_id
    generation.update({"bad_words_ids": [[pad]], "bos_token_id": end, "decoder_start_token_id": tokenizer.start_token_id,
                       "eos_token_id": end, "forced_eos_token_id": end, "pad_token_id": pad})
    generation.setdefault("max_length", model.max_sequence_length)
    generation.setdefault("num_beams", 4)
    write_text(folder / "generation_config.json", json.dumps(generation, indent=2) + "\n")


# --- keras-hub -----------------------------------------------------------------------------


def keras_hub_incompatibilities(backbone):
    return ["keras-hub has no Marian model"], []
