"""Where the time of a decoding step goes: one `zoo.generate` call traced
by JAX's profiler, the decoding loop's kernels summed by kind, per new
token, then those without a JAX op name: the copies XLA inserts.

    python benchmarks/generation/profile_step.py /tmp/zoo_cpu_engines/llama --quantize int8
    python benchmarks/generation/profile_step.py FOLDER --prompt 128 --new-tokens 128 --top 20

FOLDER is anything `zoo.from_pretrained` loads (cpu_engines.py writes a
Llama of SmolLM2-135M's shape under /tmp/zoo_cpu_engines/llama). The
call is made twice first (compiled, then warm), timed three times, then
traced once, with the compiled programs dumped so that only the loop's
kernels are counted, not the prompt's (`benchmarks/gpu/kernel_profile.py`).
Each row is one kind of kernel (XLA's name for it without its number):
its milliseconds per new token and how many run per new token. On a CPU
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
from kernel_profile import dump_flags, kinds, loop_parts, summarize, trace  # noqa: E402

DUMP_DIR = tempfile.mkdtemp(prefix="profile_step_hlo_")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + dump_flags(DUMP_DIR)).strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a model folder or preset zoo.from_pretrained loads")
    parser.add_argument("--quantize", choices=("int8", "int4"), help="quantize the weights as loaded")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens (default %(default)s)")
    parser.add_argument("--top", type=int, default=16, help="rows printed (default %(default)s)")
    args = parser.parse_args()
    import keras

    if keras.config.backend() != "jax":
        sys.exit(f"profile_step.py: traces JAX's programs; KERAS_BACKEND is {keras.config.backend()!r}, expected jax")
    import numpy as np

    import zoo

    lm = zoo.from_pretrained(args.folder, quantize=args.quantize)
    prompt = np.random.default_rng(0).integers(2, 1000, args.prompt).tolist()

    def call():
        zoo.generate(lm, [prompt], max_new_tokens=args.new_tokens, stop_token_ids=None)

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
    print(f"{args.folder}, {args.quantize or 'float32'}, batch 1, prompt {args.prompt}, {tokens} new tokens: "
          f"{seconds:.2f} s a call untraced (median of 3), {tokens / seconds:.1f} new tokens/s, "
          f"{1e3 * seconds / tokens:.2f} ms a token")
    for part, what in (("loop", "the loop's kernels"), ("unnamed", "kernels without a JAX op (XLA's copies)")):
        print(f"{what}, traced: {loop['part_launches'].get(part, 0):.0f} and "
              f"{loop['parts'].get(part, 0):.2f} ms of kernel time per new token")
        print(f"    {'kernel':<36}{'ms/token':>10}{'per token':>11}")
        for kind, ms, launches in kinds(events, tokens, DUMP_DIR, loop_parts, part)[:args.top]:
            print(f"    {kind[:35]:<36}{ms:>10.3f}{launches:>11.1f}")

if __name__ == "__main__":
    main()
