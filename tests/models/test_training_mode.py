"""Training mode reaches every layer: dropout runs in `fit`'s train step and
nowhere else.

Keras passes `training` to a model only when its `call` names the argument;
a model whose `call` hid it trained with every dropout layer off while all
its other tests passed. So for every family and task model, on every
backend the suite runs on:

- in `fit` (learning rate 0, so only dropout can change the loss) two
  passes over the same batch give different losses, and neither equals
  `evaluate`'s; every `Dropout` layer with a rate above 0 is called with
  `training=True`, as many as the config implies;
- `evaluate`, `predict`, `__call__` without `training`,
  `attention_scores` and generation are deterministic and never call a
  `Dropout` layer in training mode;
- `model(x, training=True)` (and, on JAX, `stateless_call(...,
  training=True)`) drops.
"""

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs

DROPOUT = 0.5
BATCH, LENGTH = 4, 8


def _lm_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _gpt(task, preset="gpt-nano"):
    x = gpt_inputs(batch=BATCH, length=LENGTH, seed=1)
    model = zoo.build(preset, task=task, dropout=DROPOUT)
    n = model.num_layers if task is None else model.backbone.num_layers
    expected = 1 + 3 * n  # embeddings; per block: attention weights, two residuals
    if task is None:
        return model, x, np.zeros((BATCH, LENGTH, 32), "float32"), "mse", expected
    y = np.random.default_rng(2).integers(0, 100, (BATCH, LENGTH)).astype("int32")
    return model, x, y, _lm_loss(), expected


def _bert(task):
    x = bert_inputs(batch=BATCH, length=LENGTH, seed=1, lengths=[8, 6, 8, 5])
    model = zoo.build("bert-tiny", task=task, dropout=DROPOUT)
    backbone = model if task is None else model.backbone
    expected = 1 + 3 * backbone.num_layers
    rng = np.random.default_rng(2)
    if task is None:
        y = {"sequence_output": np.zeros((BATCH, LENGTH, 32), "float32"), "pooled_output": np.zeros((BATCH, 32), "float32")}
        return model, x, y, {"sequence_output": "mse", "pooled_output": "mse"}, expected
    if task == "masked_lm":
        x["mask_positions"] = np.array([[1, 3], [0, 2], [4, 5], [1, 2]], "int32")
        return model, x, rng.integers(0, 100, (BATCH, 2)).astype("int32"), _lm_loss(), expected
    if task == "classifier":  # plus the classifier's own dropout before its last layer
        return model, x, np.array([0, 1, 1, 0], "int32"), _lm_loss(), expected + 1
    return model, x, rng.normal(size=(BATCH, 32)).astype("float32"), "mse", expected


def _transformer(task):
    x = seq2seq_inputs(batch=BATCH, source_length=9, target_length=LENGTH, seed=1, source_lengths=[9, 7, 9, 4])
    model = zoo.build("transformer-tiny", task=task, dropout=DROPOUT)
    # two embeddings; per encoder block three, per decoder block five (self, cross, three residuals)
    expected = 2 + (3 + 5) * model.num_layers
    y = np.random.default_rng(2).integers(0, 1000, (BATCH, LENGTH)).astype("int32")
    return model, x, y, _lm_loss(), expected


def _t5(task):
    x = seq2seq_inputs(batch=BATCH, source_length=9, target_length=LENGTH, seed=1, source_lengths=[9, 7, 9, 4])
    model = zoo.build("t5-tiny", task=task, dropout=DROPOUT)
    # transformers' T5: each stack's embeddings and its output after the final norm; per encoder block
    # four (attention weights, two residuals, the feed-forward's inner activations), per decoder block six
    expected = 2 * 2 + (4 + 6) * model.num_layers
    y = np.random.default_rng(2).integers(0, 1000, (BATCH, LENGTH)).astype("int32")
    return model, x, y, _lm_loss(), expected


MODELS = {
    "gpt": lambda: _gpt(None),
    "gpt-causal_lm": lambda: _gpt("causal_lm"),
    "llama": lambda: _gpt(None, "llama-nano"),
    "llama-causal_lm": lambda: _gpt("causal_lm", "llama-nano"),
    "gemma-causal_lm": lambda: _gpt("causal_lm", "gemma3-nano"),
    "bert": lambda: _bert(None),
    "bert-masked_lm": lambda: _bert("masked_lm"),
    "bert-classifier": lambda: _bert("classifier"),
    "bert-sentence_encoder": lambda: _bert("sentence_encoder"),
    "transformer-seq2seq": lambda: _transformer("seq2seq"),
    "t5-seq2seq": lambda: _t5("seq2seq"),
}
GENERATORS = ("gpt", "gpt-causal_lm", "llama", "llama-causal_lm", "gemma-causal_lm", "transformer-seq2seq",
              "t5-seq2seq")


class DropoutCalls:
    """Every call of a `keras.layers.Dropout` layer: (layer, training)."""

    def __init__(self):
        self.calls = []

    def clear(self):
        self.calls.clear()

    def reached_in_training(self):
        return {id(layer) for layer, training in self.calls if training}

    def reached(self):
        return {id(layer) for layer, _ in self.calls}


@pytest.fixture
def dropout_calls(monkeypatch):
    """Records the Dropout calls of the models built after it (the patch is
    in place before their layers exist)."""
    spy, original = DropoutCalls(), keras.layers.Dropout.call

    def call(self, inputs, training=False):
        spy.calls.append((self, bool(training)))
        return original(self, inputs, training=training)

    monkeypatch.setattr(keras.layers.Dropout, "call", call)
    return spy


def _active_dropout_layers(model):
    return {id(layer) for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout) and layer.rate > 0}


def _numpy(outputs):
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in keras.tree.flatten(outputs)]


def _same(a, b):
    return all(np.array_equal(p, q) for p, q in zip(_numpy(a), _numpy(b)))


def _close(a, b):
    # float32 rounding of a compiled call against an eager one (about 1e-6 on values near zero);
    # dropout moves outputs by tenths.
    return all(np.allclose(p, q, rtol=1e-5, atol=1e-5) for p, q in zip(_numpy(a), _numpy(b)))


@pytest.mark.parametrize("name", MODELS)
def test_fit_runs_every_dropout_layer_and_evaluate_none(name, dropout_calls):
    model, x, y, loss, expected = MODELS[name]()
    active = _active_dropout_layers(model)
    assert len(active) == expected, "the model's Dropout layers no longer match its config"
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss=loss)
    weights = _numpy(model.weights)

    dropout_calls.clear()
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    missed = active - dropout_calls.reached_in_training()
    assert not missed, f"fit's train step ran {len(active) - len(missed)} of the {len(active)} dropout layers"
    first, second = history.history["loss"]

    dropout_calls.clear()
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)["loss"]
    assert dropout_calls.reached() and not dropout_calls.reached_in_training()
    assert model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)["loss"] == evaluated

    # At learning rate 0 the weights stay put: only dropout moves the loss.
    assert all(np.array_equal(a, b) for a, b in zip(weights, _numpy(model.weights)))
    assert not np.isclose(first, second, rtol=1e-6, atol=0), "two train steps on one batch gave one loss"
    assert not np.isclose(first, evaluated, rtol=1e-6, atol=0), "the train step's loss is evaluate's"


@pytest.mark.parametrize("name", MODELS)
def test_training_flag_of_a_call_reaches_the_layers(name, dropout_calls):
    model, x, _, _, _ = MODELS[name]()
    inference = model(x, training=False)
    assert _same(model(x), inference)
    first, second = model(x, training=True), model(x, training=True)
    assert not _close(first, inference), "model(x, training=True) did not drop"
    assert not _close(first, second)

    dropout_calls.clear()
    predicted = model.predict(x, batch_size=BATCH, verbose=0)
    assert dropout_calls.reached() and not dropout_calls.reached_in_training()
    assert _close(predicted, inference)
    assert _same(model.predict(x, batch_size=BATCH, verbose=0), predicted)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="stateless_call is how fit calls a model on JAX")
@pytest.mark.parametrize("name", MODELS)
def test_stateless_call_drops_in_training_only(name):
    model, x, _, _, _ = MODELS[name]()
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    inference, _ = model.stateless_call(trainable, non_trainable, x, training=False)
    training, _ = model.stateless_call(trainable, non_trainable, x, training=True)
    assert _close(inference, model(x, training=False))
    assert not _close(training, inference)


@pytest.mark.parametrize("name", ["gpt", "gpt-causal_lm", "bert", "transformer-seq2seq"])
def test_attention_scores_run_in_inference_mode(name, dropout_calls):
    model, x, _, _, _ = MODELS[name]()
    dropout_calls.clear()
    scores = model.attention_scores(x)
    assert not dropout_calls.reached_in_training()
    assert _same(model.attention_scores(x), scores)


@pytest.mark.parametrize("name", GENERATORS)
def test_generation_runs_in_inference_mode(name, dropout_calls):
    model, x, _, _, _ = MODELS[name]()
    if name.endswith("seq2seq"):
        arguments = dict(prompt=[[1]] * 2, source=[[5, 6, 7, 8], [9, 10]])
    else:
        arguments = dict(prompt=[[5, 6, 7], [8, 9]])
    dropout_calls.clear()
    first = zoo.generate(model, max_new_tokens=6, **arguments)
    assert not dropout_calls.reached_in_training()
    second = zoo.generate(model, max_new_tokens=6, **arguments)
    assert [list(s) for s in first.sequences] == [list(s) for s in second.sequences]


def test_t5s_encoder_output_drops_after_its_final_norm():
    """The final RMSNorm's outputs are never exactly 0; T5's dropout after it zeroes about P_drop of them."""
    model, x, _, _, _ = _t5("seq2seq")
    ids, mask = x["encoder_token_ids"], x["encoder_padding_mask"]
    inference = np.asarray(keras.ops.convert_to_numpy(model.encode(ids, mask, training=False)))
    dropped = np.asarray(keras.ops.convert_to_numpy(model.encode(ids, mask, training=True)))
    assert not (inference == 0).any()
    assert 0.4 < (dropped == 0).mean() < 0.6
