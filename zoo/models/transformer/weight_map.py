"""Marian (Helsinki-NLP/opus-mt-*), BART (facebook/bart-*) and T5 (t5-*,
google/flan-t5-*) checkpoints; T5's own tables are in `t5_weights`.
keras-hub's BART and T5 presets are read by `keras_hub_bart` and
`keras_hub_t5`, one module each behind `from_keras_hub`.

Marian and BART:
`EncoderDecoder` <-> transformers' `MarianMTModel` and
`BartForConditionalGeneration`. The config's `model_type` picks the one
read; the model's flags pick the one written (`model_type`).

Marian is the paper's base model with four of the encoder-decoder's flags
set: `position="sinusoidal_halves"` (`MarianSinusoidalPositionalEmbedding`:
the sines in the first half of the channels, no position offset),
`activation="silu"` (`swish`), `final_logits_bias=True`, and
`layer_norm_epsilon=1e-5` (PyTorch's `nn.LayerNorm`); `scale_embedding` is
`scale_embeddings`, and `share_encoder_decoder_embeddings` is
`share_embeddings`. The output layer is tied to the target embedding.

BART (Lewis et al. 2020) is post-LN too, with learned positions
(`position="learned"`, `position_offset=2`: `BartLearnedPositionalEmbedding`'s
max_position_embeddings + 2 rows, position p at row p + 2), one position
table per stack under the one shared token table (`share_positions=False`),
a LayerNorm on the embeddings of each stack (`layernorm_embedding`), exact
GELU, embeddings unscaled unless `scale_embedding`, `final_logits_bias` and
the tied output layer.

Config in and out, the tensor-name tables, the tokenizers and the
generation settings of `generation_config.json`. Marian's `source.spm`,
`target.spm` and `vocab.json` are two `zoo.tokenizers.MarianTokenizer`s (the
model's `source_tokenizer` and `tokenizer`); BART's byte-level BPE
(`tokenizer.json`, or `vocab.json` and `merges.txt` as transformers'
`RobertaConverter` reads them) is one `zoo.tokenizers.HuggingFaceTokenizer` for
both sides. transformers' `q_proj`, `k_proj` and `v_proj` (out, in)
weights are the transposed column blocks [q | k | v] of the zoo's fused
(d, 3d) self-attention kernel; in the cross-attention, `k_proj` and
`v_proj` are the blocks [k | v] of the (d, 2d) key/value kernel. The
sinusoidal tables (`embed_positions`) that older Marian checkpoints store
are computed, not read.

What the zoo's encoder-decoder does not compute is refused with one line:
pre-LN blocks (`normalize_before`), final stack norms
(`add_final_layer_norm`), an encoder and a decoder of different sizes, an
untied output layer; for Marian a LayerNorm on the embeddings
(`normalize_embedding`) and learned positions; for BART the legacy keys of
one-class-for-all configs where they say other than BART
(`normalize_embedding` False, `static_position_embeddings`, an
`extra_pos_embeddings` other than 2).
"""

import functools
import json

from zoo.models.transformer import t5_weights
from zoo.models.transformer import keras_hub_bart, keras_hub_t5
from zoo.models.tensor_names import (
    CheckpointError,
    TensorName,
    check_vocabulary,
    fused_linear,
    generation_settings,
    linear,
    read_architecture,
    read_json,
    refuse_config_value,
    require_files,
    special_token,
    tokenizer_settings,
    write_text,
)

NAME = "Marian, BART or T5"
MODEL_TYPES = ("marian", "bart", "t5")
TASKS = ("seq2seq",)
DEFAULT_TASK = "seq2seq"
HEADS_WITH_WEIGHTS = ()  # the output layer is the tied target embedding
ARCHITECTURES = {
    "marian": {"MarianMTModel": "seq2seq", "MarianModel": "seq2seq"},
    "bart": {"BartForConditionalGeneration": "seq2seq", "BartModel": "seq2seq"},
    "t5": t5_weights.ARCHITECTURES,
}
NAMES = {"marian": "Marian", "bart": "BART", "t5": "T5"}
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# keras-hub's encoder-decoders, one module each: registered backbone name -> module.
KERAS_HUB_FAMILIES = {module.BACKBONE: module for module in (keras_hub_bart, keras_hub_t5)}
KERAS_HUB_BACKBONES = tuple(KERAS_HUB_FAMILIES)
KERAS_HUB_TASKS = {name: task for module in KERAS_HUB_FAMILIES.values() for name, task in module.TASKS.items()}
KERAS_HUB_TOKENIZERS = {name: files for module in KERAS_HUB_FAMILIES.values() for name, files in module.TOKENIZER.items()}
# generation_config.json's settings that the model's tokenizer carries: `zoo.translate` follows the
# first eight and BART's `forced_bos_token_id`; the last three go back out on export, not followed.
GENERATION_KEYS = ("num_beams", "max_length", "length_penalty", "bad_words_ids", "decoder_start_token_id",
                   "forced_eos_token_id", "eos_token_id", "pad_token_id", "forced_bos_token_id",
                   "min_length", "no_repeat_ngram_size", "early_stopping")
BART_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def build_backbone(zoo_config, dtype=None):
    from zoo.models.transformer.model import EncoderDecoder

    return EncoderDecoder(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    return backbone  # the encoder-decoder's output is already the logits


def model_type(backbone):
    """The transformers model_type whose model computes what this encoder-decoder's flags say
    (its positions tell; `check_huggingface_export` checks the rest)."""
    if backbone.get_config()["position"] == "relative":
        return "t5"
    return "bart" if backbone.get_config()["position"] == "learned" else "marian"


# --- Hugging Face: config ------------------------------------------------------------------


def from_huggingface_config(config, config_file):
    """transformers' MarianConfig or BartConfig -> (architecture, head, zoo config)."""
    kind = config["model_type"]
    if kind == "t5":
        return t5_weights.from_huggingface_config(config, config_file)
    architecture, get = read_architecture(config, config_file, ARCHITECTURES[kind])
    refuse = functools.partial(refuse_config_value, config, config_file)
    name = NAMES[kind]
    expected_values = [
        ("normalize_before", False, f"the zoo's {name} is post-LN, as the paper"),
        ("add_final_layer_norm", False, "the zoo's post-LN stacks have no final LayerNorm"),
        ("tie_word_embeddings", True, "the zoo ties the output layer to the target embedding"),
        ("add_bias_logits", False, "the logits' bias is `final_logits_bias`"),
    ]
    if kind == "marian":
        expected_values += [("normalize_embedding", False, "the zoo's Marian has no LayerNorm on the embeddings"),
                            ("static_position_embeddings", True, "the zoo's Marian has sinusoidal positions")]
    else:
        expected_values += [("normalize_embedding", True, "BART has a LayerNorm on the embeddings"),
                            ("static_position_embeddings", False, "BART's positions are learned")]
    for key, expected, why in expected_values:
        if key in config and bool(config[key]) != expected:
            refuse(key, why)
    if kind == "bart" and config.get("extra_pos_embeddings", 2) != 2:
        refuse("extra_pos_embeddings", "BART's position tables keep 2 rows before position 0")
    for encoder_key, decoder_key in (("encoder_layers", "decoder_layers"), ("encoder_attention_heads",
                                     "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if get(encoder_key) != get(decoder_key):
            raise CheckpointError(
                f"{config_file}: {encoder_key}={get(encoder_key)} and {decoder_key}={get(decoder_key)} differ; "
                "expected an encoder and a decoder of one size."
            )
    activation = get("activation_function", "swish" if kind == "marian" else "gelu")
    if activation not in ACTIVATIONS:
        refuse("activation_function", f"expected one of {', '.join(ACTIVATIONS)}")
    shared = kind == "bart" or bool(get("share_encoder_decoder_embeddings", True))
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
        share_embeddings=shared,
        tie_output=True,
        norm_first=False,
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=1e-5,  # nn.LayerNorm's default, which Marian's and BART's layers use
        scale_embeddings=bool(get("scale_embedding", False)),
        final_logits_bias=True,
    )
    if kind == "marian":
        zoo_config.update(position="sinusoidal_halves")
    else:
        zoo_config.update(position="learned", position_offset=2, share_positions=False, layernorm_embedding=True)
    return architecture, ARCHITECTURES[kind][architecture], zoo_config


def check_huggingface_export(backbone):
    config = backbone.get_config()
    kind = model_type(backbone)
    if kind == "t5":
        return t5_weights.check_huggingface_export(backbone)
    if kind == "marian":
        problems = [
            (config["position"] != "sinusoidal_halves",
             f"position={config['position']!r}; Marian's are 'sinusoidal_halves' (BART's 'learned')"),
            (config["layernorm_embedding"], "layernorm_embedding=True; Marian has no LayerNorm on the embeddings"),
        ]
    else:
        problems = [
            (config["position_offset"] != 2, f"position_offset={config['position_offset']}; BART's is 2"),
            (not config["share_embeddings"], "share_embeddings=False; BART shares one token table"),
            (config["share_positions"], "share_positions=True; BART has a position table per stack"),
            (not config["layernorm_embedding"], "layernorm_embedding=False; BART has one"),
        ]
    problems += [
        (config["norm_first"], f"norm_first=True; {NAMES[kind]} is post-LN"),
        (not config["tie_output"], f"tie_output=False; {NAMES[kind]} ties its output layer to the target embedding"),
        (not config["final_logits_bias"], f"final_logits_bias=False; {NAMES[kind]} has one"),
        (config["activation"] not in ("silu", "relu", "gelu"),
         f"activation {config['activation']!r} has no {NAMES[kind]} name"),
    ]
    reasons = [why for bad, why in problems if bad]
    if reasons:
        raise ValueError(f"This encoder-decoder is not a {NAMES[kind]} model: {'; '.join(reasons)}.")


def _stack_sizes(config):
    """transformers' per-stack sizes of Marian's and BART's configs: both stacks alike."""
    sizes = {}
    for side in ("encoder", "decoder"):
        sizes.update({f"{side}_layers": config["num_layers"], f"{side}_attention_heads": config["num_heads"],
                      f"{side}_ffn_dim": config["intermediate_dim"], f"{side}_layerdrop": 0.0})
    return sizes


def to_huggingface_config(model):
    if model_type(model) == "t5":
        return t5_weights.to_huggingface_config(model)
    if model_type(model) == "bart":
        return _bart_config(model)
    config = model.get_config()
    tokenizer = getattr(model, "tokenizer", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = config["vocabulary_size"] - 1 if pad is None else pad
    end = getattr(tokenizer, "end_token_id", None) or 0
    start = getattr(tokenizer, "start_token_id", None)
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": config["source_vocabulary_size"],
        "decoder_vocab_size": config["vocabulary_size"],
        "share_encoder_decoder_embeddings": config["share_embeddings"],
        **_model_config(config),
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


def _model_config(config):
    """The entries Marian's and BART's configs share: sizes, activation,
    dropout and embedding scale."""
    return {
        "d_model": config["hidden_dim"],
        **_stack_sizes(config),
        "max_position_embeddings": config["max_sequence_length"],
        "activation_function": {"silu": "swish"}.get(config["activation"], config["activation"]),
        "dropout": config["dropout"],
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "scale_embedding": config["scale_embeddings"],
    }


def _bart_config(model):
    config = model.get_config()
    tokenizer = getattr(model, "tokenizer", None)
    ids = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2}  # BartConfig's defaults
    for key, attribute in (("bos_token_id", "start_token_id"), ("pad_token_id", "pad_token_id"),
                           ("eos_token_id", "end_token_id")):
        if getattr(tokenizer, attribute, None) is not None:
            ids[key] = getattr(tokenizer, attribute)
    generation = getattr(tokenizer, "generation", None) or {}
    return {
        "architectures": ["BartForConditionalGeneration"],
        "model_type": "bart",
        "vocab_size": config["vocabulary_size"],
        **_model_config(config),
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "init_std": 0.02,
        **ids,
        "decoder_start_token_id": generation.get("decoder_start_token_id", ids["eos_token_id"]),
        "forced_eos_token_id": generation.get("forced_eos_token_id", ids["eos_token_id"]),
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


def _norm(name, layer_norm):
    return [TensorName(name + ".weight", layer_norm.gamma), TensorName(name + ".bias", layer_norm.beta)]


def _layer_norm(name, add_norm):
    return _norm(name, add_norm.layer_norm)


def _feed_forward(prefix, block):
    ff = block.feed_forward
    return (linear(prefix + "fc1", ff.intermediate_dense) + linear(prefix + "fc2", ff.output_dense)
            + _layer_norm(prefix + "final_layer_norm", block.feed_forward_add_norm))


def _blocks(model, prefix):
    d, names = model.hidden_dim, []
    for i, block in enumerate(model.encoder_blocks):
        p = f"{prefix}encoder.layers.{i}."
        names += _attention(p + "self_attn.", block.self_attention, d, cross=False)
        names += _layer_norm(p + "self_attn_layer_norm", block.self_attention_add_norm)
        names += _feed_forward(p, block)
    for i, block in enumerate(model.decoder_blocks):
        p = f"{prefix}decoder.layers.{i}."
        names += _attention(p + "self_attn.", block.self_attention, d, cross=False)
        names += _layer_norm(p + "self_attn_layer_norm", block.self_attention_add_norm)
        names += _attention(p + "encoder_attn.", block.cross_attention_layer, d, cross=True)
        names += _layer_norm(p + "encoder_attn_layer_norm", block.cross_attention_add_norm)
        names += _feed_forward(p, block)
    return names


def _final_logits_bias(model):
    bias = model.output_bias.bias
    return [TensorName("final_logits_bias", bias, shape=(1, bias.shape[0]))]


def _marian_names(model):
    if model.share_embeddings:
        names = [TensorName("model.shared.weight", model.decoder_embedding.token_embedding.embeddings)]
    else:
        names = [
            TensorName("model.encoder.embed_tokens.weight", model.encoder_embedding.token_embedding.embeddings),
            TensorName("model.decoder.embed_tokens.weight", model.decoder_embedding.token_embedding.embeddings),
        ]
    return names + _blocks(model, "model.") + _final_logits_bias(model)


def _bart_names(model, prefix="model.", with_bias=True):
    """BART's tensors: `prefix` "model." in `BartForConditionalGeneration`, "" in a `BartModel`
    file; `BartModel` files have no `final_logits_bias` (transformers starts it at zero)."""
    names = [TensorName(prefix + "shared.weight", model.decoder_embedding.token_embedding.embeddings)]
    for side, embedding, norm in (("encoder", model.encoder_embedding, model.encoder_embedding_norm),
                                  ("decoder", model.decoder_embedding, model.decoder_embedding_norm)):
        names.append(TensorName(f"{prefix}{side}.embed_positions.weight",
                                embedding.position_embedding.position_embeddings))  # (max + 2, d), whole
        names += _norm(f"{prefix}{side}.layernorm_embedding", norm)
    names += _blocks(model, prefix)
    return names + (_final_logits_bias(model) if with_bias else [])


def huggingface_names(model):
    """(architecture, table): `MarianMTModel` or `BartForConditionalGeneration`, its tensors in checkpoint order."""
    if model_type(model) == "t5":
        return "T5ForConditionalGeneration", t5_weights.names(model)
    if model_type(model) == "bart":
        return "BartForConditionalGeneration", _bart_names(model)
    return "MarianMTModel", _marian_names(model)


def module_prefix(checkpoint_names):
    """transformers' "model." before the tensor names, where a checkpoint's names have it."""
    return "model." if any(n.startswith("model.") for n in checkpoint_names) else ""


def checkpoint_name(name):
    return name


def import_names(model, checkpoint_names, with_head):
    """The table in the checkpoint's layout: for BART, with or without "model." and `final_logits_bias`."""
    if model_type(model) == "t5":
        return t5_weights.names(model)
    if model_type(model) == "bart":
        return _bart_names(model, module_prefix(checkpoint_names), with_bias="final_logits_bias" in checkpoint_names)
    return _marian_names(model)


def ignorable(name):
    """Marian's sinusoidal tables older checkpoints store, and the tied copies of an embedding
    (checked equal by `tied_copies`)."""
    return name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
                    "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight",
                    "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def tied_copies(model, checkpoint_names):
    """(copy, original) pairs that must be equal."""
    if model_type(model) == "t5":
        return t5_weights.tied_copies(model)
    if model.share_embeddings:
        prefix = module_prefix(checkpoint_names)
        shared = prefix + "shared.weight"
        return [(copy, shared) for copy in (prefix + "encoder.embed_tokens.weight",
                                            prefix + "decoder.embed_tokens.weight", "lm_head.weight")]
    return [("lm_head.weight", "model.decoder.embed_tokens.weight")]


# --- Hugging Face: tokenizers and generation settings -------------------------------------


def _folder_model_type(folder):
    return read_json(folder / "config.json").get("model_type")


def _read_side(folder, side, vocabulary_size, weights_file):
    from zoo.data import DataError
    from zoo.tokenizers import MarianTokenizer

    settings = tokenizer_settings(folder)
    if settings.get("separate_vocabs"):
        raise CheckpointError(
            f"{folder / 'tokenizer_config.json'}: separate_vocabs=True is not supported; expected one vocab.json."
        )
    generation = generation_settings(folder, GENERATION_KEYS)
    try:
        tokenizer = MarianTokenizer.from_folder(folder, side, generation.get("decoder_start_token_id"), generation)
    except (DataError, ValueError) as error:
        raise CheckpointError(str(error) if str(folder) in str(error) else f"{folder}: {error}") from None
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, folder / "vocab.json", weights_file)
    return tokenizer


def read_huggingface_tokenizer(folder, vocabulary_size, weights_file):
    """The decoder's tokenizer, the model's `tokenizer`: Marian's target side (`target.spm`,
    `vocab.json`), or BART's byte-level BPE."""
    if _folder_model_type(folder) == "t5":
        return t5_weights.read_tokenizer(folder, vocabulary_size, weights_file)
    if _folder_model_type(folder) == "bart":
        return _read_bart_tokenizer(folder, vocabulary_size, weights_file)
    require_files(folder, "source.spm", "target.spm", "vocab.json",
                  why="Marian's tokenizer (source.spm, target.spm and vocab.json)")
    return _read_side(folder, "target", vocabulary_size, weights_file)


def read_huggingface_source_tokenizer(folder, vocabulary_size, weights_file):
    """Marian's source side (`source.spm`, `vocab.json`): the model's `source_tokenizer`, the
    encoder's; None for BART and T5, whose one tokenizer serves both sides."""
    if _folder_model_type(folder) in ("bart", "t5"):
        return None
    return _read_side(folder, "source", vocabulary_size, weights_file)


def _within_the_table(tokenizer, vocabulary_size):
    """The tokenizer less its special added tokens past the embedding (bart-large-cnn's 50,264-row
    table has no row for `<mask>`, 50264: the literal text `<mask>` is then cut as plain text),
    so that every id it gives has a row; as it was when other tokens lie past the table (the
    caller refuses it)."""
    data = tokenizer.tokenizer_json()
    past = [token for token in data.get("added_tokens", []) if token["id"] >= vocabulary_size]
    special = {token["content"] for token in past if token.get("special")}
    vocabulary = (data.get("model") or {}).get("vocab") or {}
    listed = vocabulary.items() if isinstance(vocabulary, dict) else ()
    if not past or len(special) < len(past) or any(i >= vocabulary_size and t not in special for t, i in listed):
        return tokenizer
    data["added_tokens"] = [token for token in data["added_tokens"] if token["id"] < vocabulary_size]
    data["model"]["vocab"] = {token: i for token, i in listed if i < vocabulary_size}
    tokenizer.set_tokenizer_json(json.dumps(data, ensure_ascii=False))
    return tokenizer


def _read_bart_tokenizer(folder, vocabulary_size, weights_file):
    """`tokenizer.json` (what transformers' BartTokenizerFast reads), else `vocab.json` and `merges.txt`
    (BartTokenizer's) turned into the same tokenizer; its `<s>`, `</s>` and `<pad>` (or the tokens
    tokenizer_config.json names) checked against config.json's ids, the other file and the embedding."""
    from zoo.data import DataError
    from zoo.tokenizers import HuggingFaceTokenizer

    generation = generation_settings(folder, GENERATION_KEYS)
    from_json = (folder / "tokenizer.json").is_file()
    if not from_json:
        require_files(folder, "vocab.json", "merges.txt",
                      why="BART's tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    where = folder / ("tokenizer.json" if from_json else "vocab.json")
    settings = tokenizer_settings(folder)
    # BartTokenizer's defaults unless tokenizer_config.json names others
    special = {"bos_token_id": special_token(settings, "bos_token", "<s>"),
               "eos_token_id": special_token(settings, "eos_token", "</s>"),
               "pad_token_id": special_token(settings, "pad_token", "<pad>")}
    try:
        if from_json:
            tokenizer = HuggingFaceTokenizer.from_file(
                folder / "tokenizer.json", bos_token=special["bos_token_id"], eos_token=special["eos_token_id"],
                pad_token=special["pad_token_id"], generation=generation)
        else:
            tokenizer = HuggingFaceTokenizer.from_byte_level_bpe(folder / "vocab.json", folder / "merges.txt",
                                                                 generation=generation)
    except (DataError, ValueError) as error:
        message = str(error)
        raise CheckpointError(message if str(folder) in message else f"{where}: {message}") from None
    if from_json and (folder / "vocab.json").is_file():
        listed = read_json(folder / "vocab.json")
        vocabulary = tokenizer.get_vocabulary()
        different = [token for token, i in listed.items() if not (0 <= i < len(vocabulary) and vocabulary[i] == token)]
        if different:
            raise CheckpointError(
                f"{folder / 'vocab.json'}: {len(different)} token(s) with other ids than in tokenizer.json, e.g. "
                f"{different[:3]}; expected the vocabulary of the same tokenizer."
            )
    config = read_json(folder / "config.json")
    for key, attribute in (("bos_token_id", "start_token_id"), ("eos_token_id", "end_token_id"),
                           ("pad_token_id", "pad_token_id")):
        found = getattr(tokenizer, attribute)
        if config.get(key) is not None and found != config[key]:
            raise CheckpointError(
                f"{where}: the tokenizer's {special[key]!r} is id {found}; expected {config[key]}, config.json's {key}."
            )
    if tokenizer.vocabulary_size() > vocabulary_size:
        tokenizer = _within_the_table(tokenizer, vocabulary_size)
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, where, weights_file)
    return tokenizer


def tokenizer_problem(tokenizer, format, backbone):
    from zoo.tokenizers import HuggingFaceTokenizer, MarianTokenizer

    kind = model_type(backbone)
    if kind == "t5":
        return t5_weights.tokenizer_problem(tokenizer, format)
    if format != "huggingface":
        return f"keras-hub has no {NAMES[kind]} tokenizer"
    expected = MarianTokenizer if kind == "marian" else HuggingFaceTokenizer
    if not isinstance(tokenizer, expected):
        return (f"model.tokenizer is a {type(tokenizer).__name__}; {NAMES[kind]} needs a "
                f"zoo.data.{expected.__name__}")
    if kind == "bart":
        model = (tokenizer.tokenizer_json().get("model") or {}).get("type")
        if model != "BPE":
            return f"the tokenizer.json's model is {model!r}; BART's vocab.json and merges.txt need a 'BPE'"
    return None


def write_huggingface_tokenizer(tokenizer, folder, model):
    """Marian: source.spm, target.spm, vocab.json; BART: tokenizer.json, vocab.json, merges.txt;
    then tokenizer_config.json and generation_config.json."""
    if model_type(model) == "t5":
        return t5_weights.write_tokenizer(tokenizer, folder, model)
    if model_type(model) == "bart":
        return _write_bart_tokenizer(tokenizer, folder, model)
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


def _write_bart_tokenizer(tokenizer, folder, model):
    tokenizer.save_assets(folder)  # tokenizer.json, as it came
    bpe = tokenizer.tokenizer_json()["model"]
    vocabulary = dict(bpe["vocab"])
    for i, token in enumerate(tokenizer.get_vocabulary()):
        if token and token not in vocabulary:  # an added token outside the BPE's own vocabulary
            vocabulary[token] = i
    write_text(folder / "vocab.json", json.dumps(vocabulary, ensure_ascii=False))
    merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in bpe.get("merges", [])]
    write_text(folder / "merges.txt", "\n".join(["#version: 0.2", *merges]) + "\n")
    present = set(tokenizer.get_vocabulary())
    token = lambda i: None if i is None else tokenizer.id_to_token(i)  # noqa: E731
    settings = {"tokenizer_class": "BartTokenizer", "model_max_length": model.max_sequence_length,
                "bos_token": token(tokenizer.start_token_id), "eos_token": token(tokenizer.end_token_id),
                "cls_token": token(tokenizer.start_token_id), "sep_token": token(tokenizer.end_token_id),
                "pad_token": token(tokenizer.pad_token_id), "add_prefix_space": False, "errors": "replace"}
    optional = (("unk_token", "<unk>"), ("mask_token", "<mask>"))
    settings.update({key: value for key, value in optional if value in present})
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    generation = dict(tokenizer.generation or {})
    start, end, pad = tokenizer.start_token_id, tokenizer.end_token_id, tokenizer.pad_token_id
    generation.update({"bos_token_id": start, "eos_token_id": end, "pad_token_id": pad})
    generation.setdefault("decoder_start_token_id", end)
    generation.setdefault("forced_eos_token_id", end)
    write_text(folder / "generation_config.json", json.dumps(generation, indent=2) + "\n")


# --- keras-hub -----------------------------------------------------------------------------


def keras_hub_incompatibilities(backbone):
    if model_type(backbone) == "t5":
        return ["the zoo does not map keras-hub's T5Backbone"], []
    if model_type(backbone) == "bart":
        return ["the zoo does not map keras-hub's BartBackbone"], []
    return ["keras-hub has no Marian model"], []


def _keras_hub_module(backbone):
    return KERAS_HUB_FAMILIES[f"keras_hub>{type(backbone).__name__}"]


def from_keras_hub(backbone, dtype=None, **overrides):
    """keras-hub's backbone -> the zoo `EncoderDecoder` with the same weights, each shape checked."""
    module = _keras_hub_module(backbone)
    where = type(backbone).__name__
    config = {**module.zoo_config(backbone, where), **overrides}
    model = build_backbone(config, dtype=dtype or backbone.dtype_policy.name)
    module.copy_weights(model, backbone, where)
    return model


def model_tokenizer(hub_tokenizer, backbone):
    """The zoo tokenizer a keras-hub preset's model carries: keras-hub's ids, and the decoder's start."""
    return _keras_hub_module(backbone).tokenizer(hub_tokenizer)
