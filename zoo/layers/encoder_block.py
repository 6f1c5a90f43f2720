"""The encoder block (Vaswani et al., Figure 1, left; BERT's layer).

Shape letters: B batch, T length, d width.
"""

import keras

from zoo.layers.block_masks import block_config, input_keras_mask, output_keras_mask, padding_as_keras_mask, set_block_args
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import FeedForward
from zoo.layers.multi_head_attention import MultiHeadAttention
from zoo.renamed import current_names


@keras.saving.register_keras_serializable(package="zoo")
class EncoderBlock(keras.layers.Layer):
    """Self-attention (no causal mask) and a feed-forward network, each
    wrapped in Add & Norm.

    Args:
        num_heads: h.
        intermediate_dim: d_ff, 4 * d by default.
        dropout: residual dropout (P_drop).
        attention_dropout: dropout on the attention weights; `dropout` by
            default.
        activation: "relu", "gelu" or "gelu_approximate".
        norm_first: False (post-LN, the paper and BERT) or True (pre-LN).
        norm_epsilon: the LayerNorms' epsilon.
        kernel_initializer: of every projection.
        output_kernel_initializer: of the two projections that feed the
            residual stream; `kernel_initializer` by default.
        use_bias, normalization, gated_feed_forward: as in `DecoderBlock`
            (T5: no biases, RMSNorm, and in v1.1 the gated GELU).
        self_attention_options: further `MultiHeadAttention` arguments,
            as in `DecoderBlock` (T5's unscaled logits, `attention_scale=1.0`).
        feed_forward_dropout: dropout on the feed-forward network's inner
            activations (T5's; 0, the paper's, by default).

    Call arguments:
        x: (B, T, d).
        padding_mask: (B, T), False at padding.
        attention_mask: (B, T, T), False where a query may not attend.
        attention_bias: (1 or B, h, T, T) added to the attention logits
            (T5's relative position bias).
        return_attention_scores: also return the attention weights.

    Returns:
        (B, T, d), carrying the padding mask (or the input's Keras mask) as
        its Keras mask; with `return_attention_scores`, `(output, weights
        (B, h, T, T))`.

    Example:

    ```python
    block = EncoderBlock(num_heads=2, intermediate_dim=32)
    x = np.random.rand(2, 5, 8).astype("float32")  # (B, T, d)
    padding_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    y = block(x, padding_mask=padding_mask)  # (2, 5, 8)
    ```

    References:
        Vaswani et al. 2017, section 3.1 ("Encoder") and Figure 1 (left);
        Devlin et al. 2019 (BERT), section 3; Xiong et al. 2020 (pre-LN).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        dropout=0.0,
        attention_dropout=None,
        activation="relu",
        norm_first=False,
        norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        use_bias=True,
        normalization="layer_norm",
        gated_feed_forward=False,
        self_attention_options=None,
        feed_forward_dropout=0.0,
        **kwargs,
    ):
        kwargs = current_names(kwargs, {"layer_norm_epsilon": "norm_epsilon"}, "EncoderBlock")
        norm_epsilon = kwargs.pop("norm_epsilon", norm_epsilon)
        super().__init__(**kwargs)
        set_block_args(
            self, num_heads, intermediate_dim, dropout, attention_dropout, activation, norm_first,
            norm_epsilon, kernel_initializer, output_kernel_initializer,
        )
        self.use_bias = use_bias
        self.normalization = normalization
        self.gated_feed_forward = gated_feed_forward
        self.self_attention_options = dict(self_attention_options or {})
        self.feed_forward_dropout = feed_forward_dropout
        self.supports_masking = True

        policy = self.dtype_policy
        # The variants' arguments only where they are set, so that the paper's block keeps its defaults.
        bias_args = {} if use_bias else {"use_bias": False}
        self.self_attention = MultiHeadAttention(
            num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            dtype=policy,
            name="self_attention",
            **bias_args,
            **self.self_attention_options,
        )
        norm_args = dict(use_bias=use_bias, normalization=normalization)
        self.self_attention_add_norm = AddNorm(
            norm_first, dropout, norm_epsilon, dtype=policy, name="self_attention_add_norm", **norm_args
        )
        self.feed_forward = FeedForward(
            intermediate_dim,
            activation,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            use_bias=use_bias,
            gated=gated_feed_forward,
            dropout=feed_forward_dropout,
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward_add_norm = AddNorm(
            norm_first, dropout, norm_epsilon, dtype=policy, name="feed_forward_add_norm", **norm_args
        )

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.self_attention_add_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_add_norm.build(input_shape)
        self.built = True

    def __call__(self, x, *args, padding_mask=None, **kwargs):
        kwargs = padding_as_keras_mask(padding_mask, kwargs)
        return super().__call__(x, *args, padding_mask=padding_mask, **kwargs)

    def call(
        self, x, padding_mask=None, attention_mask=None, return_attention_scores=False, training=None, mask=None,
        x_mask=None, attention_bias=None,
    ):
        if not self.built:  # called as a method, not through `Layer.__call__`
            self.build(tuple(x.shape))
        # The attention layer's `call` directly: the block passes its masks
        # itself, so Keras' implicit masks do not reach it a second way.
        h = self.self_attention_add_norm.sublayer_input(x)
        attended = self.self_attention.call(
            h,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            attention_bias=attention_bias,
            # The attention weights come from the explicit masks alone (see DecoderBlock).
            query_mask=None if return_attention_scores else input_keras_mask(padding_mask, mask, x_mask),
            training=training,
        )
        if return_attention_scores:
            attended, weights = attended
        x = self.self_attention_add_norm(x, attended, training=training)
        h = self.feed_forward_add_norm.sublayer_input(x)
        x = self.feed_forward_add_norm(x, self.feed_forward(h, training=training), training=training)
        return (x, weights) if return_attention_scores else x

    def attention_scores(self, x, padding_mask=None, attention_mask=None):
        """The (B, h, T, T) self-attention weights this block computes for x
        (explicit masks only, in inference mode)."""
        return self.call(
            x, padding_mask=padding_mask, attention_mask=attention_mask, return_attention_scores=True, training=False
        )[1]

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def compute_mask(self, inputs, previous_mask):
        return output_keras_mask(previous_mask)

    def get_config(self):
        config = super().get_config()
        config.update(block_config(self))
        config.update({"use_bias": self.use_bias, "normalization": self.normalization,
                       "gated_feed_forward": self.gated_feed_forward,
                       "self_attention_options": dict(self.self_attention_options),
                       "feed_forward_dropout": self.feed_forward_dropout})
        return config

