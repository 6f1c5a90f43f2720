"""One process of `test_multi_worker`; prints one line, RESULT {json}.

    TF_CONFIG=... python -m tests.recipes.multi_worker_script fit multi-worker
    python -m tests.recipes.multi_worker_script fit default
    TF_CONFIG=... python -m tests.recipes.multi_worker_script demo OUTPUT

`fit`: gpt-nano trains STEPS SGD steps under the strategy on fixed global
batches of B rows, fed whole to every worker (tf.distribute shards them);
the result holds the loss of each step, the weights before and after, and
which rows of each global batch this worker was given.

`demo`: the demo recipe's `main` on this worker, writing to
`worker_output(OUTPUT)`: OUTPUT on the chief, a private folder elsewhere.
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from zoo.training.distribution import distribution_scope, is_chief, start_distribution, worker_output  # noqa: E402

B, T, V, STEPS = 8, 16, 50, 3  # global batch B: 4 rows per worker on two workers


def global_batches():
    """(x, y) of STEPS * B rows of random tokens; every row is full (no
    padding), so the mean loss of two half-batches is the whole batch's."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, V, (STEPS * B, T + 1)).astype("int32")
    return {"token_ids": tokens[:, :-1], "padding_mask": np.ones((STEPS * B, T), "int32")}, tokens[:, 1:]


def dataset(x, y):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y)).batch(B)


class StepLosses(keras.callbacks.Callback):
    """The loss of each step (Keras logs the running mean over the epoch so
    far: step `batch` of an epoch adds (batch + 1) mean - batch mean')."""

    def on_train_begin(self, logs=None):
        self.steps = []
        self.previous_sum = 0.0

    def on_train_batch_end(self, batch, logs=None):
        total = float(logs["loss"]) * (batch + 1)
        self.steps.append(total - (self.previous_sum if batch else 0.0))
        self.previous_sum = total

    def losses(self):
        return list(self.steps)


def rows_seen(strategy, x, y):
    """The rows of each global batch that this worker's replicas get, by the
    same `experimental_distribute_dataset` that Keras' `fit` uses."""
    seen = []
    for local_x, _ in strategy.experimental_distribute_dataset(dataset(x, y)):
        rows = np.concatenate([np.asarray(t) for t in strategy.experimental_local_results(local_x["token_ids"])])
        seen.append([int(np.flatnonzero((x["token_ids"] == row).all(1))[0]) for row in rows])
    return seen


def fit(strategy_name):
    import zoo

    start_distribution(strategy_name)  # before the first TensorFlow op
    keras.utils.set_random_seed(0)
    with distribution_scope(strategy_name):
        model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=V, dropout=0.0)
        model.compile(
            keras.optimizers.SGD(1.0),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
    before = [np.asarray(w, "float64") for w in model.get_weights()]
    x, y = global_batches()
    steps = StepLosses()
    model.fit(dataset(x, y), epochs=1, callbacks=[steps], verbose=0, shuffle=False)
    after = [np.asarray(w, "float64") for w in model.get_weights()]
    digest = hashlib.sha256(b"".join(w.astype("float32").tobytes() for w in after)).hexdigest()
    strategy = model.distribute_strategy
    return dict(
        replicas=strategy.num_replicas_in_sync,
        chief=is_chief(),
        losses=steps.losses(),
        digest=digest,
        before=[w.ravel().tolist() for w in before],
        after=[w.ravel().tolist() for w in after],
        rows=rows_seen(strategy, x, y),
    )


def demo(output):
    from recipes import demo

    start_distribution("multi-worker")  # the demo makes its tf.data pipelines first
    folder = worker_output(output, "multi-worker")
    accuracy = demo.main(["--strategy", "multi-worker", "--num-pairs", "400", "--epochs", "1", "--batch-size", "32",
                          "--jit-compile", "false", "--output", str(output), "--num-samples", "0"])
    return dict(chief=is_chief(), folder=str(folder), accuracy=accuracy)


if __name__ == "__main__":
    result = fit(sys.argv[2]) if sys.argv[1] == "fit" else demo(sys.argv[2])
    print("RESULT " + json.dumps(result), flush=True)
