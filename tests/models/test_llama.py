"""The Llama-style decoder: logits against a float64 NumPy reference of the
architecture (Hugging Face's modeling_llama written out), for every variant
flag; its layers alone; cached == uncached; padding, batching and causality
invariants; generation past the context and seeded sampling; reload; the
published checkpoints' parameter counts."""

import math

import keras
import numpy as np
import pytest

import zoo
from zoo.tokenizers import CharTokenizer
from zoo.layers import FeedForward, MultiHeadAttention, RMSNorm, RotaryEmbedding
from zoo.models import LlamaBackbone, LlamaCausalLM

LLAMA3_SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=16)
SMALL = dict(vocabulary_size=61, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=48,
             max_sequence_length=64)
# Each variant the checkpoints use: key/value heads h (Llama 1), 2 (GQA), 1 (MQA); Llama 3 scaling;
# an untied head (TinyLlama); Q/K/V biases (Qwen2); query/key norm with a wider head (Qwen3).
VARIANTS = {
    "mha-tied": dict(num_key_value_heads=4),
    "gqa-llama3-scaling": dict(num_key_value_heads=2, rope_theta=500000.0, rope_scaling=LLAMA3_SCALING),
    "mqa-untied": dict(num_key_value_heads=1, tie_word_embeddings=False),
    "qwen2-bias": dict(num_key_value_heads=2, attention_bias=True, rope_theta=1e6, rms_norm_epsilon=1e-6),
    "qwen3-norm-head-dim": dict(num_key_value_heads=2, head_dim=16, query_key_norm=True, rms_norm_epsilon=1e-6),
}


# --- The float64 reference ------------------------------------------------------------------------


def np_rms_norm(x, scale, epsilon):
    return scale * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon)


def np_inverse_frequencies(head_dim, theta, scaling):
    """transformers' `_compute_default_rope_parameters` and `_compute_llama3_parameters`."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    if scaling is None:
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


def np_rotate(x, positions, inv_freq):
    """x (B, heads, T, k): transformers' `apply_rotary_pos_emb` with `rotate_half`."""
    freqs = positions[:, None] * inv_freq[None, :]  # (T, k/2)
    emb = np.concatenate([freqs, freqs], axis=-1)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * np.cos(emb) + rotated * np.sin(emb)


def np_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def np_silu(x):
    return x / (1 + np.exp(-x))


def reference_logits(lm, token_ids):
    """Logits (B, T, V) of a `LlamaCausalLM` in float64, from its weights by name."""
    config = lm.backbone.get_config()
    weights = {w.path: np.asarray(keras.ops.convert_to_numpy(w), np.float64) for w in lm.weights}
    h, d = config["num_heads"], config["hidden_dim"]
    g = config["num_key_value_heads"] or h
    k = config["head_dim"] or d // h
    eps = config["rms_norm_epsilon"]
    inv_freq = np_inverse_frequencies(k, config["rope_theta"], config["rope_scaling"])
    b, t = token_ids.shape
    positions = np.arange(t, dtype=np.float64)
    causal = np.tril(np.ones((t, t), bool))
    x = weights["token_embedding/embeddings"][token_ids]  # (B, T, d)
    for i in range(config["num_layers"]):
        p = f"block_{i}/"
        a = np_rms_norm(x, weights[p + "self_attention_add_norm/rms_norm/scale"], eps)
        qkv = a @ weights[p + "self_attention/query_key_value/kernel"]
        if config["attention_bias"]:
            qkv = qkv + weights[p + "self_attention/query_key_value/bias"]
        q = qkv[..., : h * k].reshape(b, t, h, k).transpose(0, 2, 1, 3)  # (B, h, T, k)
        key = qkv[..., h * k: (h + g) * k].reshape(b, t, g, k).transpose(0, 2, 1, 3)  # (B, g, T, k)
        value = qkv[..., (h + g) * k:].reshape(b, t, g, k).transpose(0, 2, 1, 3)
        if config["query_key_norm"]:
            q = np_rms_norm(q, weights[p + "self_attention/query_norm/scale"], eps)
            key = np_rms_norm(key, weights[p + "self_attention/key_norm/scale"], eps)
        q, key = np_rotate(q, positions, inv_freq), np_rotate(key, positions, inv_freq)
        key, value = np.repeat(key, h // g, axis=1), np.repeat(value, h // g, axis=1)  # repeat_kv
        logits = q @ key.transpose(0, 1, 3, 2) / math.sqrt(k)
        attention = np_softmax(np.where(causal, logits, -np.inf)) @ value  # (B, h, T, k)
        x = x + attention.transpose(0, 2, 1, 3).reshape(b, t, h * k) @ weights[p + "self_attention/output/kernel"]
        m = np_rms_norm(x, weights[p + "feed_forward_add_norm/rms_norm/scale"], eps)
        gate = np_silu(m @ weights[p + "feed_forward/gate/kernel"])
        x = x + (gate * (m @ weights[p + "feed_forward/intermediate/kernel"])) @ weights[p + "feed_forward/output/kernel"]
    x = np_rms_norm(x, weights["final_norm/scale"], eps)
    head = weights["token_embedding/embeddings"].T if config["tie_word_embeddings"] else weights["lm_head/kernel"]
    return x @ head


def _randomised(lm, seed=0):
    """Every weight random, the norms' scales away from 1, so that each one is tested."""
    rng = np.random.default_rng(seed)
    for w in lm.weights:
        scale = 1.0 if w.path.endswith("scale") else 0.0
        w.assign((scale + rng.normal(0, 0.3, w.shape)).astype("float32"))
    return lm


def _model(variant, **extra):
    keras.utils.set_random_seed(0)
    return _randomised(LlamaCausalLM(LlamaBackbone(**{**SMALL, **VARIANTS[variant], **extra})))


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


# --- Layers --------------------------------------------------------------------------------------


def test_rms_norm_is_the_float64_formula_and_keeps_its_dtype():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    norm = RMSNorm(epsilon=1e-6)
    norm.build(x.shape)
    norm.scale.assign(np.linspace(0.5, 2.0, 8).astype("float32"))
    np.testing.assert_allclose(_np(norm(x)), np_rms_norm(x.astype(np.float64), np.linspace(0.5, 2.0, 8), 1e-6),
                               atol=1e-6)
    half = RMSNorm(epsilon=1e-6, dtype="mixed_bfloat16")
    assert keras.backend.standardize_dtype(half(x.astype("float32")).dtype) == "bfloat16"


@pytest.mark.parametrize("scaling", [None, LLAMA3_SCALING], ids=["plain", "llama3"])
def test_rotary_embedding_is_the_float64_rotation_from_any_start(scaling):
    x = np.random.default_rng(1).normal(size=(2, 5, 3, 16)).astype("float32")  # (B, T, h, k)
    rotary = RotaryEmbedding(head_dim=16, rope_theta=500000.0, rope_scaling=scaling)
    inv_freq = np_inverse_frequencies(16, 500000.0, scaling)
    positions = np.arange(7, 12, dtype=np.float64)
    expected = np_rotate(x.astype(np.float64).transpose(0, 2, 1, 3), positions, inv_freq).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(_np(rotary(x, start_index=7)), expected, atol=1e-5)


def test_rotated_dot_products_depend_on_the_offset_only():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(1, 1, 1, 8)).astype("float32"), rng.normal(size=(1, 1, 1, 8)).astype("float32")
    rotary = RotaryEmbedding(head_dim=8)
    dots = [float(np.sum(_np(rotary(q, start_index=s + 3)) * _np(rotary(k, start_index=s)))) for s in (0, 5, 40)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-5)


def test_llama3_scaling_keeps_short_wavelengths_and_divides_long_ones():
    plain = np_inverse_frequencies(64, 500000.0, None)
    scaled = zoo.layers.rotary_embedding.inverse_frequencies(64, 500000.0, dict(LLAMA3_SCALING, factor=32.0))
    wavelength = 2 * math.pi / plain
    np.testing.assert_allclose(scaled[wavelength < 16 / 4], plain[wavelength < 16 / 4])
    np.testing.assert_allclose(scaled[wavelength > 16], plain[wavelength > 16] / 32.0)
    with pytest.raises(ValueError, match="rope_scaling.*'yarn'.*supported"):
        RotaryEmbedding(head_dim=8, rope_scaling={"rope_type": "yarn", "factor": 2.0})


def test_swiglu_is_the_gated_formula():
    x = np.random.default_rng(3).normal(size=(2, 4, 8)).astype("float32")
    ffn = FeedForward(12, activation="silu", gated=True, use_bias=False)
    y = _np(ffn(x))
    x64 = x.astype(np.float64)
    gate, up, down = (_np(ffn.gate_dense.kernel), _np(ffn.intermediate_dense.kernel), _np(ffn.output_dense.kernel))
    np.testing.assert_allclose(y, (np_silu(x64 @ gate) * (x64 @ up)) @ down, atol=1e-5)


@pytest.mark.parametrize("key_value_heads", [1, 2, 4])
def test_grouped_query_attention_shares_each_key_value_head_and_caches_only_those(key_value_heads):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    layer = MultiHeadAttention(4, num_key_value_heads=key_value_heads, use_bias=False)
    full = _np(layer(x, use_causal_mask=True))
    # The reference: key/value heads repeated to every query head.
    qkv = x.astype(np.float64) @ _np(layer.query_key_value_dense.kernel)
    q = qkv[..., :16].reshape(2, 5, 4, 4).transpose(0, 2, 1, 3)
    kv = [qkv[..., 16 + i * 4 * key_value_heads: 16 + (i + 1) * 4 * key_value_heads] for i in (0, 1)]
    key, value = (np.repeat(t.reshape(2, 5, key_value_heads, 4).transpose(0, 2, 1, 3), 4 // key_value_heads, 1)
                  for t in kv)
    logits = np.where(np.tril(np.ones((5, 5), bool)), q @ key.transpose(0, 1, 3, 2) / 2.0, -np.inf)
    out = (np_softmax(logits) @ value).transpose(0, 2, 1, 3).reshape(2, 5, 16) @ _np(layer.output_dense.kernel)
    np.testing.assert_allclose(full, out, atol=1e-5)
    _, weights = layer(x, use_causal_mask=True, return_attention_scores=True)  # the explicit (non-fused) path
    np.testing.assert_allclose(_np(weights), np_softmax(logits), atol=1e-5)
    cache = (np.zeros((2, key_value_heads, 5, 4), "float32"),) * 2  # keys, values: (B, g, S, k), g heads only
    step, cache = layer(x, cache=cache, cache_index=0)
    np.testing.assert_allclose(_np(step), full, atol=1e-5)
    with pytest.raises(ValueError, match="num_key_value_heads.*dividing num_heads=4"):
        MultiHeadAttention(4, num_key_value_heads=3)


# --- The model against the reference ----------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_equal_the_float64_reference(variant):
    lm = _model(variant)
    ids = np.random.default_rng(5).integers(0, SMALL["vocabulary_size"], (2, 11)).astype("int32")
    np.testing.assert_allclose(_np(lm({"token_ids": ids})), reference_logits(lm, ids), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_prefill_and_steps_equal_the_full_pass(variant):
    lm = _model(variant)
    ids = np.random.default_rng(6).integers(0, SMALL["vocabulary_size"], (2, 9)).astype("int32")
    full = _np(lm({"token_ids": ids}))
    cache = lm.empty_cache(2, 12)
    assert [x.shape for x in cache[0]] == [(2, lm.backbone.num_key_value_heads, 12, lm.backbone.head_dim)] * 2
    logits, cache = lm.call_with_cache(ids[:, :5], cache, 0)
    steps = [_np(logits)]
    for i in range(5, 9):
        logits, cache = lm.call_with_cache(ids[:, i: i + 1], cache, i)
        steps.append(_np(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4)


def test_no_future_token_changes_an_earlier_logit_and_padding_changes_no_real_one():
    lm = _model("gqa-llama3-scaling")
    ids = np.random.default_rng(7).integers(0, SMALL["vocabulary_size"], (1, 10)).astype("int32")
    changed = ids.copy()
    changed[0, 6:] = (changed[0, 6:] + 1) % SMALL["vocabulary_size"]
    np.testing.assert_allclose(_np(lm({"token_ids": changed}))[:, :6], _np(lm({"token_ids": ids}))[:, :6], atol=1e-5)
    # Right padding: the real positions of a padded row are those of the row alone.
    padded = np.concatenate([ids, np.zeros((1, 4), "int32")], axis=1)
    mask = np.concatenate([np.ones((1, 10)), np.zeros((1, 4))], axis=1).astype("int32")
    np.testing.assert_allclose(_np(lm({"token_ids": padded, "padding_mask": mask}))[:, :10],
                               _np(lm({"token_ids": ids})), atol=1e-5)
    # Batching: a row's logits do not depend on the rows beside it.
    other = np.random.default_rng(8).integers(0, SMALL["vocabulary_size"], (1, 10)).astype("int32")
    together = _np(lm({"token_ids": np.concatenate([ids, other])}))
    np.testing.assert_allclose(together[:1], _np(lm({"token_ids": ids})), atol=1e-5)


def test_reload_gives_identical_logits_and_the_config_round_trips(tmp_path):
    lm = _model("qwen3-norm-head-dim", tie_word_embeddings=False)
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], "int32")
    lm.save(tmp_path / "lm.keras")
    reloaded = keras.saving.load_model(tmp_path / "lm.keras")
    assert isinstance(reloaded, LlamaCausalLM)
    np.testing.assert_array_equal(_np(reloaded({"token_ids": ids})), _np(lm({"token_ids": ids})))


TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n"


def test_text_generation_past_the_context_slides_and_sampling_is_seeded():
    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    lm = zoo.build("llama-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=8,
                   initializer_range=1.0, tokenizer=tokenizer)
    ids = tokenizer("ROMEO:").tolist()
    while len(ids) < 30:  # nanoGPT's sample.py: a full pass over the last 8 tokens, no cache
        window = np.array([ids[-8:]], "int32")
        ids.append(int(np.argmax(_np(lm({"token_ids": window}))[0, -1])))
    assert zoo.generate(lm, "ROMEO:", max_length=30) == tokenizer.detokenize(ids)
    options = dict(max_length=40, sampler="top_k", top_k=10, seed=7)
    assert zoo.generate(lm, "ROMEO:", **options) == zoo.generate(lm, "ROMEO:", **options)
    backbone = LlamaBackbone.from_config(lm.backbone.get_config())  # a bare backbone generates with its head
    backbone.set_weights(lm.backbone.get_weights())
    backbone.tokenizer = tokenizer
    assert zoo.generate(backbone, "ROMEO:", max_length=30) == tokenizer.detokenize(ids)


def test_beam_search_with_one_beam_is_greedy_decoding():
    lm = _model("mqa-untied")
    greedy = zoo.generate(lm, [[1, 2, 3]], 5).sequences[0]
    beams = zoo.generation.beam_search(lm, [[1, 2, 3]], max_new_tokens=5, num_beams=1).sequences[0]
    assert list(beams[0]) == list(greedy) and len(greedy) == 5


# --- Parameter counts --------------------------------------------------------------------------------


def llama_parameters(vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, num_key_value_heads=None,
                     head_dim=None, tie_word_embeddings=True, attention_bias=False, query_key_norm=False, **_):
    """The count from the architecture: bias-free projections (but Q, K, V with `attention_bias`),
    two RMSNorms per block and a final one, SwiGLU's three matrices, the head when untied."""
    h, d, f = num_heads, hidden_dim, intermediate_dim
    g, k = num_key_value_heads or h, head_dim or hidden_dim // num_heads
    attention = d * (h + 2 * g) * k + h * k * d + (attention_bias and (h + 2 * g) * k) + (query_key_norm and 2 * k)
    block = attention + 3 * d * f + 2 * d
    embeddings = vocabulary_size * d * (1 if tie_word_embeddings else 2)
    return embeddings + num_layers * block + d


# The counts of the published checkpoints (their model cards and `num_parameters()`).
PUBLISHED = {
    "smollm2-135m": 134_515_008,
    "qwen2.5-0.5b": 494_032_768,
    "qwen3-0.6b": 596_049_920,
    "llama-3.2-1b": 1_235_814_400,
    "tinyllama-1.1b": 1_100_048_384,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_shapes_give_the_published_parameter_counts(name):
    config = zoo.preset_info(name)["config"]
    assert llama_parameters(**config) == PUBLISHED[name]
    # The formula is the built model's count: the same shapes at one layer and a small vocabulary.
    small = {**config, "num_layers": 1, "vocabulary_size": 64}
    assert zoo.describe(name, num_layers=1, vocabulary_size=64)["parameters"] == llama_parameters(**small)


def test_the_smallest_published_preset_has_its_published_count():
    assert zoo.describe("smollm2-135m")["parameters"] == PUBLISHED["smollm2-135m"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_formula_counts_every_variant(variant):
    config = {**SMALL, **VARIANTS[variant]}
    assert LlamaBackbone(**config).count_params() == llama_parameters(**config)


def test_llama_baby_is_gpt_baby_sized():
    llama, gpt = zoo.build("llama-baby").count_params(), zoo.build("gpt-baby").count_params()
    assert llama == 800_000 and abs(llama - gpt) / gpt < 0.02
