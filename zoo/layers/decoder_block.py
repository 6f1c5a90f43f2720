"""The decoder block (Vaswani et al., Figure 1, right; GPT's layer).

Shape letters: B batch, T target length, S source length, d width,
h heads, k = d / h.
"""

import keras

from zoo.layers._block_utils import check_block_args, propagate_padding_mask
from zoo.layers.add_norm import AddNorm
from zoo.layers.encoder_block import _and
from zoo.layers.feed_forward import FeedForward
from zoo.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="zoo")
class DecoderBlock(keras.layers.Layer):
    """Causal self-attention, optional cross-attention to an encoder output,
    and a feed-forward network, each wrapped in Add & Norm.

    Without cross-attention this is the GPT block (with `norm_first=True`,
    GPT-2's pre-LN; with False, GPT-1's post-LN).

    Args:
        num_heads: h.
        intermediate_dim: d_ff, 4 * d by default.
        cross_attention: whether the block attends to an encoder output.
        dropout, attention_dropout, activation, norm_first,
        layer_norm_epsilon, kernel_initializer, output_kernel_initializer:
            as in `EncoderBlock`.
        use_bias: whether the projections and LayerNorms have biases
            (False is nanoGPT's `bias=False`).

    Call arguments:
        x: (B, T, d).
        encoder_output: (B, S, d), required with cross-attention.
        padding_mask: (B, T), False at padded target positions.
        encoder_padding_mask: (B, S), False at padded source positions.
        attention_mask: (B, T, T) for the self-attention.
        use_causal_mask: True (the default) hides future positions.
        self_attention_cache: (B, 2, h, S_max, k) keys and values of the
            positions decoded so far; the new ones are written at
            `cache_index`. With a cache, `padding_mask` must be None: the
            causal mask over absolute positions is what hides the empty
            slots, and prompts are right-padded, so no real position ever
            attends to padding (as keras-hub's cached decoding).
        cross_attention_cache: (B, 2, h, S, k) the projected encoder output;
            computed from `encoder_output` when not given.
        cache_index: position of the first query in the cache.

    Returns:
        (B, T, d); with `self_attention_cache`, the tuple
        `(output, self_attention_cache, cross_attention_cache)` (the last is
        None without cross-attention), as keras-hub's TransformerDecoder.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        cross_attention=False,
        dropout=0.0,
        attention_dropout=None,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_block_args(num_heads, intermediate_dim, dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.cross_attention = cross_attention
        self.dropout = dropout
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.activation = activation
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )
        self.use_bias = use_bias
        self.supports_masking = True

        policy = self.dtype_policy

        def attention(cross, name):
            return MultiHeadAttention(
                num_heads,
                dropout=self.attention_dropout,
                cross_attention=cross,
                use_bias=use_bias,
                kernel_initializer=self.kernel_initializer,
                output_kernel_initializer=self.output_kernel_initializer,
                dtype=policy,
                name=name,
            )

        def add_norm(name):
            return AddNorm(norm_first, dropout, layer_norm_epsilon, use_bias=use_bias, dtype=policy, name=name)

        self.self_attention = attention(False, "self_attention")
        self.self_attention_add_norm = add_norm("self_attention_add_norm")
        if cross_attention:
            self.cross_attention_layer = attention(True, "cross_attention")
            self.cross_attention_add_norm = add_norm("cross_attention_add_norm")
        self.feed_forward = FeedForward(
            intermediate_dim,
            activation,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            use_bias=use_bias,
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward_add_norm = add_norm("feed_forward_add_norm")

    def build(self, x_shape, encoder_output_shape=None):
        input_shape = x_shape
        self.self_attention.build(input_shape)
        self.self_attention_add_norm.build(input_shape)
        if self.cross_attention:
            self.cross_attention_layer.build(input_shape, encoder_output_shape or input_shape)
            self.cross_attention_add_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_add_norm.build(input_shape)
        self.built = True

    def __call__(self, x, *args, padding_mask=None, **kwargs):
        outputs = super().__call__(x, *args, padding_mask=padding_mask, **kwargs)
        if isinstance(outputs, tuple):
            return outputs
        return propagate_padding_mask(outputs, x, padding_mask)

    def call(
        self,
        x,
        encoder_output=None,
        padding_mask=None,
        encoder_padding_mask=None,
        attention_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_index=None,
        training=None,
        mask=None,
        x_mask=None,
        encoder_output_mask=None,
    ):
        if self.cross_attention and encoder_output is None and cross_attention_cache is None:
            raise ValueError(
                "This DecoderBlock has cross-attention: pass `encoder_output` (B, S, d)."
            )
        if not self.cross_attention and encoder_output is not None:
            raise ValueError(
                "This DecoderBlock has no cross-attention and takes no `encoder_output`; "
                "build it with `cross_attention=True`."
            )
        if encoder_output is not None and x.shape[0] is not None and encoder_output.shape[0] is not None:
            if x.shape[0] != encoder_output.shape[0]:
                raise ValueError(
                    f"Decoder batch size {x.shape[0]} differs from encoder batch size "
                    f"{encoder_output.shape[0]}; they must match."
                )
        implicit = x_mask if x_mask is not None else mask
        cached = self_attention_cache is not None
        if cached and padding_mask is not None:
            raise ValueError(
                "`padding_mask` is not used with a `self_attention_cache`: the causal mask "
                "over absolute positions hides the cache's empty slots. Right-pad the "
                "prompts and pass padding_mask=None."
            )
        if cached and not use_causal_mask:
            raise ValueError("Cached decoding needs `use_causal_mask=True`: the empty cache slots must stay hidden.")

        # 1. Causal self-attention.
        h = self.self_attention_add_norm.sublayer_input(x)
        a = self.self_attention(
            h,
            padding_mask=None if cached else _and(padding_mask, implicit),
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            cache=self_attention_cache,
            cache_index=cache_index,
            training=training,
        )
        if cached:
            a, self_attention_cache = a
        x = self.self_attention_add_norm(x, a, training=training)

        # 2. Cross-attention to every position of the encoder output.
        if self.cross_attention:
            if cached and cross_attention_cache is None:
                cross_attention_cache = self.cross_attention_layer.compute_key_value(encoder_output)
            h = self.cross_attention_add_norm.sublayer_input(x)
            c = self.cross_attention_layer(
                h,
                encoder_output,
                padding_mask=_and(encoder_padding_mask, encoder_output_mask),
                cache=cross_attention_cache if cached else None,
                training=training,
            )
            if cached:
                c = c[0]
            x = self.cross_attention_add_norm(x, c, training=training)

        # 3. Feed-forward.
        h = self.feed_forward_add_norm.sublayer_input(x)
        x = self.feed_forward_add_norm(x, self.feed_forward(h, training=training), training=training)
        if cached:
            return x, self_attention_cache, cross_attention_cache
        return x

    def attention_scores(self, x, encoder_output=None, padding_mask=None, encoder_padding_mask=None):
        """The (B, h, T, T) self-attention weights, and with cross-attention
        also the (B, h, T, S) cross-attention weights, for plots. Runs the
        block's own layers; returns a dict keyed "self" and "cross"."""
        h = self.self_attention_add_norm.sublayer_input(x)
        a, self_scores = self.self_attention(
            h, padding_mask=padding_mask, use_causal_mask=True, return_attention_scores=True
        )
        scores = {"self": self_scores}
        if self.cross_attention:
            x = self.self_attention_add_norm(x, a)
            h = self.cross_attention_add_norm.sublayer_input(x)
            _, scores["cross"] = self.cross_attention_layer(
                h, encoder_output, padding_mask=encoder_padding_mask, return_attention_scores=True
            )
        return scores

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def compute_output_spec(self, x, *args, self_attention_cache=None, cross_attention_cache=None, **kwargs):
        out = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        if self_attention_cache is None:
            return out
        return out, self_attention_cache, cross_attention_cache

    def compute_mask(self, inputs, previous_mask):
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "cross_attention": self.cross_attention,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(self.output_kernel_initializer),
                "use_bias": self.use_bias,
            }
        )
        return config
