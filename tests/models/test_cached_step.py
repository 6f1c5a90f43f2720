"""Models own their cached step and their attention scores.

- A model written only against `zoo.generation.interface` (no zoo layer,
  no zoo model class) generates through `zoo.generate` unchanged.
- `call_with_cache` on a whole prompt gives the functional model's logits.
- `attention_scores` are the blocks' own (the same as the block's method on
  the functional graph's intermediate output), per layer and head.
- GPT models take `padding_mask` as optional; without it the attention runs
  the causal kernel (`dot_product_attention(is_causal=True)`), with the same
  result as an all-ones padding mask.
- BERT's head layers load under their old registered names.
"""

import keras
import numpy as np
import pytest
from keras import ops

import zoo
from zoo import generate
from zoo.generation import beam_search
from zoo.layers import L2Normalize, MaskedLMTransform, MeanPooling, OutputBias
from zoo.models import GPTBackbone, GPTCausalLM

V, D = 23, 6


class MeanOfPrefixLM(keras.Model):
    """A decoder-only model written only against the generation interface:
    the logits at position t are Dense(mean of the embeddings of tokens
    0..t). Its cache holds each position's embedding."""

    vocabulary_size = V
    max_sequence_length = 32
    is_encoder_decoder = False

    def __init__(self):
        super().__init__()
        self.embedding = keras.layers.Embedding(V, D, embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0))
        self.head = keras.layers.Dense(V, kernel_initializer=keras.initializers.RandomNormal(stddev=1.0))
        self.embedding.build((None, None))
        self.head.build((None, D))

    def empty_cache(self, batch_size, length):
        return (ops.zeros((batch_size, 1, 1, length, D)),)  # (B, 1, 1, L, d): batch axis 0, position axis 3

    def call_with_cache(self, token_ids, cache, cache_index, context=None):
        (embedded,) = cache
        new = self.embedding(token_ids)  # (B, T, d)
        embedded = ops.slice_update(embedded, [0, 0, 0, cache_index, 0], new[:, None, None])
        positions = ops.cast(cache_index, "int32") + ops.arange(token_ids.shape[1], dtype="int32")  # (T,)
        seen = ops.cast(ops.arange(embedded.shape[3])[None, :] <= positions[:, None], "float32")  # (T, L)
        sums = ops.einsum("tl,bld->btd", seen, embedded[:, 0, 0])  # (B, T, d)
        means = sums / ops.cast(positions + 1, "float32")[None, :, None]
        return self.head(means), (embedded,)

    def reference_greedy(self, prompt, steps):
        table = ops.convert_to_numpy(self.embedding.embeddings).astype(np.float64)
        kernel = ops.convert_to_numpy(self.head.kernel).astype(np.float64)
        bias = ops.convert_to_numpy(self.head.bias).astype(np.float64)
        tokens = list(prompt)
        for _ in range(steps):
            logits = table[tokens].mean(axis=0) @ kernel + bias
            tokens.append(int(np.argmax(logits)))
        return tokens[len(prompt):]


def test_a_model_written_against_the_interface_generates():
    keras.utils.set_random_seed(3)
    model = MeanOfPrefixLM()
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    out = generate(model, prompts, 7)
    expected = [model.reference_greedy(p, 7) for p in prompts]
    assert out.sequences == expected
    assert len({t for row in expected for t in row}) > 2  # not a constant output
    # One beam is greedy decoding.
    beams = beam_search(model, prompts, 7, num_beams=1)
    assert [row[0] for row in beams.sequences] == expected


def test_a_model_without_the_cached_step_is_one_clear_error():
    with pytest.raises(ValueError, match="Sequential has no cached step.*lacks empty_cache, call_with_cache"):
        generate(keras.Sequential([keras.layers.Dense(2)]), [[1]], 2)


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(0)
    return zoo.build("gpt-nano", task="causal_lm")


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(0)
    return zoo.build("transformer-tiny", vocabulary_size=50)


def _seq2seq_inputs():
    return {
        "encoder_token_ids": np.array([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 13]], "int32"),
        "encoder_padding_mask": np.array([[1, 1, 1, 1, 0, 0], [1] * 6], "int32"),
        "decoder_token_ids": np.array([[1, 14, 15, 16], [1, 17, 18, 19]], "int32"),
        "decoder_padding_mask": np.ones((2, 4), "int32"),
    }


def test_cached_prefill_gives_the_functional_logits(gpt, seq2seq):
    ids = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]], "int32")
    full = ops.convert_to_numpy(gpt({"token_ids": ids}))
    logits, cache = gpt.call_with_cache(ids, gpt.empty_cache(2, 8), 0)
    np.testing.assert_allclose(ops.convert_to_numpy(logits), full, atol=1e-4)
    # Then one position at a time, from the written cache.
    step, _ = gpt.call_with_cache(ids[:, 4:], cache, 4)
    np.testing.assert_allclose(ops.convert_to_numpy(step)[:, 0], full[:, 4], atol=1e-4)

    inputs = _seq2seq_inputs()
    full = ops.convert_to_numpy(seq2seq(inputs))
    context = seq2seq.start(inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
    logits, _ = seq2seq.call_with_cache(inputs["decoder_token_ids"], seq2seq.empty_cache(2, 4), 0, context)
    np.testing.assert_allclose(ops.convert_to_numpy(logits), full, atol=1e-4)


def test_gpt_attention_scores_are_the_blocks_own(gpt):
    backbone = gpt.backbone
    ids = np.array([[3, 4, 5, 6, 7, 0], [8, 9, 10, 0, 0, 0]], "int32")
    pad = (ids != 0).astype("int32")
    scores = ops.convert_to_numpy(gpt.attention_scores({"token_ids": ids, "padding_mask": pad})["self"])
    n, h, t = backbone.num_layers, backbone.num_heads, ids.shape[1]
    assert scores.shape == (n, 2, h, t, t)
    # Block i's scores, from the functional graph's output of block i - 1.
    for i in range(1, n):
        previous = keras.Model(backbone.inputs, backbone.blocks[i - 1].output)
        hidden = previous({"token_ids": ids, "padding_mask": pad})
        expected = backbone.blocks[i].attention_scores(hidden, padding_mask=pad)["self"]
        np.testing.assert_allclose(scores[i], ops.convert_to_numpy(expected), atol=1e-5)
    # Causal, padded keys hidden, each row a distribution.
    assert np.all(scores[..., np.triu(np.ones((t, t), bool), 1)] == 0.0)
    assert np.all(scores[:, 1, :, :, 3:] == 0.0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


def test_encoder_decoder_attention_scores(seq2seq):
    inputs = _seq2seq_inputs()
    scores = {k: ops.convert_to_numpy(v) for k, v in seq2seq.attention_scores(inputs).items()}
    n, h = seq2seq.num_layers, seq2seq.num_heads
    assert scores["encoder"].shape == (n, 2, h, 6, 6)
    assert scores["self"].shape == (n, 2, h, 4, 4)
    assert scores["cross"].shape == (n, 2, h, 4, 6)
    # Padded source positions get no weight, in the encoder and across.
    assert np.all(scores["encoder"][:, 0, :, :, 4:] == 0.0)
    assert np.all(scores["cross"][:, 0, :, :, 4:] == 0.0)
    assert np.all(scores["self"][..., np.triu(np.ones((4, 4), bool), 1)] == 0.0)
    for value in scores.values():
        np.testing.assert_allclose(value.sum(-1), 1.0, atol=1e-5)
    # The last block's cross-attention is the block's own, from the functional graph.
    hidden = keras.Model(seq2seq.inputs, seq2seq.decoder_blocks[-2].output)(inputs)
    encoded = seq2seq.encode(inputs["encoder_token_ids"], inputs["encoder_padding_mask"], training=False)
    expected = seq2seq.decoder_blocks[-1].attention_scores(
        hidden, encoded, padding_mask=inputs["decoder_padding_mask"], encoder_padding_mask=inputs["encoder_padding_mask"]
    )
    np.testing.assert_allclose(scores["cross"][-1], ops.convert_to_numpy(expected["cross"]), atol=1e-5)


def test_bert_attention_scores_are_the_blocks_own():
    keras.utils.set_random_seed(0)
    backbone = zoo.build("bert-tiny")
    ids = np.array([[2, 7, 8, 9, 3, 0], [2, 10, 3, 0, 0, 0]], "int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": (ids != 0).astype("int32")}
    scores = ops.convert_to_numpy(backbone.attention_scores(inputs)["self"])
    assert scores.shape == (backbone.num_layers, 2, backbone.num_heads, 6, 6)
    hidden = keras.Model(backbone.inputs, backbone.blocks[0].output)(inputs)
    expected = backbone.blocks[1].attention_scores(hidden, padding_mask=inputs["padding_mask"])
    np.testing.assert_allclose(scores[1], ops.convert_to_numpy(expected), atol=1e-5)
    assert np.all(scores[:, 1, :, :, 3:] == 0.0)  # padded keys
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


def _spy_dot_product_attention(monkeypatch):
    calls = []
    original = ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("is_causal", False), kwargs.get("mask") is None))
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", spy)
    return calls


def test_gpt_without_padding_mask_runs_the_causal_kernel(monkeypatch):
    keras.utils.set_random_seed(1)
    backbone = GPTBackbone(vocabulary_size=V, num_layers=2, num_heads=2, hidden_dim=8, max_sequence_length=16)
    lm = GPTCausalLM(backbone)
    ids = np.random.default_rng(0).integers(0, V, (2, 7)).astype("int32")
    calls = _spy_dot_product_attention(monkeypatch)
    without = ops.convert_to_numpy(lm({"token_ids": ids}))
    assert calls == [(True, True)] * 2  # every block: the causal kernel, no dense mask
    calls.clear()
    with_ones = ops.convert_to_numpy(lm({"token_ids": ids, "padding_mask": np.ones_like(ids)}))
    assert calls == [(False, False)] * 2  # a padding mask: the dense merged mask
    np.testing.assert_allclose(without, with_ones, atol=1e-5)
    # The backbone alone, too.
    np.testing.assert_allclose(
        ops.convert_to_numpy(backbone({"token_ids": ids})),
        ops.convert_to_numpy(backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})),
        atol=1e-5,
    )


def test_gpt_fits_on_token_ids_alone():
    keras.utils.set_random_seed(2)
    ids = np.random.default_rng(1).integers(0, V, (4, 9)).astype("int32")

    def trained(with_mask):
        keras.utils.set_random_seed(2)
        backbone = GPTBackbone(vocabulary_size=V, num_layers=1, num_heads=2, hidden_dim=8, max_sequence_length=16)
        lm = GPTCausalLM(backbone)
        lm.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = {"token_ids": ids[:, :-1]}
        if with_mask:
            x["padding_mask"] = np.ones_like(ids[:, :-1])
        history = lm.fit(x, ids[:, 1:], batch_size=4, epochs=2, shuffle=False, verbose=0)
        return history.history["loss"], ops.convert_to_numpy(lm.predict(x, verbose=0))

    loss_without, out_without = trained(False)
    loss_with, out_with = trained(True)
    np.testing.assert_allclose(loss_without, loss_with, rtol=1e-5)
    np.testing.assert_allclose(out_without, out_with, atol=1e-4)


@pytest.mark.parametrize("layer", [MaskedLMTransform, OutputBias, MeanPooling, L2Normalize])
def test_bert_head_layers_keep_their_registered_names(layer):
    assert keras.saving.get_registered_object(f"zoo>{layer.__name__}") is layer
    assert layer.__module__.startswith("zoo.layers.")
