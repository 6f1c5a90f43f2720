"""The masked loss and accuracy under `tf.distribute.MirroredStrategy` on
two logical CPU devices, with padding spread unevenly over the replicas:
the first half of the batch (replica 0) holds 12 real labels, the second
half (replica 1) only 2.

A token-level loss should weigh every real label of the global batch
alike: the update of one step is minus the gradient of the *global*
masked mean, not of the mean of the two replicas' means (which would give
each of replica 1's two labels six times the weight of one of replica
0's). The reference is float64 NumPy.

Logical devices must be configured before TensorFlow initialises, so the
run is a fresh interpreter.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
B, T, V, SMOOTHING = 4, 6, 9, 0.1
LENGTHS = [6, 6, 1, 1]  # real labels per row: 12 on replica 0, 2 on replica 1

SCRIPT = textwrap.dedent(
    f"""
    import json, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
    from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy

    B, T, V = {B}, {T}, {V}
    rng = np.random.default_rng(0)
    labels = rng.integers(1, V, (B, T)).astype("int32")
    for row, n in enumerate({LENGTHS}):
        labels[row, n:] = 0
    tokens = np.where(labels > 0, rng.integers(1, V, (B, T)), 0).astype("int32")
    table = rng.normal(size=(V, V)).astype("float32")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        # logits = one table row per token; mask_zero gives them a Keras mask.
        inputs = keras.Input((T,), dtype="int32")
        model = keras.Model(inputs, keras.layers.Embedding(V, V, mask_zero=True, name="table")(inputs))
        model.get_layer("table").set_weights([table])
        model.compile(keras.optimizers.SGD(1.0), MaskedSparseCrossentropy(label_smoothing={SMOOTHING}),
                      metrics=[MaskedAccuracy()], jit_compile=False)
    evaluated = model.evaluate(tokens, labels, batch_size=B, verbose=0, return_dict=True)
    history = model.fit(tokens, labels, batch_size=B, epochs=1, shuffle=False, verbose=0).history
    print("RESULT " + json.dumps(dict(
        replicas=strategy.num_replicas_in_sync, evaluated=evaluated,
        trained={{k: v[-1] for k, v in history.items()}},
        labels=labels.tolist(), tokens=tokens.tolist(), before=table.tolist(),
        after=model.get_layer("table").get_weights()[0].tolist(),
    )))
    """
)


@pytest.fixture(scope="module")
def run():
    env = dict(os.environ, KERAS_BACKEND="tensorflow")  # tf.distribute, whatever backend the suite runs on
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:  # not an AssertionError: a crash is no expected failure
        raise RuntimeError(result.stderr[-3000:])
    line = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    labels = np.array(out["labels"])
    per_replica = [int((labels[:2] > 0).sum()), int((labels[2:] > 0).sum())]
    if out["replicas"] != 2 or per_replica != [12, 2]:
        raise RuntimeError(f"expected 2 replicas with 12 and 2 real labels; got {out['replicas']}, {per_replica}")
    return out


def reference(out):
    """The global masked mean of the smoothed cross-entropy, its value and
    the table after one SGD step of rate 1 on it; and the mean of the two
    replicas' means, for the failure message."""
    labels, tokens = np.array(out["labels"]), np.array(out["tokens"])
    table = np.array(out["before"], "float64")
    logits = table[tokens]
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = (1 - SMOOTHING) * np.eye(V)[labels] + SMOOTHING / V
    per_token = -(target * log_p).sum(-1)
    real = labels > 0
    weight = real / real.sum()  # each real label of the batch alike
    grad_logits = (np.exp(log_p) - target) * weight[..., None]
    grad_table = np.zeros_like(table)
    np.add.at(grad_table, tokens, grad_logits)
    halves = [per_token[:2][real[:2]].mean(), per_token[2:][real[2:]].mean()]
    return dict(loss=(per_token * weight).sum(), after=table - grad_table, mean_of_replica_means=np.mean(halves),
                accuracy=((logits.argmax(-1) == labels) & real).sum() / real.sum())


def test_masked_accuracy_counts_the_real_labels_of_the_global_batch(run):
    expected = reference(run)["accuracy"]
    assert run["evaluated"]["accuracy"] == pytest.approx(expected, rel=1e-6)
    assert run["trained"]["accuracy"] == pytest.approx(expected, rel=1e-6)


def test_two_replicas_train_on_the_global_masked_mean(run):
    expected = reference(run)
    message = (f"reported {run['trained']['loss']:.6f}; global masked mean {expected['loss']:.6f}, "
               f"mean of the replica means {expected['mean_of_replica_means']:.6f}")
    assert run["trained"]["loss"] == pytest.approx(expected["loss"], rel=1e-5), message
    assert run["evaluated"]["loss"] == pytest.approx(expected["loss"], rel=1e-5), message
    np.testing.assert_allclose(np.array(run["after"]), expected["after"], atol=1e-5, err_msg=message)
