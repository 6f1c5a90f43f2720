"""The first `fit` of a new model: the zoo's `fit` against `keras.Model.fit`.

    python benchmarks/training/first_fit.py --repeats 3

On TensorFlow without a distribution strategy, Keras makes the optimizer's
variables inside the first trace of the training step, and a
`tf.function` that creates variables while it traces is traced twice. The
zoo's `fit` makes them first. Each row trains a new model of a preset for
one short epoch (`compile("adamw", ...)` as a user would, with and without
`metrics=["accuracy"]`) in a fresh process, so that no compilation of an
earlier row is reused, alternating the two ways over the repetitions so
that a noisy machine slows both alike; it prints the median seconds of
that first `fit` (tracing, XLA compilation and the steps) and how many
times the training step was traced.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = ("transformer-tiny", "gpt-nano", "bert-tiny")
BATCH, STEPS, LENGTH, VOCABULARY = 16, 8, 24, 100


def _inputs(preset, np):
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, VOCABULARY, (BATCH * STEPS, LENGTH + 1)).astype("int32")
    ones = np.ones((BATCH * STEPS, LENGTH), "int32")
    if preset.startswith("transformer"):
        x = {"encoder_token_ids": tokens[:, 1:], "encoder_padding_mask": ones,
             "decoder_token_ids": tokens[:, :-1], "decoder_padding_mask": ones}
        return "seq2seq", x, tokens[:, 1:]
    if preset.startswith("bert"):
        x = {"token_ids": tokens[:, :-1], "segment_ids": 0 * ones, "padding_mask": ones}
        return "classifier", x, tokens[:, 0] % 2
    return "causal_lm", {"token_ids": tokens[:, :-1], "padding_mask": ones}, tokens[:, 1:]


def child(preset, way, metrics):
    """One first `fit` in this process: prints {"seconds", "traces"}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["KERAS_BACKEND"] = "tensorflow"
    sys.path.insert(0, ROOT)
    import keras
    import numpy as np

    import zoo

    task, x, y = _inputs(preset, np)
    keras.utils.set_random_seed(0)
    options = {"seq2seq": {}, "classifier": dict(task="classifier", num_classes=2)}.get(task, dict(task=task))
    model = zoo.build(preset, vocabulary_size=VOCABULARY, **options)
    model.compile("adamw", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"] if metrics else None)
    traces = []
    train_step = model.train_step
    model.train_step = lambda *args: traces.append(1) or train_step(*args)  # runs once per trace
    fit = model.fit if way == "zoo" else lambda *a, **k: keras.Model.fit(model, *a, **k)
    start = time.perf_counter()
    fit(x, y, epochs=1, batch_size=BATCH, verbose=0)
    print(json.dumps({"seconds": time.perf_counter() - start, "traces": len(traces)}))


def run(preset, way, metrics):
    command = [sys.executable, os.path.abspath(__file__), "--child", preset, way, str(int(metrics))]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        preset, way, metrics = args.child
        return child(preset, way, metrics == "1")
    print("| preset | metrics | zoo `fit` s | `keras.Model.fit` s | zoo / Keras | traces (zoo, Keras) |")
    print("|---|---|---|---|---|---|")
    for preset in args.presets:
        for metrics in (False, True):
            rows = {"zoo": [], "keras": []}
            for repeat in range(args.repeats):
                for way in ("zoo", "keras") if repeat % 2 == 0 else ("keras", "zoo"):
                    rows[way].append(run(preset, way, metrics))
            seconds = {way: statistics.median(r["seconds"] for r in rows[way]) for way in rows}
            print(f"| {preset} | {'accuracy' if metrics else 'none'} | {seconds['zoo']:.1f} | "
                  f"{seconds['keras']:.1f} | {seconds['zoo'] / seconds['keras']:.2f} | "
                  f"{rows['zoo'][0]['traces']}, {rows['keras'][0]['traces']} |", flush=True)


if __name__ == "__main__":
    main()
