"""File sizes and the latency of one forward pass: Keras against each runtime.

    KERAS_BACKEND=tensorflow python benchmarks/deployment/export.py          # the table
    python benchmarks/deployment/export.py --models gpt --repeats 5          # a quick look

For each model (GPT: `gpt-baby` with GPT-2's 50,257-token vocabulary;
BERT: the `bert-small` classifier; the encoder-decoder: `transformer-small`
with a 10,000-token vocabulary; random weights), `zoo.export` writes a
SavedModel, an ONNX file and a LiteRT file, and one forward pass on a batch
of `--batch` x `--length` token ids is timed in Keras (`model(x)` under
`tf.function(jit_compile=True)`), `tf.saved_model.load(...).serve`,
`onnxruntime.InferenceSession.run` and the LiteRT interpreter. The passes
alternate between runners; each figure is the median of `--repeats` passes
after one untimed pass. The table gives each export's size on disk and the
largest difference of its outputs from Keras'.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402

MODELS = {
    "gpt": lambda: zoo.build("gpt-baby", task="causal_lm", vocabulary_size=50257),
    "bert": lambda: zoo.build("bert-small", task="classifier", num_classes=2),
    "transformer": lambda: zoo.build("transformer-small", vocabulary_size=10000),
}


def inputs_for(model, batch, length):
    rng = np.random.default_rng(0)
    inputs = {}
    for tensor in model.inputs:
        if "padding_mask" in tensor.name:
            inputs[tensor.name] = np.ones((batch, length), "int32")
        elif tensor.name == "segment_ids":
            inputs[tensor.name] = np.zeros((batch, length), "int32")
        else:
            inputs[tensor.name] = rng.integers(1, 1000, (batch, length)).astype("int32")
    return inputs


def size(path):
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def runners(model, folder):
    import onnxruntime
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)
    saved = tf.saved_model.load(str(folder / "tf_saved_model"))
    session = onnxruntime.InferenceSession(str(folder / "onnx" / "model.onnx"))
    lite = Interpreter(model_path=str(folder / "litert" / "model.tflite")).get_signature_runner()
    return {
        "keras": lambda x: np.asarray(compiled(x)),
        "tf_saved_model": lambda x: np.asarray(saved.serve(x)),
        "onnx": lambda x: session.run(None, x)[0],
        "litert": lambda x: next(iter(lite(**x).values())),
    }, saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ",".join(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; expected some of {', '.join(MODELS)}")
    print(f"backend {keras.backend.backend()}, {os.cpu_count()} CPUs; batch {args.batch} x {args.length} tokens, "
          f"median of {args.repeats}")
    print(f"{'model':12s} {'runner':15s} {'size MB':>9s} {'ms/pass':>9s} {'max |diff|':>11s}")
    for name in names:
        keras.utils.set_random_seed(0)
        model = MODELS[name]()
        x = inputs_for(model, args.batch, args.length)
        expected = keras.ops.convert_to_numpy(model(x, training=False))
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            sizes = {}
            model.save(folder / "model.keras")
            sizes["keras"] = size(folder / "model.keras")
            for format in ("tf_saved_model", "onnx", "litert"):
                sizes[format] = size(zoo.export(model, folder / format, format=format))
            run, _keep = runners(model, folder)
            times = {runner: [] for runner in run}
            outputs = {runner: f(x) for runner, f in run.items()}  # untimed first pass
            for _ in range(args.repeats):
                for runner, f in run.items():
                    start = time.perf_counter()
                    f(x)
                    times[runner].append(time.perf_counter() - start)
        for runner in run:
            diff = float(np.abs(outputs[runner] - expected).max())
            print(f"{name:12s} {runner:15s} {sizes[runner] / 1e6:9.1f} {1000 * statistics.median(times[runner]):9.2f} "
                  f"{diff:11.2e}", flush=True)


if __name__ == "__main__":
    main()
