"""Weights from keras-hub: `from_keras_hub(backbone)`.

Turns a keras-hub `GPT2Backbone` or `BertBackbone` (for example one a user
loaded with `from_preset` from a checkpoint they have) into the matching zoo
model with the same weights, so that a real pretrained GPT-2 or BERT can be
fine-tuned in this zoo. keras-hub keeps separate (d, h, k) query, key and
value kernels; the zoo fuses them into one (d, 3d) kernel, [q | k | v].
"""

import numpy as np

from zoo.models import BertBackbone, GPTBackbone


def _np(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)


def _copy_dense(target, source):
    target.kernel.assign(_np(source.kernel))
    target.bias.assign(_np(source.bias))


def _copy_norm(target, source):
    target.gamma.assign(_np(source.gamma))
    target.beta.assign(_np(source.beta))


def _copy_attention(target, source, d):
    """keras MultiHeadAttention (separate EinsumDense q, k, v, output) -> zoo's fused one."""
    kernels = [_np(layer.kernel).reshape(d, d) for layer in (source._query_dense, source._key_dense, source._value_dense)]
    biases = [_np(layer.bias).reshape(d) for layer in (source._query_dense, source._key_dense, source._value_dense)]
    target.query_key_value_dense.kernel.assign(np.concatenate(kernels, axis=1))  # (d, 3d)
    target.query_key_value_dense.bias.assign(np.concatenate(biases))
    target.output_dense.kernel.assign(_np(source._output_dense.kernel).reshape(d, d))
    target.output_dense.bias.assign(_np(source._output_dense.bias))


def _copy_block(target, source, d):
    _copy_attention(target.self_attention, source._self_attention_layer, d)
    _copy_norm(target.self_attention_add_norm.layer_norm, source._self_attention_layer_norm)
    _copy_dense(target.feed_forward.intermediate_dense, source._feedforward_intermediate_dense)
    _copy_dense(target.feed_forward.output_dense, source._feedforward_output_dense)
    _copy_norm(target.feed_forward_add_norm.layer_norm, source._feedforward_layer_norm)


def _copy_embeddings(target, source):
    target.embedding.token_embedding.embeddings.assign(_np(source.token_embedding.embeddings))
    target.embedding.position_embedding.position_embeddings.assign(
        _np(source.position_embedding.position_embeddings)
    )


def from_keras_hub(backbone, dtype=None):
    """Convert a keras-hub backbone into the zoo model with the same weights.

    Args:
        backbone: a `keras_hub.models.GPT2Backbone` (-> `GPTBackbone`) or a
            `keras_hub.models.BertBackbone` (-> `BertBackbone`).
        dtype: the zoo model's dtype policy; the backbone's by default.

    Returns:
        The zoo backbone. Put a task on it as usual, e.g.
        `zoo.models.GPTCausalLM(from_keras_hub(hub_backbone))`.
    """
    kind = type(backbone).__name__
    dtype = dtype or backbone.dtype_policy.name
    if kind == "GPT2Backbone":
        model = GPTBackbone(
            vocabulary_size=backbone.vocabulary_size,
            num_layers=backbone.num_layers,
            num_heads=backbone.num_heads,
            hidden_dim=backbone.hidden_dim,
            intermediate_dim=backbone.intermediate_dim,
            max_sequence_length=backbone.max_sequence_length,
            dropout=backbone.dropout,
            norm_first=True,
            activation="gelu_approximate",
            layer_norm_epsilon=1e-5,
            dtype=dtype,
        )
        _copy_embeddings(model, backbone)
        for target, source in zip(model.blocks, backbone.transformer_layers):
            _copy_block(target, source, backbone.hidden_dim)
        _copy_norm(model.final_norm, backbone.layer_norm)
        return model
    if kind == "BertBackbone":
        model = BertBackbone(
            vocabulary_size=backbone.vocabulary_size,
            num_layers=backbone.num_layers,
            num_heads=backbone.num_heads,
            hidden_dim=backbone.hidden_dim,
            intermediate_dim=backbone.intermediate_dim,
            max_sequence_length=backbone.max_sequence_length,
            num_segments=backbone.num_segments,
            dropout=backbone.dropout,
            activation="gelu_approximate",  # what keras-hub's BERT computes
            layer_norm_epsilon=1e-12,
            dtype=dtype,
        )
        _copy_embeddings(model, backbone)
        model.segment_embedding.embeddings.assign(_np(backbone.segment_embedding.embeddings))
        _copy_norm(model.embeddings_norm, backbone.embeddings_layer_norm)
        for target, source in zip(model.blocks, backbone.transformer_layers):
            _copy_block(target, source, backbone.hidden_dim)
        _copy_dense(model.pooler, backbone.pooled_dense)
        return model
    raise ValueError(
        f"from_keras_hub converts a keras-hub GPT2Backbone or BertBackbone; got {kind}."
    )
