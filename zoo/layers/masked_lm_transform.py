"""The transform of BERT's masked-LM head (Devlin et al. 2019).

Shape letters: B batch, T length, P masked positions, d width.
"""

import keras
from keras import ops

from zoo.layers.feed_forward import activation_function
from zoo.layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="zoo")
class MaskedLMTransform(keras.layers.Layer):
    """The first half of BERT's masked-LM head: gather the masked positions,
    then Dense + gelu and LayerNorm. The logits follow through the tied token
    table (`embedding(h, reverse=True)`) and an `OutputBias`.

    Args:
        activation: "gelu" (exact, BERT) or "gelu_approximate".
        layer_norm_epsilon: the LayerNorm's epsilon (1e-12 in BERT).
        initializer_range: std of the dense layer's truncated-normal
            initialisation (0.02).

    Call arguments:
        hidden: (B, T, d) sequence output.
        mask_positions: (B, P) int32 indices of the masked tokens.

    Returns:
        (B, P, d).

    Example:

    ```python
    transform = MaskedLMTransform()
    hidden = np.random.rand(2, 6, 8).astype("float32")  # (B, T, d)
    out = transform(hidden, np.array([[1, 4], [0, 5]]))  # (2, 2, 8): (B, P, d)
    ```

    References:
        Devlin et al. 2019 (BERT), section 3.1 ("Task #1: Masked LM") and
        its released code's `get_masked_lm_output`.
    """

    def __init__(self, activation="gelu", layer_norm_epsilon=1e-12, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range

    def build(self, hidden_shape, mask_positions_shape=None):
        d = hidden_shape[-1]
        self.dense = keras.layers.Dense(
            d,
            activation=activation_function(self.activation),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.dense.build(hidden_shape)
        self.norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="norm"
        )
        self.norm.build(hidden_shape)
        self.built = True

    def compute_mask(self, hidden, previous_mask):
        return None

    def call(self, hidden, mask_positions):
        positions = ops.expand_dims(ops.cast(mask_positions, "int32"), -1)  # (B, P, 1)
        gathered = ops.take_along_axis(hidden, positions, axis=1)  # (B, P, d)
        return self.norm(self.dense(gathered))

    def compute_output_shape(self, hidden_shape, mask_positions_shape):
        return (hidden_shape[0], mask_positions_shape[1], hidden_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        return config
