"""Layer normalisation (Ba et al. 2016) with its statistics in one pass.

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class LayerNormalization(keras.layers.LayerNormalization):
    """LayerNorm(x) = gamma * (x - mean) / sqrt(var + epsilon) + beta over
    the last axis: `keras.layers.LayerNormalization`, its weights (`gamma`,
    `beta`), arguments and configuration, with the mean and the variance
    read from the input in one pass.

    Keras computes the mean, then the mean squared deviation from it: two
    reductions, one after the other. Here both statistics are sums over
    the same input, E[c] and E[c^2] of c = x - x_0 (the row less its first
    value), and var = E[c^2] - E[c]^2, so XLA computes them in one
    reduction kernel: on a GPU a batch-1 decoding step launches two kernels
    per normalisation where Keras' form launches three.

    The shift bounds the cancellation of the one-pass form: x_0 is one of
    the row's d values, so (x_0 - mean)^2 <= d var, and the variance's
    relative rounding error stays near (d + 1) times float32's epsilon
    whatever the row's offset (without the shift it grows as mean^2 / var:
    a row of 1000 + N(0, 1) would lose every digit). The statistics and the
    normalisation run in float32 at least, as Keras' do, and the output is
    in the layer's compute dtype.

    Other axes than the last, and `rms_scaling=True`, are Keras' own
    computation. The class keeps Keras' name: a model file stores a
    layer's weights under its snake-cased class name, so files saved with
    Keras' layer load into this one.

    Call arguments:
        x: (..., d).

    Returns:
        (..., d).

    Example:

    ```python
    norm = LayerNormalization(epsilon=1e-5)
    y = norm(np.random.rand(2, 5, 8).astype("float32"))  # (2, 5, 8), each row mean 0, variance 1
    ```

    References:
        Ba, Kiros and Hinton 2016, "Layer Normalization", eq. 4; Chan,
        Golub and LeVeque 1983, "Algorithms for computing the sample
        variance" (the shifted one-pass form).
    """

    def call(self, inputs):
        if self.rms_scaling or self.axis not in ([-1], [len(inputs.shape) - 1]):
            return super().call(inputs)
        x = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        c = x - ops.stop_gradient(x[..., :1])  # (..., d), shifted by the row's first value
        mean = ops.mean(c, axis=-1, keepdims=True)
        variance = ops.maximum(ops.mean(ops.square(c), axis=-1, keepdims=True) - ops.square(mean), 0.0)
        inverse = ops.rsqrt(variance + self.epsilon)
        if self.gamma is not None:
            inverse = inverse * ops.cast(self.gamma, x.dtype)
        outputs = (c - mean) * inverse
        if self.beta is not None:
            outputs = outputs + ops.cast(self.beta, x.dtype)
        return ops.cast(outputs, self.compute_dtype)
