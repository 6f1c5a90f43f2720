"""`--strategy mirrored` on two logical CPU devices gives the loss and the
update of one device on the same batch, and a recipe runs under it.

Logical devices must be configured before TensorFlow initialises, so the
check runs in a fresh interpreter.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

TWO_CPUS = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    """
)

# One process per strategy object: two MirroredStrategy instances in one
# process may reuse each other's collective instance keys.
SAME_LOSS = TWO_CPUS + textwrap.dedent(
    """
    import keras
    import numpy as np
    import zoo
    from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy
    from zoo.training import distribution_scope

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    B, T, V = 8, 6, 40
    # Every row has 5 real tokens: each replica's half holds as many labels,
    # so the mean of the two replicas' means is the mean over the batch.
    x = {
        "encoder_token_ids": rng.integers(4, V, (B, T)).astype("int32"),
        "encoder_padding_mask": (np.arange(T) < 5)[None].repeat(B, 0).astype("int32"),
        "decoder_token_ids": rng.integers(4, V, (B, T)).astype("int32"),
        "decoder_padding_mask": (np.arange(T) < 5)[None].repeat(B, 0).astype("int32"),
    }
    x["encoder_token_ids"] *= x["encoder_padding_mask"]
    x["decoder_token_ids"] *= x["decoder_padding_mask"]
    y = rng.integers(4, V, (B, T)).astype("int32") * x["decoder_padding_mask"]
    weights = zoo.build("transformer-tiny", vocabulary_size=V, dropout=0.0).get_weights()

    def run(strategy):
        with distribution_scope(strategy):
            model = zoo.build("transformer-tiny", vocabulary_size=V, dropout=0.0)
            model.set_weights(weights)
            model.compile(keras.optimizers.SGD(0.5), MaskedSparseCrossentropy(label_smoothing=0.1),
                          metrics=[MaskedAccuracy()], jit_compile=False)
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
        loss = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)["loss"]
        trained = model.train_on_batch(x, y, return_dict=True)["loss"]
        after = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)["loss"]
        return dict(replicas=replicas, loss=float(loss), trained=float(trained), after=float(after),
                    weights=[w.tolist() for w in model.get_weights()[:3]])

    print("RESULT " + json.dumps(dict(one=run("default"), two=run("mirrored"),
                                      devices=len(tf.config.list_logical_devices("CPU")))))
    """
)

RECIPE = TWO_CPUS + textwrap.dedent(
    """
    import keras
    from recipes import demo

    # What `fit` ran on: its model's strategy, and the devices that ran a
    # train step (each replica's step runs on its own device).
    seen = dict(replicas=[], devices=set())
    fit = keras.Model.fit

    def spied_fit(self, *args, **kwargs):
        seen["replicas"].append(self.distribute_strategy.num_replicas_in_sync)
        train_step = self.train_step

        def step(data):
            seen["devices"].add(tf.constant(0.0).device)
            return train_step(data)

        self.train_step = step
        return fit(self, *args, **kwargs)

    keras.Model.fit = spied_fit
    accuracy = demo.main(["--strategy", "mirrored", "--num-pairs", "400", "--epochs", "1", "--batch-size", "32",
                          "--jit-compile", "false", "--output", sys.argv[1], "--num-samples", "0"])
    print("RESULT " + json.dumps(dict(accuracy=accuracy, replicas=seen["replicas"], devices=sorted(seen["devices"]))))
    """
)


def result_of(script, *args):
    result = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_mirrored_on_two_cpus_matches_one_device():
    out = result_of(SAME_LOSS)
    one, two = out["one"], out["two"]
    assert out["devices"] == 2
    assert one["replicas"] == 1 and two["replicas"] == 2
    assert abs(one["loss"] - two["loss"]) < 1e-5
    assert abs(one["trained"] - two["trained"]) < 1e-5
    # The same update: gradients summed over replicas of per-replica means / 2.
    assert abs(one["after"] - two["after"]) < 1e-4
    for a, b in zip(one["weights"], two["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-5)


def test_a_recipe_trains_under_mirrored_on_two_cpus(tmp_path):
    out = result_of(RECIPE, str(tmp_path / "demo"))
    assert out["replicas"] == [2], out  # one fit, on two replicas
    assert [d.split("/")[-1] for d in out["devices"]] == ["device:CPU:0", "device:CPU:1"], out
    assert 0.0 <= out["accuracy"] <= 1.0
    assert (tmp_path / "demo" / "model.keras").is_file()
