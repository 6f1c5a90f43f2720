"""AddNorm, FeedForward and the encoder and decoder blocks against float64
NumPy references, and their padding and causal invariants.

Shape letters: B batch, T target length, S source length, d width.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops
from keras.src.backend.common.masking import get_keras_mask

from tests.harness import dropout_state, replay_dropout, run_layer_test
from tests.layers.test_attention import np_causal, np_mha
from zoo.layers import AddNorm, DecoderBlock, EncoderBlock, FeedForward, TokenAndPositionEmbedding

ATOL = 1e-5
B, T, S, D, H, F = 2, 5, 6, 8, 2, 16
RNG = np.random.default_rng(11)


def to_np(x):
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def randn(*shape):
    return RNG.normal(size=shape).astype("float32")


def padding(lengths, length):
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def randomize(layer):
    """Give every weight a random value, so that no bias or LayerNorm scale
    is trivially 0 or 1 and the references check them too."""
    for w in layer.trainable_weights:
        base = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(base + 0.3 * RNG.normal(size=w.shape))


def np_layer_norm(x, norm, epsilon=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    beta = 0.0 if norm.beta is None else to_np(norm.beta)  # center=False: no beta
    return (x - mean) / np.sqrt(var + epsilon) * to_np(norm.gamma) + beta


def np_gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_dense(dense, x):
    out = x @ to_np(dense.kernel)
    return out if dense.bias is None else out + to_np(dense.bias)


def np_feed_forward(ff, x):
    inner = np_dense(ff.intermediate_dense, x)
    inner = {
        "relu": lambda z: np.maximum(z, 0.0),
        "gelu": lambda z: np_gelu(z, approximate=False),
        "gelu_approximate": lambda z: np_gelu(z, approximate=True),
    }[ff.activation](inner)
    return np_dense(ff.output_dense, inner)


def np_sublayer(add_norm, x, sublayer):
    """The paper's LayerNorm(x + Sublayer(x)), or pre-LN x + Sublayer(LN(x))."""
    if add_norm.norm_first:
        return x + sublayer(np_layer_norm(x, add_norm.layer_norm))
    return np_layer_norm(x + sublayer(x), add_norm.layer_norm)


def np_encoder_block(block, x, mask):
    x = np.asarray(x, np.float64)
    x = np_sublayer(
        block.self_attention_add_norm, x, lambda h: np_mha(block.self_attention, h, mask=mask)[0]
    )
    return np_sublayer(block.feed_forward_add_norm, x, lambda h: np_feed_forward(block.feed_forward, h))


def np_decoder_block(block, x, self_mask, encoder_output=None, cross_mask=None):
    x = np.asarray(x, np.float64)
    x = np_sublayer(
        block.self_attention_add_norm, x, lambda h: np_mha(block.self_attention, h, mask=self_mask)[0]
    )
    if block.use_cross_attention:
        x = np_sublayer(
            block.cross_attention_add_norm,
            x,
            lambda h: np_mha(block.cross_attention_layer, h, encoder_output, mask=cross_mask)[0],
        )
    return np_sublayer(block.feed_forward_add_norm, x, lambda h: np_feed_forward(block.feed_forward, h))


# ----------------------------------------------------------------------------
# AddNorm.


def test_post_ln_is_layer_norm_of_the_sum():
    layer = AddNorm(norm_first=False)
    x, y = randn(B, T, D), randn(B, T, D)
    layer.build(x.shape)
    randomize(layer)
    np.testing.assert_array_equal(to_np(layer.sublayer_input(x)), x)
    expected = np_layer_norm(x.astype(np.float64) + y, layer.layer_norm)
    np.testing.assert_allclose(to_np(layer(x, y)), expected, atol=ATOL)


def test_pre_ln_normalises_the_sublayer_input_and_adds():
    layer = AddNorm(norm_first=True)
    x, y = randn(B, T, D), randn(B, T, D)
    layer.build(x.shape)
    randomize(layer)
    expected_input = np_layer_norm(x.astype(np.float64), layer.layer_norm)
    np.testing.assert_allclose(to_np(layer.sublayer_input(x)), expected_input, atol=ATOL)
    np.testing.assert_allclose(to_np(layer(x, y)), x.astype(np.float64) + y, atol=ATOL)


def test_add_norm_dropout_acts_on_the_sublayer_output_only_in_training():
    layer = AddNorm(norm_first=True, dropout=0.5)
    x, y = randn(B, T, D), randn(B, T, D)
    np.testing.assert_allclose(to_np(layer(x, y)), x + y.astype(np.float64), atol=ATOL)
    dropped = to_np(layer(x, y, training=True)) - x  # 0 or 2 * y
    assert np.all(np.isclose(dropped, 0.0, atol=1e-6) | np.isclose(dropped, 2 * y, atol=1e-5))
    assert np.any(np.isclose(dropped, 0.0, atol=1e-6)) and not np.allclose(dropped, 0.0)


@pytest.mark.parametrize("norm_first", ["pre", "post", 1, None])
def test_norm_first_must_be_a_bool(norm_first):
    with pytest.raises(ValueError, match="`norm_first`"):
        AddNorm(norm_first=norm_first)
    with pytest.raises(ValueError, match="`norm_first`"):
        EncoderBlock(H, norm_first=norm_first)
    with pytest.raises(ValueError, match="`norm_first`"):
        DecoderBlock(H, norm_first=norm_first)


# ----------------------------------------------------------------------------
# FeedForward.


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_approximate"])
def test_feed_forward_matches_reference(activation):
    layer = FeedForward(F, activation=activation, bias_initializer="random_normal")
    x = 2.0 * randn(B, T, D)
    out = to_np(layer(x))
    np.testing.assert_allclose(out, np_feed_forward(layer, x.astype(np.float64)), atol=ATOL)


def test_exact_and_approximate_gelu_differ():
    x = np.linspace(-3, 3, 7)
    assert np.abs(np_gelu(x, True) - np_gelu(x, False)).max() > 1e-4  # the references can tell them apart


def test_feed_forward_inner_width_defaults_to_four_d():
    layer = FeedForward()
    layer(randn(B, T, D))
    assert tuple(layer.intermediate_dense.kernel.shape) == (D, 4 * D)
    assert tuple(layer.output_dense.kernel.shape) == (4 * D, D)


@pytest.mark.parametrize("intermediate_dim", [0, -8, 2.5])
def test_intermediate_dim_must_be_a_positive_integer(intermediate_dim):
    for cls in (FeedForward, lambda **kw: EncoderBlock(H, **kw), lambda **kw: DecoderBlock(H, **kw)):
        with pytest.raises(ValueError, match="`intermediate_dim`"):
            cls(intermediate_dim=intermediate_dim)


def test_unknown_activation_is_rejected():
    for cls in (FeedForward, lambda **kw: EncoderBlock(H, **kw), lambda **kw: DecoderBlock(H, **kw)):
        with pytest.raises(ValueError, match="`activation`.*swishy"):
            cls(activation="swishy")


@pytest.mark.parametrize("num_heads", [0, -1])
def test_blocks_need_a_positive_number_of_heads(num_heads):
    for cls in (EncoderBlock, DecoderBlock):
        with pytest.raises(ValueError, match="`num_heads`"):
            cls(num_heads)


@pytest.mark.parametrize("dropout", [-0.1, 1.0])
def test_dropout_must_be_a_rate(dropout):
    for make in (
        lambda: FeedForward(dropout=dropout),
        lambda: AddNorm(dropout=dropout),
        lambda: EncoderBlock(H, dropout=dropout),
        lambda: DecoderBlock(H, dropout=dropout),
    ):
        with pytest.raises(ValueError, match="`dropout`"):
            make()


# ----------------------------------------------------------------------------
# EncoderBlock.


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_reference(norm_first):
    block = EncoderBlock(H, F, activation="gelu", norm_first=norm_first)
    x, pad = randn(B, T, D), padding([3, 5], T)
    block(x)
    randomize(block)
    out = to_np(block(x, padding_mask=pad))
    expected = np_encoder_block(block, x, np.broadcast_to(pad[:, None, :], (B, T, T)))
    np.testing.assert_allclose(out, expected, atol=ATOL)


def _changed_padding(x, lengths):
    changed = x.copy()
    for row, length in enumerate(lengths):
        changed[row, length:] = 50.0 * randn(x.shape[1] - length, x.shape[2])
    return changed


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_padding_changes_nothing_it_should_not(norm_first):
    block = EncoderBlock(H, F, norm_first=norm_first)
    lengths = [3, 5]
    x, pad = randn(B, T, D), padding(lengths, T)
    out = to_np(block(x, padding_mask=pad))
    out_changed = to_np(block(_changed_padding(x, lengths), padding_mask=pad))
    np.testing.assert_allclose(out_changed[pad], out[pad], atol=1e-5)
    assert not np.allclose(out_changed[~pad], out[~pad], atol=1e-3)  # the test can see a change


def test_encoder_takes_the_keras_mask_of_its_input():
    ids = np.array([[3, 1, 4, 0, 0], [5, 2, 6, 5, 3]], "int32")
    embed = TokenAndPositionEmbedding(7, T, D, mask_zero=True)
    block = EncoderBlock(H, F)
    implicit = to_np(block(embed(ids)))
    # The same embeddings without a Keras mask, and the padding stated explicitly.
    embeddings = ops.convert_to_tensor(to_np(embed(ids)).astype("float32"))
    explicit = to_np(block(embeddings, padding_mask=ids != 0))
    real = ids != 0
    np.testing.assert_allclose(implicit[real], explicit[real], atol=1e-5)
    assert not np.allclose(to_np(block(embeddings))[0, :3], explicit[0, :3], atol=1e-4)


@pytest.mark.parametrize("mode", ["eager", "functional"])
def test_padding_mask_propagates_to_the_next_block(mode):
    first, second = EncoderBlock(H, F), EncoderBlock(H, F)
    lengths = [3, 5]
    x, pad = randn(B, T, D), padding(lengths, T)
    if mode == "eager":
        hidden = first(x, padding_mask=pad)
        np.testing.assert_array_equal(to_np(get_keras_mask(hidden)).astype(bool), pad)

        def run(inputs):
            return to_np(second(first(inputs, padding_mask=pad)))
    else:
        inputs, padding_mask = keras.Input((T, D)), keras.Input((T,), dtype="bool")
        model = keras.Model([inputs, padding_mask], second(first(inputs, padding_mask=padding_mask)))

        def run(inputs):
            return to_np(model([inputs, pad]))

    out = run(x)
    # The second block, told nothing, masks the padding as if it were told.
    told = to_np(second(first(x, padding_mask=pad), padding_mask=pad))
    np.testing.assert_allclose(out[pad], told[pad], atol=1e-5)
    np.testing.assert_allclose(run(_changed_padding(x, lengths))[pad], out[pad], atol=1e-5)


# ----------------------------------------------------------------------------
# DecoderBlock.


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_reference(norm_first):
    block = DecoderBlock(H, F, use_cross_attention=True, activation="gelu_approximate", norm_first=norm_first)
    x, memory = randn(B, T, D), randn(B, S, D)
    pad, memory_pad = padding([4, 5], T), padding([3, 6], S)
    block(x, memory)
    randomize(block)
    out = to_np(block(x, memory, padding_mask=pad, encoder_padding_mask=memory_pad))
    self_mask = pad[:, None, :] & np_causal(T)[None]
    cross_mask = np.broadcast_to(memory_pad[:, None, :], (B, T, S))
    expected = np_decoder_block(block, x, self_mask, memory, cross_mask)
    np.testing.assert_allclose(out, expected, atol=ATOL)


@pytest.mark.parametrize("use_bias", [True, False])
def test_gpt_block_matches_reference(use_bias):
    block = DecoderBlock(H, F, norm_first=True, activation="gelu_approximate", use_bias=use_bias)
    x = randn(B, T, D)
    block(x)
    # Without biases: two kernels per attention and feed-forward, one scale per LayerNorm.
    assert len(block.trainable_weights) == (12 if use_bias else 6)
    randomize(block)
    expected = np_decoder_block(block, x, np.broadcast_to(np_causal(T), (B, T, T)))
    np.testing.assert_allclose(to_np(block(x)), expected, atol=ATOL)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("cross_attention", [False, True])
def test_decoder_no_future_leak(cross_attention, dropout):
    block = DecoderBlock(H, F, use_cross_attention=cross_attention, dropout=dropout)
    x = randn(B, T, D)
    extra = {"encoder_output": randn(B, S, D)} if cross_attention else {}
    block(x, **extra)
    state = dropout_state(block)

    def run(inputs):
        replay_dropout(block, state)  # the same dropout masks on every run
        return to_np(block(inputs, training=True, **extra))

    reference = run(x)
    if dropout:
        assert not np.allclose(reference, to_np(block(x, **extra)), atol=1e-3)
    for future in range(1, T):
        changed = x.copy()
        changed[:, future] += 3.0 * randn(B, D)
        out = run(changed)
        np.testing.assert_allclose(out[:, :future], reference[:, :future], atol=1e-5)
        assert not np.allclose(out[:, future], reference[:, future], atol=1e-3)


def test_decoder_cross_attention_padding_invariance():
    block = DecoderBlock(H, F, use_cross_attention=True)
    x, memory = randn(B, T, D), randn(B, S, D)
    lengths = [3, 6]
    memory_pad = padding(lengths, S)
    out = to_np(block(x, memory, encoder_padding_mask=memory_pad))
    changed = to_np(block(x, _changed_padding(memory, lengths), encoder_padding_mask=memory_pad))
    np.testing.assert_allclose(changed, out, atol=1e-5)
    # Without the mask the padded positions would be attended to.
    assert not np.allclose(to_np(block(x, memory))[0], out[0], atol=1e-4)


def test_decoder_reads_the_encoder_keras_mask():
    encoder = EncoderBlock(H, F)
    decoder = DecoderBlock(H, F, use_cross_attention=True)
    source, target = randn(B, S, D), randn(B, T, D)
    source_pad = padding([3, 6], S)
    memory = encoder(source, padding_mask=source_pad)  # carries the mask
    implicit = to_np(decoder(target, memory))
    plain_memory = ops.convert_to_tensor(to_np(memory).astype("float32"))
    explicit = to_np(decoder(target, plain_memory, encoder_padding_mask=source_pad))
    np.testing.assert_allclose(implicit, explicit, atol=1e-5)


def test_decoder_batch_mismatch_is_rejected():
    block = DecoderBlock(H, F, use_cross_attention=True)
    with pytest.raises(ValueError, match="batch size 2 differs from encoder batch size 3"):
        block(randn(2, T, D), randn(3, S, D))


def test_decoder_cross_attention_arguments_are_checked():
    with pytest.raises(ValueError, match="`encoder_output`"):
        DecoderBlock(H, F, use_cross_attention=True)(randn(B, T, D))
    with pytest.raises(ValueError, match="`encoder_output`"):
        DecoderBlock(H, F)(randn(B, T, D), randn(B, S, D))


@pytest.mark.parametrize("norm_first", [False, True])
def test_attention_scores_are_the_blocks_own(norm_first):
    x, memory = randn(B, T, D), randn(B, S, D)
    pad, memory_pad = padding([3, 5], T), padding([4, 6], S)

    def np_input(add_norm, h):
        return np_layer_norm(h, add_norm.layer_norm) if norm_first else h

    encoder = EncoderBlock(H, F, norm_first=norm_first)
    encoder(x)
    randomize(encoder)
    scores = to_np(encoder.attention_scores(x, padding_mask=pad))
    h = np_input(encoder.self_attention_add_norm, x.astype(np.float64))
    expected = np_mha(encoder.self_attention, h, mask=np.broadcast_to(pad[:, None, :], (B, T, T)))[1]
    np.testing.assert_allclose(scores, expected, atol=ATOL)

    decoder = DecoderBlock(H, F, use_cross_attention=True, norm_first=norm_first)
    decoder(x, memory)
    randomize(decoder)
    scores = decoder.attention_scores(x, memory, padding_mask=pad, encoder_padding_mask=memory_pad)
    self_mask = pad[:, None, :] & np_causal(T)[None]
    h = np_input(decoder.self_attention_add_norm, x.astype(np.float64))
    expected_self = np_mha(decoder.self_attention, h, mask=self_mask)[1]
    np.testing.assert_allclose(to_np(scores["self"]), expected_self, atol=ATOL)
    x1 = np_sublayer(
        decoder.self_attention_add_norm,
        x.astype(np.float64),
        lambda h: np_mha(decoder.self_attention, h, mask=self_mask)[0],
    )
    cross_mask = np.broadcast_to(memory_pad[:, None, :], (B, T, S))
    h = np_input(decoder.cross_attention_add_norm, x1)
    expected = np_mha(decoder.cross_attention_layer, h, memory, mask=cross_mask)[1]
    np.testing.assert_allclose(to_np(scores["cross"]), expected, atol=ATOL)


# ----------------------------------------------------------------------------
# The shared harness.


def test_add_norm_harness(tmp_path):
    run_layer_test(
        AddNorm,
        {"norm_first": False, "dropout": 0.1},
        {"residual": randn(B, T, D), "sublayer_output": randn(B, T, D)},
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=2,
        tmp_path=tmp_path,
    )


def test_feed_forward_harness(tmp_path):
    run_layer_test(
        FeedForward,
        {"intermediate_dim": F, "activation": "gelu", "dropout": 0.1},
        randn(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=4,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_harness(norm_first, tmp_path):
    run_layer_test(
        EncoderBlock,
        {"num_heads": H, "intermediate_dim": F, "dropout": 0.1, "norm_first": norm_first},
        {"x": randn(B, T, D), "padding_mask": padding([3, 5], T)},
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=12,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "init_kwargs, input_data, num_weights",
    [
        ({"norm_first": True, "activation": "gelu_approximate"}, {"x": randn(B, T, D)}, 12),
        (
            {"use_cross_attention": True},
            {
                "x": randn(B, T, D),
                "encoder_output": randn(B, S, D),
                "padding_mask": padding([4, 5], T),
                "encoder_padding_mask": padding([3, 6], S),
            },
            20,
        ),
    ],
    ids=["gpt", "cross"],
)
def test_decoder_block_harness(init_kwargs, input_data, num_weights, tmp_path):
    run_layer_test(
        DecoderBlock,
        {"num_heads": H, "intermediate_dim": F, "dropout": 0.1, **init_kwargs},
        input_data,
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=num_weights,
        tmp_path=tmp_path,
    )
