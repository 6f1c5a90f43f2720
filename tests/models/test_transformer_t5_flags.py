"""The encoder-decoder's T5 flags: relative position buckets and their bias
(`position="relative"`), the attention bias through `MultiHeadAttention`,
RMSNorm blocks without biases; no future leak and padding that changes
nothing it should not; save and reload equal to the original; the new
flags off build the paper's model as before."""

import math

import keras
import numpy as np
import pytest

import zoo
from zoo.layers import MultiHeadAttention, RelativePositionBias
from zoo.layers.relative_position_bias import relative_position_bucket


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def inputs(vocabulary_size=1000, seed=0):
    rng = np.random.default_rng(seed)
    source, target = rng.integers(3, vocabulary_size, (2, 7)), rng.integers(3, vocabulary_size, (2, 5))
    source_mask = np.ones((2, 7), "int32")
    source_mask[1, 4:] = 0
    return {"encoder_token_ids": source, "encoder_padding_mask": source_mask, "decoder_token_ids": target,
            "decoder_padding_mask": np.ones_like(target)}


def bucket(offset, bidirectional, num_buckets=32, max_distance=128):
    """T5's bucket of one key-minus-query offset, written from its definition."""
    base = 0
    if bidirectional:
        num_buckets //= 2
        base, offset = (num_buckets if offset > 0 else 0), abs(offset)
    else:
        offset = max(-offset, 0)
    exact = num_buckets // 2
    if offset < exact:
        return base + offset
    large = exact + int(math.log(offset / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return base + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_follow_t5s_definition(bidirectional):
    offsets = np.arange(-300, 301, dtype="int32")
    got = _np(relative_position_bucket(keras.ops.convert_to_tensor(offsets), bidirectional, 32, 128))
    assert got.tolist() == [bucket(int(o), bidirectional) for o in offsets]
    assert bucket(1, True) == 17 and bucket(-1, True) == 1 and bucket(1000, True) == 31 and bucket(5, False) == 0


def test_the_bias_is_the_table_at_the_buckets_from_the_start_index():
    layer = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=16, bidirectional=False)
    x = np.zeros((1, 2, 4), "float32")
    layer.build(x.shape)
    table = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    layer.embeddings.assign(table)
    bias = _np(layer(x, key_length=6, start_index=3))  # queries at positions 3 and 4
    assert bias.shape == (1, 3, 2, 6)
    for t, query in enumerate((3, 4)):
        for s in range(6):
            np.testing.assert_allclose(bias[0, :, t, s], table[bucket(s - query, False, 8, 16)], rtol=1e-6)


def test_an_attention_bias_is_added_to_the_logits():
    """A zero bias changes nothing (the explicit path against the fused one); a bias of -1e4 on a
    key removes it as a mask would."""
    layer = MultiHeadAttention(num_heads=2, attention_scale=1.0, use_bias=False)
    x = np.random.default_rng(1).normal(size=(2, 4, 8)).astype("float32")
    plain = _np(layer(x))
    np.testing.assert_allclose(_np(layer(x, attention_bias=np.zeros((1, 2, 4, 4), "float32"))), plain, atol=1e-5)
    hide = np.zeros((1, 2, 4, 4), "float32")
    hide[..., 3] = -1e4
    masked = _np(layer(x, attention_mask=np.broadcast_to(np.arange(4) < 3, (2, 4, 4))))
    np.testing.assert_allclose(_np(layer(x, attention_bias=hide)), masked, atol=1e-5)


@pytest.fixture(scope="module")
def model():
    return zoo.build("t5-tiny")


def test_t5s_blocks_have_no_biases_and_rms_norms(model):
    paths = [w.path for w in model.weights]
    assert not any(p.endswith("bias") or p.endswith("beta") for p in paths)
    assert "encoder_relative_attention_bias/embeddings" in paths and "decoder_relative_attention_bias/embeddings" in paths
    assert sum(p.endswith("rms_norm/scale") for p in paths) == 2 * 2 + 2 * 3 and "encoder_norm/scale" in paths


def test_no_future_leak_and_padding_changes_only_what_it_should(model):
    x = inputs()
    logits = _np(model(x))
    later = dict(x, decoder_token_ids=x["decoder_token_ids"].copy())
    later["decoder_token_ids"][:, 3:] = 5
    np.testing.assert_allclose(_np(model(later))[:, :3], logits[:, :3], atol=1e-5)
    padded = dict(x, encoder_token_ids=x["encoder_token_ids"].copy())
    padded["encoder_token_ids"][1, 4:] = 7  # behind the padding mask
    np.testing.assert_allclose(_np(model(padded)), logits, atol=1e-5)


def test_save_and_reload_equal_the_original(model, tmp_path):
    zoo.save(model, tmp_path / "t5.keras")
    again = zoo.load(tmp_path / "t5.keras")
    np.testing.assert_array_equal(_np(again(inputs(seed=3))), _np(model(inputs(seed=3))))


def test_the_new_flags_off_build_the_papers_model():
    model = zoo.build("transformer-tiny")
    assert model.encoder_position_bias is None and model.output_scale is None
    block = model.encoder_blocks[0].get_config()
    assert (block["use_bias"], block["normalization"], block["gated_feed_forward"]) == (True, "layer_norm", False)
    assert model.decoder_blocks[0].get_config()["cross_attention_options"] == {}


def test_relative_positions_need_one_token_table():
    with pytest.raises(ValueError, match="shares one token table"):
        zoo.build("t5-tiny", share_embeddings=False, source_vocabulary_size=500)
