"""Fine-tuning through ordinary Keras, LoRA, and weights from keras-hub."""

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _task_data(batch=16):
    x = bert_inputs(batch=batch, seed=5)
    y = (x["token_ids"][:, 1] % 2).astype("int32")
    x["token_ids"][:, 1] = 10 + y
    return x, y


def _loss(model, x, y):
    return model.evaluate(x, y, verbose=0, batch_size=len(y))


def test_freeze_then_unfreeze_fine_tuning_lowers_the_loss():
    backbone = zoo.build("bert-tiny")
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in ("token_ids", "segment_ids", "padding_mask")}
    head = keras.layers.Dense(2, name="head")
    model = keras.Model(inputs, head(backbone(inputs)["pooled_output"]))
    x, y = _task_data()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    backbone.trainable = False
    frozen = [_np(w).copy() for w in backbone.weights]
    model.compile(keras.optimizers.Adam(1e-2), loss_fn)
    start = _loss(model, x, y)
    model.fit(x, y, epochs=10, batch_size=16, verbose=0)
    after_head = _loss(model, x, y)
    assert after_head < start
    for before, w in zip(frozen, backbone.weights):
        np.testing.assert_array_equal(before, _np(w))  # the frozen backbone did not move

    backbone.trainable = True
    model.compile(keras.optimizers.Adam(1e-3), loss_fn)  # recompile after unfreezing
    model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert _loss(model, x, y) < 0.8 * after_head


def test_lora_trains_only_the_low_rank_matrices():
    model = zoo.build("bert-tiny", task="classifier", num_classes=2)
    model.backbone.enable_lora(4)
    trainable = {w.path for w in model.backbone.trainable_weights}
    assert trainable and all("lora" in p for p in trainable), trainable
    frozen = {w.path: _np(w).copy() for w in model.backbone.weights if "lora" not in w.path}
    x, y = _task_data()
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = _loss(model, x, y)
    model.fit(x, y, epochs=30, batch_size=16, verbose=0)
    assert _loss(model, x, y) < 0.85 * start
    for w in model.backbone.weights:
        if w.path in frozen:
            np.testing.assert_array_equal(frozen[w.path], _np(w))
    assert any(np.abs(_np(w)).max() > 0 for w in model.backbone.weights if "lora_kernel_b" in w.path)


def test_a_lora_model_reloads_with_lora_and_the_same_outputs(tmp_path):
    model = zoo.build("bert-tiny", task="classifier", num_classes=2)
    model.backbone.enable_lora(4)
    x, y = _task_data()
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)  # the LoRA B matrices leave zero
    model.save(tmp_path / "lora.keras")
    reloaded = keras.saving.load_model(tmp_path / "lora.keras")
    np.testing.assert_allclose(_np(reloaded.predict(x, verbose=0)), _np(model.predict(x, verbose=0)), atol=1e-5)
    # Keras saves a LoRA Dense with the low-rank update merged into its kernel, so the
    # reloaded model starts a fresh update (B = 0) from the merged kernel: the same function,
    # and the same variables train.
    assert {w.path for w in reloaded.backbone.trainable_weights} == {w.path for w in model.backbone.trainable_weights}
    assert any("lora_kernel_b" in w.path for w in reloaded.backbone.weights)


def _randomize(model, seed):
    """Every weight random: a fresh backbone's zero biases, LayerNorm gamma 1
    and beta 0 and pooler would hide a swapped or missing mapping."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return model


def test_gpt2_backbone_from_keras_hub_gives_the_same_outputs():
    keras_hub = pytest.importorskip("keras_hub")
    from zoo.checkpoints import from_keras_hub

    hub = keras_hub.models.GPT2Backbone(
        vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64, max_sequence_length=32
    )
    _randomize(hub, seed=1)
    model = from_keras_hub(hub)
    assert model.count_params() == hub.count_params()
    x = gpt_inputs(length=12)
    theirs = _np(hub(x))
    assert np.abs(theirs).max() > 0.1
    np.testing.assert_allclose(_np(model(x)), theirs, rtol=1e-4, atol=1e-4)
    lm = zoo.models.GPTCausalLM(model)
    hub_logits = _np(hub.token_embedding(hub(x), reverse=True))
    np.testing.assert_allclose(_np(lm(x)), hub_logits, rtol=1e-4, atol=1e-4)


def test_bert_backbone_from_keras_hub_gives_the_same_outputs():
    keras_hub = pytest.importorskip("keras_hub")
    from zoo.checkpoints import from_keras_hub

    hub = keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64, max_sequence_length=32
    )
    _randomize(hub, seed=2)  # the pooler and the segment table included
    model = from_keras_hub(hub)
    assert model.count_params() == hub.count_params()
    x = bert_inputs(lengths=[8, 5])
    x["segment_ids"][:, 4:] = 1
    ours, theirs = model(x), hub(x)
    np.testing.assert_allclose(_np(ours["pooled_output"]), _np(theirs["pooled_output"]), rtol=1e-4, atol=1e-4)
    mask = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        _np(ours["sequence_output"])[mask], _np(theirs["sequence_output"])[mask], rtol=1e-4, atol=1e-4
    )


def test_from_keras_hub_rejects_other_models():
    from zoo.checkpoints import from_keras_hub

    with pytest.raises(ValueError, match="converts a keras-hub backbone of .*BartBackbone, T5Backbone, GPT2Backbone, .*BertBackbone; got Sequential"):
        from_keras_hub(keras.Sequential([keras.layers.Dense(2)]))
