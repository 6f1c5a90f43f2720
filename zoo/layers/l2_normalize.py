"""Scaling vectors to unit length.

Shape letters: d width.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class L2Normalize(keras.layers.Layer):
    """Unit-length vectors, so that a dot product is a cosine similarity.

    Call arguments:
        x: (..., d).

    Returns:
        (..., d), `x / max(||x||, 1e-12)` along the last axis.

    Example:

    ```python
    unit = L2Normalize()(np.array([[3.0, 4.0]], "float32"))  # [[0.6, 0.8]]
    ```

    References:
        Reimers and Gurevych 2019 (Sentence-BERT), section 3 (cosine
        similarity between sentence embeddings).
    """

    def call(self, x):
        return x / ops.maximum(ops.norm(x, axis=-1, keepdims=True), 1e-12)
