"""Multi-head attention (Vaswani et al. 2017, section 3.2.2).

Shape letters: B batch, T query length, S key/value length, d model width,
h heads, k = d / h the width of one head.
"""

import keras
from keras import ops

from zoo.layers.attention import attention_weights, fused_attention, merge_masks


@keras.saving.register_keras_serializable(package="zoo")
class MultiHeadAttention(keras.layers.Layer):
    """h heads of width d/h, the paper's split, with one output projection.

    Self-attention (the default) projects Q, K and V with one fused matrix
    product; cross-attention (`cross_attention=True`) projects Q from the
    query sequence and K, V from another sequence, with one fused product for
    K and V.

    Args:
        num_heads: h. The query width d must be divisible by it.
        dropout: dropout rate on the attention weights.
        cross_attention: False for self-attention, True to attend to a
            second sequence passed as `key_value`.
        use_bias: whether the projections have biases.
        kernel_initializer: initializer of the Q, K, V projections.
        output_kernel_initializer: initializer of the output projection
            (GPT-2 scales it down by sqrt(2 * layers)); defaults to
            `kernel_initializer`.

    Call arguments:
        query: (B, T, d).
        key_value: (B, S, d_kv), only for cross-attention.
        padding_mask: (B, S), False (or 0) at padded keys.
        attention_mask: (B, T, S), False where a query may not attend.
        use_causal_mask: query t attends to keys s <= t only.
        cache: for cached decoding. Self-attention: (B, 2, h, S_max, k), the
            keys and values of all positions so far, head-major (each of K
            and V is the (B, h, S, k) operand of the attention product, so
            no step transposes the whole cache); the new positions are
            written at `cache_index` and the updated cache is returned.
            Cross-attention: the (B, 2, h, S, k) projected keys/values of
            `key_value` (from `compute_key_value`), returned unchanged.
        cache_index: the position of the first query in the cache.
        return_attention_scores: also return the (B, h, T, S) weights.
        training: enables dropout.

    Returns:
        (B, T, d); or `(output, scores)` with `return_attention_scores`; or
        `(output, cache)` when a cache is given - the convention of
        keras-hub's cached attention.
    """

    def __init__(
        self,
        num_heads,
        dropout=0.0,
        cross_attention=False,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"`num_heads` must be a positive integer; got {num_heads!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")
        self.num_heads = num_heads
        self.dropout = dropout
        self.cross_attention = cross_attention
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _dense(self, units, name, initializer=None):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=initializer or self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, key_value_shape=None):
        d = query_shape[-1]
        if d is None:
            raise ValueError("The query width (last axis) must be known to build MultiHeadAttention.")
        if d % self.num_heads:
            raise ValueError(
                f"The model width d_model={d} must be divisible by num_heads="
                f"{self.num_heads} (each head has width d_model / num_heads)."
            )
        self.model_dim = d
        self.head_dim = d // self.num_heads
        if self.cross_attention:
            kv_shape = key_value_shape or query_shape
            self.query_dense = self._dense(d, "query")
            self.query_dense.build(query_shape)
            self.key_value_dense = self._dense(2 * d, "key_value")
            self.key_value_dense.build(kv_shape)
        else:
            self.query_key_value_dense = self._dense(3 * d, "query_key_value")
            self.query_key_value_dense.build(query_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = self._dense(d, "output", self.output_kernel_initializer)
        self.output_dense.build(tuple(query_shape[:-1]) + (d,))
        self.built = True

    def _split_heads(self, x, parts):
        # (B, L, parts * d) -> (B, parts, h, L, k), head-major
        b, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (b, length, parts, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 3, 1, 4))

    def _heads(self, x):
        # (B, L, d) -> (B, L, h, k)
        return ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[1], self.num_heads, self.head_dim))

    def compute_key_value(self, key_value):
        """Project a cross-attention sequence once: (B, S, d_kv) -> (B, 2, h, S, k)."""
        return self._split_heads(self.key_value_dense(key_value), 2)

    def call(
        self,
        query,
        key_value=None,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
        mask=None,
        query_mask=None,
        key_value_mask=None,
    ):
        if cache is not None and return_attention_scores:
            raise ValueError("`return_attention_scores` cannot be combined with a cache.")
        # Keras' implicit masks: `mask` when the query is the only tensor
        # argument, `query_mask` / `key_value_mask` otherwise.
        if query_mask is None:
            query_mask = mask
        if self.cross_attention:
            if key_value is None and cache is None:
                raise ValueError(
                    "This MultiHeadAttention was built for cross-attention: pass the "
                    "sequence to attend to as `key_value`."
                )
            q = self._heads(self.query_dense(query))  # (B, T, h, k)
            if cache is None:
                kv = self.compute_key_value(key_value)  # (B, 2, h, S, k)
            else:
                kv = cache
            key_padding = key_value_mask
        else:
            if key_value is not None:
                raise ValueError(
                    "This MultiHeadAttention was built for self-attention and takes no "
                    "`key_value`; build it with `cross_attention=True` to attend to "
                    "another sequence."
                )
            # One matrix product for Q, K and V, then a split (whose gradient
            # is a concatenation; strided slices' gradients cost far more).
            q, key, value = ops.split(self.query_key_value_dense(query), 3, axis=-1)  # 3 x (B, T, d)
            q, key, value = (self._heads(t) for t in (q, key, value))  # (B, T, h, k)
            # Head-major K and V, the layout of the attention product (and
            # of the cache): only the new positions are transposed.
            key = ops.transpose(key, (0, 2, 1, 3))  # (B, h, T, k)
            value = ops.transpose(value, (0, 2, 1, 3))  # (B, h, T, k)
            if cache is not None:
                # Write the new positions into the preallocated cache.
                kv = ops.stack([key, value], axis=1)  # (B, 2, h, T, k)
                start = [0, 0, 0, ops.cast(cache_index, "int32"), 0]
                cache = ops.slice_update(cache, start, ops.cast(kv, cache.dtype))
                key, value = cache[:, 0], cache[:, 1]  # (B, h, S, k)
            key_padding = query_mask if cache is None else None
        if self.cross_attention:
            key, value = kv[:, 0], kv[:, 1]  # (B, h, S, k)

        key_shape = key[:, 0]  # (B, S, k): merge_masks reads only the shape of the keys
        attend_mask = merge_masks(
            query,
            key_shape,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            query_mask=query_mask,
            use_causal_mask=use_causal_mask,
            query_start=0 if cache_index is None else cache_index,
        )
        if key_padding is not None:
            # Merged separately, so that `padding_mask` is shape-checked first.
            key_mask = merge_masks(query, key_shape, padding_mask=key_padding)
            attend_mask = key_mask if attend_mask is None else ops.logical_and(attend_mask, key_mask)
        if attend_mask is not None:
            attend_mask = attend_mask[:, None, :, :]  # (B, 1, T, S)

        if cache is None and not return_attention_scores and self.dropout == 0:
            # Neither the weights nor dropout on them are needed: the
            # backend's fused attention (flash attention on a GPU), as in
            # Keras' MultiHeadAttention. The cached step keeps the explicit
            # form, whose one-query product reads the cache in place.
            key, value = ops.swapaxes(key, 1, 2), ops.swapaxes(value, 1, 2)  # (B, S, h, k)
            out = fused_attention(q, key, ops.cast(value, q.dtype), mask=attend_mask)  # (B, T, h, k)
        else:
            q = ops.transpose(q, (0, 2, 1, 3))  # (B, h, T, k)
            weights = attention_weights(q, key, mask=attend_mask)  # (B, h, T, S)
            dropped = self.dropout_layer(weights, training=training)
            out = ops.matmul(dropped, ops.cast(value, dropped.dtype))  # (B, h, T, k)
            out = ops.transpose(out, (0, 2, 1, 3))  # (B, T, h, k)
        out = ops.reshape(out, (ops.shape(out)[0], ops.shape(out)[1], self.model_dim))
        out = self.output_dense(out)  # (B, T, d)

        if cache is not None:
            return out, cache
        if return_attention_scores:
            return out, weights
        return out

    def compute_output_spec(self, query, key_value=None, cache=None, return_attention_scores=False, **kwargs):
        out = keras.KerasTensor(query.shape, dtype=self.compute_dtype)
        if cache is not None:
            return out, keras.KerasTensor(cache.shape, dtype=cache.dtype)
        if return_attention_scores:
            s = (key_value if key_value is not None else query).shape[1]
            scores = keras.KerasTensor(
                (query.shape[0], self.num_heads, query.shape[1], s), dtype=self.compute_dtype
            )
            return out, scores
        return out

    def compute_mask(self, inputs, previous_mask):
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "cross_attention": self.cross_attention,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(
                    self.output_kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
