"""Mean pooling over the non-padded positions of a sequence.

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class MeanPooling(keras.layers.Layer):
    """Mean of the (B, T, d) vectors over non-padded positions -> (B, d).

    Call arguments:
        sequence: (B, T, d).
        padding_mask: (B, T), 1 at tokens, 0 at padding.

    Returns:
        (B, d); a row with no token gives 0.

    Example:

    ```python
    pooled = MeanPooling()(np.ones((2, 4, 8), "float32"), np.array([[1, 1, 0, 0], [1, 1, 1, 1]]))
    pooled.shape  # (2, 8)
    ```

    References:
        Reimers and Gurevych 2019 (Sentence-BERT), section 3 (the MEAN
        pooling strategy).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_mask(self, sequence, previous_mask):
        return None

    def call(self, sequence, padding_mask):
        weights = ops.expand_dims(ops.cast(padding_mask, sequence.dtype), -1)  # (B, T, 1)
        total = ops.sum(sequence * weights, axis=1)
        count = ops.maximum(ops.sum(weights, axis=1), 1.0)
        return total / count

    def compute_output_shape(self, sequence_shape, padding_mask_shape):
        return (sequence_shape[0], sequence_shape[-1])
