"""The position-wise feed-forward network (Vaswani et al., 3.3).

Shape letters: B batch, T length, d width, f inner width (d_ff).
"""

import math

import keras
from keras import ops

from zoo.layers.initializers import fresh
from zoo.layers.lora_dense import LoraDense

ACTIVATIONS = ("relu", "gelu", "gelu_approximate", "silu")


def activation_function(name):
    if name == "silu":  # Swish-1, the gate of SwiGLU
        return keras.activations.silu
    if name == "gelu":
        return gelu
    if name == "gelu_approximate":  # GPT-2's tanh approximation
        return lambda x: keras.activations.gelu(x, approximate=True)
    return keras.activations.relu


def gelu(x):
    """GELU(x) = x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))) (Hendrycks and
    Gimpel 2016), BERT's exact form. Written with erf, which every runtime a
    model exports to has (ONNX has no erfc, which TensorFlow's own gelu uses)."""
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


@keras.saving.register_keras_serializable(package="zoo")
class FeedForward(keras.layers.Layer):
    """FFN(x) = W2 act(W1 x + b1) + b2, or with `gated=True` the GLU
    variant FFN(x) = W2 (act(W_gate x) * W1 x): SwiGLU with "silu", the
    feed-forward network of Llama, Mistral and Qwen.

    Args:
        intermediate_dim: d_ff; 4 * d by default (the paper's 2048 for 512).
        activation: "relu" (the paper), "gelu" (BERT, exact),
            "gelu_approximate" (GPT-2's tanh form) or "silu" (with
            `gated=True`, SwiGLU).
        gated: multiply the activation of a third projection W_gate (the
            "gate") by W1 x (the "up" projection); Shazeer 2020.
        dropout: dropout on the inner activations (0 in the paper).
        kernel_initializer: of both matrices.
        output_kernel_initializer: of W2 (GPT-2 scales it); defaults to
            `kernel_initializer`.
        use_bias: whether W1 and W2 have biases (nanoGPT's `bias=False`
            drops them).

    Call arguments:
        inputs: (B, T, d).

    Returns:
        (B, T, d).

    Example:

    ```python
    ffn = FeedForward(intermediate_dim=32, activation="gelu")
    y = ffn(np.random.rand(2, 5, 8).astype("float32"))  # (2, 5, 8)
    ```

    References:
        Vaswani et al. 2017, section 3.3 ("Position-wise Feed-Forward
        Networks", eq. 2); Hendrycks and Gimpel 2016 (GELU); Shazeer 2020,
        "GLU Variants Improve Transformer", eq. 6 (SwiGLU).
    """

    def __init__(
        self,
        intermediate_dim=None,
        activation="relu",
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        bias_initializer="zeros",
        use_bias=True,
        gated=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if intermediate_dim is not None and (not isinstance(intermediate_dim, int) or intermediate_dim < 1):
            raise ValueError(f"`intermediate_dim` must be a positive integer; got {intermediate_dim!r}.")
        if activation not in ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {ACTIVATIONS}; got {activation!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.use_bias = use_bias
        self.gated = gated
        self.supports_masking = True

    def build(self, input_shape):
        d = input_shape[-1]
        inner = self.intermediate_dim or 4 * d
        if self.gated:
            self.gate_dense = LoraDense(
                inner,
                activation=activation_function(self.activation),
                use_bias=self.use_bias,
                kernel_initializer=fresh(self.kernel_initializer),
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name="gate",
            )
            self.gate_dense.build(input_shape)
        self.intermediate_dense = LoraDense(
            inner,
            activation=None if self.gated else activation_function(self.activation),
            use_bias=self.use_bias,
            kernel_initializer=fresh(self.kernel_initializer),
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="intermediate",
        )
        self.intermediate_dense.build(input_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = LoraDense(
            d,
            use_bias=self.use_bias,
            kernel_initializer=fresh(self.output_kernel_initializer),
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (inner,))
        self.built = True

    def call(self, inputs, training=None):
        h = self.intermediate_dense(inputs)  # (B, T, f)
        if self.gated:
            h = self.gate_dense(inputs) * h  # (B, T, f)
        return self.output_dense(self.dropout_layer(h, training=training))  # (B, T, d)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": self.activation,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(self.output_kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "use_bias": self.use_bias,
                "gated": self.gated,
            }
        )
        return config
