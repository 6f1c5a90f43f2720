"""Learned position embeddings (GPT, BERT).

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops

from zoo.layers.attention import is_per_row, positions
from zoo.layers.initializers import fresh


@keras.saving.register_keras_serializable(package="zoo")
class PositionEmbedding(keras.layers.Layer):
    """A learned (max_length + offset, d) table; position t reads row t + offset.

    Args:
        sequence_length: the maximum length this model accepts.
        initializer: initializer of the table.
        offset: rows before position 0's (BART's `BartLearnedPositionalEmbedding`
            keeps 2, from fairseq's padding-aware positions); 0 for GPT and BERT.
            The table keeps them, so a checkpoint's table comes and goes whole.

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
    bart = PositionEmbedding(sequence_length=16, offset=2)
    q = bart(x)  # rows 2..6 of its (18, 8) table
    ```

    References:
        Radford et al. 2018 (GPT-1), section 4.1 ("learned position
        embeddings"); Devlin et al. 2019 (BERT), section 3, Figure 2;
        Lewis et al. 2020 (BART), as transformers' `BartLearnedPositionalEmbedding`
        (the offset).
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", offset=0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(sequence_length, int) or sequence_length < 1:
            raise ValueError(f"`sequence_length` must be a positive integer; got {sequence_length!r}.")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"`offset` must be a non-negative integer; got {offset!r}.")
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)
        self.offset = offset

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length + self.offset, input_shape[-1]),
            initializer=fresh(self.initializer),
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
        if is_per_row(start_index):  # each row at its own position
            rows = ops.take(table, positions(length, start_index) + self.offset, axis=0)  # (B, T, d)
            return ops.cast(rows, self.compute_dtype)
        first = start_index + self.offset if self.offset else start_index
        rows = ops.slice(table, (first, 0), (length, shape[-1]))  # (T, d)
        return ops.broadcast_to(ops.cast(rows, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
                "offset": self.offset,
            }
        )
        return config
