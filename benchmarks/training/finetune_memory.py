"""The fine-tuning memory levers side by side at SmolLM2-135M's shape:
trainable parameters, peak resident memory and tokens a second of the
training steps for each setting of the recipes' flags.

    KERAS_BACKEND=jax python benchmarks/training/finetune_memory.py

Each row is a fresh process that builds a causal LM with random weights
(no download) of the `smollm2-135m` preset's shape (30 layers, d=576, 9
query and 3 key/value heads, SwiGLU 1536, vocabulary 49,152, tied
embedding: 134.5 M parameters), applies the levers as `zoo train
gpt_finetune` and `zoo train sft` do (`recipes/lm_data.py`:
`keras.RematScope` on the decoder blocks, `model.quantize`,
`model.enable_lora` on every projection, AdamW with
`gradient_accumulation_steps`, the mixed_bfloat16 policy), then takes
training steps on micro-batches of MICRO_BATCH x LENGTH tokens (under
--accumulate N, N of them an update).

It prints, from the process's resident memory (Linux' /proc/self/status):
- "baseline": after the imports and the backend's start, before the
  model is built (the same in every row);
- "peak": the highest of the whole process (building, quantizing,
  compiling, training), and "peak - baseline";
- "steps' peak - baseline": the highest during the updates after the
  first, compiled one (in between, the allocator's free pages go back to
  the system and the high-water mark is reset through
  /proc/self/clear_refs): what the weights, the optimizer's state, the
  compiled step and one update's work hold, without the transients of
  building, quantizing and compiling;
and the median tokens a second of an update after the first.

On JAX it also prints the compiled training step's own buffers, from
XLA's buffer assignment (`memory_analysis()` of the step as Keras
compiles it): the arguments (weights, optimizer state) plus the
temporaries (activations kept for the backward pass, gradients, every
intermediate), outputs that reuse a donated argument counted once. That is
what an accelerator must hold for the step, without the process's
allocator, compiled code and framework, which the resident figures add.
"""

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESET = "smollm2-135m"
MICRO_BATCH, LENGTH, UPDATES, RANK = 1, 256, 2, 8
# name: (LoRA rank, --quantize, --accumulate, --remat, mixed_bfloat16)
SETTINGS = {
    "full fine-tuning": (0, None, 1, False, False),
    "LoRA r8": (RANK, None, 1, False, False),
    "LoRA r8 + --remat": (RANK, None, 1, True, False),
    "LoRA r8 + --accumulate 4": (RANK, None, 4, False, False),
    "LoRA r8 + --mixed-precision": (RANK, None, 1, False, True),
    "QLoRA int8 r8": (RANK, "int8", 1, False, False),
    "QLoRA int4 r8": (RANK, "int4", 1, False, False),
    "QLoRA int4 r8 + --remat": (RANK, "int4", 1, True, False),
}


def resident_mib():
    """(current, highest) resident memory of this process, MiB."""
    with open("/proc/self/status") as status:
        text = status.read()
    return tuple(int(re.search(rf"{key}:\s+(\d+) kB", text).group(1)) / 1024 for key in ("VmRSS", "VmHWM"))


def release_free_memory():
    """Hands the allocator's free pages back to the system (glibc's
    `malloc_trim`): what building and compiling freed stops counting as
    resident. A no-op where there is no glibc."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak():
    """Starts the high-water mark of resident memory again from the
    current size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def measure(name):
    """One row, in this process."""
    import keras
    import numpy as np

    import zoo
    from recipes.lm_data import DECODER_BLOCKS, LORA_TARGETS
    from zoo.training import adamw

    rank, quantize, accumulate, remat, mixed = SETTINGS[name]
    keras.ops.convert_to_tensor(np.zeros(1))  # the backend's runtime starts: part of the baseline
    baseline = resident_mib()[0]
    keras.config.set_dtype_policy("mixed_bfloat16" if mixed else "float32")
    keras.utils.set_random_seed(0)
    scope = keras.RematScope(mode="list_of_layers", layer_names=DECODER_BLOCKS) if remat else contextlib.nullcontext()
    with scope:
        model = zoo.build(PRESET, task="causal_lm", dropout=0.0)
    if quantize:
        model.quantize(quantize)
    if rank:
        model.enable_lora(rank, LORA_TARGETS)
    model.compile(adamw(1e-4, model=model, gradient_accumulation_steps=accumulate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    vocabulary = model.backbone.vocabulary_size
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(0, vocabulary, (MICRO_BATCH, LENGTH)).astype("int32"),
         "padding_mask": np.ones((MICRO_BATCH, LENGTH), "int32")}
    y = rng.integers(0, vocabulary, (MICRO_BATCH, LENGTH)).astype("int32")
    seconds, steps_peak, peak = [], None, None
    for update in range(UPDATES + 1):
        if update == 1:  # after the compiled first update: the steps' own high-water mark
            peak = resident_mib()[1]  # building, quantizing, compiling
            release_free_memory()
            steps_peak = reset_peak()
        start = time.perf_counter()
        for _ in range(accumulate):
            loss = model.train_on_batch(x, y)
        seconds.append(time.perf_counter() - start)
    highest = resident_mib()[1]
    buffers = step_buffers_mib(model, x, y) if keras.backend.backend() == "jax" else None
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return dict(name=name, parameters=model.count_params(), trainable=trainable, baseline_mib=baseline,
                peak_mib=max(peak, highest),
                steps_mib=highest - baseline if steps_peak else None, buffers_mib=buffers, loss=float(loss),
                tokens_per_second=MICRO_BATCH * LENGTH * accumulate / statistics.median(seconds[1:]))


def step_buffers_mib(model, x, y):
    """The MiB XLA assigns to one compiled training step (JAX): arguments
    plus temporaries plus the outputs that are not a donated argument."""
    import jax

    state = [[v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, model.optimizer.variables, model.metrics_variables)]
    compiled = jax.jit(model.train_step, donate_argnums=0).lower(state, (x, y, None)).compile()
    m = compiled.memory_analysis()
    return (m.argument_size_in_bytes + m.temp_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=SETTINGS, help=argparse.SUPPRESS)  # one row, in a child process
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS), metavar="NAME",
                        help="the rows to measure (default: all)")
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.row)))
        return
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax"), "PYTHONPATH": ROOT}
    rows = []
    for name in args.settings:
        out = subprocess.run([sys.executable, __file__, "--row", name], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{name}: {out.stderr.strip().splitlines()[-1]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  {name}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    full = rows[0]
    print(f"{env['KERAS_BACKEND']}; {PRESET}'s shape, {full['parameters']:,} parameters, random weights; "
          f"micro-batches of {MICRO_BATCH} x {LENGTH} tokens; LoRA rank {RANK} on every projection\n")
    print("| setting | trainable parameters | step's buffers (MiB) | vs full | baseline (MiB) | peak (MiB) | "
          "peak - baseline (MiB) | vs full | steps' peak - baseline (MiB) | vs full | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        growth, full_growth = r["peak_mib"] - r["baseline_mib"], full["peak_mib"] - full["baseline_mib"]
        steps = f"{r['steps_mib']:,.0f} | {r['steps_mib'] / full['steps_mib']:.0%}" if r["steps_mib"] else "- | -"
        buffers = f"{r['buffers_mib']:,.0f} | {r['buffers_mib'] / full['buffers_mib']:.0%}" if r["buffers_mib"] else "- | -"
        print(f"| {r['name']} | {r['trainable']:,} | {buffers} | {r['baseline_mib']:,.0f} | {r['peak_mib']:,.0f} | "
              f"{growth:,.0f} | {growth / full_growth:.0%} | {steps} | {r['tokens_per_second']:,.0f} |")


if __name__ == "__main__":
    main()
