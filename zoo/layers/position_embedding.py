"""Learned position embeddings (GPT, BERT).

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class PositionEmbedding(keras.layers.Layer):
    """A learned (max_length, d) table; position t reads row t.

    Args:
        sequence_length: the maximum length this model accepts.
        initializer: initializer of the table.

    Call arguments:
        inputs: (B, T, d) embeddings; only the shape is used.
        start_index: position of the first input (for cached decoding).

    Returns:
        (B, T, d) position embeddings.

    Example:

    ```python
    positions = PositionEmbedding(sequence_length=16)
    x = np.zeros((2, 5, 8), "float32")  # (B, T, d)
    p = positions(x, start_index=3)  # rows 3..7 of the table, (2, 5, 8)
    ```

    References:
        Radford et al. 2018 (GPT-1), section 4.1 ("learned position
        embeddings"); Devlin et al. 2019 (BERT), section 3, Figure 2.
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(sequence_length, int) or sequence_length < 1:
            raise ValueError(f"`sequence_length` must be a positive integer; got {sequence_length!r}.")
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length = shape[-2]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.sequence_length:
                raise ValueError(
                    f"Sequence of length {start_index + length} is longer than the "
                    f"maximum length {self.sequence_length} of this position embedding."
                )
        table = ops.convert_to_tensor(self.position_embeddings)
        rows = ops.slice(table, (start_index, 0), (length, shape[-1]))  # (T, d)
        return ops.broadcast_to(ops.cast(rows, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
