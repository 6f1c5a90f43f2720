"""Root-mean-square layer normalisation (Zhang and Sennrich 2019).

Shape letters: B batch, T length, d width.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class RMSNorm(keras.layers.Layer):
    """RMSNorm(x) = g * x / sqrt(mean(x^2) + epsilon): no centring, no bias.

    Computed as the Llama, Mistral and Qwen checkpoints compute it: the
    statistic in float32 whatever the input dtype, the normalised x cast
    back to the input dtype, then scaled by g. Keras' `RMSNormalization`
    scales in float32 before the cast, which differs in the last bit under
    bfloat16, so the checkpoints' order is written out here.

    With `unit_offset=True` it is Gemma's form, (1 + g) * x / sqrt(mean(x^2)
    + epsilon) with g initialised to 0, computed as the Gemma checkpoints
    compute it: the scaling in float32, then the cast to the input dtype.

    Args:
        epsilon: added to the mean square (the checkpoint's
            `rms_norm_eps`).
        unit_offset: scale by 1 + g instead of g (Gemma).

    Call arguments:
        x: (..., d).

    Returns:
        (..., d), in the input's dtype.

    Example:

    ```python
    norm = RMSNorm(epsilon=1e-6)
    y = norm(np.random.rand(2, 5, 8).astype("float32"))  # (2, 5, 8)
    ```

    References:
        Zhang and Sennrich 2019, "Root Mean Square Layer Normalization",
        eq. 4; Touvron et al. 2023 (LLaMA), section 2.2 (pre-normalisation
        with RMSNorm).
    """

    def __init__(self, epsilon=1e-6, unit_offset=False, **kwargs):
        super().__init__(**kwargs)
        if not epsilon > 0:
            raise ValueError(f"`epsilon` must be positive; got {epsilon!r}.")
        self.epsilon = epsilon
        self.unit_offset = unit_offset
        self.supports_masking = True

    def build(self, input_shape):
        initializer = "zeros" if self.unit_offset else "ones"
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer=initializer)
        self.built = True

    def call(self, x):
        dtype = x.dtype
        x = ops.cast(x, "float32")
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        if self.unit_offset:
            return ops.cast(x * (1.0 + ops.cast(self.scale, "float32")), dtype)
        return ops.cast(self.scale, dtype) * ops.cast(x, dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "unit_offset": self.unit_offset})
        return config
