"""The same decoding from two or more checkouts of the zoo, in turn: what a
change did to the speed of `zoo.generate`, on a machine whose speed
drifts from minute to minute.

    git worktree add /tmp/before HEAD~1
    python benchmarks/generation/checkouts.py /tmp/before . --quantize int4 --rounds 5
    python benchmarks/generation/checkouts.py /tmp/before . --folder FOLDER --prompt 32 --new-tokens 64

Each call is a process of its own that imports the zoo from one checkout
(its folder put first on `sys.path`, over an installed or editable zoo),
loads FOLDER (`zoo.from_pretrained`, with `--quantize`), decodes once to
compile, then times `--calls` greedy calls of `--new-tokens` new tokens
after a `--prompt`-token prompt at batch 1, and prints the median. The
checkouts take turns, A, B, A, B, for `--rounds` rounds, so that a slow
minute falls on each alike. Printed per checkout: each round's new
tokens per second, their median, and a digest of the tokens (the same
digest: the same greedy tokens). FOLDER defaults to the Llama of
SmolLM2-135M's shape that `benchmarks/deployment/cpu_engines.py` writes.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CALL = r"""
import hashlib, json, os, sys, time
sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in type(finder).__name__.lower()
                    and "editable" not in str(getattr(finder, "__module__", "")).lower()]
sys.path.insert(0, sys.argv[1])
import numpy as np
import zoo
assert os.path.realpath(zoo.__file__).startswith(os.path.realpath(sys.argv[1])), zoo.__file__
folder, quantize, prompt, new_tokens, calls = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
lm = zoo.from_pretrained(folder, quantize=None if quantize == "none" else quantize)
prompts = [np.random.default_rng(0).integers(10, min(lm.vocabulary_size, 40000), prompt).tolist()]
tokens = zoo.generate(lm, prompts, max_new_tokens=new_tokens, stop_token_ids=None)
seconds = []
for _ in range(calls):
    start = time.perf_counter()
    tokens = zoo.generate(lm, prompts, max_new_tokens=new_tokens, stop_token_ids=None)
    seconds.append(time.perf_counter() - start)
print(json.dumps({"tokens_per_second": new_tokens / float(np.median(seconds)),
                  "digest": hashlib.sha256(repr(tokens).encode()).hexdigest()[:12]}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", help="folders holding a checkout of the zoo (its zoo/ package)")
    parser.add_argument("--folder", default="/tmp/zoo_cpu_engines/llama", help="the model folder (default %(default)s)")
    parser.add_argument("--quantize", choices=("none", "int8", "int4"), default="none")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens a call (default %(default)s)")
    parser.add_argument("--calls", type=int, default=3, help="timed calls a process (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="processes a checkout (default %(default)s)")
    args = parser.parse_args()
    checkouts = [str(Path(path).resolve()) for path in args.checkouts]
    for path in checkouts:
        if not (Path(path) / "zoo" / "__init__.py").is_file():
            parser.error(f"{path} holds no zoo/__init__.py: give folders that hold a checkout of the zoo")
    if not Path(args.folder).is_dir():
        parser.error(f"{args.folder} is not a folder: give --folder, or run benchmarks/deployment/cpu_engines.py "
                     "once to write the default one")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.setdefault("KERAS_BACKEND", "jax")
    results = {path: [] for path in checkouts}
    digests = {path: set() for path in checkouts}
    print(f"{args.folder}, {args.quantize}, {env['KERAS_BACKEND']}, batch 1, prompt {args.prompt}, "
          f"{args.new_tokens} new tokens; median of {args.calls} calls a process, {args.rounds} rounds in turn")
    for round_ in range(args.rounds):
        for path in checkouts:
            done = subprocess.run([sys.executable, "-c", CALL, path, args.folder, args.quantize, str(args.prompt),
                                   str(args.new_tokens), str(args.calls)], env=env, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                sys.exit(f"{path}: the call failed: {done.stderr.strip().splitlines()[-1] if done.stderr else done.returncode}")
            result = json.loads(lines[-1])
            results[path].append(result["tokens_per_second"])
            digests[path].add(result["digest"])
            print(f"round {round_ + 1}  {path}: {result['tokens_per_second']:.1f} new tokens/s", flush=True)
    print(f"{'checkout':50s} {'median':>8s}  rounds (new tokens/s)  tokens")
    for path in checkouts:
        rounds = " ".join(f"{value:.1f}" for value in results[path])
        print(f"{path:50s} {statistics.median(results[path]):8.1f}  {rounds}  {','.join(sorted(digests[path]))}")


if __name__ == "__main__":
    main()
