"""Multi-head attention (Vaswani et al. 2017, section 3.2.2).

Shape letters: B batch, T query length, S key/value length, d model width,
h heads, g key/value heads (h for the paper, fewer for grouped-query
attention), k the width of one head (d / h unless set).
"""

import math

import keras
from keras import ops

from zoo.kernels import cached_attention
from zoo.layers.attention import attention_weights, fused_attention, is_per_row, merge_masks
from zoo.layers.initializers import fresh
from zoo.layers.lora_dense import LoraDense
from zoo.layers.rms_norm import RMSNorm
from zoo.layers.rotary_embedding import RotaryEmbedding


@keras.saving.register_keras_serializable(package="zoo")
class MultiHeadAttention(keras.layers.Layer):
    """h heads of width d/h, the paper's split, with one output projection.

    Self-attention (the default) projects Q, K and V with one fused matrix
    product; cross-attention (`cross_attention=True`) projects Q from the
    query sequence and K, V from another sequence, with one fused product for
    K and V.

    One entry, `call`, reads top to bottom: the projections (`_project_self`
    or `_project_cross`), the masks merged (`merge_masks`), one of two
    attention algorithms (`_fused_attention` or `_grouped_attention`), the
    output projection. The cache is an optional argument, as in keras-hub's
    `CachedMultiHeadAttention`: `layer(query, cache=cache, cache_index=i)`
    returns `(output, cache)` for cached decoding (a cross-attention layer
    reads keys and values projected once by `compute_key_value`), and
    `return_attention_scores=True` returns `(output, weights)` with the
    (B, h, T, S) attention weights (for plots).

    When the only mask is the causal one (no padding, attention or Keras
    mask, no cache, no dropout on the weights), the attention runs as
    `keras.ops.dot_product_attention(..., is_causal=True)`: the backend's
    causal kernel (cuDNN's causal flash attention with JAX on a GPU) rather
    than a dense mask.

    The later variants are named flags: `num_key_value_heads` (grouped-query
    attention: g < h key/value heads, each shared by h / g query heads; 1 is
    multi-query attention), `rope_theta` (rotary positions on Q and K),
    `query_key_norm` (Qwen3's and Gemma 3's RMSNorm of each query and key
    head), `sliding_window` (each query sees only the most recent keys:
    Gemma's local layers), `attention_scale` and an explicit `head_dim`.
    The cache holds the g key/value heads only.

    Args:
        num_heads: h. The query width d must be divisible by it unless
            `head_dim` is given.
        dropout: dropout rate on the attention weights.
        cross_attention: False for self-attention, True to attend to a
            second sequence passed as `key_value`.
        use_bias: whether the projections have biases.
        kernel_initializer: initializer of the Q, K, V projections.
        output_kernel_initializer: initializer of the output projection
            (GPT-2 scales it down by sqrt(2 * layers)); defaults to
            `kernel_initializer`.
        bias_initializer: initializer of the biases.
        num_key_value_heads: g, dividing h; None for h (the paper).
        head_dim: k; None for d / h.
        use_output_bias: whether the output projection has a bias; None
            for `use_bias` (Qwen2 has Q, K, V biases and none on the output).
        rope_theta: None for no rotary embedding, else its frequency base
            (see `RotaryEmbedding`); self-attention only.
        rope_scaling: None or a "llama3" frequency scaling dict.
        query_key_norm: an `RMSNorm` over k on each query and key head,
            before the rotation (Qwen3, Gemma 3).
        norm_epsilon: that RMSNorm's epsilon.
        normalization: its kind, "rms_norm" or "gemma_rms_norm" (see
            `AddNorm`).
        sliding_window: with the causal mask, each query attends to its
            `sliding_window` most recent positions only (itself included);
            None for all (see `merge_masks`).
        attention_scale: the logits' scale, 1/sqrt(k) when None (Gemma's
            `query_pre_attn_scalar ** -0.5`).

    Call arguments:
        query: (B, T, d).
        key_value: (B, S, d_kv), only for cross-attention.
        padding_mask: (B, S), False (or 0) at padded keys.
        attention_mask: (B, T, S), False where a query may not attend.
        use_causal_mask: query t attends to keys s <= t only.
        cache: for cached decoding, a pair `(keys, values)` of (B, g, S, k)
            tensors, head-major: each is the operand of the attention
            product as it is, so no step copies or transposes the cache.
            Self-attention: S = S_max, the keys and values of all
            positions so far; the new positions' keys and values are
            written at `cache_index`, and the causal mask over absolute
            positions (always on with a cache) hides the empty slots.
            Cross-attention: from `compute_key_value`, read only.
            A self-attention cache may also come as (B g, S, k) tensors,
            the rows of each batch row's g heads together: the form a
            compiled loop carries at batch 1 (`merge_rows`), because the
            attention product reads it without a reshape, so XLA writes
            the new positions into it in place instead of copying it
            every step. It is returned in the form it came in.
        cache_index: the absolute position of the first query (with a
            self-attention cache): a scalar, or (B,) int32, each row at its
            own position (a server's slots; the rows' positions, causal
            masks and cache writes are then each their own).
        attention_bias: (1 or B, h, T, S) float, added to the attention
            logits (T5's relative position bias, `RelativePositionBias`).
        return_attention_scores: also return the attention weights (after
            the softmax, and dropout when training); not with a cache.
        training: enables dropout.
        query_mask, key_value_mask: Keras' implicit masks of `query` and
            `key_value` (filled in by Keras); in self-attention the query's
            mask also hides padded keys.

    Returns:
        (B, T, d); with a `cache`, `(output, cache)` (the cache with the new
        positions written); with `return_attention_scores`, `(output,
        weights (B, h, T, S))`.

    Example:

    ```python
    layer = MultiHeadAttention(num_heads=2)
    x = np.random.rand(2, 5, 8).astype("float32")  # (B, T, d)
    out = layer(x, use_causal_mask=True)  # (2, 5, 8)
    out, weights = layer(x, use_causal_mask=True, return_attention_scores=True)
    weights.shape  # (2, 2, 5, 5): (B, h, T, S)

    # Cached decoding: the same outputs, one position at a time.
    cache = (np.zeros((2, 2, 5, 4), "float32"),) * 2  # keys, values: (B, g, S_max, k)
    first, cache = layer(x[:, :1], cache=cache, cache_index=0)
    np.testing.assert_allclose(first, out[:, :1], atol=1e-5)
    ```

    References:
        Vaswani et al. 2017, section 3.2.2 (multi-head attention) and
        section 3.2.3 (its three uses: encoder self-attention, masked
        decoder self-attention, encoder-decoder attention); Shazeer 2019
        (multi-query attention); Ainslie et al. 2023 (grouped-query
        attention); Su et al. 2021 (rotary positions).
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
        num_key_value_heads=None,
        head_dim=None,
        use_output_bias=None,
        rope_theta=None,
        rope_scaling=None,
        query_key_norm=False,
        norm_epsilon=1e-6,
        normalization="rms_norm",
        sliding_window=None,
        attention_scale=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"`num_heads` must be a positive integer; got {num_heads!r}.")
        num_key_value_heads = num_heads if num_key_value_heads is None else num_key_value_heads
        if not isinstance(num_key_value_heads, int) or num_key_value_heads < 1 or num_heads % num_key_value_heads:
            raise ValueError(
                f"`num_key_value_heads` must be a positive integer dividing num_heads={num_heads}; "
                f"got {num_key_value_heads!r}."
            )
        if cross_attention and rope_theta is not None:
            raise ValueError("Rotary positions (`rope_theta`) are for self-attention; a cross-attention layer takes none.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); got {dropout!r}.")
        if sliding_window is not None and (not isinstance(sliding_window, int) or sliding_window < 1):
            raise ValueError(f"`sliding_window` must be a positive integer or None; got {sliding_window!r}.")
        if normalization not in ("rms_norm", "gemma_rms_norm"):
            raise ValueError(f"`normalization` of the query/key norm must be 'rms_norm' or 'gemma_rms_norm'; got {normalization!r}.")
        self.num_heads = num_heads
        self.dropout = dropout
        self.cross_attention = cross_attention
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.use_output_bias = use_bias if use_output_bias is None else use_output_bias
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.query_key_norm = query_key_norm
        self.norm_epsilon = norm_epsilon
        self.normalization = normalization
        self.sliding_window = sliding_window
        self.attention_scale = attention_scale
        self.supports_masking = True

    def _dense(self, units, name, initializer=None, use_bias=None):
        return LoraDense(
            units,
            use_bias=self.use_bias if use_bias is None else use_bias,
            kernel_initializer=fresh(initializer or self.kernel_initializer),
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, key_value_shape=None):
        d = query_shape[-1]
        if d is None:
            raise ValueError("The query width (last axis) must be known to build MultiHeadAttention.")
        if self.head_dim is None and d % self.num_heads:
            raise ValueError(
                f"The model width d_model={d} must be divisible by num_heads="
                f"{self.num_heads} (each head has width d_model / num_heads), or pass `head_dim`."
            )
        self.model_dim = d
        self.head_dim = self.head_dim or d // self.num_heads
        query_width = self.num_heads * self.head_dim  # h k
        key_width = self.num_key_value_heads * self.head_dim  # g k
        if self.cross_attention:
            kv_shape = key_value_shape or query_shape
            self.query_dense = self._dense(query_width, "query")
            self.query_dense.build(query_shape)
            self.key_value_dense = self._dense(2 * key_width, "key_value")
            self.key_value_dense.build(kv_shape)
        else:
            self.query_key_value_dense = self._dense(query_width + 2 * key_width, "query_key_value")
            self.query_key_value_dense.build(query_shape)
        self.query_norm = self.key_norm = None
        if self.query_key_norm:
            unit_offset = self.normalization == "gemma_rms_norm"
            self.query_norm = RMSNorm(self.norm_epsilon, unit_offset, dtype=self.dtype_policy, name="query_norm")
            self.query_norm.build((self.head_dim,))
            self.key_norm = RMSNorm(self.norm_epsilon, unit_offset, dtype=self.dtype_policy, name="key_norm")
            self.key_norm.build((self.head_dim,))
        self.rotary = None
        if self.rope_theta is not None:
            self.rotary = RotaryEmbedding(
                self.head_dim, self.rope_theta, self.rope_scaling, dtype=self.dtype_policy, name="rotary"
            )
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = self._dense(d, "output", self.output_kernel_initializer, self.use_output_bias)
        self.output_dense.build(tuple(query_shape[:-1]) + (query_width,))
        self.built = True

    def _heads(self, x, heads, sequence=None):
        # (B, L, heads * k) -> (B, L, heads, k); B and L read from `sequence`
        # (the layer's input) when given: tf2onnx gives the shape of a Dense
        # output on a 3-D input as its flattened (B L, n) matrix's.
        batch, length = ops.shape(x if sequence is None else sequence)[:2]
        return ops.reshape(x, (batch, length, heads, self.head_dim))

    def compute_key_value(self, key_value):
        """Project a cross-attention sequence once: (B, S, d_kv) -> (keys,
        values), each (B, g, S, k), head-major."""
        x = self.key_value_dense(key_value)  # (B, S, 2 g k)
        b, length = ops.shape(key_value)[0], ops.shape(key_value)[1]  # not x's: see `_heads`
        x = ops.reshape(x, (b, length, 2, self.num_key_value_heads, self.head_dim))
        x = ops.transpose(x, (0, 2, 3, 1, 4))  # (B, 2, g, S, k), head-major
        return x[:, 0], x[:, 1]  # 2 x (B, g, S, k)

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
        attention_bias=None,
        key_value_mask=None,
    ):
        if cache is not None and (return_attention_scores or (cache_index is None and not self.cross_attention)):
            raise ValueError(
                "With a `cache`, MultiHeadAttention returns (output, cache): pass `cache_index` (self-attention) "
                "and not `return_attention_scores`."
            )
        if not self.built:  # called as a method, not through `Layer.__call__`
            self.build(tuple(query.shape), None if key_value is None else tuple(key_value.shape))
        # Keras' implicit masks: `mask` when the query is the only tensor
        # argument, `query_mask` / `key_value_mask` otherwise.
        query_mask = query_mask if query_mask is not None else mask
        if self.cross_attention:
            q, key, value = self._project_cross(query, key_value, cache)
            key_mask = key_value_mask
        else:
            q, key, value, cache = self._project_self(query, key_value, cache, cache_index)
            key_mask = query_mask if cache is None else None
            # The causal mask over absolute positions hides a cache's empty slots.
            use_causal_mask = use_causal_mask or cache is not None
        attend_mask = merge_masks(
            query,
            key[:, 0],  # (B, S, k): only the shape of the keys is read
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            query_mask=query_mask,
            key_mask=key_mask,
            use_causal_mask=use_causal_mask,
            query_start=0 if cache_index is None else cache_index,
            sliding_window=self.sliding_window,
        )
        if cache is None and not return_attention_scores and self.dropout == 0 and attention_bias is None:
            # Neither the weights nor dropout on them are needed: the
            # backend's fused attention (flash attention on a GPU), as in
            # Keras' MultiHeadAttention. The cached step keeps the explicit
            # form, whose one-query product reads the cache in place.
            causal_only = use_causal_mask and self.sliding_window is None and all(
                m is None for m in (padding_mask, attention_mask, query_mask, key_mask)
            )
            out, weights = self._fused_attention(q, key, value, attend_mask, causal_only), None
        else:
            out, weights = self._grouped_attention(q, key, value, attend_mask, training, attention_bias, cache)
        out = ops.reshape(out, (ops.shape(out)[0], ops.shape(out)[1], self.num_heads * self.head_dim))
        out = self.output_dense(out)  # (B, T, d)
        if return_attention_scores:
            return out, weights
        return out if cache is None else (out, cache)

    def _project_cross(self, query, key_value, key_value_cache):
        """Q from the query, K and V from the other sequence (or read from
        `key_value_cache`, projected once) -> (B, T, h, k), 2 x (B, g, S, k)."""
        if key_value is None and key_value_cache is None:
            raise ValueError(
                "This MultiHeadAttention was built for cross-attention: pass the "
                "sequence to attend to as `key_value`."
            )
        q = self._heads(self.query_dense(query), self.num_heads, sequence=query)  # (B, T, h, k)
        key, value = self.compute_key_value(key_value) if key_value_cache is None else key_value_cache
        return q, key, value  # (B, T, h, k), 2 x (B, g, S, k)

    def _project_self(self, query, key_value, cache, cache_index):
        """Q, K and V from the query, normed and rotated where the layer
        does so; with a cache, the new K and V written into it at
        `cache_index` -> (B, T, h, k), 2 x (B, g, S, k), cache or None."""
        if key_value is not None:
            raise ValueError(
                "This MultiHeadAttention was built for self-attention and takes no "
                "`key_value`; build it with `cross_attention=True` to attend to "
                "another sequence."
            )
        # One matrix product for Q, K and V, then a split (whose gradient
        # is a concatenation; strided slices' gradients cost far more).
        query_width = self.num_heads * self.head_dim
        key_width = self.num_key_value_heads * self.head_dim
        q, key, value = ops.split(
            self.query_key_value_dense(query), [query_width, query_width + key_width], axis=-1
        )  # (B, T, h k), 2 x (B, T, g k)
        q = self._heads(q, self.num_heads)  # (B, T, h, k)
        key, value = (self._heads(t, self.num_key_value_heads) for t in (key, value))  # (B, T, g, k)
        if self.query_key_norm:
            q, key = self.query_norm(q), self.key_norm(key)
        if self.rotary is not None:
            position = 0 if cache_index is None else cache_index
            q, key = self.rotary(q, start_index=position), self.rotary(key, start_index=position)
        # Head-major K and V, the layout of the attention product (and
        # of the cache): only the new positions are transposed.
        key = ops.transpose(key, (0, 2, 1, 3))  # (B, g, T, k)
        value = ops.transpose(value, (0, 2, 1, 3))  # (B, g, T, k)
        if cache is not None:
            # Write the new positions into the preallocated keys and values.
            cache = tuple(_write(whole, new, cache_index) for whole, new in zip(cache, (key, value)))
            key, value = (split_rows(whole, self.num_key_value_heads) for whole in cache)  # (B, g, S, k)
        return q, key, value, cache

    def _fused_attention(self, q, key, value, mask, causal_only):
        """The backend's one attention op (`fused_attention`), with the
        causal kernel when the causal mask is the only one:
        (B, T, h, k), 2 x (B, g, S, k), mask (B, T, S) -> (B, T, h, k)."""
        # The op shares each of the g key/value heads among h / g query heads itself.
        key, value = ops.swapaxes(key, 1, 2), ops.swapaxes(value, 1, 2)  # (B, S, g, k)
        if self.num_key_value_heads == 1 < self.num_heads and keras.backend.backend() == "tensorflow":
            # Keras' TensorFlow op repeats g > 1 heads but does not broadcast a single one.
            key, value = ops.repeat(key, self.num_heads, axis=2), ops.repeat(value, self.num_heads, axis=2)
        return fused_attention(
            q,
            key,
            ops.cast(value, q.dtype),
            mask=None if causal_only or mask is None else ops.expand_dims(mask, 1),  # (B, 1, T, S)
            scale=self.attention_scale,
            is_causal=causal_only,
        )  # (B, T, h, k)

    def _grouped_attention(self, q, key, value, mask, training, bias=None, cache=None):
        """The explicit softmax(Q K^T / sqrt(k)) V, with the weights and
        dropout on them: (B, T, h, k), 2 x (B, g, S, k), mask (B, T, S) ->
        (output (B, T, h, k), weights (B, h, T, S)). The query heads that
        share a key/value head become rows of one product, so K and V (and
        the cache) are read once, not copied per query head. A cached step
        of a few queries (`cache`: its keys and values as stored, which
        K and V are views of) runs in `zoo.kernels.cached_attention` where it takes them (JAX on a
        CPU), with no weights (None)."""
        b, t = ops.shape(q)[0], ops.shape(q)[1]
        groups = self.num_heads // self.num_key_value_heads
        q = ops.transpose(q, (0, 2, 1, 3))  # (B, h, T, k)
        q = ops.reshape(q, (b, self.num_key_value_heads, groups * t, self.head_dim))  # (B, g, h/g T, k)
        if cache is not None and bias is None and mask is not None and len(mask.shape) == 3 and not training:
            scale = self.attention_scale or 1.0 / math.sqrt(self.head_dim)
            out = cached_attention(q, *cache, mask, scale)  # (B, g, h/g T, k)
            if out is not None:
                out = ops.transpose(ops.reshape(out, (b, self.num_heads, t, self.head_dim)), (0, 2, 1, 3))
                return out, None
        mask = None if mask is None else ops.tile(ops.expand_dims(mask, 1), (1, 1, groups, 1))  # (B, 1, h/g T, S)
        if bias is not None:  # (1|B, h, T, S) -> (1|B, g, h/g T, S), the rows of the grouped product
            bias = ops.reshape(bias, (ops.shape(bias)[0], self.num_key_value_heads, groups * t, ops.shape(bias)[-1]))
        weights = attention_weights(q, key, mask=mask, scale=self.attention_scale, bias=bias)  # (B, g, h/g T, S)
        dropped = self.dropout_layer(weights, training=training)
        out = ops.matmul(dropped, ops.cast(value, dropped.dtype))  # (B, g, h/g T, k)
        out = ops.transpose(ops.reshape(out, (b, self.num_heads, t, self.head_dim)), (0, 2, 1, 3))  # (B, T, h, k)
        weights = ops.reshape(weights, (b, self.num_heads, t, ops.shape(weights)[-1]))  # (B, h, T, S)
        return out, weights

    def compute_output_spec(self, query, *args, **kwargs):
        return keras.KerasTensor(query.shape, dtype=self.compute_dtype)

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
                "num_key_value_heads": self.num_key_value_heads,
                "head_dim": self.head_dim,
                "use_output_bias": self.use_output_bias,
                "rope_theta": self.rope_theta,
                "rope_scaling": self.rope_scaling,
                "query_key_norm": self.query_key_norm,
                "norm_epsilon": self.norm_epsilon,
                "normalization": self.normalization,
                "sliding_window": self.sliding_window,
                "attention_scale": self.attention_scale,
            }
        )
        return config


def merge_rows(cache):
    """A self-attention cache of one batch row, its (1, g, S, k) tensors,
    as (g, S, k): a compiled loop's form of the cache (see
    `MultiHeadAttention`'s `cache`). XLA's CPU programs copied a (1, g, S,
    k) cache every step (its update fused twice, once into the reshape the
    attention product reads), and update a cache of more rows in place as
    it is (merged, they copied it): any other tensor is kept as it is."""
    def merge(x):
        if len(x.shape) != 4 or x.shape[0] != 1:
            return x
        return ops.reshape(x, (x.shape[1], x.shape[2], x.shape[3]))

    return keras.tree.map_structure(merge, cache)


def split_rows(whole, heads):
    """(B g, S, k) -> (B, g, S, k), the inverse of `merge_rows` for one
    tensor; a (B, g, S, k) tensor as it is."""
    if len(whole.shape) == 4:
        return whole
    return ops.reshape(whole, (whole.shape[0] // heads, heads, whole.shape[1], whole.shape[2]))


def _write(cache, new_positions, cache_index):
    """The keys (or values) `cache`, (B, g, S, k) or (B g, S, k), with the
    (B, g, T, k) `new_positions` written from `cache_index` (a scalar, or
    (B,) one a row)."""
    new_positions = ops.cast(new_positions, cache.dtype)
    if len(cache.shape) == 4:
        if is_per_row(cache_index):
            return _write_rows(cache, new_positions, cache_index)
        return ops.slice_update(cache, [0, 0, ops.cast(cache_index, "int32"), 0], new_positions)
    batch, heads, new, width = new_positions.shape
    if not is_per_row(cache_index):
        return ops.slice_update(cache, [0, ops.cast(cache_index, "int32"), 0],
                                ops.reshape(new_positions, (batch * heads, new, width)))
    return ops.reshape(_write_rows(split_rows(cache, heads), new_positions, cache_index), cache.shape)


def _write_rows(cache, new_positions, cache_index):
    """The keys (or values) with each row's T new positions written from
    its own `cache_index`: (B, g, S, k), (B, g, T, k), (B,) -> (B, g, S, k)."""
    length, new = cache.shape[2], new_positions.shape[2]
    if new == 1 and cache.shape[0] is not None:
        # A decoding step: each row's one position written where it lies (one update of
        # (1, g, 1, k) a row, done in place by XLA), not a select over the whole cache.
        index = ops.cast(cache_index, "int32")
        for b in range(cache.shape[0]):
            cache = ops.slice_update(cache, [b, 0, index[b], 0], new_positions[b:b + 1])
        return cache
    offset = ops.expand_dims(ops.arange(length, dtype="int32"), 0) - ops.expand_dims(
        ops.cast(cache_index, "int32"), 1)  # (B, S): a slot's place among the new positions
    inside = ops.logical_and(offset >= 0, offset < new)[:, None, :, None]  # (B, 1, S, 1)
    if new != 1:  # each slot's new position, gathered along S
        taken = ops.clip(offset, 0, new - 1)[:, None, :, None]
        new_positions = ops.take_along_axis(
            new_positions, ops.broadcast_to(taken, (*new_positions.shape[:2], length, new_positions.shape[3])), axis=2)
    return ops.where(inside, new_positions, cache)
