"""keras-hub's `T5Backbone` (T5 v1.0, and Flan-T5 with `use_gated_activation`)
-> the zoo's `EncoderDecoder`, and its `T5Tokenizer` -> `zoo.tokenizers.T5Tokenizer`.

keras-hub's T5 is transformers' with fixed relative-position settings (32
buckets, distance 128, the table in the first layer of each stack),
RMSNorm without biases, unscaled attention logits, and a head that is the
token table rescaled by d**-0.5 when `tie_embedding_weights`, else the
`ReversibleEmbedding`'s own (d, V) table without the rescale
(`T5Seq2SeqLM._logits`). Its gated feed-forward activates
`input_projector` and multiplies by `gate_projector`: transformers' `wi_0`
and `wi_1`. Its "gelu" is Keras' exact GELU, not transformers' tanh form,
and it is kept as such.
"""

import numpy as np

from zoo.models.tensor_names import CheckpointError, to_numpy

BACKBONE = "keras_hub>T5Backbone"
TASKS = {"keras_hub>T5Seq2SeqLM": "seq2seq"}
TOKENIZER = {"keras_hub>T5Tokenizer": ("vocabulary.spm",)}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "keras_hub>gelu_approximate": "gelu_approximate",
               "gelu_approximate": "gelu_approximate", "silu": "silu"}


def zoo_config(backbone, where):
    config = backbone.get_config()
    if config["activation"] not in ACTIVATIONS:
        raise CheckpointError(f"{where}: activation {config['activation']!r}; expected one of {', '.join(ACTIVATIONS)}.")
    tied = bool(config["tie_embedding_weights"])
    return dict(
        vocabulary_size=config["vocabulary_size"],
        source_vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        head_dim=config["key_value_dim"] or config["hidden_dim"] // config["num_heads"],
        max_sequence_length=512,
        dropout=float(config["dropout"]),
        position="relative",
        relative_attention_num_buckets=32,  # T5MultiHeadAttention's constants
        relative_attention_max_distance=128,
        normalization="rms_norm",
        use_bias=False,
        attention_scale=1.0,
        norm_first=True,
        activation=ACTIVATIONS[config["activation"]],
        gated_feed_forward=bool(config["use_gated_activation"]),
        layer_norm_epsilon=float(config["layer_norm_epsilon"]),
        scale_embeddings=False,
        tie_output=tied,
        scale_tied_output=tied,
    )


def _assign(variable, value, where):
    value = to_numpy(value)
    if tuple(variable.shape) != value.shape:
        raise CheckpointError(f"{where}: shape {value.shape}; expected {tuple(variable.shape)}.")
    variable.assign(value)


def _attention(target, source, where, cross):
    q, k, v = (to_numpy(p.kernel) for p in (source.query_projector, source.key_projector, source.value_projector))
    if cross:
        _assign(target.query_dense.kernel, q, where)
        _assign(target.key_value_dense.kernel, np.concatenate([k, v], axis=1), where)
    else:
        _assign(target.query_key_value_dense.kernel, np.concatenate([q, k, v], axis=1), where)
    _assign(target.output_dense.kernel, source.output_projector.kernel, where)


def _block(target, source, where):
    _attention(target.self_attention, source.self_attention, f"{where}.self_attention", cross=False)
    _assign(target.self_attention_add_norm.layer_norm.scale, source.self_attention_layer_norm.weight, where)
    if source.is_decoder:
        _attention(target.cross_attention_layer, source.cross_attention, f"{where}.cross_attention", cross=True)
        _assign(target.cross_attention_add_norm.layer_norm.scale, source.cross_attention_layer_norm.weight, where)
    ff = target.feed_forward
    if source.use_gated_activation:  # the activated projection is the gate
        _assign(ff.gate_dense.kernel, source.input_projector.kernel, where)
        _assign(ff.intermediate_dense.kernel, source.gate_projector.kernel, where)
    else:
        _assign(ff.intermediate_dense.kernel, source.input_projector.kernel, where)
    _assign(ff.output_dense.kernel, source.output_projector.kernel, where)
    _assign(target.feed_forward_add_norm.layer_norm.scale, source.layer_norm.weight, where)


def copy_weights(model, backbone, where):
    """keras-hub's T5Backbone's weights into `model`, each shape checked."""
    _assign(model.decoder_embedding.embeddings, backbone.token_embedding.embeddings, f"{where}: token_embedding")
    for name, blocks, layers, bias in (
        ("encoder", model.encoder_blocks, backbone.encoder_transformer_layers, model.encoder_position_bias),
        ("decoder", model.decoder_blocks, backbone.decoder_transformer_layers, model.decoder_position_bias),
    ):
        _assign(bias.embeddings, layers[0].self_attention.relative_attention_bias, f"{where}: {name} relative bias")
        for i, (target, source) in enumerate(zip(blocks, layers)):
            _block(target, source, f"{where}: transformer_{name}_layer_{i}")
    _assign(model.encoder_norm.scale, backbone.encoder_layer_norm.weight, f"{where}: encoder_output_layer_norm")
    _assign(model.decoder_norm.scale, backbone.decoder_layer_norm.weight, f"{where}: decoder_output_layer_norm")
    if model.output_projection is not None:
        _assign(model.output_projection.kernel, backbone.token_embedding.reverse_embeddings, f"{where}: output head")


def tokenizer(hub_tokenizer):
    """keras-hub's T5Tokenizer as the zoo's, with keras-hub's ids (the
    SentencePiece model's, no sentinels); the decoder starts from `<pad>`."""
    from zoo.tokenizers import T5Tokenizer
    from zoo.tokenizers.t5_tokenizer import t5_vocabulary

    proto = bytes(hub_tokenizer.proto)
    vocabulary = t5_vocabulary(proto, extra_ids=0)
    return T5Tokenizer(proto, vocabulary, start_token_id=vocabulary["<pad>"])
