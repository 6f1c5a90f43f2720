"""A token embedding that can also be used in reverse as a tied output head.

Shape letters: B batch, T length, d width, V vocabulary.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class TokenEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` whose table, transposed, also maps to logits.

    Called as usual, (B, T) ids -> (B, T, d). Called with `reverse=True`,
    (B, T, d) hidden states -> (B, T, V) logits through the same table: the
    weight tying of Press & Wolf (2017) used by the Transformer, GPT and
    BERT. Token ids outside [0, V) are an error in eager calls.

    Args:
        input_dim: V. output_dim: d. Other arguments as
            `keras.layers.Embedding`.

    Call arguments:
        inputs: (B, T) ids, or with `reverse=True` (B, T, d) hidden states.
        reverse: map hidden states to (B, T, V) logits.

    Example:

    ```python
    embedding = TokenEmbedding(input_dim=10, output_dim=4)
    x = embedding(np.array([[1, 2, 3]]))  # (1, 3, 4)
    logits = embedding(x, reverse=True)  # (1, 3, 10)
    ```

    References:
        Press and Wolf 2017 (tying the input and output embeddings);
        Vaswani et al. 2017, section 3.4.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.supports_masking = True  # passes no mask on; see TokenAndPositionEmbedding

    def call(self, inputs, reverse=False):
        if reverse:
            table = ops.cast(ops.convert_to_tensor(self.embeddings), self.compute_dtype)
            return ops.matmul(ops.cast(inputs, self.compute_dtype), ops.transpose(table))
        _check_ids(inputs, self.input_dim)
        return super().call(inputs)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape[:-1]) + (self.input_dim,)
        return tuple(input_shape) + (self.output_dim,)

    def compute_output_spec(self, inputs, reverse=False):
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


def eager_values(x):
    """x as a NumPy array, or None if it is symbolic or traced (the data
    pipeline checks those instead)."""
    try:
        import numpy as np

        return np.asarray(x)
    except Exception:
        return None


def first_out_of_range(values, high):
    """The first value of an array outside [0, high), or None."""
    bad = values[(values < 0) | (values >= high)]
    return int(bad.flat[0]) if bad.size else None


def _check_ids(ids, vocabulary_size):
    """Cheap eager check that token ids are inside the vocabulary."""
    values = eager_values(ids)
    if values is None or not values.size:
        return
    bad = first_out_of_range(values, vocabulary_size)
    if bad is not None:
        raise ValueError(
            f"Token id {bad} is outside the vocabulary: ids must be in "
            f"[0, {vocabulary_size})."
        )
