"""The decoder block (Vaswani et al., Figure 1, right; GPT's layer).

Shape letters: B batch, T target length, S source length, d width,
h heads, g key/value heads, k head width (d / h unless set).
"""

import keras

from zoo.layers.block_masks import block_config, input_keras_mask, output_keras_mask, padding_as_keras_mask, set_block_args
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import FeedForward
from zoo.layers.multi_head_attention import MultiHeadAttention
from zoo.renamed import current_names

FORMER_NAMES = {"layer_norm_epsilon": "norm_epsilon", "cross_attention": "use_cross_attention"}


@keras.saving.register_keras_serializable(package="zoo")
class DecoderBlock(keras.layers.Layer):
    """Causal self-attention, optional cross-attention to an encoder output,
    and a feed-forward network, each wrapped in Add & Norm.

    Without cross-attention this is the GPT block (with `norm_first=True`,
    GPT-2's pre-LN; with False, GPT-1's post-LN), and with the later
    variants as flags the Llama block: RMSNorm (`normalization="rms_norm"`)
    and SwiGLU (`activation="silu", gated_feed_forward=True`), no biases,
    with the self-attention's own variants (rotary positions, grouped-query
    attention, ...) in `self_attention_options`; and the Gemma 3 block:
    GeGLU (`activation="gelu_approximate"`), the (1 + g) RMSNorm
    (`normalization="gemma_rms_norm"`, also on the query/key heads) and
    `sandwich_norm`.

    Args:
        num_heads: h.
        intermediate_dim: d_ff, 4 * d by default.
        use_cross_attention: whether the block attends to an encoder output
            (its `cross_attention_layer`).
        dropout, attention_dropout, activation, norm_first,
        kernel_initializer, output_kernel_initializer: as in `EncoderBlock`.
        norm_epsilon: the epsilon of every LayerNorm or RMSNorm of the
            block (the query/key norm's too).
        use_bias: whether the projections and LayerNorms have biases
            (False is nanoGPT's `bias=False`).
        normalization: "layer_norm", "rms_norm" or "gemma_rms_norm" (see
            `AddNorm`); an RMSNorm kind is the query/key norm's too.
        sandwich_norm: a normalisation of each sub-layer's output as well
            (see `AddNorm`; Gemma 2 and 3).
        gated_feed_forward: the GLU feed-forward network (see
            `FeedForward`'s `gated`).
        feed_forward_dropout: dropout on the feed-forward network's inner
            activations (T5's; 0, the paper's, by default).
        self_attention_options: further `MultiHeadAttention` arguments of
            the self-attention, passed on as they are: the variants of the
            later decoders (grouped-query attention, rotary positions, the
            query/key norm, a sliding window, the logits' scale; `use_bias`
            here is for Q, K and V alone, as Qwen2's biases). The block
            reads none of them.
        cross_attention_options: the same for the cross-attention (T5's
            unscaled logits, `attention_scale=1.0`); the paper's when None.

    Call arguments:
        x: (B, T, d).
        encoder_output: (B, S, d), required with cross-attention.
        padding_mask: (B, T), False at padded target positions.
        encoder_padding_mask: (B, S), False at padded source positions.
        attention_mask: (B, T, T) for the self-attention.
        attention_bias: (1 or B, h, T, T) added to the self-attention's
            logits (T5's relative position bias).
        use_causal_mask: True (the default) hides future positions.
        self_attention_cache: for cached decoding, the (keys, values),
            each (B, g, S_max, k), of the positions decoded so far; the new ones
            are written at `cache_index`. The causal mask over absolute
            positions hides the empty slots, so no padding mask is needed:
            prompts are right-padded and no real position ever attends to
            padding (keras-hub's cached decoding).
        cache_index: the absolute position of x's first row.
        cross_attention_cache: (keys, values), each (B, h, S, k), from
            `compute_cross_attention_cache`, in place of `encoder_output`
            in cached decoding.
        return_attention_scores: also return the attention weights.

    Returns:
        (B, T, d), carrying the padding mask (or the input's Keras mask) as
        its Keras mask; with a `self_attention_cache`, `(output,
        self_attention_cache)` with the new positions written; with
        `return_attention_scores`, `(output, {"self": (B, h, T, T),
        "cross": (B, h, T, S)})` ("cross" only with cross-attention).
        One `call` serves the three: the sub-layers run in one order, top
        to bottom.

    Example:

    ```python
    block = DecoderBlock(num_heads=2, intermediate_dim=32, use_cross_attention=True)
    x = np.random.rand(2, 5, 8).astype("float32")  # (B, T, d) target
    memory = np.random.rand(2, 7, 8).astype("float32")  # (B, S, d) encoder output
    y = block(x, memory)  # (2, 5, 8), causal self-attention then cross-attention

    # Cached decoding gives the same outputs one position at a time.
    cache = (np.zeros((2, 2, 5, 4), "float32"),) * 2  # keys, values: (B, h, T, k)
    cross_cache = block.compute_cross_attention_cache(memory)
    first, cache = block(x[:, :1], self_attention_cache=cache, cache_index=0, cross_attention_cache=cross_cache)
    np.testing.assert_allclose(first, y[:, :1], atol=1e-5)
    ```

    References:
        Vaswani et al. 2017, section 3.1 ("Decoder"), Figure 1 (right);
        Radford et al. 2018 (GPT-1, post-LN), 2019 (GPT-2, pre-LN, section
        2.3).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        use_cross_attention=False,
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
        sandwich_norm=False,
        self_attention_options=None,
        cross_attention_options=None,
        feed_forward_dropout=0.0,
        **kwargs,
    ):
        kwargs = current_names(kwargs, FORMER_NAMES, "DecoderBlock")
        norm_epsilon = kwargs.pop("norm_epsilon", norm_epsilon)
        use_cross_attention = kwargs.pop("use_cross_attention", use_cross_attention)
        super().__init__(**kwargs)
        set_block_args(
            self, num_heads, intermediate_dim, dropout, attention_dropout, activation, norm_first,
            norm_epsilon, kernel_initializer, output_kernel_initializer,
        )
        self.use_cross_attention = use_cross_attention
        self.use_bias = use_bias
        self.normalization = normalization
        self.gated_feed_forward = gated_feed_forward
        self.sandwich_norm = sandwich_norm
        self.feed_forward_dropout = feed_forward_dropout
        self.self_attention_options = dict(self_attention_options or {})
        self.cross_attention_options = dict(cross_attention_options or {})
        self.supports_masking = True

        self.self_attention = self._attention(False, "self_attention", **self.self_attention_options)
        self.self_attention_add_norm = self._add_norm("self_attention_add_norm")
        if use_cross_attention:
            self.cross_attention_layer = self._attention(True, "cross_attention", **self.cross_attention_options)
            self.cross_attention_add_norm = self._add_norm("cross_attention_add_norm")
        self.feed_forward = FeedForward(
            intermediate_dim,
            activation,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            use_bias=use_bias,
            gated=gated_feed_forward,
            dropout=feed_forward_dropout,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward_add_norm = self._add_norm("feed_forward_add_norm")

    def _attention(self, cross, name, **options):
        """A sub-layer's `MultiHeadAttention`: the block's settings, then `options`."""
        arguments = dict(
            dropout=self.attention_dropout,
            cross_attention=cross,
            use_bias=self.use_bias,
            use_output_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            norm_epsilon=self.norm_epsilon,
            normalization="gemma_rms_norm" if self.normalization == "gemma_rms_norm" else "rms_norm",
            dtype=self.dtype_policy,
            name=name,
        )
        return MultiHeadAttention(self.num_heads, **{**arguments, **options})

    def _add_norm(self, name):
        """A sub-layer's residual connection and norm (`AddNorm`)."""
        return AddNorm(
            self.norm_first, self.dropout, self.norm_epsilon, use_bias=self.use_bias,
            normalization=self.normalization, sandwich_norm=self.sandwich_norm, dtype=self.dtype_policy, name=name,
        )

    def build(self, x_shape, encoder_output_shape=None):
        input_shape = x_shape
        self.self_attention.build(input_shape)
        self.self_attention_add_norm.build(input_shape)
        if self.use_cross_attention:
            self.cross_attention_layer.build(input_shape, encoder_output_shape or input_shape)
            self.cross_attention_add_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_add_norm.build(input_shape)
        self.built = True

    def __call__(self, x, *args, padding_mask=None, **kwargs):
        kwargs = padding_as_keras_mask(padding_mask, kwargs)
        return super().__call__(x, *args, padding_mask=padding_mask, **kwargs)

    def _check_encoder_output(self, x, encoder_output, has_cross_cache=False):
        if self.use_cross_attention and encoder_output is None and not has_cross_cache:
            raise ValueError(
                "This DecoderBlock has cross-attention: pass `encoder_output` (B, S, d)."
            )
        if not self.use_cross_attention and (encoder_output is not None or has_cross_cache):
            raise ValueError(
                "This DecoderBlock has no cross-attention and takes no `encoder_output`; "
                "build it with `use_cross_attention=True`."
            )
        if encoder_output is not None and x.shape[0] is not None and encoder_output.shape[0] is not None:
            if x.shape[0] != encoder_output.shape[0]:
                raise ValueError(
                    f"Decoder batch size {x.shape[0]} differs from encoder batch size "
                    f"{encoder_output.shape[0]}; they must match."
                )

    def call(
        self,
        x,
        encoder_output=None,
        padding_mask=None,
        encoder_padding_mask=None,
        attention_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
        mask=None,
        x_mask=None,
        encoder_output_mask=None,
        attention_bias=None,
    ):
        self._check_encoder_output(x, encoder_output, has_cross_cache=cross_attention_cache is not None)
        if not self.built:  # called as a method, not through `Layer.__call__`
            self.build(tuple(x.shape), None if encoder_output is None else tuple(encoder_output.shape))
        # The attention weights come from the explicit masks alone, whatever
        # Keras mask x carries, so every caller gets the same weights.
        query_mask = None if return_attention_scores else input_keras_mask(padding_mask, mask, x_mask)
        scores = {}

        # The attention layers' `call` directly: the block passes their masks
        # itself, so Keras' implicit masks do not reach them a second way.
        h = self.self_attention_add_norm.sublayer_input(x)
        attended = self.self_attention.call(
            h,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            cache=self_attention_cache,
            cache_index=cache_index,
            return_attention_scores=return_attention_scores,
            query_mask=query_mask,
            attention_bias=attention_bias,
            training=training,
        )
        if self_attention_cache is not None:
            attended, self_attention_cache = attended
        elif return_attention_scores:
            attended, scores["self"] = attended
        x = self.self_attention_add_norm(x, attended, training=training)

        if self.use_cross_attention:
            h = self.cross_attention_add_norm.sublayer_input(x)
            attended = self.cross_attention_layer.call(
                h,
                encoder_output,
                padding_mask=encoder_padding_mask,
                cache=cross_attention_cache,
                return_attention_scores=return_attention_scores,
                query_mask=query_mask,
                key_value_mask=encoder_output_mask,
                training=training,
            )
            if cross_attention_cache is not None:
                attended, _ = attended
            elif return_attention_scores:
                attended, scores["cross"] = attended
            x = self.cross_attention_add_norm(x, attended, training=training)

        h = self.feed_forward_add_norm.sublayer_input(x)
        x = self.feed_forward_add_norm(x, self.feed_forward(h, training=training), training=training)
        if self_attention_cache is not None:
            return x, self_attention_cache
        return (x, scores) if return_attention_scores else x

    def rematerialized_call(self, layer_call, *args, **kwargs):
        """The block under Keras' rematerialization (built inside a
        `keras.RematScope` that names it): its activations are recomputed in
        the backward pass instead of kept. Keras' `remat` differentiates a
        function of float tensors (JAX's checkpoint traces every argument,
        TensorFlow's `recompute_grad` takes no keywords and differentiates
        every input), so the Python arguments (`training`, the flags) and
        the integer masks are bound first and the float tensors passed in
        order."""
        call = super().rematerialized_call(layer_call, *args, **kwargs)
        if call is layer_call:
            return call

        def rematerialized(*args, **kwargs):
            names = [k for k, v in kwargs.items() if _is_float_tensor(v)]
            fixed = {k: v for k, v in kwargs.items() if k not in names}

            def on_tensors(*values):
                return layer_call(*values[: len(args)], **fixed, **dict(zip(names, values[len(args):])))

            return keras.remat(on_tensors)(*args, *(kwargs[k] for k in names))

        return rematerialized

    def compute_cross_attention_cache(self, encoder_output):
        """The encoder output (B, S, d) projected once to this block's
        cross-attention keys and values, each (B, h, S, k): the
        `cross_attention_cache` of cached decoding."""
        self._check_encoder_output(encoder_output, encoder_output)
        if not self.built:
            self.build(tuple(encoder_output.shape), tuple(encoder_output.shape))
        return self.cross_attention_layer.compute_key_value(encoder_output)

    def attention_scores(self, x, encoder_output=None, padding_mask=None, encoder_padding_mask=None):
        """The attention weights this block computes for x (explicit masks
        only, in inference mode): {"self": (B, h, T, T), "cross": (B, h, T, S)}
        ("cross" only with cross-attention)."""
        return self.call(
            x, encoder_output, padding_mask=padding_mask, encoder_padding_mask=encoder_padding_mask,
            return_attention_scores=True, training=False,
        )[1]

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def compute_output_spec(self, x, *args, **kwargs):
        return keras.KerasTensor(x.shape, dtype=self.compute_dtype)

    def compute_mask(self, inputs, previous_mask):
        return output_keras_mask(previous_mask)

    def get_config(self):
        config = super().get_config()
        config.update(block_config(self))
        config.update(
            {
                "use_cross_attention": self.use_cross_attention,
                "use_bias": self.use_bias,
                "normalization": self.normalization,
                "gated_feed_forward": self.gated_feed_forward,
                "sandwich_norm": self.sandwich_norm,
                "self_attention_options": dict(self.self_attention_options),
                "cross_attention_options": dict(self.cross_attention_options),
                "feed_forward_dropout": self.feed_forward_dropout,
            }
        )
        return config


def _is_float_tensor(value):
    return value is not None and keras.ops.is_tensor(value) and "float" in keras.backend.standardize_dtype(value.dtype)
