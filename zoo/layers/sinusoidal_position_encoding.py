"""The paper's fixed sinusoidal position encoding (Vaswani et al., 3.5).

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops

from zoo.layers.attention import positions


@keras.saving.register_keras_serializable(package="zoo")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    No weights. Sines sit on even channels and cosines on odd ones, exactly
    as in the paper's formula; with `interleaved=False` the same sines fill
    the first ceil(d/2) channels and the cosines the rest (Marian's
    `MarianSinusoidalPositionalEmbedding`, tensor2tensor's
    `get_timing_signal_1d`).

    Args:
        max_wavelength: the 10000 of the formula.
        interleaved: True (the paper: sin, cos, sin, ...) or False (all
            sines, then all cosines).

    Call arguments:
        inputs: (B, T, d) embeddings; only the shape is used.
        start_index: position of the first input (for cached decoding).

    Returns:
        (B, T, d) encodings, in the layer's compute dtype.

    Example:

    ```python
    encoding = SinusoidalPositionEncoding()
    pe = encoding(np.zeros((1, 4, 6), "float32"))  # (1, 4, 6)
    np.testing.assert_allclose(pe[0, 1, :2], [np.sin(1.0), np.cos(1.0)], atol=1e-6)
    ```

    References:
        Vaswani et al. 2017, section 3.5 ("Positional Encoding").
    """

    def __init__(self, max_wavelength=10000, interleaved=True, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(f"`max_wavelength` must be positive; got {max_wavelength!r}.")
        self.max_wavelength = max_wavelength
        self.interleaved = interleaved
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, width = shape[-2], shape[-1]
        steps = ops.cast(positions(length, start_index), "float32")  # (T,), or (B, T) one a row
        channel = ops.arange(width)  # (d,)
        if self.interleaved:
            is_sine = channel % 2 == 0
            pair = channel // 2 * 2  # 2i for channels 2i and 2i+1
        else:
            sines = (width + 1) // 2  # channels 0..sines-1 hold the sines
            is_sine = channel < sines
            pair = ops.where(is_sine, channel, channel - sines) * 2  # 2i for channels i and sines + i
        inverse_frequency = ops.power(
            ops.cast(self.max_wavelength, "float32"), -ops.cast(pair, "float32") / ops.cast(width, "float32")
        )
        angles = ops.expand_dims(steps, -1) * inverse_frequency  # (T, d) or (B, T, d)
        encoding = ops.where(is_sine, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "interleaved": self.interleaved})
        return config
