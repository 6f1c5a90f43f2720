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


def _check_ids(ids, vocabulary_size):
    """Cheap eager check that token ids are inside the vocabulary."""
    try:
        import numpy as np

        values = np.asarray(ids)
    except Exception:  # symbolic or traced: checked in the data pipeline instead
        return
    if values.size and (values.min() < 0 or values.max() >= vocabulary_size):
        bad = values[(values < 0) | (values >= vocabulary_size)]
        raise ValueError(
            f"Token id {int(bad.flat[0])} is outside the vocabulary: ids must be in "
            f"[0, {vocabulary_size})."
        )
