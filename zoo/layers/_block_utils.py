"""What the encoder and decoder blocks share: argument checks and masks."""

import keras
from keras.src.backend.common.masking import get_keras_mask, set_keras_mask


def check_block_args(num_heads, intermediate_dim, dropout):
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"`num_heads` must be a positive integer; got {num_heads!r}.")
    if intermediate_dim is not None and (not isinstance(intermediate_dim, int) or intermediate_dim < 1):
        raise ValueError(f"`intermediate_dim` must be a positive integer; got {intermediate_dim!r}.")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")


def propagate_padding_mask(outputs, inputs, padding_mask):
    """Let the next block see the padding mask as the Keras implicit mask."""
    if padding_mask is None or get_keras_mask(inputs) is not None:
        return outputs
    mask = keras.ops.cast(padding_mask, "bool")
    try:
        set_keras_mask(outputs, mask)
    except AttributeError:  # backend arrays that cannot carry attributes
        pass
    return outputs
