"""What the encoder and decoder blocks share: their common arguments, checked
and kept as config, and the Keras mask they carry.

A block's output carries a Keras mask (what `mask_zero` embeddings start),
so that the next layer sees the padding without being told: the block's
`padding_mask` when one is given, otherwise its input's Keras mask. Keras
itself attaches it: a block's `__call__` passes the padding mask on as
Keras' `mask` argument, which `Layer.__call__` hands to `compute_mask`.
"""

import keras


def set_block_args(block, num_heads, intermediate_dim, dropout, attention_dropout, activation, norm_first,
                   norm_epsilon, kernel_initializer, output_kernel_initializer):
    """Checks the arguments both blocks take and keeps them on `block` as
    its config: `attention_dropout` None is `dropout`, and
    `output_kernel_initializer` None is `kernel_initializer`."""
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"`num_heads` must be a positive integer; got {num_heads!r}.")
    if intermediate_dim is not None and (not isinstance(intermediate_dim, int) or intermediate_dim < 1):
        raise ValueError(f"`intermediate_dim` must be a positive integer; got {intermediate_dim!r}.")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")
    block.num_heads = num_heads
    block.intermediate_dim = intermediate_dim
    block.dropout = dropout
    block.attention_dropout = dropout if attention_dropout is None else attention_dropout
    block.activation = activation
    block.norm_first = norm_first
    block.norm_epsilon = norm_epsilon
    block.kernel_initializer = keras.initializers.get(kernel_initializer)
    block.output_kernel_initializer = keras.initializers.get(output_kernel_initializer or kernel_initializer)


def block_config(block):
    """The config entries of the arguments `set_block_args` kept on `block`."""
    return {
        "num_heads": block.num_heads,
        "intermediate_dim": block.intermediate_dim,
        "dropout": block.dropout,
        "attention_dropout": block.attention_dropout,
        "activation": block.activation,
        "norm_first": block.norm_first,
        "norm_epsilon": block.norm_epsilon,
        "kernel_initializer": keras.initializers.serialize(block.kernel_initializer),
        "output_kernel_initializer": keras.initializers.serialize(block.output_kernel_initializer),
    }


def padding_as_keras_mask(padding_mask, kwargs):
    """`Layer.__call__` kwargs with `padding_mask` as Keras' `mask`, which
    Keras attaches (through `compute_mask`) to the block's output."""
    if padding_mask is not None and kwargs.get("mask") is None:
        kwargs = dict(kwargs, mask=padding_mask)
    return kwargs


def input_keras_mask(padding_mask, mask, x_mask):
    """The Keras mask of a block's input x (B, T), or None.

    Keras fills `mask` when x is the only tensor argument and `x_mask` when
    there are several; with a `padding_mask`, `mask` is that padding mask
    (see `padding_as_keras_mask`), not x's.
    """
    if x_mask is not None or padding_mask is not None:
        return x_mask
    return mask


def output_keras_mask(previous_mask):
    return None if previous_mask is None else keras.ops.cast(previous_mask, "bool")
