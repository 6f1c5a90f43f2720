"""The residual connection around a sub-layer, with layer normalisation.

Shape letters: B batch, T length, d width.
"""

import keras

from zoo.layers.layer_normalization import LayerNormalization
from zoo.layers.rms_norm import RMSNorm

NORMALIZATIONS = ("layer_norm", "rms_norm", "gemma_rms_norm")


def normalization_layer(normalization, epsilon, use_bias=True, dtype=None, name=None):
    """The normalisation a `normalization` name stands for: "layer_norm"
    (`LayerNormalization`, with its offset beta if `use_bias`),
    "rms_norm" (`RMSNorm`) or "gemma_rms_norm" (`RMSNorm` with Gemma's
    (1 + g) scale)."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"`normalization` must be one of {NORMALIZATIONS}; got {normalization!r}.")
    if normalization == "layer_norm":
        return LayerNormalization(epsilon=epsilon, center=use_bias, dtype=dtype, name=name)
    return RMSNorm(epsilon, unit_offset=normalization == "gemma_rms_norm", dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="zoo")
class AddNorm(keras.layers.Layer):
    """"Add & Norm" (Vaswani et al., Figure 1), post-LN or pre-LN.

    With `norm_first=False` (the 2017 paper, post-LN) the output is
    LayerNorm(x + Dropout(Sublayer(x))). With `norm_first=True` (GPT-2,
    pre-LN) the sub-layer sees LayerNorm(x) and the output is
    x + Dropout(Sublayer(LayerNorm(x))). With `sandwich_norm=True` (pre-LN
    only) the sub-layer's output is normalised too before the residual add,
    x + Dropout(Norm'(Sublayer(Norm(x)))): Gemma 2 and 3's post-norms. A
    block uses it in two steps:

        h = add_norm.sublayer_input(x)     # LayerNorm(x) if norm_first
        x = add_norm(x, sublayer(h))       # add, then LayerNorm if not

    Args:
        norm_first: False for post-LN (the paper), True for pre-LN (GPT-2).
        dropout: residual dropout on the sub-layer output (P_drop).
        epsilon: the normalisation's epsilon.
        use_bias: whether the LayerNorm has its offset beta (nanoGPT's
            `bias=False` drops it).
        normalization: "layer_norm" (the paper, GPT, BERT), "rms_norm"
            (`RMSNorm`: Llama, Mistral, Qwen; no offset) or
            "gemma_rms_norm" (`RMSNorm` with the (1 + g) scale, Gemma).
        sandwich_norm: a second normalisation on the sub-layer's output
            (Ding et al. 2021, CogView's sandwich-LN; Gemma 2 and 3).

    Call arguments:
        residual: (B, T, d) the sub-layer's input x.
        sublayer_output: (B, T, d) Sublayer(x or LayerNorm(x)).

    Returns:
        (B, T, d).

    Example:

    ```python
    add_norm = AddNorm(norm_first=False)  # the paper's post-LN
    x = np.random.rand(2, 5, 8).astype("float32")
    feed_forward = zoo.layers.FeedForward(32)
    y = add_norm(x, feed_forward(add_norm.sublayer_input(x)))  # LayerNorm(x + FFN(x))
    ```

    References:
        Vaswani et al. 2017, section 3.1 ("LayerNorm(x + Sublayer(x))")
        and section 5.4 (residual dropout); Xiong et al. 2020 (pre-LN);
        Radford et al. 2019 (GPT-2), section 2.3; Ding et al. 2021
        (CogView), section 3.3 (sandwich-LN).
    """

    def __init__(
        self, norm_first=False, dropout=0.0, epsilon=1e-5, use_bias=True, normalization="layer_norm",
        sandwich_norm=False, **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(norm_first, bool):
            raise ValueError(
                "`norm_first` must be True (pre-LN, GPT-2) or False (post-LN, the "
                f"2017 paper); got {norm_first!r}."
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")
        if sandwich_norm and not norm_first:
            raise ValueError("`sandwich_norm=True` normalises a pre-LN sub-layer's output; it needs norm_first=True.")
        self.norm_first = norm_first
        self.dropout = dropout
        self.epsilon = epsilon
        self.use_bias = use_bias
        self.normalization = normalization
        self.sandwich_norm = sandwich_norm
        self.supports_masking = True
        # One attribute for either kind (RMSNorm is a layer normalisation too): Keras saves a layer's
        # weights under its attribute names, so the name stays what saved models hold.
        norm_name = "layer_norm" if normalization == "layer_norm" else "rms_norm"
        self.layer_norm = normalization_layer(normalization, epsilon, use_bias, dtype=self.dtype_policy, name=norm_name)
        self.output_norm = None
        if sandwich_norm:
            self.output_norm = normalization_layer(
                normalization, epsilon, use_bias, dtype=self.dtype_policy, name="output_norm"
            )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, residual_shape, sublayer_output_shape=None):
        self.layer_norm.build(residual_shape)
        if self.output_norm is not None:
            self.output_norm.build(residual_shape)
        self.built = True

    def sublayer_input(self, x):
        """What the sub-layer sees: Norm(x) for pre-LN, x for post-LN."""
        return self.layer_norm(x) if self.norm_first else x

    def call(self, residual, sublayer_output, training=None):
        if self.output_norm is not None:
            sublayer_output = self.output_norm(sublayer_output)
        x = residual + self.dropout_layer(sublayer_output, training=training)
        return x if self.norm_first else self.layer_norm(x)

    def compute_output_shape(self, residual_shape, sublayer_output_shape=None):
        return residual_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"norm_first": self.norm_first, "dropout": self.dropout, "epsilon": self.epsilon, "use_bias": self.use_bias,
             "normalization": self.normalization, "sandwich_norm": self.sandwich_norm}
        )
        return config
