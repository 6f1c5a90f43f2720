"""Rotary position embedding (Su et al. 2021), as Llama, Mistral and Qwen
apply it to queries and keys.

Shape letters: B batch, T length, h heads, k head width.
"""

import math

import keras
import numpy as np
from keras import ops

from zoo.layers.attention import is_per_row, positions

ROPE_SCALING_TYPES = ("llama3",)


def inverse_frequencies(head_dim, rope_theta=10000.0, rope_scaling=None):
    """The k/2 rotation frequencies theta^(-2i/k), in float64, with Llama
    3's frequency scaling when `rope_scaling` asks for it.

    Args:
        head_dim: k, even.
        rope_theta: the base theta (10,000 in the paper, 500,000 in Llama 3,
            1,000,000 in Qwen2.5).
        rope_scaling: None, or a Hugging Face `rope_scaling` dict of type
            "llama3" (`factor`, `low_freq_factor`, `high_freq_factor`,
            `original_max_position_embeddings`): long wavelengths are
            divided by `factor`, short ones kept, the band between
            interpolated.

    Returns:
        A (k/2,) float64 NumPy array.
    """
    if head_dim % 2:
        raise ValueError(f"Rotary embedding needs an even head width; got {head_dim}.")
    inverse = 1.0 / rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if rope_scaling is None:
        return inverse
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind not in ROPE_SCALING_TYPES:
        raise ValueError(f"`rope_scaling` of type {kind!r} is not supported; supported: {ROPE_SCALING_TYPES}.")
    factor = rope_scaling["factor"]
    low, high = rope_scaling.get("low_freq_factor", 1.0), rope_scaling.get("high_freq_factor", 4.0)
    context = rope_scaling.get("original_max_position_embeddings", 8192)
    wavelength = 2 * math.pi / inverse
    scaled = np.where(wavelength > context / low, inverse / factor, inverse)
    smooth = (context / wavelength - low) / (high - low)
    interpolated = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= context / high) & (wavelength <= context / low)
    return np.where(medium, interpolated, scaled)


@keras.saving.register_keras_serializable(package="zoo")
class RotaryEmbedding(keras.layers.Layer):
    """Rotates each pair (x_i, x_{i + k/2}) of a head by the angle
    position * theta_i: relative positions then appear in q . k alone.

    The pairs are the two halves of the head (the "rotate half" layout of
    the Hugging Face and keras-hub checkpoints), not the paper's adjacent
    pairs; the angles are computed in float32 from frequencies fixed at
    construction. keras-hub's `RotaryEmbedding` has no Llama 3 frequency
    scaling, which the Llama 3.2 checkpoints need, so it is written here.

    Args:
        head_dim: k.
        rope_theta: the frequency base.
        rope_scaling: None or a "llama3" scaling dict (see
            `inverse_frequencies`).

    Call arguments:
        x: (B, T, h, k) queries or keys.
        start_index: the absolute position of x's first row (the cache
            index during cached decoding).

    Returns:
        (B, T, h, k), in x's dtype.

    Example:

    ```python
    rotary = RotaryEmbedding(head_dim=8)
    q = np.random.rand(1, 5, 2, 8).astype("float32")  # (B, T, h, k)
    rotated = rotary(q, start_index=3)  # positions 3..7
    ```

    References:
        Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", section 3.4.2 (eq. 34); Meta's Llama 3 `rope_scaling`.
    """

    def __init__(self, head_dim, rope_theta=10000.0, rope_scaling=None, **kwargs):
        super().__init__(**kwargs)
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.inverse = inverse_frequencies(head_dim, rope_theta, rope_scaling).astype("float32")
        self.built = True

    def call(self, x, start_index=0):
        if is_per_row(start_index):  # each row at its own position
            rows = ops.cast(positions(ops.shape(x)[1], start_index), "float32")  # (B, T)
            angles = ops.expand_dims(rows, 2) * ops.convert_to_tensor(self.inverse)  # (B, T, k/2)
            cos = ops.expand_dims(ops.cast(ops.cos(angles), x.dtype), 2)  # (B, T, 1, k/2)
            sin = ops.expand_dims(ops.cast(ops.sin(angles), x.dtype), 2)
        else:
            steps = ops.arange(ops.shape(x)[1], dtype="float32") + ops.cast(start_index, "float32")
            angles = ops.expand_dims(steps, 1) * ops.expand_dims(ops.convert_to_tensor(self.inverse), 0)  # (T, k/2)
            cos = ops.expand_dims(ops.cast(ops.cos(angles), x.dtype), (0, 2))  # (1, T, 1, k/2)
            sin = ops.expand_dims(ops.cast(ops.sin(angles), x.dtype), (0, 2))
        first, second = ops.split(x, 2, axis=-1)  # 2 x (B, T, h, k/2)
        return ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"head_dim": self.head_dim, "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling})
        return config
