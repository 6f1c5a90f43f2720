"""A learned bias over the vocabulary, added to tied-embedding logits.

Shape letters: V vocabulary.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class OutputBias(keras.layers.Layer):
    """Adds a learned bias over the vocabulary to tied-embedding logits.

    Call arguments:
        logits: (..., V).

    Returns:
        (..., V), `logits + bias`, the bias (V,) starting at zero.

    Example:

    ```python
    bias = OutputBias()
    logits = bias(np.zeros((2, 3, 10), "float32"))  # (2, 3, 10), zero at first
    ```

    References:
        Devlin et al. 2019 (BERT), the masked-LM head of its released code
        (`output_bias`).
    """

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")
        self.built = True

    def call(self, logits):
        return logits + ops.cast(self.bias, logits.dtype)
