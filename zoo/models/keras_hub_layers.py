"""keras-hub's `TransformerEncoder` / `TransformerDecoder` blocks (GPT-2's
and BERT's) <-> the zoo's blocks, both ways.

keras-hub keeps separate (d, h, k) query, key and value kernels (Keras'
`MultiHeadAttention`); the zoo fuses them into one (d, 3d) kernel,
[q | k | v].
"""

import numpy as np

from zoo.models.tensor_names import copy_dense, copy_layer_norm, to_numpy

__all__ = [
    "block_sizes",
    "copy_block", "copy_block_back", "copy_dense", "copy_embeddings", "copy_embeddings_back", "copy_layer_norm",
]


def block_sizes(backbone, dtype=None):
    """The sizes of a keras-hub GPT-2 or BERT backbone, as the zoo
    backbone's config fields (and its dtype policy, or `dtype`)."""
    names = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length",
             "dropout")
    return {**{name: getattr(backbone, name) for name in names}, "dtype": dtype or backbone.dtype_policy.name}


def copy_attention(target, source, d):
    """keras MultiHeadAttention (separate EinsumDense q, k, v, output) -> zoo's fused one."""
    parts = (source._query_dense, source._key_dense, source._value_dense)
    target.query_key_value_dense.kernel.assign(np.concatenate([to_numpy(p.kernel).reshape(d, d) for p in parts], axis=1))
    target.query_key_value_dense.bias.assign(np.concatenate([to_numpy(p.bias).reshape(d) for p in parts]))
    target.output_dense.kernel.assign(to_numpy(source._output_dense.kernel).reshape(d, d))
    target.output_dense.bias.assign(to_numpy(source._output_dense.bias))


def copy_attention_back(target, source, d):
    """zoo's fused attention -> keras MultiHeadAttention's (d, h, k) q, k, v and (h, k, d) output."""
    kernel = to_numpy(source.query_key_value_dense.kernel)  # (d, 3d)
    bias = to_numpy(source.query_key_value_dense.bias)  # (3d,)
    for i, layer in enumerate((target._query_dense, target._key_dense, target._value_dense)):
        layer.kernel.assign(kernel[:, i * d : (i + 1) * d].reshape(layer.kernel.shape))
        layer.bias.assign(bias[i * d : (i + 1) * d].reshape(layer.bias.shape))
    target._output_dense.kernel.assign(to_numpy(source.output_dense.kernel).reshape(target._output_dense.kernel.shape))
    target._output_dense.bias.assign(to_numpy(source.output_dense.bias))


def copy_block(target, source, d):
    """keras-hub block `source` -> zoo block `target`."""
    copy_attention(target.self_attention, source._self_attention_layer, d)
    copy_layer_norm(target.self_attention_add_norm.layer_norm, source._self_attention_layer_norm)
    copy_dense(target.feed_forward.intermediate_dense, source._feedforward_intermediate_dense)
    copy_dense(target.feed_forward.output_dense, source._feedforward_output_dense)
    copy_layer_norm(target.feed_forward_add_norm.layer_norm, source._feedforward_layer_norm)


def copy_block_back(target, source, d):
    """zoo block `source` -> keras-hub block `target`."""
    copy_attention_back(target._self_attention_layer, source.self_attention, d)
    copy_layer_norm(target._self_attention_layer_norm, source.self_attention_add_norm.layer_norm)
    copy_dense(target._feedforward_intermediate_dense, source.feed_forward.intermediate_dense)
    copy_dense(target._feedforward_output_dense, source.feed_forward.output_dense)
    copy_layer_norm(target._feedforward_layer_norm, source.feed_forward_add_norm.layer_norm)


def copy_embeddings(target, source):
    """keras-hub's token and position embeddings -> the zoo's."""
    target.embedding.token_embedding.embeddings.assign(to_numpy(source.token_embedding.embeddings))
    target.embedding.position_embedding.position_embeddings.assign(to_numpy(source.position_embedding.position_embeddings))


def copy_embeddings_back(target, source):
    target.token_embedding.embeddings.assign(to_numpy(source.embedding.token_embedding.embeddings))
    target.position_embedding.position_embeddings.assign(to_numpy(source.embedding.position_embedding.position_embeddings))


def hub_sizes(backbone):
    """The constructor arguments keras-hub's GPT2Backbone and BertBackbone share, from a zoo backbone."""
    config = backbone.get_config()
    return dict(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=config["dropout"],
        max_sequence_length=config["max_sequence_length"],
        dtype=backbone.dtype_policy.name,
    )


def epsilon_and_gelu(config, expected_epsilon):
    """(refusals, approximations) for keras-hub's fixed LayerNorm epsilon and its tanh-approximate GELU."""
    refusals, approximations = [], []
    if not np.isclose(config["layer_norm_epsilon"], expected_epsilon, rtol=1e-3, atol=0):
        refusals.append(f"layer_norm_epsilon is {config['layer_norm_epsilon']}; keras-hub's is fixed at {expected_epsilon}")
    activation = config.get("activation")
    if activation == "gelu":
        approximations.append(
            "keras-hub computes the tanh-approximate GELU where this model uses the exact one "
            "(activations differ by < 1e-3)"
        )
    elif activation != "gelu_approximate":
        refusals.append(f"activation is {activation!r}; keras-hub's is the GELU")
    return refusals, approximations
