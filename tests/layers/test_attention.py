"""Scaled dot-product and multi-head attention against a float64 NumPy
reference, every mask kind, the causal and padding invariants, the cache.

Shape letters: B batch, T query length, S key length, d width, h heads,
k = d / h.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tests.harness import dropout_state, replay_dropout, run_layer_test
from zoo.layers import (
    DecoderBlock,
    MultiHeadAttention,
    attention_weights,
    fused_attention,
    merge_masks,
    scaled_dot_product_attention,
)

ATOL = 1e-5


# ----------------------------------------------------------------------------
# The float64 NumPy reference.


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def np_attention(q, k, v, mask=None, scale=None):
    """softmax(q k^T * scale) v in float64; a fully masked row gives 0."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = q @ np.swapaxes(k, -1, -2) * scale  # (..., T, S)
    if mask is None:
        weights = softmax(logits)
    else:
        mask = np.broadcast_to(np.asarray(mask, bool), logits.shape)
        safe = np.where(mask, logits, -np.inf)
        any_key = mask.any(-1, keepdims=True)
        weights = np.where(any_key, softmax(np.where(any_key, safe, 0.0)), 0.0)
        weights = np.where(mask, weights, 0.0)
    return weights @ v, weights


def np_mha(layer, query, key_value=None, mask=None):
    """The layer's forward pass from its own weights, in float64.

    mask: (B, T, S) bool or None. Returns ((B, T, d), (B, h, T, S)).
    """
    h = layer.num_heads
    query = np.asarray(query, np.float64)
    b, t, d = query.shape
    k_dim = d // h

    def dense(x, dense_layer):
        kernel = np.asarray(ops.convert_to_numpy(dense_layer.kernel), np.float64)
        if dense_layer.bias is None:  # use_bias=False
            return x @ kernel
        return x @ kernel + np.asarray(ops.convert_to_numpy(dense_layer.bias), np.float64)

    if layer.cross_attention:
        key_value = np.asarray(key_value, np.float64)
        q = dense(query, layer.query_dense)
        kv = dense(key_value, layer.key_value_dense)  # (B, S, 2d) = [k | v]
        k, v = kv[..., :d], kv[..., d:]
    else:
        qkv = dense(query, layer.query_key_value_dense)  # (B, T, 3d) = [q | k | v]
        q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]

    def heads(x):  # (B, L, d) -> (B, h, L, k)
        return x.reshape(x.shape[0], x.shape[1], h, k_dim).transpose(0, 2, 1, 3)

    out, weights = np_attention(
        heads(q), heads(k), heads(v), None if mask is None else np.asarray(mask)[:, None]
    )
    out = out.transpose(0, 2, 1, 3).reshape(b, t, d)  # (B, T, d)
    return dense(out, layer.output_dense), weights


def np_causal(t, s=None):
    return np.tril(np.ones((t, t if s is None else s), bool))


def to_np(x):
    return np.asarray(ops.convert_to_numpy(x))


def make_mha(num_heads=2, **kwargs):
    # Random biases so that the bias paths count in the references too.
    return MultiHeadAttention(num_heads, bias_initializer="random_normal", **kwargs)


RNG = np.random.default_rng(20240611)


def randn(*shape):
    return RNG.normal(size=shape).astype("float32")


# ----------------------------------------------------------------------------
# scaled_dot_product_attention and attention_weights.


def test_lecture_cross_attention_example():
    # Queries "die", "Katze" against keys = values "the cat danced".
    q = np.array([[-1.0, -2.5], [4.0, 3.0]], "float32")
    kv = np.array([[-2.0, -4.0], [-2.5, -0.5], [4.5, 2.5]], "float32")
    expected, expected_weights = np_attention(q, kv, kv, scale=1 / np.sqrt(2))
    out = scaled_dot_product_attention(ops.convert_to_tensor(q), kv, kv)
    np.testing.assert_allclose(to_np(out), expected, atol=ATOL)
    np.testing.assert_allclose(to_np(attention_weights(q, kv)), expected_weights, atol=ATOL)
    # "die" looks at "the", "Katze" at "danced".
    assert np.argmax(expected_weights, -1).tolist() == [0, 2]


def test_lecture_masked_self_attention_example():
    x = np.array([[1.0, 1.0], [-1.0, -2.5], [4.0, 3.0], [2.0, -3.0]], "float32")
    mask = np_causal(4)
    _, expected = np_attention(x, x, x, mask=mask, scale=1.0)
    weights = to_np(attention_weights(ops.convert_to_tensor(x), x, mask=mask, scale=1.0)).astype(np.float64)
    np.testing.assert_allclose(weights, expected, atol=ATOL)
    # The slides' rounded rows.
    np.testing.assert_array_equal(np.round(weights[1], 4), [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.round(weights[3], 4), [0.0, 0.0006, 0.0, 0.9994])
    assert np.all(weights[np.triu_indices(4, 1)] == 0.0)


@pytest.mark.parametrize("mask_kind", ["none", "shared_ts", "batched_bts", "causal", "fully_masked_row"])
def test_scaled_dot_product_attention_matches_reference(mask_kind):
    b, t, s, dk, dv = 2, 4, 5, 6, 3
    q, k, v = randn(b, t, dk), randn(b, s, dk), randn(b, s, dv)
    mask = {
        "none": None,
        "shared_ts": RNG.random((t, s)) > 0.3,
        "batched_bts": RNG.random((b, t, s)) > 0.3,
        "causal": np_causal(t, s),
        "fully_masked_row": np.ones((b, t, s), bool),
    }[mask_kind]
    if mask_kind == "fully_masked_row":
        mask[1, 2] = False
    expected, _ = np_attention(q, k, v, mask=mask)
    out = to_np(scaled_dot_product_attention(ops.convert_to_tensor(q), k, v, mask=mask))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, expected, atol=ATOL)
    if mask_kind == "fully_masked_row":
        np.testing.assert_array_equal(out[1, 2], 0.0)


def test_scale_argument_is_used():
    q, k, v = randn(1, 3, 4), randn(1, 3, 4), randn(1, 3, 4)
    expected, _ = np_attention(q, k, v, scale=0.37)
    out = scaled_dot_product_attention(ops.convert_to_tensor(q), k, v, scale=0.37)
    np.testing.assert_allclose(to_np(out), expected, atol=ATOL)


def test_fully_masked_row_is_zero_in_bfloat16():
    q = ops.cast(randn(1, 3, 4), "bfloat16")
    k = ops.cast(randn(1, 3, 4), "bfloat16")
    mask = np.array([[[True, False, False], [False, False, False], [True, True, True]]])
    weights = to_np(ops.cast(attention_weights(q, k, mask=mask), "float32"))
    assert np.all(np.isfinite(weights))
    np.testing.assert_array_equal(weights[0, 1], 0.0)
    np.testing.assert_allclose(weights.sum(-1)[0, [0, 2]], 1.0, atol=1e-2)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "batched_bhts", "fully_masked_row"])
def test_fused_attention_matches_reference(mask_kind):
    # keras.ops.dot_product_attention's (B, T, h, k) layout.
    b, t, s, h, k = 2, 4, 5, 3, 6
    q, key, v = randn(b, t, h, k), randn(b, s, h, k), randn(b, s, h, k)
    mask = {
        "none": None,
        "causal": np_causal(t, s)[None, None],
        "padding": padding([5, 2], s)[:, None, None, :],
        "batched_bhts": RNG.random((b, h, t, s)) > 0.3,
        "fully_masked_row": np.ones((b, 1, t, s), bool),
    }[mask_kind]
    if mask_kind == "fully_masked_row":
        mask[1, 0, 2] = False
    head_major = (lambda x: np.swapaxes(x, 1, 2))  # (B, L, h, k) <-> (B, h, L, k)
    expected, _ = np_attention(head_major(q), head_major(key), head_major(v), mask=mask)
    out = to_np(fused_attention(ops.convert_to_tensor(q), key, v, mask=mask))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, head_major(expected), atol=ATOL)
    if mask_kind == "fully_masked_row":
        np.testing.assert_array_equal(out[1, 2], 0.0)


@pytest.mark.parametrize(
    "dropout, call_kwargs, fused",
    [
        (0.0, {}, True),
        (0.1, {}, False),  # dropout acts on the weights
    ],
)
def test_multi_head_attention_takes_the_fused_path_only_where_it_can(monkeypatch, dropout, call_kwargs, fused):
    calls = []
    original = ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", spy)
    layer = make_mha(H, dropout=dropout)
    layer(randn(B, T, D), use_causal_mask=True, **call_kwargs)
    assert bool(calls) == fused
    calls.clear()
    layer(randn(B, T, D), use_causal_mask=True, return_attention_scores=True)  # the weights are needed
    assert not calls


def _spy_dot_product_attention(monkeypatch):
    calls = []
    original = ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append({"is_causal": kwargs.get("is_causal", False), "mask": kwargs.get("mask")})
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", spy)
    return calls


@pytest.mark.parametrize(
    "mask_kind, causal_kernel",
    [
        ("causal", True),
        ("none", False),
        ("causal_and_padding", False),
        ("causal_and_attention", False),
        ("causal_and_keras_mask", False),
        ("padding", False),
    ],
)
def test_causal_kernel_is_taken_exactly_when_the_mask_is_causal_only(monkeypatch, mask_kind, causal_kernel):
    """`dot_product_attention(is_causal=True)` without a dense mask (the
    backend's causal flash kernel) exactly when no mask but the causal one
    applies; its output is the float64 reference's either way."""
    x = randn(B, T, D)
    pad = padding([3, 5], T)
    attn = RNG.random((B, T, T)) > 0.3
    layer = make_mha(H)
    kwargs, mask = {
        "causal": ({"use_causal_mask": True}, np.broadcast_to(np_causal(T), (B, T, T))),
        "none": ({}, None),
        "causal_and_padding": (
            {"use_causal_mask": True, "padding_mask": pad},
            pad[:, None, :] & np_causal(T)[None],
        ),
        "causal_and_attention": ({"use_causal_mask": True, "attention_mask": attn}, attn & np_causal(T)[None]),
        "causal_and_keras_mask": (
            {"use_causal_mask": True, "query_mask": pad},
            pad[:, None, :] & pad[:, :, None] & np_causal(T)[None],
        ),
        "padding": ({"padding_mask": pad}, np.broadcast_to(pad[:, None, :], (B, T, T))),
    }[mask_kind]
    calls = _spy_dot_product_attention(monkeypatch)
    out = to_np(layer(x, **kwargs))
    assert len(calls) == 1
    assert calls[0]["is_causal"] == causal_kernel
    if causal_kernel:
        assert calls[0]["mask"] is None
    expected, _ = np_mha(layer, x, mask=mask)  # a padded query attends to nothing
    np.testing.assert_allclose(out, expected, atol=ATOL)


def test_fused_attention_refuses_a_mask_with_is_causal():
    q = ops.convert_to_tensor(randn(B, T, H, D // H))
    with pytest.raises(ValueError, match="not both"):
        fused_attention(q, q, q, mask=np.ones((B, 1, T, T), bool), is_causal=True)


def test_query_and_key_widths_must_match():
    with pytest.raises(ValueError, match="query width 3 and key width 4"):
        scaled_dot_product_attention(
            ops.convert_to_tensor(randn(1, 2, 3)), randn(1, 2, 4), randn(1, 2, 4)
        )


# ----------------------------------------------------------------------------
# merge_masks.


def test_merge_masks_combines_every_kind():
    b, t, s = 2, 3, 4
    query, key = np.zeros((b, t, 1)), np.zeros((b, s, 1))
    padding = RNG.random((b, s)) > 0.3
    attention = RNG.random((b, t, s)) > 0.3
    query_mask = RNG.random((b, t)) > 0.3
    merged = merge_masks(
        query,
        key,
        padding_mask=padding,
        attention_mask=attention,
        query_mask=query_mask,
        use_causal_mask=True,
        query_start=1,
    )
    # Query i sits at absolute position i + 1.
    causal = np.arange(s)[None, :] <= (np.arange(t) + 1)[:, None]
    expected = padding[:, None, :] & attention & query_mask[:, :, None] & causal[None]
    np.testing.assert_array_equal(np.broadcast_to(to_np(merged), (b, t, s)), expected)
    assert merge_masks(query, key) is None


# ----------------------------------------------------------------------------
# MultiHeadAttention against the reference, one mask kind at a time.


B, T, S, D, H = 2, 5, 7, 8, 2


def padding(lengths, length):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]  # (B, L)


@pytest.mark.parametrize(
    "mask_kind",
    ["none", "padding_mask", "attention_mask", "causal", "all_explicit", "fully_masked_row"],
)
def test_self_attention_matches_reference(mask_kind):
    x = randn(B, T, D)
    layer = make_mha(H)
    pad = padding([3, 5], T)
    attn = RNG.random((B, T, T)) > 0.3
    kwargs, mask = {
        "none": ({}, None),
        "padding_mask": ({"padding_mask": pad}, np.broadcast_to(pad[:, None, :], (B, T, T))),
        "attention_mask": ({"attention_mask": attn}, attn),
        "causal": ({"use_causal_mask": True}, np.broadcast_to(np_causal(T), (B, T, T))),
        "all_explicit": (
            {"padding_mask": pad, "attention_mask": attn, "use_causal_mask": True},
            pad[:, None, :] & attn & np_causal(T)[None],
        ),
        "fully_masked_row": ({"attention_mask": _with_empty_row(attn)}, _with_empty_row(attn)),
    }[mask_kind]
    out, scores = layer(x, **kwargs, return_attention_scores=True)
    expected, expected_scores = np_mha(layer, x, mask=mask)
    np.testing.assert_allclose(to_np(out), expected, atol=ATOL)
    np.testing.assert_allclose(to_np(scores), expected_scores, atol=ATOL)
    # The plain call gives the same output.
    np.testing.assert_allclose(to_np(layer(x, **kwargs)), expected, atol=ATOL)
    if mask_kind == "fully_masked_row":
        np.testing.assert_array_equal(to_np(scores)[1, :, 2], 0.0)
        # Nothing attended: the output is the output projection's bias.
        np.testing.assert_allclose(to_np(out)[1, 2], to_np(layer.output_dense.bias), atol=ATOL)


def _with_empty_row(attn):
    attn = attn.copy()
    attn[1, 2] = False
    return attn


def test_implicit_keras_mask_merges_with_explicit_padding_mask():
    ids = np.array([[4, 2, 9, 0, 0], [3, 1, 1, 7, 0]], "int32")  # 0 is padding
    explicit = np.array([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    layer = make_mha(H)
    # Eager: the embedding's output carries its mask into the layer.
    x = embedding(ids)
    out = to_np(layer(x, padding_mask=explicit))
    implicit = ids != 0
    keys = implicit & explicit
    mask = keys[:, None, :] & implicit[:, :, None]  # padded queries attend nowhere
    expected, _ = np_mha(layer, to_np(x), mask=mask)
    np.testing.assert_allclose(out, expected, atol=ATOL)
    # Symbolic: the same through a functional model.
    token_ids = keras.Input((T,), dtype="int32")
    padding_mask = keras.Input((T,), dtype="bool")
    model = keras.Model([token_ids, padding_mask], layer(embedding(token_ids), padding_mask=padding_mask))
    np.testing.assert_allclose(to_np(model([ids, explicit])), expected, atol=ATOL)
    # And the explicit mask really took part: without it the answer differs.
    without_explicit = to_np(layer(embedding(ids)))
    assert not np.allclose(without_explicit[0, :3], expected[0, :3], atol=1e-3)


@pytest.mark.parametrize("mask_kind", ["none", "padding_mask", "attention_mask", "implicit_and_explicit"])
def test_cross_attention_matches_reference(mask_kind):
    d_kv = 6  # the attended sequence may have another width
    x, memory = randn(B, T, D), randn(B, S, d_kv)
    layer = make_mha(H, cross_attention=True)
    pad = padding([4, 7], S)
    attn = RNG.random((B, T, S)) > 0.3
    if mask_kind == "implicit_and_explicit":
        memory[1, 5:] = 0.0  # Masking hides source positions 5 and 6 of row 1
        memory_in = keras.layers.Masking(0.0)(memory)
        out = layer(x, memory_in, padding_mask=pad)  # Keras fills `key_value_mask`
        keys = pad & np.any(memory != 0.0, -1)
        mask = np.broadcast_to(keys[:, None, :], (B, T, S))
        same, scores = layer(
            x, memory, padding_mask=pad, key_value_mask=np.any(memory != 0.0, -1), return_attention_scores=True
        )
        np.testing.assert_allclose(to_np(same), to_np(out), atol=ATOL)
    else:
        kwargs, mask = {
            "none": ({}, None),
            "padding_mask": ({"padding_mask": pad}, np.broadcast_to(pad[:, None, :], (B, T, S))),
            "attention_mask": ({"attention_mask": attn}, attn),
        }[mask_kind]
        out, scores = layer(x, memory, **kwargs, return_attention_scores=True)
    assert tuple(out.shape) == (B, T, D) and tuple(scores.shape) == (B, H, T, S)
    expected, expected_scores = np_mha(layer, x, memory, mask=mask)
    np.testing.assert_allclose(to_np(out), expected, atol=ATOL)
    np.testing.assert_allclose(to_np(scores), expected_scores, atol=ATOL)


# ----------------------------------------------------------------------------
# Invariants.


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_causal_mask_no_future_leak(dropout):
    x = randn(B, T, D)
    layer = make_mha(H, dropout=dropout)
    layer(x)
    state = dropout_state(layer)

    def run(inputs):
        replay_dropout(layer, state)  # the same dropout mask on every run
        return to_np(layer(inputs, use_causal_mask=True, training=True))

    reference = run(x)
    if dropout:
        # Dropout is really on, and replaying its seed reproduces it.
        assert not np.allclose(reference, to_np(layer(x, use_causal_mask=True)), atol=1e-3)
        np.testing.assert_array_equal(run(x), reference)
    for future in range(1, T):
        changed = x.copy()
        changed[:, future] += 3.0 * randn(B, D)
        out = run(changed)
        np.testing.assert_allclose(out[:, :future], reference[:, :future], atol=1e-6)
        assert not np.allclose(out[:, future], reference[:, future], atol=1e-3)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_causal_scores_are_exactly_zero_above_the_diagonal(dropout):
    layer = make_mha(H, dropout=dropout)
    x = randn(B, T, D)
    for training in (False, True):
        out, scores = layer(x, use_causal_mask=True, training=training, return_attention_scores=True)
        scores = to_np(scores)
        above = np.triu(np.ones((T, T), bool), 1)
        assert np.all(scores[..., above] == 0.0)
        assert np.all(np.isfinite(to_np(out)))
        if not training:
            assert np.all(scores[..., ~above] > 0.0)
            np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


def test_changing_a_padded_key_changes_no_output():
    x, pad = randn(B, T, D), padding([3, 5], T)
    layer = make_mha(H)
    out = to_np(layer(x, padding_mask=pad))
    changed = x.copy()
    changed[0, 3:] = 100.0 * randn(2, D)
    out_changed = to_np(layer(changed, padding_mask=pad))
    # Real positions see only real keys; padded positions may change.
    np.testing.assert_allclose(out_changed[0, :3], out[0, :3], atol=1e-6)
    np.testing.assert_array_equal(out_changed[1], out[1])

    # Cross-attention: a padded source position changes nothing at all.
    cross = make_mha(H, cross_attention=True)
    memory, memory_pad = randn(B, S, D), padding([4, 7], S)
    out = to_np(cross(x, memory, padding_mask=memory_pad))
    memory_changed = memory.copy()
    memory_changed[0, 4:] = 100.0 * randn(3, D)
    np.testing.assert_allclose(
        to_np(cross(x, memory_changed, padding_mask=memory_pad)), out, atol=1e-6
    )


@pytest.mark.parametrize("dropout", [0.0, 0.1])  # 0: the plain call takes the fused path
def test_fully_masked_row_gives_zeros_not_nan_in_mixed_bfloat16(dropout):
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = make_mha(H, dropout=dropout)
    x = randn(B, T, D)
    pad = np.ones((B, T), bool)
    pad[1] = False  # the second sequence is all padding
    for training in (False, True):
        plain = to_np(ops.cast(layer(x, padding_mask=pad, training=training), "float32"))
        assert np.all(np.isfinite(plain))
        out, scores = layer(x, padding_mask=pad, training=training, return_attention_scores=True)
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
        out, scores = to_np(ops.cast(out, "float32")), to_np(ops.cast(scores, "float32"))
        assert np.all(np.isfinite(out)) and np.all(np.isfinite(scores))
        np.testing.assert_array_equal(scores[1], 0.0)
        bias = to_np(ops.cast(ops.cast(layer.output_dense.bias, "bfloat16"), "float32"))
        np.testing.assert_allclose(out[1], np.broadcast_to(bias, (T, D)), atol=1e-2)
        np.testing.assert_allclose(plain[1], np.broadcast_to(bias, (T, D)), atol=1e-2)


# ----------------------------------------------------------------------------
# The cache: step-by-step decoding equals the full causal pass.


def _empty_cache(batch, length, layer_or_heads, width):
    heads = layer_or_heads if isinstance(layer_or_heads, int) else layer_or_heads.num_heads
    return tuple(ops.zeros((batch, heads, length, width // heads)) for _ in range(2))  # keys, values: (B, h, S_max, k)


@pytest.mark.parametrize("index_as_tensor", [False, True])
def test_cached_attention_equals_full_causal_pass(index_as_tensor):
    s_max = T + 2  # the cache may be longer than what is decoded
    x = randn(B, T, D)
    layer = make_mha(H)
    full = to_np(layer(x, use_causal_mask=True))
    cache = _empty_cache(B, s_max, layer, D)
    # Prefill the first two positions at once, then one position per step.
    steps = [(0, 2)] + [(t, t + 1) for t in range(2, T)]
    outputs = []
    for start, end in steps:
        index = ops.convert_to_tensor(start, "int32") if index_as_tensor else start
        out, cache = layer(x[:, start:end], cache=cache, cache_index=index)
        assert [tuple(x.shape) for x in cache] == [(B, H, s_max, D // H)] * 2
        outputs.append(to_np(out))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=ATOL)
    # The cache holds each position's keys and values, the reference's.
    qkv = x.astype(np.float64) @ to_np(layer.query_key_value_dense.kernel) + to_np(
        layer.query_key_value_dense.bias
    )
    for held, width in zip(cache, (slice(D, 2 * D), slice(2 * D, 3 * D))):  # the keys, then the values
        expected = qkv[..., width].reshape(B, T, H, D // H).transpose(0, 2, 1, 3)  # (B, h, T, k)
        np.testing.assert_allclose(to_np(held)[:, :, :T], expected, atol=ATOL)
        np.testing.assert_array_equal(to_np(held)[:, :, T:], 0.0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("cross_attention", [False, True])
def test_cached_decoder_block_equals_full_pass(norm_first, cross_attention):
    block = DecoderBlock(H, intermediate_dim=16, use_cross_attention=cross_attention, norm_first=norm_first)
    x = randn(B, T, D)
    extra = {}
    if cross_attention:
        extra = {"encoder_output": randn(B, S, D), "encoder_padding_mask": padding([4, 7], S)}
    full = to_np(block(x, **extra))
    self_cache = _empty_cache(B, T, H, D)
    cross = {}
    if cross_attention:
        cross_cache = block.compute_cross_attention_cache(extra["encoder_output"])
        assert [tuple(x.shape) for x in cross_cache] == [(B, H, S, D // H)] * 2
        cross = {"cross_attention_cache": cross_cache, "encoder_padding_mask": extra["encoder_padding_mask"]}
    outputs = []
    for t in range(T):
        out, self_cache = block(x[:, t : t + 1], self_attention_cache=self_cache, cache_index=t, **cross)
        outputs.append(to_np(out))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=ATOL)


# ----------------------------------------------------------------------------
# Bad input.


def test_each_cached_call_fits_its_kind_of_attention():
    x = randn(B, T, D)
    with pytest.raises(ValueError, match="With a `cache`.*pass `cache_index`"):
        make_mha(H)(x, cache=_empty_cache(B, T, H, D))
    with pytest.raises(ValueError, match="With a `cache`.*not `return_attention_scores`"):
        make_mha(H)(x, cache=_empty_cache(B, T, H, D), cache_index=0, return_attention_scores=True)
    with pytest.raises(ValueError, match="takes no `key_value`"):
        make_mha(H)(x, randn(B, S, D))
    block = DecoderBlock(H, intermediate_dim=16, use_cross_attention=True)
    with pytest.raises(ValueError, match="has cross-attention: pass `encoder_output`"):
        block(x[:, :1], self_attention_cache=_empty_cache(B, T, H, D), cache_index=0)


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="d_model=10 must be divisible by num_heads=4"):
        MultiHeadAttention(4)(randn(1, 2, 10))


@pytest.mark.parametrize("num_heads", [0, -2, 2.0])
def test_num_heads_must_be_a_positive_integer(num_heads):
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(num_heads)


def test_dropout_must_be_a_rate():
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(2, dropout=1.0)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"padding_mask": np.ones((B, T + 1), bool)}, "padding_mask"),
        ({"padding_mask": np.ones((B, T, T), bool)}, "padding_mask"),
        ({"attention_mask": np.ones((B, T + 1, T), bool)}, "attention_mask"),
        ({"attention_mask": np.ones((B, T, T + 1), bool)}, "attention_mask"),
        ({"attention_mask": np.ones((T, T), bool)}, "attention_mask"),
    ],
)
def test_mask_that_does_not_broadcast_is_rejected(kwargs, name):
    layer = make_mha(H)
    with pytest.raises(ValueError, match=f"`{name}`"):
        layer(randn(B, T, D), **kwargs)


def test_bad_padding_mask_is_rejected_next_to_an_implicit_mask():
    x = keras.layers.Embedding(10, D, mask_zero=True)(np.array([[1, 2, 3, 0, 0]] * B))
    with pytest.raises(ValueError, match="`padding_mask`"):
        make_mha(H)(x, padding_mask=np.ones((B, T + 1), bool))


def test_cross_attention_padding_mask_must_match_the_source_length():
    layer = make_mha(H, cross_attention=True)
    with pytest.raises(ValueError, match="`padding_mask`"):
        layer(randn(B, T, D), randn(B, S, D), padding_mask=np.ones((B, T), bool))


def test_self_and_cross_attention_arguments_are_checked():
    with pytest.raises(ValueError, match="key_value"):
        make_mha(H)(randn(B, T, D), randn(B, S, D))
    with pytest.raises(ValueError, match="key_value"):
        make_mha(H, cross_attention=True)(randn(B, T, D))


# ----------------------------------------------------------------------------
# The shared harness.


@pytest.mark.parametrize(
    "init_kwargs, input_data, call_kwargs, expected_shape, num_weights",
    [
        (
            {"num_heads": H, "dropout": 0.1},
            {"query": randn(B, T, D), "padding_mask": padding([3, 5], T)},
            {"use_causal_mask": True},
            (B, T, D),
            4,  # fused QKV kernel and bias, output kernel and bias
        ),
        (
            {"num_heads": H, "cross_attention": True},
            {"query": randn(B, T, D), "key_value": randn(B, S, 6), "padding_mask": padding([4, 7], S)},
            {},
            (B, T, D),
            6,  # Q, fused KV and output projections
        ),
        (
            {"num_heads": H},
            {"query": randn(B, T, D), "attention_mask": RNG.random((B, T, T)) > 0.2},
            {},
            (B, T, D),
            4,
        ),
    ],
    ids=["self_causal_padding", "cross", "attention_mask"],
)
def test_multi_head_attention_harness(
    init_kwargs, input_data, call_kwargs, expected_shape, num_weights, tmp_path
):
    run_layer_test(
        MultiHeadAttention,
        init_kwargs,
        input_data,
        call_kwargs=call_kwargs,
        expected_output_shape=expected_shape,
        expected_num_trainable_weights=num_weights,
        tmp_path=tmp_path,
    )
