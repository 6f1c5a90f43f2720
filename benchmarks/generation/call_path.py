"""The call path from `zoo.generate` to the attention: every frame between
them, the zoo's own marked, for a preset's causal LM on JAX.

    python benchmarks/generation/call_path.py               # gpt-nano
    python benchmarks/generation/call_path.py llama-nano

It wraps the two attention algorithms (`attention_weights`,
`fused_attention`), generates 4 tokens, and prints the stack at the first
call, from `zoo.generate` down: the frames a reader follows to see what a
decoding step computes.
"""

import os
import sys
import traceback

os.environ.setdefault("KERAS_BACKEND", "jax")

import zoo  # noqa: E402
import zoo.layers.multi_head_attention as multi_head_attention  # noqa: E402

FIRST = []


def _recording(function):
    def wrapper(*args, **kwargs):
        if not FIRST:
            stack = traceback.extract_stack()[:-1]
            start = max(i for i, f in enumerate(stack) if f.name == "generate" and f.filename.endswith("text_generation.py"))
            FIRST.append((function.__name__, stack[start:]))
        return function(*args, **kwargs)

    return wrapper


def main(preset="gpt-nano"):
    for name in ("attention_weights", "fused_attention"):
        setattr(multi_head_attention, name, _recording(getattr(multi_head_attention, name)))
    zoo.generate(zoo.build(preset, task="causal_lm"), [[1, 2, 3]], 4)
    name, frames = FIRST[0]
    ours = [f for f in frames if os.sep + "zoo" + os.sep in f.filename]
    print(f"{preset}: zoo.generate reaches {name} in {len(frames)} frames, {len(ours)} of them the zoo's")
    for f in frames:
        mark = "*" if f in ours else " "
        print(f"  {mark} {f.filename.split('site-packages' + os.sep)[-1]}:{f.lineno} {f.name}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
