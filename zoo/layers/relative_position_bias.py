"""T5's relative position bias (Raffel et al. 2020, section 2.1).

Shape letters: B batch, T query length, S key length, h heads.
"""

import math

import keras
from keras import ops

from zoo.layers.attention import is_per_row, positions


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """The bucket of each key-minus-query offset (int32, any shape), as T5
    buckets them: half the buckets for each direction when bidirectional
    (the decoder's causal attention folds every later key into offset 0);
    offsets below half the buckets each have their own, the rest share
    logarithmically wider ones up to `max_distance`, beyond which all
    offsets fall in the last bucket. The logarithm is taken in float32,
    as the reference implementation takes it."""
    buckets = ops.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + ops.cast(relative_position > 0, "int32") * num_buckets
        distance = ops.abs(relative_position)
    else:
        distance = -ops.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    # Clamped below at max_exact so that the logarithm is finite where its bucket is not used.
    far = ops.cast(ops.maximum(distance, max_exact), "float32")
    large = max_exact + ops.cast(
        ops.log(far / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact), "int32"
    )
    large = ops.minimum(large, num_buckets - 1)
    return buckets + ops.where(distance < max_exact, distance, large)


@keras.saving.register_keras_serializable(package="zoo")
class RelativePositionBias(keras.layers.Layer):
    """A learned scalar per head and relative-position bucket, added to the
    attention logits: T5's position encoding, in place of absolute
    positions. One table per stack, shared by all its layers (transformers
    keeps it in the stack's first block, `relative_attention_bias`).

    Args:
        num_heads: h.
        num_buckets: `relative_attention_num_buckets` (32 in T5).
        max_distance: `relative_attention_max_distance` (128 in T5).
        bidirectional: True for the encoder, False for the decoder's
            causal self-attention.

    Call arguments:
        x: (B, T, ...) the queries (only the length is read).
        key_length: S; T when None (self-attention over x itself).
        start_index: the absolute position of x's first row (the cache
            index in cached decoding): a scalar, or (B,) one a row (a
            server's slots, each at its own position).

    Returns:
        (1, h, T, S) float bias, in the layer's compute dtype; (B, h, T, S)
        for a (B,) `start_index`.

    Example:
    ```python
    bias = RelativePositionBias(num_heads=2, num_buckets=8, max_distance=16)
    bias(np.zeros((1, 5, 4))).shape  # (1, 2, 5, 5)
    ```

    References:
        Raffel et al. 2020 (T5), section 2.1 ("each position embedding is a
        scalar that is added to the corresponding logit"); Shaw et al. 2018.
    """

    def __init__(self, num_heads, num_buckets=32, max_distance=128, bidirectional=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.num_buckets, self.num_heads), initializer="random_normal"
        )
        self.built = True

    def call(self, x, key_length=None, start_index=0):
        query_length = ops.shape(x)[1]
        key_length = query_length if key_length is None else key_length
        if is_per_row(start_index):
            return self._per_row(query_length, key_length, start_index)
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(start_index, "int32")
        key_positions = ops.arange(key_length, dtype="int32")
        relative = ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 1)  # (T, S)
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
        bias = ops.take(ops.cast(self.embeddings, self.compute_dtype), buckets, axis=0)  # (T, S, h)
        return ops.expand_dims(ops.transpose(bias, (2, 0, 1)), 0)  # (1, h, T, S)

    def _per_row(self, query_length, key_length, start_index):
        """The bias of each row's queries from its own start: (B, h, T, S)."""
        query_positions = positions(query_length, start_index)  # (B, T)
        key_positions = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)  # (1, S)
        relative = ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 2)  # (B, T, S)
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
        bias = ops.take(ops.cast(self.embeddings, self.compute_dtype), buckets, axis=0)  # (B, T, S, h)
        return ops.transpose(bias, (0, 3, 1, 2))  # (B, h, T, S)

    def compute_output_spec(self, x, key_length=None, start_index=0):
        length = x.shape[1]
        rows = x.shape[0] if is_per_row(start_index) else 1
        return keras.KerasTensor((rows, self.num_heads, length, length if key_length is None else key_length),
                                 dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "num_buckets": self.num_buckets,
                       "max_distance": self.max_distance, "bidirectional": self.bidirectional})
        return config
