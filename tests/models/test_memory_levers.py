"""The fine-tuning memory levers, each against an invariant: LoRA on a
chosen subset of projections trains exactly their adapters (a subset of
the fused q/k/v kernel moves only its columns), QLoRA trains float adapters
on a frozen quantized base, gradient accumulation over 2 batches of B is
one step on 2B, rematerialized blocks give the same loss and update, and a
LoRA model exported to Hugging Face is merged and reloads with its logits."""

import keras
import numpy as np
import pytest

import zoo
from zoo.training import adamw

V, T = 96, 12


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _batch(batch=4, seed=0):
    rng = np.random.default_rng(seed)
    x = {"token_ids": rng.integers(0, V, (batch, T)).astype("int32"), "padding_mask": np.ones((batch, T), "int32")}
    return x, rng.integers(0, V, (batch, T)).astype("int32")


def _llama(**overrides):
    keras.utils.set_random_seed(0)
    return zoo.build("llama-nano", task="causal_lm", vocabulary_size=V, max_sequence_length=32, **overrides)


def _compile(model, learning_rate=1e-2, **options):  # the recipes' optimizer
    model.compile(adamw(learning_rate, weight_decay=0.0, model=model, **options),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _columns(model):
    attention = model.backbone.get_layer("block_0").self_attention
    q = attention.num_heads * attention.head_dim
    k = attention.num_key_value_heads * attention.head_dim
    return {"query": slice(0, q), "key": slice(q, q + k), "value": slice(q + k, q + 2 * k)}


# Which Dense layers of a block get adapters for each choice ("output": the attention's and the feed-forward's).
@pytest.mark.parametrize("targets, layers", [
    (("query",), {"self_attention/query_key_value"}),
    (("key", "value"), {"self_attention/query_key_value"}),
    (("query", "key", "value"), {"self_attention/query_key_value"}),
    (("output",), {"self_attention/output", "feed_forward/output"}),
    (("gate", "intermediate"), {"feed_forward/gate", "feed_forward/intermediate"}),
    (("query_key_value", "output", "gate", "intermediate"),  # the recipes' default: every projection
     {"self_attention/query_key_value", "self_attention/output", "feed_forward/gate", "feed_forward/intermediate",
      "feed_forward/output"}),
])
def test_lora_targets_train_exactly_the_chosen_adapters(targets, layers):
    model = _llama()
    model.enable_lora(4, targets)
    expected = {f"{block}/{layer}/{m}" for block in ("block_0", "block_1") for layer in layers
                for m in ("lora_kernel_a", "lora_kernel_b")}
    assert {w.path.split("backbone/")[-1] for w in model.trainable_weights} == expected
    assert all(w.dtype == "float32" for w in model.trainable_weights)

    fused = model.backbone.get_layer("block_0").self_attention.query_key_value_dense
    before = _np(fused.kernel).copy()
    x, y = _batch()
    _compile(model).fit(x, y, epochs=3, batch_size=4, verbose=0)
    moved = np.abs(_np(fused.kernel) - before).max(axis=0)  # per output column of [q | k | v]
    for name, columns in _columns(model).items():
        chosen = name in targets or "query_key_value" in targets
        assert (moved[columns].min() > 0) if chosen else (moved[columns].max() == 0), name


def test_lora_on_a_subset_of_q_k_v_reloads_with_the_same_outputs_and_adapters(tmp_path):
    model = _llama()
    model.enable_lora(4, ("query", "value"))
    x, y = _batch()
    _compile(model).fit(x, y, epochs=2, batch_size=4, verbose=0)
    zoo.save(model, tmp_path / "lora.keras")
    reloaded = zoo.load(tmp_path / "lora.keras")
    np.testing.assert_allclose(_np(reloaded.predict(x, verbose=0)), _np(model.predict(x, verbose=0)), atol=1e-5)
    assert {w.path for w in reloaded.trainable_weights} == {w.path for w in model.trainable_weights}
    # The reloaded adapters are held to the same columns (Keras reloads a LoRA layer merged, its A and B at zero).
    fused = reloaded.backbone.get_layer("block_0").self_attention.query_key_value_dense
    b = fused.lora_kernel_b
    columns = _columns(reloaded)
    held = _np(b.constraint(keras.ops.ones(b.shape)))
    assert held[:, columns["key"]].max() == 0 and held[:, columns["query"]].min() == held[:, columns["value"]].min() == 1


def test_an_unknown_lora_target_is_refused():
    with pytest.raises(ValueError, match="LoRA target 'up': expected names from query, key, value"):
        _llama().enable_lora(4, ("query", "up"))


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_qlora_trains_float_adapters_on_a_frozen_quantized_base_and_reloads(mode, tmp_path):
    model = _llama()
    model.quantize(mode)
    model.enable_lora(4, ("query_key_value", "output", "gate", "intermediate"))
    kernels = [layer._kernel for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dense)]
    assert kernels and all(k.dtype == "int8" and not k.trainable for k in kernels)  # int4: two a byte
    assert model.trainable_weights and all("lora" in w.path and w.dtype == "float32" for w in model.trainable_weights)
    frozen = {w.path: _np(w).copy() for w in model.weights if "lora" not in w.path}
    x, y = _batch(8)
    base = _np(model.predict(x, verbose=0))
    _compile(model, 3e-2)
    start = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=8, batch_size=8, verbose=0)
    assert model.evaluate(x, y, verbose=0) < start - 0.1
    for w in model.weights:
        if w.path in frozen:
            np.testing.assert_array_equal(frozen[w.path], _np(w), err_msg=w.path)
    zoo.save(model, tmp_path / "qlora.keras")
    reloaded = zoo.load(tmp_path / "qlora.keras")
    assert reloaded.get_config()["quantization"] == model.get_config()["quantization"]
    assert {w.path for w in reloaded.trainable_weights} == {w.path for w in model.trainable_weights}
    # Keras saves a quantized LoRA layer with its adapters merged and the kernel quantized again: the reloaded
    # model is the trained one up to that rounding, much nearer to it than the base it started from.
    trained, again = _np(model.predict(x, verbose=0)), _np(reloaded.predict(x, verbose=0))
    assert np.abs(again - trained).mean() < 0.5 * np.abs(base - trained).mean()


def test_qlora_under_mixed_bfloat16_trains_float32_adapters():
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = _llama()
        model.quantize("int8")
        model.enable_lora(4, ("query", "value"))
        x, y = _batch(8)
        _compile(model, 3e-2)
        start = model.evaluate(x, y, verbose=0)
        model.fit(x, y, epochs=8, batch_size=8, verbose=0)
        assert model.evaluate(x, y, verbose=0) < start - 0.1
        assert model.trainable_weights and all(w.dtype == "float32" for w in model.trainable_weights)
    finally:
        keras.config.set_dtype_policy("float32")


def test_two_accumulated_batches_of_b_are_one_step_of_2b():
    x, y = _batch(8)
    # An epsilon that keeps Adam's first step g / (|g| + eps) smooth where |g| is tiny (else it is a sign).
    whole = _compile(_llama(dropout=0.0), epsilon=1e-3)
    halves = _compile(_llama(dropout=0.0), epsilon=1e-3, gradient_accumulation_steps=2)
    np.testing.assert_array_equal(_np(whole.weights[0]), _np(halves.weights[0]))
    whole.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    halves.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    moved = 0.0
    for a, b, w in zip(whole.weights, halves.weights, _llama(dropout=0.0).weights):
        np.testing.assert_allclose(_np(b), _np(a), atol=1e-5, err_msg=a.path)  # a thousandth of the step
        moved = max(moved, float(np.abs(_np(a) - _np(w)).max()))
    assert moved > 1e-3  # both took the one step
    assert int(halves.optimizer.iterations) == 1


def test_rematerialized_blocks_give_the_same_loss_and_update(monkeypatch):
    remat_calls = []
    remat = keras.remat
    monkeypatch.setattr(keras, "remat", lambda f: remat_calls.append(f) or remat(f))
    x, y = _batch()
    plain = _compile(_llama(dropout=0.0))
    with keras.RematScope(mode="list_of_layers", layer_names=["block_0", "block_1"]):
        checkpointed = _compile(_llama(dropout=0.0))
    losses = [m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
              for m in (plain, checkpointed)]
    assert len(remat_calls) >= 2  # each block was rematerialized
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    for a, b in zip(plain.weights, checkpointed.weights):
        np.testing.assert_allclose(_np(b), _np(a), atol=1e-5, err_msg=a.path)


def test_a_lora_model_exports_merged_weights_that_reload_with_its_logits(tmp_path):
    safetensors = pytest.importorskip("safetensors.numpy")
    from tests.checkpoints.llama_checkpoints import hf_folder

    model = zoo.from_pretrained(hf_folder(tmp_path / "qwen2", "qwen2"), task="causal_lm")
    model.enable_lora(4, ("query", "value", "output", "gate"))
    x, y = _batch()
    x["token_ids"] %= model.backbone.vocabulary_size
    y %= model.backbone.vocabulary_size
    _compile(model).fit(x, y, epochs=2, batch_size=4, verbose=0)  # the adapters leave zero
    assert any(np.abs(_np(w)).max() > 0 for w in model.weights if "lora_kernel_b" in w.path)
    zoo.export(model, tmp_path / "merged", format="huggingface")
    tensors = safetensors.load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert not [name for name in tensors if "lora" in name]
    exported = zoo.from_pretrained(tmp_path / "merged", task="causal_lm")
    assert not any("lora" in w.path for w in exported.weights)
    np.testing.assert_allclose(_np(exported.predict(x, verbose=0)), _np(model.predict(x, verbose=0)),
                               rtol=1e-5, atol=1e-5)
