"""Token and position embeddings against float64 NumPy references.

Shape letters: B batch, T length, d width, V vocabulary.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops
from keras.src.backend.common.masking import get_keras_mask

from tests.harness import run_layer_test
from zoo.layers import (
    MultiHeadAttention,
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    TokenEmbedding,
)

ATOL = 1e-5
RNG = np.random.default_rng(7)


def to_np(x):
    return np.asarray(ops.convert_to_numpy(x))


def np_sinusoid(length, width, start=0, max_wavelength=10000.0):
    """The paper's PE, section 3.5, in float64, written channel by channel."""
    table = np.zeros((length, width), np.float64)
    for pos in range(start, start + length):
        for i in range(width):
            angle = pos / max_wavelength ** (2 * (i // 2) / width)
            table[pos - start, i] = np.sin(angle) if i % 2 == 0 else np.cos(angle)
    return table


IDS = np.array([[5, 1, 3, 0, 0], [2, 6, 6, 4, 1]], "int32")  # (B, T), 0 is padding
V, L, D = 7, 8, 6  # vocabulary, maximum length, width


# ----------------------------------------------------------------------------
# SinusoidalPositionEncoding.


@pytest.mark.parametrize("width", [6, 7, 16])
@pytest.mark.parametrize("start_index", [0, 3, 40])
def test_sinusoidal_table_matches_the_paper(width, start_index):
    x = np.zeros((2, 5, width), "float32")
    out = to_np(SinusoidalPositionEncoding()(x, start_index=start_index))
    assert out.shape == (2, 5, width)
    expected = np_sinusoid(5, width, start_index)
    np.testing.assert_allclose(out[0], expected, atol=ATOL)
    np.testing.assert_array_equal(out[0], out[1])
    if start_index == 0:
        # Position 0: sin(0) = 0 on even channels, cos(0) = 1 on odd ones.
        np.testing.assert_array_equal(out[0, 0], np.arange(width) % 2)


def np_marian_sinusoid(length, width, start=0):
    """transformers' MarianSinusoidalPositionalEmbedding._init_weight, in float64: the
    angles pos / 10000^(2 (j // 2) / d), sines of the even j in the first ceil(d/2)
    channels, cosines of the odd j after them."""
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / width) for j in range(width)]
                       for pos in range(start + length)])[start:]
    sentinel = width // 2 if width % 2 == 0 else width // 2 + 1
    table = np.empty((length, width))
    table[:, :sentinel] = np.sin(angles[:, 0::2])
    table[:, sentinel:] = np.cos(angles[:, 1::2])
    return table


@pytest.mark.parametrize("width", [6, 7, 16])
@pytest.mark.parametrize("start_index", [0, 40])
def test_sinusoidal_halves_match_marian(width, start_index):
    out = to_np(SinusoidalPositionEncoding(interleaved=False)(np.zeros((1, 5, width), "float32"), start_index=start_index))
    np.testing.assert_allclose(out[0], np_marian_sinusoid(5, width, start_index), atol=ATOL)
    # The same values as the paper's, only in another channel order.
    paper = np_sinusoid(5, width, start_index)
    order = np.concatenate([np.arange(0, width, 2), np.arange(1, width, 2)])
    np.testing.assert_allclose(out[0], paper[:, order], atol=ATOL)


def test_sinusoidal_halves_through_the_embedding():
    embedding = TokenAndPositionEmbedding(10, 16, 8, position="sinusoidal_halves", embeddings_initializer="zeros")
    np.testing.assert_allclose(to_np(embedding(np.array([[1, 2, 3]])))[0], np_marian_sinusoid(3, 8), atol=ATOL)


def test_sinusoidal_max_wavelength_is_used():
    out = to_np(SinusoidalPositionEncoding(max_wavelength=100)(np.zeros((1, 4, 8), "float32")))
    np.testing.assert_allclose(out[0], np_sinusoid(4, 8, max_wavelength=100.0), atol=ATOL)


def test_sinusoidal_start_index_continues_the_table():
    layer = SinusoidalPositionEncoding()
    whole = to_np(layer(np.zeros((1, 9, 8), "float32")))
    tail = to_np(layer(np.zeros((1, 3, 8), "float32"), start_index=6))
    np.testing.assert_allclose(tail[0], whole[0, 6:], atol=1e-6)


# ----------------------------------------------------------------------------
# PositionEmbedding.


@pytest.mark.parametrize("start_index", [0, 2, 5])
def test_learned_positions_read_rows_start_to_start_plus_length(start_index):
    layer = PositionEmbedding(L, initializer="random_normal")
    x = np.zeros((2, 3, D), "float32")
    out = to_np(layer(x, start_index=start_index))
    table = to_np(layer.position_embeddings)
    assert table.shape == (L, D)
    np.testing.assert_array_equal(out[0], table[start_index : start_index + 3])
    np.testing.assert_array_equal(out[1], out[0])


def test_position_embedding_too_long_names_the_maximum():
    layer = PositionEmbedding(4)
    with pytest.raises(ValueError, match="maximum length 4"):
        layer(np.zeros((1, 5, D), "float32"))
    with pytest.raises(ValueError, match="maximum length 4"):
        layer(np.zeros((1, 2, D), "float32"), start_index=3)


# ----------------------------------------------------------------------------
# TokenEmbedding.


def test_token_embedding_forward_and_reverse():
    layer = TokenEmbedding(V, D)
    out = to_np(layer(IDS))
    table = to_np(layer.embeddings)
    np.testing.assert_array_equal(out, table[IDS])
    hidden = RNG.normal(size=(2, 5, D)).astype("float32")
    logits = to_np(layer(hidden, reverse=True))
    assert logits.shape == (2, 5, V)
    np.testing.assert_allclose(logits, hidden.astype(np.float64) @ table.T.astype(np.float64), atol=ATOL)


@pytest.mark.parametrize("vocabulary", [V, 130, 256])
def test_the_padded_tied_head_a_gpu_runs_gives_the_same_logits(vocabulary, monkeypatch):
    from zoo.layers import token_embedding

    layer = TokenEmbedding(vocabulary, D)
    layer.build((2, 5))
    hidden = RNG.normal(size=(2, 5, D)).astype("float32")
    table = to_np(layer.embeddings).astype(np.float64)
    reference = hidden.astype(np.float64) @ table.T  # (2, 5, vocabulary)
    monkeypatch.setattr(token_embedding, "pads_logits", lambda: True)
    padded = to_np(layer(hidden, reverse=True))
    monkeypatch.setattr(token_embedding, "pads_logits", lambda: False)
    plain = to_np(layer(hidden, reverse=True))
    assert padded.shape == plain.shape == (2, 5, vocabulary)
    np.testing.assert_allclose(padded, reference, atol=ATOL)
    np.testing.assert_allclose(padded, plain, atol=ATOL)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the padded head runs on JAX only")
@pytest.mark.parametrize("length, pads", [(5, True), (1, False)])
def test_a_decoding_step_multiplies_against_the_table_unpadded(length, pads, monkeypatch):
    # The padded table would be a copy of the table written at every token.
    import jax

    from zoo.layers import token_embedding

    layer = TokenEmbedding(130, D)
    layer.build((2, length))
    hidden = RNG.normal(size=(2, length, D)).astype("float32")
    monkeypatch.setattr(token_embedding, "pads_logits", lambda: True)

    def logits(table):
        return layer.stateless_call([table], [], hidden, reverse=True)[0]

    program = str(jax.make_jaxpr(logits)(layer.embeddings.value))  # nested jaxprs included
    assert (" pad[" in program) == pads
    reference = hidden.astype(np.float64) @ to_np(layer.embeddings).astype(np.float64).T
    np.testing.assert_allclose(to_np(logits(layer.embeddings.value)), reference, atol=ATOL)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the padded head runs on JAX only")
def test_the_padded_tied_head_gives_the_table_its_gradient(monkeypatch):
    import jax

    from zoo.layers import token_embedding

    layer = TokenEmbedding(130, D)
    layer.build((2, 5))
    hidden = RNG.normal(size=(2, 5, D)).astype("float32")
    upstream = RNG.normal(size=(2, 5, 130)).astype("float32")

    def gradient():
        def loss(table):
            logits, _ = layer.stateless_call([table], [], hidden, reverse=True)
            return jax.numpy.sum(upstream * logits)

        return np.asarray(jax.grad(loss)(layer.embeddings.value))

    monkeypatch.setattr(token_embedding, "pads_logits", lambda: True)
    # d sum(U * H E^T) / dE = U^T H, rows of the real vocabulary only.
    reference = upstream.reshape(-1, 130).T.astype(np.float64) @ hidden.reshape(-1, D).astype(np.float64)
    np.testing.assert_allclose(gradient(), reference, atol=1e-4)


@pytest.mark.parametrize("bad_id", [V, 100, -1])
def test_token_id_outside_the_vocabulary_is_an_eager_error(bad_id):
    ids = IDS.copy()
    ids[1, 2] = bad_id
    with pytest.raises(ValueError, match=rf"Token id {bad_id} is outside the vocabulary.*\[0, {V}\)"):
        TokenEmbedding(V, D)(ids)
    with pytest.raises(ValueError, match=rf"Token id {bad_id}"):
        TokenAndPositionEmbedding(V, L, D)(ops.convert_to_tensor(ids))


# ----------------------------------------------------------------------------
# TokenAndPositionEmbedding.


@pytest.mark.parametrize("scale_embeddings", [False, True])
@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
def test_token_and_position_embedding_matches_reference(position, scale_embeddings):
    layer = TokenAndPositionEmbedding(
        V, L, D, position=position, scale_embeddings=scale_embeddings, position_initializer="random_normal"
    )
    out = to_np(layer(IDS))
    tokens = to_np(layer.token_embedding.embeddings).astype(np.float64)[IDS]
    if scale_embeddings:
        tokens = tokens * math.sqrt(D)
    if position == "learned":
        positions = to_np(layer.position_embedding.position_embeddings)[:5]
    else:
        positions = np_sinusoid(5, D)
    np.testing.assert_allclose(out, tokens + positions[None], atol=ATOL)


def test_token_and_position_embedding_start_index():
    layer = TokenAndPositionEmbedding(V, L, D)
    whole = to_np(layer(IDS))
    tail = to_np(layer(IDS[:, 3:], start_index=3))
    np.testing.assert_allclose(tail, whole[:, 3:], atol=1e-6)


def test_mask_zero_yields_the_keras_mask():
    layer = TokenAndPositionEmbedding(V, L, D, mask_zero=True)
    expected = IDS != 0
    np.testing.assert_array_equal(to_np(layer.compute_mask(IDS)), expected)
    # Eager: the output carries the mask.
    np.testing.assert_array_equal(to_np(get_keras_mask(layer(IDS))), expected)
    # Symbolic: the model's tensors carry it too.
    hidden = layer(keras.Input((5,), dtype="int32"))
    assert hidden._keras_mask is not None and tuple(hidden._keras_mask.shape) == (None, 5)
    # Without mask_zero there is no mask.
    assert TokenAndPositionEmbedding(V, L, D).compute_mask(IDS) is None


def test_mask_zero_hides_padding_from_attention():
    embed = TokenAndPositionEmbedding(V, L, D, mask_zero=True)
    attention = MultiHeadAttention(2)
    token_ids = keras.Input((5,), dtype="int32")
    model = keras.Model(token_ids, attention(embed(token_ids)))
    out = to_np(model(IDS))
    np.testing.assert_allclose(to_np(attention(embed(IDS))), out, atol=1e-6)
    # The same keys with the padding stated explicitly, and no Keras mask.
    plain = TokenAndPositionEmbedding(V, L, D)
    plain.build(IDS.shape)
    plain.set_weights(embed.get_weights())
    explicit = to_np(attention(plain(IDS), padding_mask=IDS != 0))
    np.testing.assert_allclose(out[0, :3], explicit[0, :3], atol=1e-6)
    np.testing.assert_allclose(out[1], explicit[1], atol=1e-6)
    # And the padding matters: attending to it would change the answer.
    assert not np.allclose(to_np(attention(plain(IDS)))[0, :3], out[0, :3], atol=1e-4)


def test_reverse_is_the_tied_output_head():
    layer = TokenAndPositionEmbedding(V, L, D)
    layer(IDS)
    hidden = RNG.normal(size=(2, 5, D)).astype("float32")
    logits = to_np(layer(hidden, reverse=True))
    table = to_np(layer.token_embedding.embeddings).astype(np.float64)
    np.testing.assert_allclose(logits, hidden.astype(np.float64) @ table.T, atol=ATOL)


def test_too_long_sequence_names_the_maximum_length():
    layer = TokenAndPositionEmbedding(V, 4, D)
    with pytest.raises(ValueError, match="maximum sequence length 4"):
        layer(IDS)  # length 5
    with pytest.raises(ValueError, match="maximum sequence length 4"):
        layer(IDS[:, :2], start_index=3)
    with pytest.raises(ValueError, match="maximum sequence length 4"):
        layer(keras.Input((5,), dtype="int32"))  # also when building a model


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"vocabulary_size": -3}, "vocabulary_size"),
        ({"sequence_length": 0}, "sequence_length"),
        ({"sequence_length": -1}, "sequence_length"),
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"position": "rotary"}, "position"),
    ],
)
def test_bad_token_and_position_arguments(kwargs, name):
    args = {"vocabulary_size": V, "sequence_length": L, "embedding_dim": D, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        TokenAndPositionEmbedding(**args)


@pytest.mark.parametrize("sequence_length", [0, -4, 3.5])
def test_position_embedding_length_must_be_positive(sequence_length):
    with pytest.raises(ValueError, match="`sequence_length`"):
        PositionEmbedding(sequence_length)


def test_max_wavelength_must_be_positive():
    with pytest.raises(ValueError, match="`max_wavelength`"):
        SinusoidalPositionEncoding(max_wavelength=0)


# ----------------------------------------------------------------------------
# The shared harness.


def test_sinusoidal_position_encoding_harness(tmp_path):
    run_layer_test(
        SinusoidalPositionEncoding,
        {},
        np.zeros((2, 5, D), "float32"),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=0,
        tmp_path=tmp_path,
    )


def test_position_embedding_harness(tmp_path):
    run_layer_test(
        PositionEmbedding,
        {"sequence_length": L},
        RNG.normal(size=(2, 5, D)).astype("float32"),
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=1,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("reverse", [False, True])
def test_token_embedding_harness(reverse, tmp_path):
    data = RNG.normal(size=(2, 5, D)).astype("float32") if reverse else IDS
    run_layer_test(
        TokenEmbedding,
        {"input_dim": V, "output_dim": D},
        data,
        call_kwargs={"reverse": reverse},
        expected_output_shape=(2, 5, V) if reverse else (2, 5, D),
        expected_num_trainable_weights=1,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "init_kwargs",
    [
        {"mask_zero": True},
        {"position": "sinusoidal", "scale_embeddings": True},
    ],
    ids=["learned_mask_zero", "sinusoidal_scaled"],
)
def test_token_and_position_embedding_harness(init_kwargs, tmp_path):
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": V, "sequence_length": L, "embedding_dim": D, **init_kwargs},
        IDS,
        expected_output_shape=(2, 5, D),
        expected_num_trainable_weights=2 if init_kwargs.get("position", "learned") == "learned" else 1,
        tmp_path=tmp_path,
    )
