"""T5 and Flan-T5 checkpoints (t5-small, google/flan-t5-*): `EncoderDecoder`
<-> transformers' `T5ForConditionalGeneration`, for the family's weight map.

T5 (Raffel et al. 2020) is the encoder-decoder with `position="relative"`
(`relative_attention_bias`, a (num_buckets, h) table in the first block of
each stack whose bias every layer of the stack adds), pre-norm RMSNorm
blocks with a final norm of each stack (`normalization="rms_norm"`,
`norm_first=True`), no biases, unscaled attention logits
(`attention_scale=1.0`) and heads of width `d_kv` (`head_dim`). v1.0
(`feed_forward_proj="relu"`) ties the output layer to the shared embedding
and rescales the decoder output by d_model**-0.5 before it
(`scale_tied_output`); v1.1 and Flan-T5 (`"gated-gelu"`: GELU's tanh form
gating `wi_0`, times `wi_1`) do not rescale, and have an untied `lm_head`
in the published folders; transformers >= 5 ties it and writes
`"scale_decoder_outputs": false`, which the zoo reads as it does.

The tokenizer is `spiece.model` with transformers' `T5Tokenizer` ids
(`zoo.tokenizers.T5Tokenizer`): the SentencePiece model's own (`<pad>` 0, `</s>`
1, `<unk>` 2), then the 100 sentinels, `<extra_id_0>` last; `</s>` appended
to each text. A folder without `spiece.model` reads its `tokenizer.json`
(`T5TokenizerFast`'s file: a Unigram model, the sentinels as added tokens,
`</s>` appended by its post-processor) through the `tokenizers` package as
a `zoo.tokenizers.HuggingFaceTokenizer`. An encoder and a decoder
of different depths are refused with one line, as is a feed-forward
projection the zoo does not compute.
"""

import json

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

ARCHITECTURES = {"T5ForConditionalGeneration": "seq2seq"}
# transformers' `feed_forward_proj` -> (activation, gated); "gated-gelu" is GELU's tanh form ("gelu_new").
FEED_FORWARD = {"relu": ("relu", False), "gelu": ("gelu", False), "gated-gelu": ("gelu_approximate", True),
                "gated-relu": ("relu", True), "gated-silu": ("silu", True)}
EXTRA_IDS = 100
GENERATION_KEYS = ("decoder_start_token_id", "eos_token_id", "pad_token_id", "max_length", "num_beams")


def from_huggingface_config(config, config_file):
    """transformers' T5Config -> (architecture, head, zoo config)."""
    architecture, get = read_architecture(config, config_file, ARCHITECTURES)
    layers, decoder_layers = get("num_layers"), get("num_decoder_layers", get("num_layers"))
    if layers != decoder_layers:
        raise CheckpointError(
            f"{config_file}: num_layers={layers} and num_decoder_layers={decoder_layers} differ; "
            "expected an encoder and a decoder of one depth."
        )
    projection = get("feed_forward_proj", "relu")
    if projection not in FEED_FORWARD:
        refuse_config_value(config, config_file, "feed_forward_proj", f"expected one of {', '.join(FEED_FORWARD)}")
    activation, gated = FEED_FORWARD[projection]
    tied = bool(get("tie_word_embeddings", True))
    # transformers >= 5 writes whether the decoder output is rescaled as `scale_decoder_outputs`
    # (v1.0 yes, v1.1 no) and ties every head; before, `tie_word_embeddings` said both.
    scaled = bool(get("scale_decoder_outputs", tied))
    zoo_config = dict(
        vocabulary_size=get("vocab_size"),
        source_vocabulary_size=get("vocab_size"),
        num_layers=layers,
        num_heads=get("num_heads"),
        hidden_dim=get("d_model"),
        intermediate_dim=get("d_ff"),
        head_dim=get("d_kv"),
        max_sequence_length=get("n_positions", 512),
        dropout=float(get("dropout_rate", 0.1)),
        position="relative",
        relative_attention_num_buckets=get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=get("relative_attention_max_distance", 128),
        normalization="rms_norm",
        use_bias=False,
        attention_scale=1.0,
        norm_first=True,
        activation=activation,
        gated_feed_forward=gated,
        layer_norm_epsilon=float(get("layer_norm_epsilon", 1e-6)),
        scale_embeddings=False,
        tie_output=tied,
        scale_tied_output=scaled,
    )
    return architecture, ARCHITECTURES[architecture], zoo_config


def check_huggingface_export(backbone):
    config = backbone.get_config()
    problems = [
        (config["normalization"] != "rms_norm", f"normalization={config['normalization']!r}; T5's is 'rms_norm'"),
        (config["use_bias"], "use_bias=True; T5 has no biases"),
        (not config["norm_first"], "norm_first=False; T5 is pre-norm"),
        (config["attention_scale"] != 1.0, "attention_scale is not 1.0; T5's logits are unscaled"),
        (config["final_logits_bias"] or config["layernorm_embedding"] or config["scale_embeddings"],
         "T5 has no final logits bias, embedding LayerNorm or embedding scale"),
        ((config["activation"], config["gated_feed_forward"]) not in FEED_FORWARD.values(),
         f"activation {config['activation']!r} (gated={config['gated_feed_forward']}) has no T5 name"),
    ]
    reasons = [why for bad, why in problems if bad]
    if reasons:
        raise ValueError(f"This encoder-decoder is not a T5 model: {'; '.join(reasons)}.")


def to_huggingface_config(model):
    config = model.get_config()
    tokenizer = getattr(model, "tokenizer", None)
    projection = {value: key for key, value in FEED_FORWARD.items()}[(config["activation"], config["gated_feed_forward"])]
    pad = getattr(tokenizer, "pad_token_id", None)
    end = getattr(tokenizer, "end_token_id", None)
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": config["vocabulary_size"],
        "d_model": config["hidden_dim"],
        "d_kv": config["head_dim"] or config["hidden_dim"] // config["num_heads"],
        "d_ff": config["intermediate_dim"],
        "num_layers": config["num_layers"],
        "num_decoder_layers": config["num_layers"],
        "num_heads": config["num_heads"],
        "relative_attention_num_buckets": config["relative_attention_num_buckets"],
        "relative_attention_max_distance": config["relative_attention_max_distance"],
        "dropout_rate": config["dropout"],
        "layer_norm_epsilon": config["layer_norm_epsilon"],
        "initializer_factor": 1.0,
        "feed_forward_proj": projection,
        "is_gated_act": config["gated_feed_forward"],
        "tie_word_embeddings": config["tie_output"],
        "scale_decoder_outputs": config["scale_tied_output"],
        "n_positions": config["max_sequence_length"],
        "is_encoder_decoder": True,
        "pad_token_id": 0 if pad is None else pad,
        "eos_token_id": 1 if end is None else end,
        "decoder_start_token_id": 0 if pad is None else pad,
        "use_cache": True,
        "torch_dtype": "float32",
    }


def _attention(prefix, attention, inner, cross):
    if cross:
        names = linear(prefix + "q", attention.query_dense, bias=False)
        names += fused_linear([prefix + "k", prefix + "v"], attention.key_value_dense, [inner] * 2, bias=False)
    else:
        names = fused_linear([prefix + n for n in "qkv"], attention.query_key_value_dense, [inner] * 3, bias=False)
    return names + linear(prefix + "o", attention.output_dense, bias=False)


def _norm(name, add_norm):
    return [TensorName(name + ".weight", add_norm.layer_norm.scale)]


def _feed_forward(prefix, block):
    ff, p = block.feed_forward, prefix + "DenseReluDense."
    if ff.gated:
        names = linear(p + "wi_0", ff.gate_dense, bias=False) + linear(p + "wi_1", ff.intermediate_dense, bias=False)
    else:
        names = linear(p + "wi", ff.intermediate_dense, bias=False)
    return names + linear(p + "wo", ff.output_dense, bias=False)


def names(model):
    """T5ForConditionalGeneration's tensors, in checkpoint order."""
    inner = model.num_heads * (model.head_dim or model.hidden_dim // model.num_heads)
    table = [TensorName("shared.weight", model.decoder_embedding.embeddings)]
    for i, block in enumerate(model.encoder_blocks):
        p = f"encoder.block.{i}.layer."
        table += _attention(p + "0.SelfAttention.", block.self_attention, inner, cross=False)
        if i == 0:
            table.append(TensorName(p + "0.SelfAttention.relative_attention_bias.weight",
                                    model.encoder_position_bias.embeddings))
        table += _norm(p + "0.layer_norm", block.self_attention_add_norm)
        table += _feed_forward(p + "1.", block) + _norm(p + "1.layer_norm", block.feed_forward_add_norm)
    table.append(TensorName("encoder.final_layer_norm.weight", model.encoder_norm.scale))
    for i, block in enumerate(model.decoder_blocks):
        p = f"decoder.block.{i}.layer."
        table += _attention(p + "0.SelfAttention.", block.self_attention, inner, cross=False)
        if i == 0:
            table.append(TensorName(p + "0.SelfAttention.relative_attention_bias.weight",
                                    model.decoder_position_bias.embeddings))
        table += _norm(p + "0.layer_norm", block.self_attention_add_norm)
        table += _attention(p + "1.EncDecAttention.", block.cross_attention_layer, inner, cross=True)
        table += _norm(p + "1.layer_norm", block.cross_attention_add_norm)
        table += _feed_forward(p + "2.", block) + _norm(p + "2.layer_norm", block.feed_forward_add_norm)
    table.append(TensorName("decoder.final_layer_norm.weight", model.decoder_norm.scale))
    if model.output_projection is not None:
        table += linear("lm_head", model.output_projection, bias=False)
    return table


def tied_copies(model):
    """(copy, original) pairs that must be equal: the stacks' copies of the shared table, and a tied lm_head."""
    copies = [("encoder.embed_tokens.weight", "shared.weight"), ("decoder.embed_tokens.weight", "shared.weight")]
    return copies + ([("lm_head.weight", "shared.weight")] if model.output_projection is None else [])


def read_tokenizer(folder, vocabulary_size, weights_file):
    """`spiece.model` with T5Tokenizer's ids (its legacy mode, the default), else `tokenizer.json`
    (T5TokenizerFast's, which also holds the non-legacy mode of `"legacy": false`); the decoder
    starts from `decoder_start_token_id` (`<pad>`)."""
    from zoo.data import DataError
    from zoo.tokenizers import T5Tokenizer

    generation = generation_settings(folder, GENERATION_KEYS)
    settings = tokenizer_settings(folder)
    has_json = (folder / "tokenizer.json").is_file()
    if has_json and (settings.get("legacy") is False or not (folder / "spiece.model").is_file()):
        return _read_tokenizer_json(folder, settings, vocabulary_size, weights_file, generation)
    if settings.get("legacy") is False:
        raise CheckpointError(
            f"{folder / 'tokenizer_config.json'}: legacy=false, T5Tokenizer's non-legacy mode, which the zoo reads "
            "from tokenizer.json alone; expected a tokenizer.json beside spiece.model."
        )
    require_files(folder, "spiece.model", why="T5's tokenizer (spiece.model, or tokenizer.json)")
    try:
        tokenizer = T5Tokenizer.from_folder(folder, generation.get("decoder_start_token_id"), generation)
    except (DataError, ValueError, RuntimeError, OSError) as error:
        raise CheckpointError(f"{folder / 'spiece.model'}: {error}") from None
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, folder / "spiece.model", weights_file)
    return tokenizer


def _read_tokenizer_json(folder, settings, vocabulary_size, weights_file, generation):
    """tokenizer.json as a HuggingFaceTokenizer: a Unigram model whose `</s>` and `<pad>` (or the
    tokens tokenizer_config.json names) are config.json's `eos_token_id` and `pad_token_id`."""
    from zoo.data import DataError
    from zoo.tokenizers import HuggingFaceTokenizer

    where = folder / "tokenizer.json"
    end, pad = special_token(settings, "eos_token", "</s>"), special_token(settings, "pad_token", "<pad>")
    try:
        tokenizer = HuggingFaceTokenizer.from_file(where, eos_token=end, pad_token=pad, generation=generation)
    except (DataError, ValueError) as error:
        message = str(error)
        raise CheckpointError(message if str(folder) in message else f"{where}: {message}") from None
    model = (tokenizer.tokenizer_json().get("model") or {}).get("type")
    if model != "Unigram":
        raise CheckpointError(f"{where}: the tokenizer's model is {model!r}; expected T5's 'Unigram'.")
    config = read_json(folder / "config.json")
    for key, name, found in (("eos_token_id", end, tokenizer.end_token_id), ("pad_token_id", pad, tokenizer.pad_token_id)):
        if config.get(key) is not None and found != config[key]:
            raise CheckpointError(f"{where}: the tokenizer's {name!r} is id {found}; expected {config[key]}, "
                                  f"config.json's {key}.")
    start = generation.get("decoder_start_token_id", config.get("decoder_start_token_id", tokenizer.pad_token_id))
    tokenizer.start_token_id = None if start is None else int(start)
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, where, weights_file)
    return tokenizer


def tokenizer_problem(tokenizer, format):
    from zoo.tokenizers import HuggingFaceTokenizer, T5Tokenizer

    if format != "huggingface":
        return "keras-hub has no T5 tokenizer"
    if isinstance(tokenizer, HuggingFaceTokenizer):
        model = (tokenizer.tokenizer_json().get("model") or {}).get("type")
        return None if model == "Unigram" else f"the tokenizer.json's model is {model!r}; T5 needs a 'Unigram'"
    if not isinstance(tokenizer, T5Tokenizer):
        return (f"model.tokenizer is a {type(tokenizer).__name__}; T5 needs a zoo.tokenizers.T5Tokenizer (spiece.model) "
                "or a zoo.tokenizers.HuggingFaceTokenizer (tokenizer.json)")
    return None


def write_tokenizer(tokenizer, folder, model):
    """spiece.model (or the tokenizer.json it came as), tokenizer_config.json and generation_config.json."""
    from zoo.tokenizers import HuggingFaceTokenizer
    from zoo.files import atomic_path

    if isinstance(tokenizer, HuggingFaceTokenizer):
        tokenizer.save_assets(folder)  # tokenizer.json, as it came
    else:
        with atomic_path(folder / "spiece.model") as temporary:
            temporary.write_bytes(tokenizer.proto)
    settings = {"tokenizer_class": "T5Tokenizer", "model_max_length": model.max_sequence_length,
                "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "extra_ids": EXTRA_IDS}
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")
    generation = dict(tokenizer.generation or {})
    generation.update({"decoder_start_token_id": tokenizer.start_token_id, "eos_token_id": tokenizer.end_token_id,
                       "pad_token_id": tokenizer.pad_token_id})
    write_text(folder / "generation_config.json", json.dumps(generation, indent=2) + "\n")
