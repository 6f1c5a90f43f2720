"""The encoder-decoder's Marian flags: `scale_embeddings`, `final_logits_bias`,
`position="sinusoidal_halves"` and the swish feed-forward, each changing what
it says and nothing else; cached decoding equal to the full pass; save and
reload equal to the original."""

import math

import keras
import numpy as np
import pytest

import zoo
from zoo.models import EncoderDecoder

SIZES = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
             max_sequence_length=16, dropout=0.0)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    source, target = rng.integers(1, 40, (2, 7)), rng.integers(1, 40, (2, 5))
    source_mask = np.ones((2, 7), "int32")
    source_mask[1, 4:] = 0
    return {"encoder_token_ids": source, "encoder_padding_mask": source_mask, "decoder_token_ids": target,
            "decoder_padding_mask": np.ones_like(target)}


def copy_weights(target, source):
    for variable, value in zip(target.weights, source.weights):
        variable.assign(value)


def test_defaults_are_the_papers():
    model = EncoderDecoder(**SIZES)
    assert model.config.scale_embeddings and not model.config.final_logits_bias
    assert model.config.position == "sinusoidal" and model.output_bias is None


def test_scale_embeddings_false_leaves_the_embeddings_unscaled():
    scaled = EncoderDecoder(**SIZES)
    unscaled = EncoderDecoder(**SIZES, scale_embeddings=False)
    copy_weights(unscaled, scaled)
    ids = np.array([[3, 4, 5]])
    table = _np(scaled.decoder_embedding.token_embedding.embeddings)[ids[0]]  # (T, d)
    # tokens x sqrt(d) + positions against tokens + positions.
    difference = _np(scaled.embed_target(ids))[0] - _np(unscaled.embed_target(ids))[0]
    np.testing.assert_allclose(difference, table * (math.sqrt(16) - 1), atol=1e-5)
    assert np.abs(_np(scaled(inputs())) - _np(unscaled(inputs()))).max() > 1e-3


def test_final_logits_bias_is_added_to_every_position():
    plain = EncoderDecoder(**SIZES)
    biased = EncoderDecoder(**SIZES, final_logits_bias=True)
    assert len(biased.weights) == len(plain.weights) + 1
    for variable in biased.weights:
        if variable is not biased.output_bias.bias:
            variable.assign(next(v for v in plain.weights if v.path == variable.path))
    bias = np.random.default_rng(1).normal(size=40).astype("float32")
    biased.output_bias.bias.assign(bias)
    x = inputs()
    np.testing.assert_allclose(_np(biased(x)), _np(plain(x)) + bias, atol=1e-5)


@pytest.mark.parametrize("position", ["sinusoidal", "sinusoidal_halves"])
def test_cached_decoding_equals_the_full_pass(position):
    model = EncoderDecoder(**SIZES, position=position, activation="silu", final_logits_bias=True,
                           layer_norm_epsilon=1e-5)
    model.output_bias.bias.assign(np.random.default_rng(2).normal(size=40).astype("float32"))
    x = inputs()
    full = _np(model(x))
    context = model.start(x["encoder_token_ids"], x["encoder_padding_mask"])
    cache = model.empty_cache(2, 16)
    steps = []
    for i in range(x["decoder_token_ids"].shape[1]):
        logits, cache = model.call_with_cache(x["decoder_token_ids"][:, i : i + 1], cache, i, context)
        steps.append(_np(logits)[:, 0])
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=2e-5)


def test_the_opus_mt_preset_reloads(tmp_path):
    model = zoo.build("opus-mt-tiny")
    assert model.config.position == "sinusoidal_halves" and model.config.activation == "silu"
    model.output_bias.bias.assign(np.random.default_rng(3).normal(size=1000).astype("float32"))
    path = tmp_path / "marian.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    assert again.config == model.config
    x = inputs()
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))


def test_opus_mt_has_transformers_parameter_count():
    """MarianMTModel(opus-mt-de-en's config): 58,101 x 512 shared embeddings, 6 encoder layers of
    4 (512 x 512 + 512) attention + 2 LayerNorms + the feed-forward, 6 decoder layers with a
    cross-attention and a third LayerNorm; `final_logits_bias` is a buffer transformers does not
    count, the zoo does (58,101 more)."""
    d, ff, v = 512, 2048, 58101
    attention = 4 * (d * d + d)
    feed_forward = d * ff + ff + ff * d + d
    encoder_layer = attention + feed_forward + 2 * 2 * d
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d
    assert zoo.describe("opus-mt")["parameters"] == v * d + 6 * encoder_layer + 6 * decoder_layer + v
