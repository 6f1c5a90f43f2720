"""`MaskedSparseCrossentropy` and `MaskedAccuracy` against float64 NumPy
references: label smoothing, padding ignored, the mean over the real
labels of the whole batch; also through `fit`/`evaluate`, where the logits
carry a Keras mask."""

import keras
import numpy as np
import pytest

from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy

B, T, V = 4, 7, 11


def log_softmax(logits):
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def reference_loss(labels, logits, pad_id=0, smoothing=0.0):
    """The mean over non-`pad_id` labels of the cross-entropy against
    (1 - e) one_hot(label) + e / V (Szegedy et al.)."""
    log_p = log_softmax(logits)
    one_hot = np.eye(logits.shape[-1])[labels]
    target = (1.0 - smoothing) * one_hot + smoothing / logits.shape[-1]
    per_token = -(target * log_p).sum(-1)
    real = labels != pad_id
    return per_token[real].sum() / max(real.sum(), 1)


def reference_accuracy(batches, pad_id=0):
    correct = total = 0
    for labels, logits in batches:
        real = labels != pad_id
        correct += ((logits.argmax(-1) == labels) & real).sum()
        total += real.sum()
    return correct / total


def padded_labels(rng, lengths, pad_id=0):
    labels = rng.integers(1, V, (len(lengths), T))
    labels = np.where(labels == pad_id, (pad_id + 1) % V, labels)
    for row, n in enumerate(lengths):
        labels[row, n:] = pad_id
    return labels.astype("int32")


def _np(x):
    return float(keras.ops.convert_to_numpy(x))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("pad_id", [0, 3])
def test_masked_crossentropy_matches_the_reference(smoothing, pad_id):
    rng = np.random.default_rng(int(smoothing * 10) + pad_id)
    labels = padded_labels(rng, [7, 3, 1, 5], pad_id)
    logits = (3.0 * rng.normal(size=(B, T, V))).astype("float32")
    loss = MaskedSparseCrossentropy(pad_id=pad_id, label_smoothing=smoothing)
    expected = reference_loss(labels, logits, pad_id, smoothing)
    assert _np(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    # Only real labels count: what sits at padded positions changes nothing.
    changed = logits.copy()
    changed[labels == pad_id] = 50.0 * rng.normal(size=changed[labels == pad_id].shape)
    assert _np(loss(labels, changed)) == pytest.approx(expected, rel=1e-5)
    # The mean over tokens, not over rows: the one-token row weighs 1/16.
    row_means = np.mean([reference_loss(labels[i : i + 1], logits[i : i + 1], pad_id, smoothing) for i in range(B)])
    assert abs(expected - row_means) > 1e-3


def test_smoothing_matches_keras_on_unpadded_labels():
    rng = np.random.default_rng(7)
    labels = rng.integers(1, V, (B, T)).astype("int32")
    logits = rng.normal(size=(B, T, V)).astype("float32")
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    ours = MaskedSparseCrossentropy(label_smoothing=0.1)
    assert _np(ours(labels, logits)) == pytest.approx(_np(keras_loss(np.eye(V)[labels], logits)), rel=1e-5)


def test_an_all_padded_batch_gives_zero_not_nan():
    labels = np.zeros((2, T), "int32")
    logits = np.random.default_rng(0).normal(size=(2, T, V)).astype("float32")
    assert _np(MaskedSparseCrossentropy(label_smoothing=0.1)(labels, logits)) == 0.0


def test_masked_accuracy_is_the_share_of_real_tokens_right_over_all_batches():
    rng = np.random.default_rng(1)
    batches = []
    metric = MaskedAccuracy()
    for lengths in ([7, 7, 2, 1], [1, 1, 1, 1], [3, 6, 5, 4]):
        labels = padded_labels(rng, lengths)
        logits = rng.normal(size=(B, T, V)).astype("float32")
        # Make about half the real tokens right, and every padded one "right".
        right = rng.random((B, T)) < 0.5
        logits[right, labels[right]] += 100.0
        batches.append((labels, logits))
        metric.update_state(labels, logits)
    expected = reference_accuracy(batches)
    assert _np(metric.result()) == pytest.approx(expected, rel=1e-6)
    assert 0.2 < expected < 0.8
    metric.reset_state()
    metric.update_state(*batches[1])
    assert _np(metric.result()) == pytest.approx(reference_accuracy(batches[1:2]), rel=1e-6)


def _token_model():
    """logits = a table row per input token; the Embedding's `mask_zero`
    gives the logits a Keras mask, as the zoo's decoders do."""
    inputs = keras.Input((T,), dtype="int32")
    logits = keras.layers.Embedding(V, V, mask_zero=True, name="table")(inputs)
    return keras.Model(inputs, logits)


def test_fit_and_evaluate_report_the_masked_mean_with_a_keras_mask():
    rng = np.random.default_rng(2)
    labels = padded_labels(rng, [7, 2, 4, 1, 6, 3, 5, 7])
    tokens = np.where(labels > 0, rng.integers(1, V, labels.shape), 0).astype("int32")
    model = _token_model()
    table = rng.normal(size=(V, V)).astype("float32")
    model.get_layer("table").set_weights([table])
    model.compile(keras.optimizers.SGD(1.0), MaskedSparseCrossentropy(label_smoothing=0.1),
                  metrics=[MaskedAccuracy()], jit_compile=False)
    result = model.evaluate(tokens, labels, batch_size=8, verbose=0, return_dict=True)
    logits = table[tokens]
    assert result["loss"] == pytest.approx(reference_loss(labels, logits, smoothing=0.1), rel=1e-5)
    assert result["accuracy"] == pytest.approx(reference_accuracy([(labels, logits)]), rel=1e-6)
    # One SGD step of rate 1 moves the table by minus the gradient of the
    # masked mean: d/dlogits = (softmax - target) / number of real labels.
    model.train_on_batch(tokens, labels)
    log_p = log_softmax(logits)
    target = 0.9 * np.eye(V)[labels] + 0.1 / V
    grad_logits = (np.exp(log_p) - target) * (labels > 0)[..., None] / (labels > 0).sum()
    grad_table = np.zeros((V, V))
    np.add.at(grad_table, tokens, grad_logits)
    np.testing.assert_allclose(model.get_layer("table").get_weights()[0], table - grad_table, atol=1e-6)
