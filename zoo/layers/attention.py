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


def _static_dim(x, axis):
    dim = x.shape[axis]
    return dim if isinstance(dim, int) else None


def attention_weights(query, key, mask=None, scale=None):
    """softmax(Q K^T * scale) with masked keys removed.

    Args:
        query: (..., T, d_k).
        key: (..., S, d_k).
        mask: optional boolean, broadcastable to (..., T, S); False means
            "may not attend".
        scale: the logit scale, 1/sqrt(d_k) by default (the paper's).

    Returns:
        (..., T, S) weights in the query's dtype. The softmax runs in float32
        (also under `mixed_bfloat16`); a row whose keys are all masked is 0.
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
    if _static_dim(query, -2) == 1:
        # One query (a cached decoding step): K q, a matrix-vector product
        # that reads K in its stored (..., S, d_k) layout; Q K^T would make
        # XLA copy K transposed every step. Swapping the length-1 axis back
        # is free.
        logits = ops.swapaxes(ops.matmul(key, ops.swapaxes(query, -1, -2)), -1, -2)  # (..., 1, S)
    else:
        logits = ops.matmul(query, ops.swapaxes(key, -1, -2))  # (..., T, S)
    logits = ops.cast(logits, "float32") * scale
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
    """
    weights = attention_weights(query, key, mask=mask, scale=scale)
    return ops.matmul(weights, value)


def fused_attention(query, key, value, mask=None, scale=None):
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

    Returns:
        (B, T, h, k); a query whose keys are all masked outputs 0, as in
        `scaled_dot_product_attention` (Keras' op would give it the mean of
        the values).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(_static_dim(key, -1) or ops.shape(key)[-1])
    out = ops.dot_product_attention(query, key, value, mask=mask, scale=scale)
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
    use_causal_mask=False,
    query_start=0,
):
    """Merge every kind of attention mask into one boolean (B, T, S) mask.

    Args:
        query: (B, T, ...) the queries (only the shape is used).
        key: (B, S, ...) the keys (only the shape is used).
        padding_mask: (B, S), True (or 1) for real keys, False for padding.
        attention_mask: (B, T, S) or broadcastable, True where allowed.
        query_mask: (B, T), False for padded queries: their rows attend to
            nothing and output 0. This is where Keras' implicit mask of the
            query lands.
        use_causal_mask: query t may attend to key s only if s <= t.
        query_start: the absolute position of the first query (the cache
            index during cached decoding), so the causal mask holds there too.

    Returns:
        A boolean tensor broadcastable to (B, T, S), or None if no mask
        applies.
    """
    batch, q_len, k_len = _static_dim(query, 0), _static_dim(query, 1), _static_dim(key, 1)
    merged = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if padding_mask is not None:
        _check_mask_shape("padding_mask", padding_mask, (batch, k_len))
        merged = _and(merged, ops.cast(padding_mask, "bool")[:, None, :])
    if query_mask is not None:
        _check_mask_shape("query mask", query_mask, (batch, q_len))
        merged = _and(merged, ops.cast(query_mask, "bool")[:, :, None])
    if attention_mask is not None:
        _check_mask_shape("attention_mask", attention_mask, (batch, q_len, k_len))
        merged = _and(merged, ops.cast(attention_mask, "bool"))
    if use_causal_mask:
        t, s = ops.shape(query)[1], ops.shape(key)[1]
        query_positions = ops.arange(t) + ops.cast(query_start, "int32")
        key_positions = ops.arange(s)
        causal = key_positions[None, :] <= query_positions[:, None]  # (T, S)
        merged = _and(merged, causal[None, :, :])
    return merged
