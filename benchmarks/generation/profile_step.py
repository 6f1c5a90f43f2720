"""Where the time of a decoding step goes: one `zoo.generate` call traced
by JAX's profiler, the decoding loop's kernels summed by kind, per new
token, then those without a JAX op name: the copies XLA inserts.

    python benchmarks/generation/profile_step.py /tmp/zoo_cpu_engines/llama --quantize int8
    python benchmarks/generation/profile_step.py FOLDER --prompt 128 --new-tokens 128 --top 20
    python benchmarks/generation/profile_step.py MARIAN --quantize int8 --beams 4 --batch 8 --new-tokens 32 --ops 12

FOLDER is anything `zoo.from_pretrained` loads (cpu_engines.py writes a
Llama of SmolLM2-135M's shape under /tmp/zoo_cpu_engines/llama). The
call is made twice first (compiled, then warm), timed three times, then
traced once, with the compiled programs dumped so that only the loop's
kernels are counted, not the prompt's (`benchmarks/gpu/kernel_profile.py`).
Each row is one kind of kernel (XLA's name for it without its number):
its milliseconds per new token and how many run per new token. With
`--beams`, the call is a beam search of an encoder-decoder
(`zoo.generation.beam_search`, every row decoding exactly --new-tokens
over a random source of --source ids), and a step is one beam step of
all rows. `--ops N` adds the N costliest pairs of a kind and the JAX
operation it runs for (the layer's name in it). On a CPU
the kernels are XLA's thunks, which run on several threads, and tracing
slows them: the kernel time may exceed the untraced token. Names are
XLA's: `ffi_call` is a product of `zoo.kernels`, `dot` and `ynn_fusion`
XLA's products, `copy` and `copy_*_fusion` copies of whole buffers.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu"))
from kernel_profile import _op_names, dump_flags, kinds, loop_parts, summarize, trace  # noqa: E402

DUMP_DIR = tempfile.mkdtemp(prefix="profile_step_hlo_")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + dump_flags(DUMP_DIR)).strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a model folder or preset zoo.from_pretrained loads")
    parser.add_argument("--quantize", choices=("int8", "int4"), help="quantize the weights as loaded")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens (default %(default)s)")
    parser.add_argument("--top", type=int, default=16, help="rows printed (default %(default)s)")
    parser.add_argument("--batch", type=int, default=1, help="rows decoded (default %(default)s)")
    parser.add_argument("--beams", type=int, default=0, help="a beam search of this many beams (an encoder-decoder)")
    parser.add_argument("--source", type=int, default=16, help="source ids of each row with --beams (default %(default)s)")
    parser.add_argument("--ops", type=int, default=0, help="also the N costliest (kind, JAX operation) pairs")
    args = parser.parse_args()
    import keras

    if keras.config.backend() != "jax":
        sys.exit(f"profile_step.py: traces JAX's programs; KERAS_BACKEND is {keras.config.backend()!r}, expected jax")
    import numpy as np

    import zoo

    from zoo.generation import beam_search

    lm = zoo.from_pretrained(args.folder, quantize=args.quantize)
    rng = np.random.default_rng(0)
    prompt = rng.integers(2, 1000, args.prompt).tolist()
    sources = rng.integers(2, 1000, (args.batch, args.source)).tolist()

    def call():
        if args.beams:
            beam_search(lm, [[0]] * args.batch, args.new_tokens, args.beams, source=sources,
                        min_new_tokens=args.new_tokens)
        else:
            zoo.generate(lm, [prompt] * args.batch, max_new_tokens=args.new_tokens, stop_token_ids=None)

    call(), call()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[1]
    events = trace(call)
    tokens = args.new_tokens
    loop = summarize(events, tokens, DUMP_DIR, loop_parts)
    what = f"{args.beams} beams, source {args.source}" if args.beams else f"prompt {args.prompt}"
    print(f"{args.folder}, {args.quantize or 'float32'}, batch {args.batch}, {what}, {tokens} new tokens: "
          f"{seconds:.2f} s a call untraced (median of 3), {tokens / seconds:.1f} new tokens/s, "
          f"{1e3 * seconds / tokens:.2f} ms a token")
    for part, what in (("loop", "the loop's kernels"), ("unnamed", "kernels without a JAX op (XLA's copies)")):
        print(f"{what}, traced: {loop['part_launches'].get(part, 0):.0f} and "
              f"{loop['parts'].get(part, 0):.2f} ms of kernel time per new token")
        print(f"    {'kernel':<36}{'ms/token':>10}{'per token':>11}")
        for kind, ms, launches in kinds(events, tokens, DUMP_DIR, loop_parts, part)[:args.top]:
            print(f"    {kind[:35]:<36}{ms:>10.3f}{launches:>11.1f}")
    if args.ops:
        print("the loop's costliest kernels by the JAX operation they run for, traced:")
        print(f"    {'kernel':<24}{'ms/token':>10}{'per token':>11}  operation")
        for (kind, op), (ms, launches) in by_operation(events, tokens)[:args.ops]:
            print(f"    {kind[:23]:<24}{ms:>10.3f}{launches:>11.1f}  {op}")


def by_operation(events, steps):
    """[((kind, operation), (ms per step, kernels per step))] of the loop's
    kernels, most time first: the operation is the JAX op name inside the
    loop's body, numbers dropped, its last 90 characters."""
    import re

    programs, totals = {}, {}
    for name, ns, hlo_op, program_id in events:
        if program_id not in programs:
            programs[program_id] = _op_names(DUMP_DIR, program_id)
        op_name = programs[program_id].get(hlo_op)
        if op_name is None or loop_parts(op_name) != "loop":
            continue
        key = (re.sub(r"\.\d+$", "", name), re.sub(r"\d+", "#", op_name.split("while/body/")[-1])[-90:])
        ms, launches = totals.get(key, (0.0, 0.0))
        totals[key] = (ms + ns / 1e6 / steps, launches + 1 / steps)
    return sorted(totals.items(), key=lambda item: -item[1][0])

if __name__ == "__main__":
    main()
