"""Fuzzed inputs for the attention layers and blocks: random batch sizes,
lengths, padding masks (all-padded rows included), attention masks and
the causal flag.

Properties, for every drawn case:
- every output is finite, also in rows that attend to nothing;
- outputs have the documented shapes, and attention weights are 0 at
  masked keys and sum to 1 over a row (0 for a row with no key left);
- masks are honoured: the key vectors at masked positions are replaced by
  other, large values, and no output at a query that may not see them
  moves (which covers padding, `attention_mask` and "no future leak").

Shape letters: B batch, T query length, S key length, d width, h heads.
"""

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SEED
from tests.fuzz import (
    FUZZ,
    allowed,
    assert_finite,
    assert_unmoved,
    attention_masks,
    batch_sizes,
    lengths,
    padding_masks,
    perturbed_keys,
    unaffected,
)
from zoo.layers import DecoderBlock, EncoderBlock, MultiHeadAttention

D = 16  # d
D_KV = 12  # width of a cross-attention key/value sequence
H = 4  # h
D_FF = 32
MAX_LENGTH = 9

# Keras warns about a softmax over one key; a length of 1 is a case we want.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1:UserWarning")

seeds = st.integers(0, 2**32 - 1)
extras = st.sampled_from(("none", "suffix", "random"))
mask_dtypes = st.sampled_from(("int32", "bool"))


@pytest.fixture(scope="module")
def layers():
    """Every layer under test, built once; the cases vary only the inputs."""
    keras.utils.set_random_seed(SEED)
    return {
        "self": MultiHeadAttention(H),
        "cross": MultiHeadAttention(H, cross_attention=True),
        "encoder": {nf: EncoderBlock(H, D_FF, norm_first=nf) for nf in (False, True)},
        "decoder": {nf: DecoderBlock(H, D_FF, norm_first=nf) for nf in (False, True)},
        "decoder_cross": {nf: DecoderBlock(H, D_FF, use_cross_attention=True, norm_first=nf) for nf in (False, True)},
    }


def replace_at(rng, x, changed):
    """x with the vectors at `changed` (B, L) replaced by large random ones."""
    other = 10.0 * rng.normal(size=x.shape)
    return np.where(changed[..., None], other, x).astype("float32")


def check_weights(scores, mask):
    """(B, h, T, S) attention weights against the (B, T, S) allowed mask."""
    mask = np.broadcast_to(mask[:, None], scores.shape)
    assert (scores[~mask] == 0).all(), "a masked key has a non-zero attention weight"
    np.testing.assert_allclose(scores.sum(-1), mask.any(-1).astype("float32"), atol=1e-5)


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_self_attention(layers, data):
    b, t = data.draw(batch_sizes, "B"), data.draw(lengths(MAX_LENGTH), "T")
    padding = data.draw(padding_masks(b, t), "padding_mask").astype(data.draw(mask_dtypes, "dtype"))
    attention = data.draw(attention_masks(b, t, t), "attention_mask")
    causal = data.draw(st.booleans(), "use_causal_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed = perturbed_keys(rng, padding, data.draw(extras, "perturbed"))
    x = rng.normal(size=(b, t, D)).astype("float32")

    def run(x):
        out, scores = layers["self"](
            x, padding_mask=padding, attention_mask=attention, use_causal_mask=causal, return_attention_scores=True
        )
        return assert_finite("output", out), assert_finite("scores", scores)

    out, scores = run(x)
    again, _ = run(replace_at(rng, x, changed))
    assert out.shape == (b, t, D) and scores.shape == (b, H, t, t)
    mask = allowed(b, t, t, padding, attention, causal)
    check_weights(scores, mask)
    assert_unmoved("self-attention output", out, again, unaffected(mask, changed, changed))


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_cross_attention(layers, data):
    b = data.draw(batch_sizes, "B")
    t, s = data.draw(lengths(MAX_LENGTH), "T"), data.draw(lengths(MAX_LENGTH), "S")
    padding = data.draw(padding_masks(b, s), "padding_mask").astype(data.draw(mask_dtypes, "dtype"))
    attention = data.draw(attention_masks(b, t, s), "attention_mask")
    causal = data.draw(st.booleans(), "use_causal_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed = perturbed_keys(rng, padding, data.draw(extras, "perturbed"))
    query = rng.normal(size=(b, t, D)).astype("float32")
    key_value = rng.normal(size=(b, s, D_KV)).astype("float32")

    def run(key_value):
        out, scores = layers["cross"](
            query,
            key_value,
            padding_mask=padding,
            attention_mask=attention,
            use_causal_mask=causal,
            return_attention_scores=True,
        )
        return assert_finite("output", out), assert_finite("scores", scores)

    out, scores = run(key_value)
    again, _ = run(replace_at(rng, key_value, changed))
    assert out.shape == (b, t, D) and scores.shape == (b, H, t, s)
    mask = allowed(b, t, s, padding, attention, causal)
    check_weights(scores, mask)
    assert_unmoved("cross-attention output", out, again, unaffected(mask, changed))


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_encoder_block(layers, data):
    b, t = data.draw(batch_sizes, "B"), data.draw(lengths(MAX_LENGTH), "T")
    block = layers["encoder"][data.draw(st.booleans(), "norm_first")]
    padding = data.draw(padding_masks(b, t), "padding_mask")
    attention = data.draw(attention_masks(b, t, t), "attention_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed = perturbed_keys(rng, padding, data.draw(extras, "perturbed"))
    x = rng.normal(size=(b, t, D)).astype("float32")

    def run(x):
        return assert_finite("output", block(x, padding_mask=padding, attention_mask=attention))

    out, again = run(x), run(replace_at(rng, x, changed))
    assert out.shape == (b, t, D)
    mask = allowed(b, t, t, padding, attention)
    assert_unmoved("encoder block output", out, again, unaffected(mask, changed, changed))


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_decoder_block(layers, data):
    b, t = data.draw(batch_sizes, "B"), data.draw(lengths(MAX_LENGTH), "T")
    block = layers["decoder"][data.draw(st.booleans(), "norm_first")]
    padding = data.draw(padding_masks(b, t), "padding_mask")
    attention = data.draw(attention_masks(b, t, t), "attention_mask")
    causal = data.draw(st.booleans(), "use_causal_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed = perturbed_keys(rng, padding, data.draw(extras, "perturbed"))
    x = rng.normal(size=(b, t, D)).astype("float32")

    def run(x):
        out = block(x, padding_mask=padding, attention_mask=attention, use_causal_mask=causal)
        return assert_finite("output", out)

    out, again = run(x), run(replace_at(rng, x, changed))
    assert out.shape == (b, t, D)
    mask = allowed(b, t, t, padding, attention, causal)
    assert_unmoved("decoder block output", out, again, unaffected(mask, changed, changed))


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_decoder_block_with_cross_attention(layers, data):
    b = data.draw(batch_sizes, "B")
    t, s = data.draw(lengths(MAX_LENGTH), "T"), data.draw(lengths(MAX_LENGTH), "S")
    block = layers["decoder_cross"][data.draw(st.booleans(), "norm_first")]
    padding = data.draw(padding_masks(b, t), "padding_mask")
    encoder_padding = data.draw(padding_masks(b, s), "encoder_padding_mask")
    attention = data.draw(attention_masks(b, t, t), "attention_mask")
    causal = data.draw(st.booleans(), "use_causal_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed = perturbed_keys(rng, padding, data.draw(extras, "perturbed"))
    # Cross-attention has no attention mask: only padded source positions
    # are hidden from every query, so only those change.
    changed_source = perturbed_keys(rng, encoder_padding, "none")
    x = rng.normal(size=(b, t, D)).astype("float32")
    encoder_output = rng.normal(size=(b, s, D)).astype("float32")

    def run(x, encoder_output):
        out = block(
            x,
            encoder_output,
            padding_mask=padding,
            encoder_padding_mask=encoder_padding,
            attention_mask=attention,
            use_causal_mask=causal,
        )
        return assert_finite("output", out)

    out = run(x, encoder_output)
    again = run(replace_at(rng, x, changed), replace_at(rng, encoder_output, changed_source))
    assert out.shape == (b, t, D)
    mask = allowed(b, t, t, padding, attention, causal)
    assert_unmoved("decoder block output", out, again, unaffected(mask, changed, changed))
