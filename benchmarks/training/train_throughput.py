"""Training throughput of `recipes.gpt_char --preset baby`: zoo vs keras-hub.

    python benchmarks/training/train_throughput.py --steps 200

Trains the same configuration (nanoGPT's CPU baby GPT: 4 layers, 4 heads,
width 128, block 64, batch 12, AdamW with clipping, tied head) through the
zoo recipe's own model, optimizer, tf.data pipeline and default settings
(XLA in float32, `steps_per_execution=50`; `--also fusible/true` adds the
recipe's `--jit-compile fusible --mixed-precision` mode, XLA for the
element-wise ops and oneDNN bf16 matrix products), and through
keras-hub's `GPT2Backbone` at its best settings (jit_compile=True, a pure
tf.data pipeline, steps_per_execution=20), in one process, alternating
chunks of steps over several repetitions so that a noisy shared machine
slows both alike.

Prints for each: ms per step (median over executions after warm-up),
tokens/s, achieved GFLOP/s (6 x non-embedding parameters + 12 L T d per
token), and that as a fraction of the matrix-product peak measured on the
spot (a 2048^3 fp32 and bf16 tf.matmul); the last line is
`ratio zoo/keras-hub: 0.NN` (ms per step, lower is better for the zoo).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

DEFAULT_DATA = "tinyshakespeare"  # the registered data set (zoo.data.fetch_dataset), or a text file
LAYERS, HEADS, WIDTH, BLOCK, BATCH = 4, 4, 128, 64, 12


def flops_per_step(layers=LAYERS, width=WIDTH, block=BLOCK, batch=BATCH):
    """Training FLOPs of one step (nanoGPT / Kaplan): 6 N + 12 L T d per token,
    N = 12 L d^2 the weight matrices of the blocks."""
    non_embedding = 12 * layers * width * width
    return (6 * non_embedding + 12 * layers * block * width) * block * batch


def matmul_peak(dtype, n=2048, repeats=5):
    """GFLOP/s of an n^3 matrix product through TensorFlow, best of `repeats`."""
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    product = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32)))
    product(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times) / 1e9


class StepTimes:
    """Keras callback: how long each execution of `steps_per_execution`
    steps takes, from its start to its end."""

    def __init__(self):
        import keras

        outer = self

        class _Callback(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                outer.begin = (batch, time.perf_counter())

            def on_train_batch_end(self, batch, logs=None):
                b0, t0 = outer.begin
                outer.per_step.append((time.perf_counter() - t0) / (batch - b0 + 1))

        self.callback = _Callback()
        self.per_step = []  # seconds per step, one entry per execution


def zoo_setup(ids, vocabulary_size, steps, args, jit_compile, mixed_precision):
    import keras

    from recipes import gpt_char
    from recipes.flags import set_precision

    set_precision(mixed_precision)
    keras.utils.set_random_seed(1337)
    model = gpt_char.build_model("baby", vocabulary_size)
    gpt_char.compile_model(
        model,
        steps,
        gpt_char.DEFAULTS["learning_rate"],
        jit_compile={"true": True, "false": False, "auto": "auto"}[jit_compile],
        steps_per_execution=args.steps_per_execution,
    )
    set_precision(False)
    return model, gpt_char.train_dataset(ids, BATCH, BLOCK, seed=1337)


def keras_hub_setup(ids, vocabulary_size, steps, args, jit_compile=None, mixed_precision=None):
    """keras-hub at its best: GPT2Backbone + tied head, XLA, tf.data, SPE."""
    import keras
    import keras_hub
    import tensorflow as tf

    keras.utils.set_random_seed(1337)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=vocabulary_size, num_layers=LAYERS, num_heads=HEADS, hidden_dim=WIDTH,
        intermediate_dim=4 * WIDTH, dropout=0.0, max_sequence_length=BLOCK,
    )
    token_ids = keras.Input((BLOCK,), dtype="int32")
    padding_mask = keras.Input((BLOCK,), dtype="int32")
    hidden = backbone({"token_ids": token_ids, "padding_mask": padding_mask})
    model = keras.Model([token_ids, padding_mask], backbone.token_embedding(hidden, reverse=True))
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps - 100, alpha=0.1, warmup_target=1e-3, warmup_steps=100
    )
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.1, beta_2=0.99, global_clipnorm=1.0)
    model.compile(
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
        steps_per_execution=args.reference_steps_per_execution,
    )
    data = tf.constant(ids)

    def window(_):
        i = tf.random.uniform((BATCH,), 0, len(ids) - BLOCK - 1, dtype=tf.int32)
        w = tf.gather(data, i[:, None] + tf.range(BLOCK + 1)[None])
        return (w[:, :-1], tf.ones((BATCH, BLOCK), tf.int32)), w[:, 1:]

    return model, tf.data.Dataset.range(1 << 30).map(window).prefetch(8)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="timed steps per model, in all repetitions")
    parser.add_argument("--repeats", type=int, default=4, help="alternating chunks per model")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--steps-per-execution", type=int, default=None, help="zoo; the recipe's default")
    parser.add_argument("--reference-steps-per-execution", type=int, default=20, help="keras-hub")
    parser.add_argument(
        "--jit-compile", default=None, choices=("true", "false", "auto", "fusible"), help="zoo; the recipe's default"
    )
    parser.add_argument("--mixed-precision", default=None, choices=("true", "false"), help="zoo; the recipe's default")
    parser.add_argument(
        "--also", default="", help="more zoo settings to time alongside, e.g. 'true/false,fusible/false' (jit/bf16)"
    )
    parser.add_argument("--only", choices=("zoo", "keras-hub"), default=None)
    args = parser.parse_args(argv)

    from recipes import gpt_char
    from zoo.data import read_text
    from zoo.tokenizers import CharVocabulary

    if args.steps_per_execution is None:
        args.steps_per_execution = gpt_char.DEFAULTS["steps_per_execution"]
    if args.jit_compile is None:
        args.jit_compile = gpt_char.DEFAULTS["jit_compile"]
    if args.mixed_precision is None:
        args.mixed_precision = "true" if gpt_char.DEFAULTS["mixed_precision"] else "false"
    if args.jit_compile == "fusible" or "fusible/" in args.also:
        # Process-wide, before TensorFlow runs anything; keras-hub's
        # jit_compile=True step is compiled whole by XLA either way.
        from recipes.flags import enable_fusible_autoclustering

        enable_fusible_autoclustering()
    text = read_text(args.data)
    vocabulary = CharVocabulary.from_text(text)
    ids = vocabulary.encode(text)[: int(0.9 * len(text))]

    peak32, peak16 = matmul_peak("float32"), matmul_peak("bfloat16")
    print(f"matmul peak (2048^3 through tf.matmul): fp32 {peak32:.0f} GFLOP/s, bf16 {peak16:.0f} GFLOP/s")

    variants = {"zoo": (zoo_setup, args.jit_compile, args.mixed_precision == "true")}
    for extra in filter(None, args.also.split(",")):
        jit, bf16 = extra.split("/")
        variants[f"zoo[jit={jit},bf16={bf16}]"] = (zoo_setup, jit, bf16 == "true")
    variants["keras-hub"] = (keras_hub_setup, "true", False)
    names = [n for n in variants if args.only is None or n.startswith(args.only)]
    runs = {}
    for name in names:
        start = time.perf_counter()
        setup, jit, bf16 = variants[name]
        model, dataset = setup(ids, vocabulary.vocabulary_size, 2000, args, "false" if jit == "fusible" else jit, bf16)
        spe = args.reference_steps_per_execution if name == "keras-hub" else args.steps_per_execution
        timer = StepTimes()
        model.fit(dataset, steps_per_epoch=2 * spe, epochs=1, verbose=0)  # compile
        runs[name] = dict(model=model, dataset=dataset, timer=timer, spe=spe, bf16=bf16)
        print(f"{name}: built and compiled in {time.perf_counter() - start:.1f} s", flush=True)

    chunk = max(args.steps // args.repeats, 1)
    for repeat in range(args.repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            run = runs[name]
            steps = max(chunk // run["spe"], 1) * run["spe"]
            run["model"].fit(run["dataset"], steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[run["timer"].callback])

    flops = flops_per_step()
    ms = {}
    for name in names:
        per_step = runs[name]["timer"].per_step
        ms[name] = 1000 * statistics.median(per_step)
        spread = 1000 * np.percentile(per_step, [25, 75])
        gflops = flops / ms[name] / 1e6
        print(
            f"{name}: {ms[name]:.2f} ms/step (IQR {spread[0]:.2f}-{spread[1]:.2f}, {len(per_step)} executions of "
            f"{runs[name]['spe']} steps), {BATCH * BLOCK / ms[name] * 1000:,.0f} tokens/s, "
            f"{2000 * ms[name] / 1000:.1f} s per 2000 steps, {gflops:.1f} GFLOP/s = "
            f"{gflops / peak32:.1%} of fp32 peak, {gflops / peak16:.1%} of bf16 peak"
        )
    if "zoo" in ms and "keras-hub" in ms:
        print(f"settings: zoo jit_compile={args.jit_compile} steps_per_execution={args.steps_per_execution} "
              f"mixed_precision={args.mixed_precision}; keras-hub jit_compile=True "
              f"steps_per_execution={args.reference_steps_per_execution}")
        print(f"ratio zoo/keras-hub: {ms['zoo'] / ms['keras-hub']:.2f}")


if __name__ == "__main__":
    main()
