"""The optimised XLA programs of the families' training and cached
generation, written as text, so that a change to the code can show that
the programs it compiles are the same.

    python benchmarks/xla_programs.py --output /tmp/xla_before
    # ... change the code ...
    python benchmarks/xla_programs.py --output /tmp/xla_after
    python benchmarks/xla_programs.py --compare /tmp/xla_before /tmp/xla_after

On JAX (CPU is enough: the comparison is of programs, not of speed), each
of `gpt-nano`, `llama-nano` (grouped-query attention, rotary positions,
SwiGLU, RMSNorm) and `gemma3-nano` (sliding-window and global layers, q/k
norms, sandwich norms) trains 2 steps with `model.fit` (AdamW, XLA) and
generates 6 tokens greedily with the cache, two prompts of different
lengths; `transformer-tiny` (the encoder-decoder: cross-attention) trains
2 steps and translates with greedy decoding and beam search; `bert-tiny`
trains 2 steps as a masked LM and 2 as a classifier. XLA writes every program it compiles after its optimisation
passes (`--xla_dump_to`); each is kept with its `metadata={...}` and its
tables of stack frames (Python source lines and function names, which move
with any edit) removed, under the name of the jitted function. `--compare` prints, per program, `same` or
the size of the difference, and exits 1 when any differs.
"""

import argparse
import difflib
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

METADATA = re.compile(r",? ?metadata=\{[^{}]*\}")
# The module's tables of Python files, functions and stack frames, between
# the header line and the first computation.
FRAME_TABLES = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n(?:(?!%|ENTRY).*\n)*", re.M)
NUMBERED = re.compile(r"^module_\d+\.")
PROGRAM = re.compile(r"\.cpu_after_optimizations\.txt$|\.after_optimizations\.txt$")


def workload():
    """Trains and generates with each preset (run with the dump flags set)."""
    import keras
    import numpy as np

    import zoo
    from zoo import generation
    from zoo.training import adamw

    keras.utils.set_random_seed(0)
    for preset in ("gpt-nano", "llama-nano", "gemma3-nano"):
        model = zoo.build(preset, vocabulary_size=96, max_sequence_length=32)
        model.compile(optimizer=adamw(1e-3, model=model), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=True)
        ids = np.random.default_rng(0).integers(1, 96, size=(8, 17))
        inputs = {"token_ids": ids[:, :-1], "padding_mask": np.ones_like(ids[:, :-1])}
        model.fit(inputs, ids[:, 1:], batch_size=4, epochs=1, verbose=0)
        for prompt in (ids[:2, :5], ids[:2, :9]):
            zoo.generate(model, prompt, max_new_tokens=6)
    model = zoo.build("transformer-tiny", vocabulary_size=96, max_sequence_length=32)
    model.compile(optimizer=adamw(1e-3, model=model), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    source, target = (np.random.default_rng(seed).integers(1, 96, size=(8, 12)) for seed in (1, 2))
    inputs = {"encoder_token_ids": source, "encoder_padding_mask": np.ones_like(source),
              "decoder_token_ids": target[:, :-1], "decoder_padding_mask": np.ones_like(target[:, :-1])}
    model.fit(inputs, target[:, 1:], batch_size=4, epochs=1, verbose=0)
    zoo.generate(model, target[:2, :1], max_new_tokens=6, source=source[:2],
                        source_padding_mask=np.ones_like(source[:2]))
    generation.beam_search(model, target[:2, :1], max_new_tokens=6, num_beams=3, source=source[:2],
                           source_padding_mask=np.ones_like(source[:2]))
    ids = np.random.default_rng(3).integers(1, 96, size=(8, 16))
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    for task, extra, labels in (("masked_lm", {"mask_positions": ids[:, :3] % 16}, ids[:, 3:6]),
                                ("classifier", {}, ids[:, 0] % 2)):
        model = zoo.build("bert-tiny", task=task, vocabulary_size=96)
        model.compile(optimizer=adamw(1e-3, model=model),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
        model.fit({**inputs, **extra}, labels, batch_size=4, epochs=1, verbose=0)


def normalised(raw):
    """{program name: [its texts]} of a dump folder, metadata removed."""
    programs = defaultdict(list)
    for path in sorted(Path(raw).iterdir()):  # module_NNNN: the order compiled
        if not PROGRAM.search(path.name):
            continue
        name = PROGRAM.sub("", NUMBERED.sub("", path.name))
        text = FRAME_TABLES.sub("", METADATA.sub("", path.read_text()))
        programs[name].append(text)
    return programs


def write(output):
    output = Path(output)
    if output.exists():
        sys.exit(f"{output}: exists; choose a new folder")
    with tempfile.TemporaryDirectory() as raw:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={raw} --xla_dump_hlo_as_text"
        os.environ["KERAS_BACKEND"] = "jax"
        os.environ["JAX_PLATFORMS"] = os.environ.get("JAX_PLATFORMS", "cpu")
        workload()
        programs = normalised(raw)
    output.mkdir(parents=True)
    for name, texts in programs.items():
        for index, text in enumerate(texts):  # in the order compiled
            (output / f"{name}.{index}.hlo").write_text(text)
    print(f"{sum(map(len, programs.values()))} programs written to {output}")


def compare(before, after):
    names = sorted({p.name for p in Path(before).glob("*.hlo")} | {p.name for p in Path(after).glob("*.hlo")})
    differ = 0
    for name in names:
        a, b = Path(before) / name, Path(after) / name
        if not a.is_file() or not b.is_file():
            print(f"{name}: only in {before if a.is_file() else after}")
            differ += 1
            continue
        lines_a, lines_b = a.read_text().splitlines(), b.read_text().splitlines()
        if lines_a == lines_b:
            print(f"{name}: same ({len(lines_a)} lines)")
        else:
            changed = sum(1 for line in difflib.unified_diff(lines_a, lines_b, lineterm="", n=0)
                          if line[:1] in "+-" and line[:3] not in ("+++", "---"))
            print(f"{name}: {changed} lines differ (of {len(lines_a)} and {len(lines_b)})")
            differ += 1
    print(f"{len(names) - differ} of {len(names)} programs the same")
    return 1 if differ else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--output", help="a new folder for the programs")
    group.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="two folders written by --output")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
