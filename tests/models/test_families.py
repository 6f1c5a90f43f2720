"""The three families on their tiny presets: invariants, training, saving."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


# --- No future leak under the causal mask ----------------------------------


@pytest.mark.parametrize("norm_first", [True, False], ids=["gpt2-pre-ln", "gpt1-post-ln"])
def test_gpt_changing_a_future_token_changes_no_earlier_logit(norm_first):
    model = zoo.build("gpt-nano", task="causal_lm", norm_first=norm_first)
    x = gpt_inputs(length=10)
    changed = {k: v.copy() for k, v in x.items()}
    changed["token_ids"][:, 6] = (changed["token_ids"][:, 6] + 7) % 100
    a, b = _np(model(x)), _np(model(changed))
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert np.abs(a[:, 6:] - b[:, 6:]).max() > 1e-4  # the change is seen from t=6 on


def test_transformer_decoder_is_causal_and_sees_the_whole_source():
    model = zoo.build("transformer-tiny")
    x = seq2seq_inputs()
    future = {k: v.copy() for k, v in x.items()}
    future["decoder_token_ids"][:, 4] = (future["decoder_token_ids"][:, 4] + 5) % 1000
    a, b = _np(model(x)), _np(model(future))
    np.testing.assert_allclose(a[:, :4], b[:, :4], atol=1e-6)
    source = {k: v.copy() for k, v in x.items()}
    source["encoder_token_ids"][:, -1] = (source["encoder_token_ids"][:, -1] + 5) % 1000
    c = _np(model(source))
    assert np.abs(a[:, 0] - c[:, 0]).max() > 1e-5  # the first target already attends to the last source token


# --- Padding changes nothing it should not ---------------------------------


def test_bert_padded_tokens_change_no_real_output():
    model = zoo.build("bert-tiny")
    x = bert_inputs(lengths=[8, 5])
    changed = {k: v.copy() for k, v in x.items()}
    changed["token_ids"][1, 5:] = [11, 12, 13]
    a, b = model(x), model(changed)
    np.testing.assert_allclose(_np(a["sequence_output"])[1, :5], _np(b["sequence_output"])[1, :5], atol=1e-6)
    np.testing.assert_allclose(_np(a["pooled_output"]), _np(b["pooled_output"]), atol=1e-6)


def test_transformer_padded_source_tokens_change_no_decoder_output():
    model = zoo.build("transformer-tiny")
    x = seq2seq_inputs(source_lengths=[9, 6])
    changed = {k: v.copy() for k, v in x.items()}
    changed["encoder_token_ids"][1, 6:] = [21, 22, 23]
    np.testing.assert_allclose(_np(model(x))[1], _np(model(changed))[1], atol=1e-5)


def test_sentence_encoder_mean_pools_real_tokens_only():
    encoder = zoo.build("bert-tiny", task="sentence_encoder", pooling="mean", normalize=False)
    x = bert_inputs(lengths=[8, 5])
    sequence = _np(encoder.backbone(x)["sequence_output"])
    np.testing.assert_allclose(_np(encoder(x))[1], sequence[1, :5].mean(axis=0), atol=1e-5)
    unit = zoo.build("bert-tiny", task="sentence_encoder", pooling="cls")
    np.testing.assert_allclose(np.linalg.norm(_np(unit(x)), axis=-1), 1.0, atol=1e-5)


def _gelu(x):
    """The exact GELU, x Phi(x), in float64."""
    from math import erf

    return x * 0.5 * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def _layer_norm(x, gamma, beta, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def test_masked_lm_head_is_berts_at_every_masked_position():
    model = zoo.build("bert-tiny", task="masked_lm")
    rng = np.random.default_rng(11)
    backbone_weights = {id(w) for w in model.backbone.weights}
    head = [w for w in model.weights if id(w) not in backbone_weights]
    d, vocabulary = 32, 100
    tied = [w for w in model.backbone.weights if tuple(w.shape) == (vocabulary, d)]
    for w in head + tied:  # no zero bias, unit gamma or tiny table that could hide a mistake
        w.assign(rng.normal(scale=0.5, size=w.shape).astype("float32"))
    (kernel,) = [_np(w) for w in head if tuple(w.shape) == (d, d)]
    (output_bias,) = [_np(w) for w in head if tuple(w.shape) == (vocabulary,)]
    (gamma,) = [_np(w) for w in head if "gamma" in w.path]
    (beta,) = [_np(w) for w in head if "beta" in w.path]
    (dense_bias,) = [_np(w) for w in head if tuple(w.shape) == (d,) and "gamma" not in w.path and "beta" not in w.path]
    (table,) = [_np(w) for w in model.backbone.weights if tuple(w.shape) == (vocabulary, d)]  # tied token table

    x = bert_inputs(batch=3, lengths=[8, 6, 8])
    x["segment_ids"][2, 4:] = 1
    positions = np.array([[1, 3, 0, 7], [2, 4, 5, 5], [6, 0, 2, 1]], "int32")  # a repeat, position 0, the last
    logits = _np(model({**x, "mask_positions": positions}))
    assert logits.shape == (3, 4, vocabulary)

    hidden = _np(model.backbone(x)["sequence_output"]).astype("float64")  # what the head reads
    gathered = np.take_along_axis(hidden, positions[..., None].astype(int), axis=1)  # (B, P, d)
    transformed = _layer_norm(_gelu(gathered @ kernel + dense_bias), gamma, beta)
    expected = transformed @ table.T.astype("float64") + output_bias  # logits through the tied table
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


# --- A few fit steps lower the loss on a learnable task --------------------


def _loss_falls(model, x, y, steps=30, lr=3e-3, **fit_kwargs):
    model.compile(keras.optimizers.Adam(lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.evaluate(x, y, verbose=0, **fit_kwargs)
    model.fit(x, y, epochs=steps, batch_size=len(y), verbose=0, **fit_kwargs)
    after = model.evaluate(x, y, verbose=0, **fit_kwargs)
    assert after < 0.7 * before, (before, after)


def test_gpt_learns_a_repeating_sequence():
    model = zoo.build("gpt-nano", task="causal_lm")
    pattern = np.tile(np.arange(1, 5), 5)[:17]
    tokens = np.stack([np.roll(pattern, -i) for i in range(8)]).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones_like(tokens[:, :-1])}
    _loss_falls(model, x, tokens[:, 1:])


def test_bert_classifier_learns_which_token_appears():
    model = zoo.build("bert-tiny", task="classifier", num_classes=2)
    x = bert_inputs(batch=16, seed=3)
    x["token_ids"][:, 0] = 2  # [CLS]
    y = (x["token_ids"][:, 1] % 2).astype("int32")
    x["token_ids"][:, 1] = 10 + y  # the label is token 10 or 11 at position 1
    _loss_falls(model, x, y, steps=25)


def test_transformer_learns_to_copy():
    model = zoo.build("transformer-tiny", vocabulary_size=20)
    rng = np.random.default_rng(0)
    source = rng.integers(3, 20, (16, 6)).astype("int32")
    x = {
        "encoder_token_ids": source,
        "encoder_padding_mask": np.ones_like(source),
        "decoder_token_ids": np.concatenate([np.ones((16, 1), "int32"), source[:, :-1]], axis=1),
        "decoder_padding_mask": np.ones_like(source),
    }
    _loss_falls(model, x, source, steps=30)


# --- Saving ------------------------------------------------------------------

CASES = {
    "gpt-causal_lm": (lambda: zoo.build("gpt-nano", task="causal_lm"), gpt_inputs),
    "bert-backbone": (lambda: zoo.build("bert-tiny"), bert_inputs),
    "bert-classifier": (lambda: zoo.build("bert-tiny", task="classifier", num_classes=3), bert_inputs),
    "bert-sentence_encoder": (lambda: zoo.build("bert-tiny", task="sentence_encoder"), bert_inputs),
    "transformer": (lambda: zoo.build("transformer-tiny"), seq2seq_inputs),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_keras_round_trip_gives_identical_outputs(case, tmp_path):
    make, inputs = CASES[case]
    model, x = make(), inputs()
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    for a, b in zip(keras.tree.flatten(model(x)), keras.tree.flatten(loaded(x))):
        np.testing.assert_array_equal(_np(a), _np(b))


def test_masked_lm_round_trip_and_weights_only(tmp_path):
    model = zoo.build("bert-tiny", task="masked_lm")
    x = bert_inputs()
    x["mask_positions"] = np.array([[1, 2], [3, 4]], "int32")
    model.save(tmp_path / "mlm.keras")
    loaded = keras.saving.load_model(tmp_path / "mlm.keras", safe_mode=True)
    np.testing.assert_array_equal(_np(model(x)), _np(loaded(x)))
    model.save_weights(tmp_path / "mlm.weights.h5")
    fresh = zoo.build("bert-tiny", task="masked_lm")
    fresh.load_weights(tmp_path / "mlm.weights.h5")
    np.testing.assert_array_equal(_np(model(x)), _np(fresh(x)))


def test_reload_in_a_fresh_process_gives_identical_outputs(tmp_path):
    model = zoo.build("gpt-nano", task="causal_lm")
    x = gpt_inputs()
    model.save(tmp_path / "gpt.keras")
    np.save(tmp_path / "ids.npy", x["token_ids"])
    np.save(tmp_path / "expected.npy", _np(model(x)))
    script = textwrap.dedent(
        f"""
        import numpy as np, keras
        import zoo  # registers the zoo's classes
        model = keras.saving.load_model({str(tmp_path / "gpt.keras")!r}, safe_mode=True)
        ids = np.load({str(tmp_path / "ids.npy")!r})
        out = keras.ops.convert_to_numpy(model({{"token_ids": ids, "padding_mask": np.ones_like(ids)}}))
        np.testing.assert_array_equal(out, np.load({str(tmp_path / "expected.npy")!r}))
        print("identical")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "identical" in result.stdout


# --- Mixed precision -----------------------------------------------------------


@pytest.mark.parametrize(
    "name, task, inputs",
    [("gpt-nano", "causal_lm", gpt_inputs), ("bert-tiny", "classifier", bert_inputs), ("transformer-tiny", None, seq2seq_inputs)],
)
def test_mixed_bfloat16_trains_and_stays_finite(name, task, inputs):
    model = zoo.build(name, task=task, dtype="mixed_bfloat16")
    x = inputs()
    out = model(x)
    # GPT's (B, T, V) logits stay bfloat16 (as keras-hub's GPT2CausalLM): Keras
    # losses and MaskedSparseCrossentropy sum them in float32 themselves.
    expected = "bfloat16" if task == "causal_lm" else "float32"
    assert keras.backend.standardize_dtype(out.dtype) == expected
    assert np.isfinite(_np(out)).all()
    if task == "classifier":
        y = np.array([0, 1], "int32")
    else:
        y = (x.get("token_ids", x.get("decoder_token_ids"))).astype("int32")
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    losses = model.fit(x, y, epochs=8, batch_size=len(y), verbose=0).history["loss"]
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.8 * losses[0], losses  # it learns in bfloat16, not only stays finite
