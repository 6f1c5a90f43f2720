"""The fine-tuning memory levers side by side: trainable parameters, peak
memory and time of a training step for each setting of the recipes' flags.

    KERAS_BACKEND=jax python benchmarks/training/memory_levers.py

Each row is a fresh process that builds a random Llama-layout causal LM
(llama-nano's layout at the widths below: SwiGLU, grouped-query attention,
a tied embedding), applies the levers as `zoo train gpt_finetune` and
`zoo train sft` do (`recipes/lm_data.py`: `keras.RematScope` on the
decoder blocks, `model.quantize`, `model.enable_lora` on the projections,
AdamW with `gradient_accumulation_steps`, the mixed_bfloat16 policy), then
takes training steps on one batch of BATCH x LENGTH tokens. It prints the
trainable parameters, the peak resident memory of the process
(`resource.getrusage`'s max RSS) and its growth over the process after
its imports and before the model is built (the runtime's own memory is the
same in every row), and the median seconds of one update (the whole
batch; under accumulation, --accumulate micro-batches) after the first,
compiled one.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = dict(vocabulary_size=8192, hidden_dim=384, intermediate_dim=1024, num_layers=4, num_heads=6,
             num_key_value_heads=2, max_sequence_length=256)
BATCH, LENGTH, UPDATES = 4, 256, 2
# name: (LoRA rank, --lora-targets, --quantize, --accumulate, --remat, mixed_bfloat16)
SETTINGS = {
    "full fine-tuning": (0, None, None, 1, False, False),
    "LoRA r8, every projection": (8, None, None, 1, False, False),
    "LoRA r8, query,value": (8, ("query", "value"), None, 1, False, False),
    "LoRA r8 + --remat": (8, None, None, 1, True, False),
    "LoRA r8 + --accumulate 4": (8, None, None, 4, False, False),
    "LoRA r8 + mixed_bfloat16": (8, None, None, 1, False, True),
    "QLoRA int8 r8": (8, None, "int8", 1, False, False),
    "QLoRA int4 r8": (8, None, "int4", 1, False, False),
}


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure(name):
    """One row, in this process."""
    import contextlib

    import keras
    import numpy as np

    import zoo
    from recipes.lm_data import DECODER_BLOCKS, LORA_TARGETS
    from zoo.training import adamw

    rank, targets, quantize, accumulate, remat, mixed = SETTINGS[name]
    before = max_rss_mib()
    keras.config.set_dtype_policy("mixed_bfloat16" if mixed else "float32")
    keras.utils.set_random_seed(0)
    scope = keras.RematScope(mode="list_of_layers", layer_names=DECODER_BLOCKS) if remat else contextlib.nullcontext()
    with scope:
        model = zoo.build("llama-nano", task="causal_lm", dropout=0.0, **SIZES)
    if quantize:
        model.quantize(quantize)
    if rank:
        model.enable_lora(rank, targets or LORA_TARGETS)
    model.compile(adamw(1e-4, model=model, gradient_accumulation_steps=accumulate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    micro = BATCH // accumulate
    x = {"token_ids": rng.integers(0, SIZES["vocabulary_size"], (micro, LENGTH)).astype("int32"),
         "padding_mask": np.ones((micro, LENGTH), "int32")}
    y = rng.integers(0, SIZES["vocabulary_size"], (micro, LENGTH)).astype("int32")
    seconds = []
    for _ in range(UPDATES + 1):
        start = time.perf_counter()
        for _ in range(accumulate):
            loss = model.train_on_batch(x, y)
        seconds.append(time.perf_counter() - start)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return dict(name=name, trainable=trainable, peak_mib=max_rss_mib(), growth_mib=max_rss_mib() - before,
                seconds=statistics.median(seconds[1:]), loss=float(loss))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=SETTINGS, help=argparse.SUPPRESS)  # one row, in a child process
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.row)))
        return
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax"), "PYTHONPATH": ROOT}
    rows = []
    for name in SETTINGS:
        out = subprocess.run([sys.executable, __file__, "--row", name], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{name}: {out.stderr.strip().splitlines()[-1]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  {name}: done", file=sys.stderr, flush=True)
    full = rows[0]
    tokens = BATCH * LENGTH
    print(f"{env['KERAS_BACKEND']}; {SIZES['num_layers']} layers, d={SIZES['hidden_dim']}, "
          f"V={SIZES['vocabulary_size']}; batch {BATCH} x {LENGTH} tokens an update\n")
    print("| setting | trainable parameters | peak RSS (MiB) | over the runtime (MiB) | vs full | s / update | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['trainable']:,} | {r['peak_mib']:,.0f} | {r['growth_mib']:,.0f} | "
              f"{r['growth_mib'] / full['growth_mib']:.0%} | {r['seconds']:.2f} | {tokens / r['seconds']:,.0f} |")


if __name__ == "__main__":
    main()
