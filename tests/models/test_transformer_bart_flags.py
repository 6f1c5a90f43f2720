"""The encoder-decoder's BART flags: `position_offset` (learned positions
read from row p + 2), `share_positions=False` (one token table, a position
table per stack) and `layernorm_embedding`, each computing what it says
against a float64 formula; cached decoding equal to the full pass; save and
reload equal to the original; bart-base's parameter count."""

import keras
import numpy as np
import pytest

import zoo
from zoo.layers import PositionEmbedding, TokenAndPositionEmbedding
from zoo.models import EncoderDecoder
from zoo.models.transformer.config import EncoderDecoderConfig

SIZES = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
             max_sequence_length=16, dropout=0.0)
BART = dict(position="learned", position_offset=2, share_positions=False, layernorm_embedding=True,
            activation="gelu", layer_norm_epsilon=1e-5, scale_embeddings=False, final_logits_bias=True)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    source, target = rng.integers(1, 40, (2, 7)), rng.integers(1, 40, (2, 5))
    source_mask = np.ones((2, 7), "int32")
    source_mask[1, 4:] = 0
    return {"encoder_token_ids": source, "encoder_padding_mask": source_mask, "decoder_token_ids": target,
            "decoder_padding_mask": np.ones_like(target)}


def randomize(model, seed=1):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        mean = 1.0 if variable.path.endswith("gamma") else 0.0
        variable.assign(rng.normal(mean, 0.3, variable.shape).astype("float32"))


def layer_norm(x, gamma, beta, epsilon=1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon) * gamma + beta


def test_position_offset_reads_the_rows_after_it():
    positions = PositionEmbedding(sequence_length=6, offset=2)
    x = np.zeros((1, 3, 4), "float32")
    positions.build(x.shape)
    table = np.arange(8 * 4, dtype="float32").reshape(8, 4)
    positions.position_embeddings.assign(table)
    np.testing.assert_array_equal(_np(positions(x))[0], table[2:5])
    np.testing.assert_array_equal(_np(positions(x, start_index=3))[0], table[5:8])
    with pytest.raises(ValueError, match="longer than the maximum length 6"):
        positions(np.zeros((1, 4, 4), "float32"), start_index=3)


def test_an_offset_needs_a_learned_table():
    with pytest.raises(ValueError, match="offset into a learned"):
        EncoderDecoderConfig(**SIZES, position_offset=2)
    with pytest.raises(ValueError, match="offset into a learned"):
        TokenAndPositionEmbedding(10, 8, 4, position="sinusoidal", position_offset=2)
    with pytest.raises(ValueError, match="non-negative integer"):
        EncoderDecoderConfig(**SIZES, position="learned", position_offset=-1)


def test_bart_embeddings_are_one_token_table_two_position_tables_and_a_norm():
    """embed_source / embed_target = LayerNorm(token row + that stack's position row p + 2)."""
    model = EncoderDecoder(**SIZES, **BART)
    randomize(model)
    tokens = model.decoder_embedding.token_embedding
    assert model.encoder_embedding.token_embedding is tokens
    tables = [v for v in model.weights if len(v.shape) == 2 and v.shape[0] == 18]  # (16 + 2, d)
    assert len(tables) == 2 and sum(v is tokens.embeddings for v in model.weights) == 1
    ids = np.array([[3, 4, 5]])
    table = _np(tokens.embeddings)
    for embed, embedding, norm in ((model.embed_source, model.encoder_embedding, model.encoder_embedding_norm),
                                   (model.embed_target, model.decoder_embedding, model.decoder_embedding_norm)):
        rows = _np(embedding.position_embedding.position_embeddings)
        expected = layer_norm(table[ids[0]] + rows[2:5], _np(norm.gamma), _np(norm.beta))
        np.testing.assert_allclose(_np(embed(ids))[0], expected, atol=1e-5)
    source, target = (_np(e.position_embedding.position_embeddings) for e in (model.encoder_embedding,
                                                                                model.decoder_embedding))
    assert np.abs(source - target).max() > 0.1  # two tables, not one


def test_the_papers_models_keep_one_embedding_layer():
    model = EncoderDecoder(**SIZES)
    assert model.encoder_embedding is model.decoder_embedding
    assert model.encoder_embedding_norm is None and model.decoder_embedding_norm is None


def test_cached_decoding_equals_the_full_pass():
    model = EncoderDecoder(**SIZES, **BART)
    randomize(model, seed=2)
    x = inputs()
    full = _np(model(x))
    context = model.start(x["encoder_token_ids"], x["encoder_padding_mask"])
    cache = model.empty_cache(2, 16)
    steps = []
    for i in range(x["decoder_token_ids"].shape[1]):
        logits, cache = model.call_with_cache(x["decoder_token_ids"][:, i : i + 1], cache, i, context)
        steps.append(_np(logits)[:, 0])
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=5e-5)


def test_the_bart_preset_reloads(tmp_path):
    model = zoo.build("bart-tiny")
    randomize(model, seed=3)
    path = tmp_path / "bart.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    assert again.config == model.config
    assert again.encoder_embedding.token_embedding is again.decoder_embedding.token_embedding
    x = inputs()
    np.testing.assert_array_equal(_np(again(x)), _np(model(x)))


def test_bart_base_has_transformers_parameter_count():
    """BartModel(facebook/bart-base's config), 139,420,416 parameters: 50,265 x 768 shared embeddings,
    two (1024 + 2) x 768 position tables and two embedding LayerNorms, 6 encoder layers of 4
    (768 x 768 + 768) attention + 2 LayerNorms + the feed-forward, 6 decoder layers with a
    cross-attention and a third LayerNorm; `final_logits_bias` is a buffer transformers does not
    count, the zoo does (50,265 more)."""
    d, ff, v = 768, 3072, 50265
    attention = 4 * (d * d + d)
    feed_forward = d * ff + ff + ff * d + d
    encoder_layer = attention + feed_forward + 2 * 2 * d
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d
    transformers_count = v * d + 2 * 1026 * d + 2 * 2 * d + 6 * encoder_layer + 6 * decoder_layer
    assert transformers_count == 139_420_416
    assert zoo.describe("bart-base")["parameters"] == transformers_count + v
