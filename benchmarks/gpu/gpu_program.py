"""The programs XLA compiles for a GPU, counted on a machine without one.

    pip install -e ".[jax,jax-cuda]"             # JAX's CUDA plugin and its libraries; no GPU needed
    python benchmarks/gpu/gpu_program.py             # GPT-2 small: batch-1 generation at contexts 256 and 1024
    python benchmarks/gpu/gpu_program.py --contexts 256 --save /tmp/programs   # one context; the programs as text
    python benchmarks/gpu/gpu_program.py --generate-batch 8                     # 8 rows per generation
    python benchmarks/gpu/gpu_program.py --family llama --layers 30 --width 576 --heads 9 --key-value-heads 3 \
        --intermediate 1536 --vocab 49152 --contexts 256                    # SmolLM2-135M's shape
    python benchmarks/gpu/gpu_program.py --rows zoo --stored-kernels             # the loop's kernels as stored
    python benchmarks/gpu/gpu_program.py --rows '' --contexts '' --train zoo,zoo+flat   # training steps' optimizers
    XLA_FLAGS=--xla_gpu_experimental_enable_triton_heroless_priority_fusion=true python benchmarks/gpu/gpu_program.py

At batch 1 a new token's time on a GPU is the kernels it launches, each a
few microseconds, more than their work: a GPT-2 small token of the zoo
launched about 220 kernels and took about 0.6 ms on an H100. How many
kernels XLA makes is decided at compilation, from the program and a
description of the device, not by running it; JAX compiles for a GPU it
does not have when given one (`jax.experimental.topologies`, the CUDA
plugin installed). So this script builds the zoo's and keras-hub's GPT-2
on the CPU (float32, random weights, as `benchmarks/generation/generate.py`), captures
the program each runs to generate greedily from an 8-token prompt to the
end of the context at batch 1 (or `--generate-batch` rows; the first call
of a jitted function), compiles it for an NVIDIA H100 or H200 (`--target`) and reads XLA's
optimised program: the kernels one new token launches (each `while`
loop's body: the zoo runs a loop per cache stage, keras-hub one), the
kernels of the loop's condition, and the bytes the body's kernels write
that are not the cache (temporaries, which a fusion would have kept in
registers). The zoo takes its GPU path as on a device (the tied head's
product padded to a multiple of 128 logits, the loop's Dense kernels
carried transposed: `zoo.generation.loop.KernelLayout`).

Every figure is a count from the compiled program, not a time: a GPU
times it (`benchmarks/generation/generate.py`). Without autotuning (there is no
device to time the candidates on) XLA picks its GEMM configurations by
heuristics, so which kernel runs a matrix product may differ from a real
device's choice; the fusions do not.

`--train ROWS` compiles one training step of `benchmarks/gpu/train_gpu.py`'s
rows (bfloat16, AdamW, batch 16 x 1024; levers after a `+`) and splits its
kernels and the bytes they write into the forward pass, the backward pass
and the optimizer (the scopes of `benchmarks/gpu/kernel_profile.py`). Its
attention is XLA's softmax, not the cuDNN kernel a device runs (Keras
chooses cuDNN only where it sees a GPU), so the forward and backward
counts are not a device's; the optimizer's are. `--save DIR` writes each
optimised program as text.
"""

import argparse
import contextlib
import os
import re
import sys

# The device descriptions XLA's GPU compiler reads (`stream_executor.GpuTargetConfigProto`).
_SM90 = """gpu_device_info {{
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth} l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: {memory} shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }} registers_per_core_limit: 65536 registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
runtime_version {{ major: 12 minor: 9 }}
device_description_str: "{name}"
"""
TARGETS = {
    "h100": _SM90.format(name="NVIDIA H100 80GB HBM3", bandwidth=3352320000000, memory=84929347584),
    "h200": _SM90.format(name="NVIDIA H200", bandwidth=4800000000000, memory=150754820096),
}
# Instructions of a scheduled program that launch nothing themselves.
_NO_LAUNCH = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional", "call",
              "after-all", "opt-barrier", "add-dependency", "copy-done", "partition-id", "replica-id"}
_INSTRUCTION = re.compile(r"^(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{$")
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16|f8e\w+)\[([\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16}


class _Captured(Exception):
    pass


@contextlib.contextmanager
def captured_jit():
    """Within the block, the first call of a function jitted there is
    recorded, not run: `calls` gets (function, jit keyword arguments,
    positional arguments, keyword arguments) and the call raises
    `_Captured`. Keras' JAX trainer holds its own name for `jax.jit`."""
    import jax
    from keras.src.backend.jax import trainer

    calls, saved = [], (jax.jit, trainer.jit)

    class Recorder:
        def __init__(self, function, options):
            self.function, self.options = function, options

        def __call__(self, *args, **kwargs):
            calls.append((self.function, self.options, args, kwargs))
            raise _Captured()

        def __get__(self, instance, owner):
            return self if instance is None else lambda *args, **kwargs: self(instance, *args, **kwargs)

    def jit(function=None, **options):
        return (lambda f: Recorder(f, options)) if function is None else Recorder(function, options)

    jax.jit = trainer.jit = jit
    try:
        yield calls
    finally:
        jax.jit, trainer.jit = saved


def gpu_sharding(target):
    """A one-device sharding on the described GPU, which need not exist."""
    import jax
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(platform="cuda", target_config=TARGETS[target], topology="1x1x1")
    mesh = topologies.make_mesh(topology, (1,), ("device",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def compiled_program(run, sharding):
    """XLA's optimised program (as text), compiled for `sharding`'s device,
    of the first jitted call `run()` makes, and the function jitted."""
    import jax
    import numpy as np

    with captured_jit() as calls:
        try:
            run()
        except _Captured:
            pass
    if not calls:
        raise RuntimeError("the run made no jitted call")
    function, options, args, kwargs = calls[0]
    options = {k: v for k, v in options.items() if k in ("static_argnums", "static_argnames", "donate_argnums")}

    def abstract(x):
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)
        return x

    args, kwargs = jax.tree_util.tree_map(abstract, (args, kwargs))
    return jax.jit(function, **options).lower(*args, **kwargs).compile().as_text(), function


# --- Reading an optimised program ----------------------------------------------


def computations(text):
    """{computation name: its instruction lines}, and the entry's name."""
    found, entry, current = {}, None, None
    for line in text.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            current = match.group(2)
            found[current] = []
            entry = current if match.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current is not None:
            found[current].append(line.strip())
    return found, entry


def nbytes(shape):
    """Bytes of an HLO shape, a tuple's summed: 'f32[3072,768]{1,0}' -> 9437184."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * (_BITS.get(dtype) or int(re.match(r"[a-z]+(\d+)", dtype).group(1))) // 8
    return total


def _launches(lines):
    """(match of `_INSTRUCTION`, line) of each launching instruction of a computation."""
    for line in lines:
        match = _INSTRUCTION.match(line)
        if match and match.group(3) not in _NO_LAUNCH:
            yield match, line


def kernels(lines):
    """The launching instructions of a computation: [(name, opcode, output bytes)]."""
    return [(match.group(1), match.group(3), nbytes(match.group(2))) for match, _ in _launches(lines)]


def loops(text):
    """Each `while` loop of the program, in the program's order:
    [(body kernels, condition kernels)]."""
    found, _ = computations(text)
    result = []
    for lines in found.values():
        for line in lines:
            match = re.search(r"\bwhile\(.*condition=%([\w.\-]+), body=%([\w.\-]+)", line)
            if match:
                result.append((kernels(found[match.group(2)]), kernels(found[match.group(1)])))
    return result


def parts(text, part_of):
    """The entry computation's kernels, their count and bytes written, by
    `part_of(op_name)`: {part: (kernels, bytes)}."""
    found, entry = computations(text)
    result = {}
    for match, line in _launches(found[entry]):
        op_name = re.search(r'op_name="([^"]*)"', line)
        part = part_of(op_name.group(1) if op_name else "")
        count, size = result.get(part, (0, 0))
        result[part] = (count + 1, size + nbytes(match.group(2)))
    return result


def written(kernel_list):
    """Bytes written by kernels that are not in-place cache writes."""
    return sum(size for name, opcode, size in kernel_list
               if opcode != "dynamic-update-slice" and "dynamic_update_slice" not in name)


# --- The models ----------------------------------------------------------------


def training_run(row, args):
    """One `fit` step (or `gradonly` step) of a `train_gpu.py` row."""
    import numpy as np

    import train_gpu

    train_args = train_gpu.parse(["--impl", row, "--layers", str(args.layers), "--width", str(args.width),
                                  "--heads", str(args.heads), "--vocab", str(args.vocab), "--seq", str(args.seq),
                                  "--batch", str(args.batch)])
    train_args.steps, train_args.warmup = 1, 0
    tokens = np.random.default_rng(0).integers(0, args.vocab, (1, args.batch, args.seq + 1)).astype("int32")
    return lambda: train_gpu.keras_run(row, train_args, tokens)


def runs_of(args, context):
    """{row: a call that generates to the end of `context` at batch `args.generate_batch`}."""
    import keras
    import keras_hub
    import numpy as np

    from zoo import generate
    from zoo.models import GPTBackbone, GPTCausalLM, LlamaBackbone, LlamaCausalLM

    prompt = 8
    runs = {}
    intermediate = args.intermediate or 4 * args.width
    if "zoo" in args.row_list:
        keras.utils.set_random_seed(0)
        if args.family == "llama":
            lm = LlamaCausalLM(LlamaBackbone(args.vocab, args.layers, args.heads, args.width, intermediate,
                                             num_key_value_heads=args.key_value_heads, max_sequence_length=context,
                                             tie_word_embeddings=True))
        else:
            lm = GPTCausalLM(GPTBackbone(args.vocab, args.layers, args.heads, args.width, intermediate,
                                         max_sequence_length=context, dropout=0.0))
        runs["zoo"] = lambda: generate(lm, [list(range(1, prompt + 1))] * args.generate_batch, context - prompt)
    if "hub" in args.row_list:
        keras.utils.set_random_seed(0)
        if args.family == "llama":
            hub = keras_hub.models.LlamaCausalLM(
                backbone=keras_hub.models.LlamaBackbone(
                    vocabulary_size=args.vocab, num_layers=args.layers, num_query_heads=args.heads,
                    hidden_dim=args.width, intermediate_dim=intermediate, num_key_value_heads=args.key_value_heads,
                    tie_word_embeddings=True),
                preprocessor=None)
        else:
            hub = keras_hub.models.GPT2CausalLM(
                backbone=keras_hub.models.GPT2Backbone(
                    vocabulary_size=args.vocab, num_layers=args.layers, num_heads=args.heads, hidden_dim=args.width,
                    intermediate_dim=intermediate, max_sequence_length=context),
                preprocessor=None)
        hub.compile(sampler="greedy", jit_compile=True)
        ids = np.zeros((args.generate_batch, context), "int32")
        ids[:, :prompt] = np.arange(1, prompt + 1)
        inputs = {"token_ids": ids, "padding_mask": ids != 0}
        runs["hub"] = lambda: hub.generate(inputs, stop_token_ids=None)
    return runs


# --- The report ----------------------------------------------------------------


def describe_training(text, optimizer_scope=None):
    from kernel_profile import train_parts

    found = parts(text, lambda op_name: train_parts(op_name, optimizer_scope or "(no optimizer)"))
    total = sum(count for count, _ in found.values())
    inner = sum(len(body) + len(condition) for body, condition in loops(text))
    split = ", ".join(f"{part} {found[part][0]}" for part in ("forward", "backward", "optimizer", "other")
                      if part in found)
    gigabytes = ", ".join(f"{part} {found[part][1] / 2**30:.2f}" for part in ("forward", "backward", "optimizer")
                          if part in found)
    return (f"{total} kernels per step ({split}){f' + {inner} in loops' if inner else ''}; "
            f"GB written: {gigabytes}")


def describe(text):
    found = loops(text)
    if not found:
        return "no loop"
    bodies = ", ".join(str(len(body)) for body, _ in found)
    conditions = ", ".join(str(len(condition)) for _, condition in found)
    mb = max(written(body) for body, _ in found) / 2**20
    label = "loop" if len(found) == 1 else f"{len(found)} loops (the cache stages)"
    return (f"{label}: {bodies} kernels per new token (+ {conditions} in the condition); "
            f"{mb:.1f} MB written per token, not counting the cache")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="h100", choices=sorted(TARGETS), help="the GPU to compile for")
    parser.add_argument("--rows", default="zoo,hub", help="comma-separated: zoo, hub (keras-hub)")
    parser.add_argument("--contexts", default="256,1024", help="comma-separated contexts")
    parser.add_argument("--generate-batch", type=int, default=1, help="rows of each generation")
    parser.add_argument("--train", default="", help="train_gpu.py rows to compile one step of (zoo, hub, zoo+LEVER)")
    parser.add_argument("--seq", type=int, default=1024, help="--train: tokens per row")
    parser.add_argument("--batch", type=int, default=16, help="--train: rows per step")
    parser.add_argument("--family", choices=("gpt", "llama"), default="gpt",
                        help="generation: GPT-2's block (and keras-hub's GPT2CausalLM) or the Llama block "
                             "(and its LlamaCausalLM), the embedding tied")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--intermediate", type=int, help="the feed-forward width (default 4 x --width)")
    parser.add_argument("--key-value-heads", type=int, help="--family llama: key/value heads (default --heads)")
    parser.add_argument("--stored-kernels", action="store_true",
                        help="the zoo's decoding loop reads its Dense kernels as stored, not transposed")
    parser.add_argument("--save", help="a folder to write each optimised program to")
    args = parser.parse_args(argv)
    args.row_list = [r.strip() for r in args.rows.split(",") if r.strip()]
    args.train_rows = [r.strip() for r in args.train.split(",") if r.strip()]
    unknown = [r for r in args.row_list if r not in ("zoo", "hub")]
    if unknown or not (args.row_list or args.train_rows):
        parser.error(f"--rows {args.rows!r}: expected a comma-separated list of zoo, hub (or --train rows)")
    try:
        args.context_list = [int(c) for c in args.contexts.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--contexts {args.contexts!r}: expected comma-separated numbers, as 256,1024")
    if any(c <= 8 for c in args.context_list):
        parser.error(f"--contexts {args.contexts}: each must exceed the 8-token prompt")
    if args.generate_batch < 1:
        parser.error(f"--generate-batch {args.generate_batch}: expected a positive number of rows")
    if args.width % args.heads:
        parser.error(f"--width {args.width} is not a multiple of --heads {args.heads}")
    args.key_value_heads = args.key_value_heads or args.heads
    if args.heads % args.key_value_heads:
        parser.error(f"--key-value-heads {args.key_value_heads} does not divide --heads {args.heads}")
    if args.train_rows:
        if args.family != "gpt":
            parser.error("--train compiles train_gpu.py's GPT-2 step: --family llama is for the generation rows")
        import train_gpu

        train_gpu.parse(["--impl", ",".join(args.train_rows)])  # its one-line refusals of a row or lever
        if any(lever in train_gpu.XLA_FLAGS for row in args.train_rows for lever in train_gpu.split_row(row)[1]):
            parser.error("--train: the XLA_FLAGS levers (cublas, lhs) go in XLA_FLAGS here, for the whole run")
    return args


def main(argv=None):
    args = parse(argv)
    # Before JAX starts: the models live on the CPU, the GPU is only a compilation target, with no driver to check.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import jax_plugins.xla_cuda12  # noqa: F401
    except ImportError:
        raise SystemExit('gpu_program.py compiles for a GPU with JAX\'s CUDA plugin: pip install -e ".[jax,jax-cuda]"')
    sharding = gpu_sharding(args.target)
    from zoo.generation import loop
    from zoo.layers import token_embedding

    # The zoo's GPU path: JAX's default backend here is the CPU.
    token_embedding.pads_logits = lambda: True
    loop.transposes_kernels = lambda: not args.stored_kernels
    flags = os.environ.get("XLA_FLAGS") or "none"
    layout = "; the zoo's loop reads its kernels as stored" if args.stored_kernels else ""
    device = re.search(r'device_description_str: "(.*)"', TARGETS[args.target]).group(1)
    block = "GPT" if args.family == "gpt" else f"Llama ({args.key_value_heads} key/value heads)"
    print(f"{block}: {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}; compiled for "
          f"{device} without one; XLA flags: {flags}{layout}")
    names = {"zoo": "zoo", "hub": "keras-hub"}
    for context in args.context_list:
        for row, run in runs_of(args, context).items():
            text, _ = compiled_program(run, sharding)
            save(args, f"generate_{context}x{args.generate_batch}_{row}", text)
            print(f"context {context:>5}, batch {args.generate_batch}  {names[row]:<10} {describe(text)}", flush=True)
    for row in args.train_rows:
        text, function = compiled_program(training_run(row, args), sharding)
        save(args, f"train_{row.replace('+', '_')}", text)
        optimizer = getattr(getattr(getattr(function, "__self__", None), "optimizer", None), "name", None)
        print(f"train step {args.batch} x {args.seq}  {row:<18} {describe_training(text, optimizer)}", flush=True)


def save(args, name, text):
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        with open(os.path.join(args.save, name + ".txt"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
