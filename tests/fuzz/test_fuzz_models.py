"""Fuzzed inputs for the three tiny families, as `zoo.build` makes them:
random batch sizes, lengths up to the preset's maximum, random padding
masks (all-padded rows and rows of one token included).

Properties, for every drawn case:
- every output is finite, also for all-padded rows;
- outputs have the documented shapes;
- masks are honoured: token (and segment) ids at padded positions are
  replaced by other ids, and no output at a real position moves; for the
  causal decoders, the ids after a random cut change as well, and no
  output before the cut moves.

Shape letters: B batch, T length (S the source length), P masked
positions, d width, V vocabulary.
"""

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zoo
from tests.conftest import SEED
from tests.fuzz import (
    FUZZ,
    allowed,
    assert_finite,
    assert_unmoved,
    batch_sizes,
    lengths,
    padding_masks,
    perturbed_keys,
    unaffected,
)

# Keras warns about a softmax over one key; a length of 1 is a case we want.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1:UserWarning")

seeds = st.integers(0, 2**32 - 1)


def replace_ids(rng, ids, changed, vocabulary_size):
    """ids with the positions in `changed` (B, T) set to other random ids."""
    return np.where(changed, rng.integers(0, vocabulary_size, ids.shape), ids).astype("int32")


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(SEED)
    return zoo.build("gpt-nano", task="causal_lm")


@pytest.fixture(scope="module")
def bert():
    keras.utils.set_random_seed(SEED)
    return {
        "backbone": zoo.build("bert-tiny"),
        "masked_lm": zoo.build("bert-tiny", task="masked_lm"),
        "classifier": zoo.build("bert-tiny", task="classifier", num_classes=3),
        "sentence_encoder": zoo.build("bert-tiny", task="sentence_encoder"),
    }


@pytest.fixture(scope="module")
def transformer():
    keras.utils.set_random_seed(SEED)
    return zoo.build("transformer-tiny")


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_gpt_causal_lm(gpt, data):
    vocabulary, maximum = gpt.backbone.vocabulary_size, gpt.backbone.max_sequence_length
    b, t = data.draw(batch_sizes, "B"), data.draw(lengths(maximum), "T")
    padding = data.draw(padding_masks(b, t), "padding_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    # Padding, then a random future ("suffix") or random positions.
    changed = perturbed_keys(rng, padding, data.draw(st.sampled_from(("suffix", "random")), "perturbed"))
    ids = rng.integers(0, vocabulary, (b, t)).astype("int32")

    def run(ids):
        return assert_finite("logits", gpt({"token_ids": ids, "padding_mask": padding}))

    logits, again = run(ids), run(replace_ids(rng, ids, changed, vocabulary))
    assert logits.shape == (b, t, vocabulary)
    mask = allowed(b, t, t, padding, causal=True)
    assert_unmoved("GPT logits", logits, again, unaffected(mask, changed, changed))


@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_bert_backbone_and_heads(bert, data):
    backbone = bert["backbone"]
    vocabulary, maximum, width = backbone.vocabulary_size, backbone.max_sequence_length, backbone.hidden_dim
    b, t = data.draw(batch_sizes, "B"), data.draw(lengths(maximum), "T")
    padding = data.draw(padding_masks(b, t), "padding_mask")
    num_masked = data.draw(st.integers(1, 4), "P")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    # Attention is bidirectional: only padded positions are hidden from all.
    changed = perturbed_keys(rng, padding, "none")
    ids = rng.integers(0, vocabulary, (b, t)).astype("int32")
    segments = rng.integers(0, 2, (b, t)).astype("int32")
    positions = rng.integers(0, t, (b, num_masked)).astype("int32")

    def run(ids, segments):
        x = {"token_ids": ids, "segment_ids": segments, "padding_mask": padding}
        outputs = backbone(x)
        return {
            "sequence_output": assert_finite("sequence_output", outputs["sequence_output"]),
            "pooled_output": assert_finite("pooled_output", outputs["pooled_output"]),
            "masked_lm": assert_finite("masked_lm", bert["masked_lm"]({**x, "mask_positions": positions})),
            "classifier": assert_finite("classifier", bert["classifier"](x)),
            "sentence_encoder": assert_finite("sentence_encoder", bert["sentence_encoder"](x)),
        }

    out = run(ids, segments)
    again = run(replace_ids(rng, ids, changed, vocabulary), replace_ids(rng, segments, changed, 2))
    expected_shapes = {
        "sequence_output": (b, t, width),
        "pooled_output": (b, width),
        "masked_lm": (b, num_masked, vocabulary),
        "classifier": (b, 3),
        "sentence_encoder": (b, width),
    }
    assert {name: value.shape for name, value in out.items()} == expected_shapes
    real = padding.astype(bool)
    keep = {
        "sequence_output": real,
        "pooled_output": real[:, 0],  # [CLS], when it is a real token
        "masked_lm": np.take_along_axis(real, positions, axis=1),
        "classifier": real[:, 0],
        "sentence_encoder": np.ones(b, dtype=bool),  # the mean over real tokens only
    }
    for name in out:
        assert_unmoved(f"BERT {name}", out[name], again[name], keep[name])
    # An all-padded row has no real token to average: a zero vector, not NaN.
    sentences = out["sentence_encoder"]
    np.testing.assert_array_equal(sentences[~real.any(1)], 0.0)
    np.testing.assert_allclose(np.linalg.norm(sentences[real.any(1)], axis=-1), 1.0, atol=1e-5)


@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_encoder_decoder(transformer, data):
    vocabulary, maximum = transformer.vocabulary_size, transformer.max_sequence_length
    b = data.draw(batch_sizes, "B")
    s, t = data.draw(lengths(maximum), "S"), data.draw(lengths(maximum), "T")
    source_padding = data.draw(padding_masks(b, s), "encoder_padding_mask")
    target_padding = data.draw(padding_masks(b, t), "decoder_padding_mask")
    rng = np.random.default_rng(data.draw(seeds, "seed"))
    changed_source = perturbed_keys(rng, source_padding, "none")
    changed = perturbed_keys(rng, target_padding, data.draw(st.sampled_from(("suffix", "random")), "perturbed"))
    source = rng.integers(0, vocabulary, (b, s)).astype("int32")
    target = rng.integers(0, vocabulary, (b, t)).astype("int32")

    def run(source, target):
        x = {
            "encoder_token_ids": source,
            "encoder_padding_mask": source_padding,
            "decoder_token_ids": target,
            "decoder_padding_mask": target_padding,
        }
        return assert_finite("logits", transformer(x))

    logits = run(source, target)
    again = run(replace_ids(rng, source, changed_source, vocabulary), replace_ids(rng, target, changed, vocabulary))
    assert logits.shape == (b, t, vocabulary)
    mask = allowed(b, t, t, target_padding, causal=True)
    assert_unmoved("encoder-decoder logits", logits, again, unaffected(mask, changed, changed))
