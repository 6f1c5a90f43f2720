"""Gemma 3's model: the sliding window, the (1 + g) norm and the sandwich
norms as the layers compute them, and the backbone's invariants (cached ==
full pass past the window, no future leak, padding, reload).

The logits against a float64 reference of transformers' Gemma3ForCausalLM,
and against keras-hub's, are in tests/checkpoints/test_gemma.py.
"""

import keras
import numpy as np
import pytest

import zoo
from zoo.layers import AddNorm, MultiHeadAttention, RMSNorm
from zoo.layers.attention import merge_masks
from zoo.models import Gemma3Backbone, Gemma3CausalLM


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_the_sliding_window_mask_is_the_banded_causal_mask():
    query, key = np.zeros((1, 6, 4)), np.zeros((1, 9, 4))
    mask = _np(merge_masks(query, key, use_causal_mask=True, query_start=3, sliding_window=3))[0]
    t, s = np.arange(3, 9)[:, None], np.arange(9)[None, :]
    np.testing.assert_array_equal(mask, (s <= t) & (t - s < 3))


def test_a_sliding_window_layer_ignores_keys_outside_its_window():
    layer = MultiHeadAttention(num_heads=2, sliding_window=3)
    x = np.random.default_rng(0).normal(size=(1, 8, 8)).astype("float32")
    out = _np(layer(x, use_causal_mask=True))
    changed = x.copy()
    changed[0, :4] += 1.0  # positions 0..3 are outside the window of every query from 6 on
    np.testing.assert_allclose(_np(layer(changed, use_causal_mask=True))[0, 6:], out[0, 6:], atol=1e-6)
    assert np.abs(_np(layer(changed, use_causal_mask=True))[0, 5] - out[0, 5]).max() > 1e-3


def test_the_unit_offset_rms_norm_is_the_float64_formula():
    x = np.random.default_rng(1).normal(size=(2, 3, 8))
    norm = RMSNorm(1e-6, unit_offset=True)
    norm.build(x.shape)
    assert np.all(_np(norm.scale) == 0)  # (1 + 0): the identity scale at initialisation
    g = np.random.default_rng(2).normal(size=8)
    norm.scale.assign(g.astype("float32"))
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * (1 + g)
    np.testing.assert_allclose(_np(norm(x.astype("float32"))), expected, rtol=1e-5, atol=1e-6)


def test_the_sandwich_norm_normalises_the_sublayer_output_before_the_add():
    add_norm = AddNorm(norm_first=True, normalization="gemma_rms_norm", sandwich_norm=True, epsilon=1e-6)
    x = np.random.default_rng(3).normal(size=(2, 4, 8)).astype("float32")
    sublayer_output = 5.0 * np.random.default_rng(4).normal(size=(2, 4, 8)).astype("float32")
    out = _np(add_norm(x, sublayer_output))
    rms = sublayer_output / np.sqrt((sublayer_output**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, x + rms, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="sandwich_norm=True.* needs norm_first=True"):
        AddNorm(norm_first=False, sandwich_norm=True)


def _lm(**overrides):
    keras.utils.set_random_seed(0)
    lm = zoo.build("gemma3-nano", task="causal_lm", **overrides)
    # Every norm weight away from its (1 + 0) initialisation, so a misplaced norm shows.
    lm.set_weights([w + 0.3 * np.random.default_rng(i).normal(size=w.shape).astype(w.dtype)
                    for i, w in enumerate(lm.get_weights())])
    return lm


def test_the_nano_preset_has_five_local_layers_then_a_global_one():
    lm = _lm()
    assert lm.backbone.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    windows = [block.self_attention.sliding_window for block in lm.backbone.blocks]
    thetas = [block.self_attention.rope_theta for block in lm.backbone.blocks]
    assert windows == [8] * 5 + [None] and thetas == [10000.0] * 5 + [1000000.0]


def test_cached_prefill_and_steps_past_the_window_equal_the_full_pass():
    lm = _lm()
    ids = np.random.default_rng(6).integers(0, 100, (2, 20)).astype("int32")  # 20 positions, window 8
    full = _np(lm({"token_ids": ids}))
    cache = lm.empty_cache(2, 24)
    logits, cache = lm.call_with_cache(ids[:, :5], cache, 0)
    steps = [_np(logits)]
    for i in range(5, 20):
        logits, cache = lm.call_with_cache(ids[:, i: i + 1], cache, i)
        steps.append(_np(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4)


def test_no_future_token_changes_an_earlier_logit_and_padding_changes_no_real_one():
    lm = _lm()
    ids = np.random.default_rng(7).integers(0, 100, (1, 14)).astype("int32")
    changed = ids.copy()
    changed[0, 9:] = (changed[0, 9:] + 1) % 100
    np.testing.assert_allclose(_np(lm({"token_ids": changed}))[:, :9], _np(lm({"token_ids": ids}))[:, :9], atol=1e-5)
    padded = np.concatenate([ids, np.zeros((1, 4), "int32")], axis=1)
    mask = np.concatenate([np.ones((1, 14)), np.zeros((1, 4))], axis=1).astype("int32")
    np.testing.assert_allclose(_np(lm({"token_ids": padded, "padding_mask": mask}))[:, :14],
                               _np(lm({"token_ids": ids})), atol=1e-5)


def test_reload_gives_identical_logits_and_the_config_round_trips(tmp_path):
    lm = _lm(layer_types=["full_attention", "sliding_attention"] * 3, query_pre_attention_scalar=12)
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]], "int32")
    lm.save(tmp_path / "lm.keras")
    reloaded = keras.saving.load_model(tmp_path / "lm.keras")
    assert isinstance(reloaded, Gemma3CausalLM)
    assert reloaded.backbone.layer_types == lm.backbone.layer_types
    np.testing.assert_array_equal(_np(reloaded({"token_ids": ids})), _np(lm({"token_ids": ids})))


def test_bad_layer_types_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"`layer_types` must list 2 of .*got \['sliding_attention'\]"):
        Gemma3Backbone(vocabulary_size=10, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=16,
                       layer_types=["sliding_attention"])
