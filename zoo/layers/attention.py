"""Scaled dot-product attention and the one helper that merges masks.

Shape letters used in this file:
    B: batch, T: query length, S: key/value length, h: heads, d: width.

A boolean mask is True where a query *may* attend to a key.
"""

import math

from keras import ops

# Added to logits that may not be attended to. Finite, so that a row with
# every key masked gives a uniform softmax (then zeroed) and never NaN.
_MASKED_LOGIT = -1e9


def is_per_row(start):
    """Whether a start position is (B,), one a row, rather than one for
    the whole batch (an int or a scalar tensor)."""
    return len(getattr(start, "shape", ())) == 1


def positions(length, start):
    """The absolute int32 positions of `length` inputs from `start`: (T,)
    for a scalar `start`, (B, T) for a (B,) one (each row at its own
    position, as a server's slots are)."""
    steps = ops.arange(length, dtype="int32")
    if is_per_row(start):
        return ops.expand_dims(ops.cast(start, "int32"), 1) + ops.expand_dims(steps, 0)  # (B, T)
    return steps + ops.cast(start, "int32")  # (T,)


def _static_dim(x, axis):
    dim = x.shape[axis]
    return dim if isinstance(dim, int) else None


_FEW_QUERIES = 16  # up to this many query rows, the logits are K Q^T swapped


def attention_weights(query, key, mask=None, scale=None, bias=None):
    """softmax(Q K^T * scale + bias) with masked keys removed.

    Args:
        query: (..., T, d_k).
        key: (..., S, d_k).
        mask: optional boolean, broadcastable to (..., T, S); False means
            "may not attend".
        scale: the logit scale, 1/sqrt(d_k) by default (the paper's).
        bias: optional float, broadcastable to (..., T, S), added to the
            scaled logits (T5's relative position bias).

    Returns:
        (..., T, S) weights in the query's dtype. The softmax runs in float32
        (also under `mixed_bfloat16`); a row whose keys are all masked is 0.

    Example:

    ```python
    q = k = np.random.rand(1, 3, 4).astype("float32")
    w = attention_weights(q, k, mask=np.tril(np.ones((3, 3), bool)))  # (1, 3, 3)
    np.testing.assert_allclose(np.sum(w, axis=-1), 1.0, atol=1e-6)
    ```

    References:
        Vaswani et al. 2017, section 3.2.1 (eq. 1, the softmax part).
    """
    d_query, d_key = _static_dim(query, -1), _static_dim(key, -1)
    if d_query is not None and d_key is not None and d_query != d_key:
        raise ValueError(
            "query and key must have the same width to be compared: got "
            f"query width {d_query} and key width {d_key}. Project them to a "
            "common width first (MultiHeadAttention does this)."
        )
    if scale is None:
        scale = 1.0 / math.sqrt(d_key or ops.shape(key)[-1])
    rows = _static_dim(query, -2)
    if rows is not None and rows <= _FEW_QUERIES:
        # A few queries (a cached decoding step, with the query heads that
        # share a key head as rows): K Q^T, a product that reads K in its
        # stored (..., S, d_k) layout; Q K^T would make XLA copy K
        # transposed every step. Swapping the few rows back costs little.
        logits = ops.swapaxes(ops.matmul(key, ops.swapaxes(query, -1, -2)), -1, -2)  # (..., T, S)
    else:
        logits = ops.matmul(query, ops.swapaxes(key, -1, -2))  # (..., T, S)
    logits = ops.cast(logits, "float32") * scale
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    if mask is None:
        return ops.cast(ops.softmax(logits, axis=-1), query.dtype)
    mask = ops.cast(mask, "bool")
    logits = ops.where(mask, logits, _MASKED_LOGIT)
    weights = ops.softmax(logits, axis=-1)
    # A row with nothing to attend to contributes nothing.
    any_key = ops.any(mask, axis=-1, keepdims=True)
    weights = ops.where(any_key, weights, 0.0)
    return ops.cast(weights, query.dtype)


def scaled_dot_product_attention(query, key, value, mask=None, scale=None):
    """Attention(Q, K, V) = softmax(Q K^T * scale) V (Vaswani et al., eq. 1).

    Args:
        query: (..., T, d_k).
        key: (..., S, d_k).
        value: (..., S, d_v).
        mask: optional boolean broadcastable to (..., T, S); False means
            "may not attend". A query whose keys are all masked outputs 0.
        scale: 1/sqrt(d_k) by default.

    Returns:
        (..., T, d_v).

    Example:

    ```python
    q = k = v = np.random.rand(2, 3, 4).astype("float32")
    out = scaled_dot_product_attention(q, k, v)  # (2, 3, 4)
    ```

    References:
        Vaswani et al. 2017, section 3.2.1 ("Scaled Dot-Product
        Attention", eq. 1).
    """
    weights = attention_weights(query, key, mask=mask, scale=scale)
    return ops.matmul(weights, value)


def fused_attention(query, key, value, mask=None, scale=None, is_causal=False):
    """`scaled_dot_product_attention` through `keras.ops.dot_product_attention`.

    The same function in that op's (B, T, h, k) layout, so that each backend
    runs its own fused kernel where it has one: cuDNN flash attention with
    JAX on a GPU (in float16/bfloat16), `torch.nn.functional.
    scaled_dot_product_attention` with torch, one XLA computation with
    TensorFlow. Keras' own `MultiHeadAttention` takes this path too whenever
    it needs neither dropout on the weights nor the weights themselves.

    Args:
        query: (B, T, h, k).
        key: (B, S, h, k).
        value: (B, S, h, k).
        mask: optional boolean broadcastable to (B, h, T, S); False means
            "may not attend".
        scale: 1/sqrt(k) by default.
        is_causal: the causal mask (query t attends to keys s <= t, T = S)
            and no other: the backend builds it inside its causal kernel
            (cuDNN's causal flash attention with JAX on a GPU) instead of
            reading a dense (T, S) mask. Not combined with `mask`.

    Returns:
        (B, T, h, k); a query whose keys are all masked outputs 0, as in
        `scaled_dot_product_attention` (Keras' op would give it the mean of
        the values).

    Example:

    ```python
    q = k = v = keras.random.normal((2, 5, 4, 8))  # (B, T, h, k)
    out = fused_attention(q, k, v, is_causal=True)  # (2, 5, 4, 8)
    ```

    References:
        Vaswani et al. 2017, section 3.2.1 (eq. 1); Dao et al. 2022
        (FlashAttention), the kernel a GPU backend may run.
    """
    if is_causal and mask is not None:
        raise ValueError("`is_causal=True` is the only mask: pass `mask` or `is_causal`, not both.")
    if scale is None:
        scale = 1.0 / math.sqrt(_static_dim(key, -1) or ops.shape(key)[-1])
    out = ops.dot_product_attention(query, key, value, mask=mask, scale=scale, is_causal=is_causal)
    if mask is None:
        return out
    any_key = ops.any(mask, axis=-1, keepdims=True)  # (B, 1|h, T, 1)
    return ops.where(ops.swapaxes(any_key, 1, 2), out, ops.zeros_like(out))


def _check_mask_shape(name, mask, expected):
    """Raise if a mask's static shape cannot broadcast to `expected`."""
    shape = tuple(mask.shape)
    if len(shape) != len(expected):
        raise ValueError(
            f"`{name}` must have rank {len(expected)} with shape "
            f"{_fmt(expected)}; got shape {_fmt(shape)}."
        )
    for got, want in zip(shape, expected):
        if got is None or want is None or got == 1 or got == want:
            continue
        raise ValueError(
            f"`{name}` of shape {_fmt(shape)} does not broadcast to "
            f"{_fmt(expected)}."
        )


def _fmt(shape):
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def merge_masks(
    query,
    key,
    padding_mask=None,
    attention_mask=None,
    query_mask=None,
    key_mask=None,
    use_causal_mask=False,
    query_start=0,
    sliding_window=None,
):
    """Merge every kind of attention mask into one boolean (B, T, S) mask.

    The one place where masks meet: every layer of `zoo.layers` passes its
    masks, by role, to this function.

    Args:
        query: (B, T, ...) the queries (only the shape is used).
        key: (B, S, ...) the keys (only the shape is used).
        padding_mask: (B, S), True (or 1) for real keys, False for padding.
        attention_mask: (B, T, S) or broadcastable, True where allowed.
        query_mask: (B, T), False for padded queries: their rows attend to
            nothing and output 0. This is where Keras' implicit mask of the
            query lands.
        key_mask: (B, S), False for padded keys; Keras' implicit mask of the
            keys (the query's own in self-attention), AND-ed with
            `padding_mask`.
        use_causal_mask: query t may attend to key s only if s <= t.
        query_start: the absolute position of the first query (the cache
            index during cached decoding), so the causal mask holds there too:
            a scalar, or (B,) one a row.
        sliding_window: with the causal mask, query t sees only the
            `sliding_window` most recent keys, t - sliding_window < s <= t
            (Mistral's and Gemma's local layers); None for all of them.

    Returns:
        A boolean tensor broadcastable to (B, T, S), or None if no mask
        applies.

    Example:

    ```python
    query, key = np.zeros((2, 3, 8)), np.zeros((2, 3, 8))
    mask = merge_masks(query, key, padding_mask=np.array([[1, 1, 0], [1, 1, 1]]), use_causal_mask=True)
    mask.shape  # (2, 3, 3): row t of batch 0 sees keys 0..min(t, 1)
    ```

    References:
        Vaswani et al. 2017, section 3.2.3 (masking out illegal
        connections in the decoder).
    """
    batch, q_len, k_len = _static_dim(query, 0), _static_dim(query, 1), _static_dim(key, 1)
    masks = []
    if padding_mask is not None:
        _check_mask_shape("padding_mask", padding_mask, (batch, k_len))
        masks.append(ops.expand_dims(ops.cast(padding_mask, "bool"), 1))  # (B, 1, S)
    if key_mask is not None:
        _check_mask_shape("key mask", key_mask, (batch, k_len))
        masks.append(ops.expand_dims(ops.cast(key_mask, "bool"), 1))  # (B, 1, S)
    if query_mask is not None:
        _check_mask_shape("query mask", query_mask, (batch, q_len))
        masks.append(ops.expand_dims(ops.cast(query_mask, "bool"), 2))  # (B, T, 1)
    if attention_mask is not None:
        _check_mask_shape("attention_mask", attention_mask, (batch, q_len, k_len))
        masks.append(ops.cast(attention_mask, "bool"))
    if use_causal_mask:
        t, s = ops.shape(query)[1], ops.shape(key)[1]
        if is_per_row(query_start):
            query_positions = ops.expand_dims(positions(t, query_start), -1)  # (B, T, 1)
            key_positions = ops.reshape(ops.arange(s, dtype="int32"), (1, 1, s))  # (1, 1, S)
        else:
            query_positions = ops.expand_dims(ops.arange(t) + ops.cast(query_start, "int32"), 1)  # (T, 1)
            key_positions = ops.expand_dims(ops.arange(s), 0)  # (1, S)
        allowed = key_positions <= query_positions  # (T, S) or (B, T, S)
        if sliding_window is not None:
            allowed = ops.logical_and(allowed, key_positions > query_positions - sliding_window)
        masks.append(allowed if is_per_row(query_start) else ops.expand_dims(allowed, 0))  # (B or 1, T, S)
    if not masks:
        return None
    merged = masks[0]
    for mask in masks[1:]:
        merged = ops.logical_and(merged, mask)
    return merged
