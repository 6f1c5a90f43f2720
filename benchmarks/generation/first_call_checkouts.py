"""The first decoding call after the model is loaded, in a new process,
for checkouts of the zoo taken in turn: what a change does to a second
process's first token (the persistent compilation cache already holding
the program).

    git worktree add /tmp/before <commit>
    python benchmarks/generation/first_call_checkouts.py /tmp/before . \
        --sample FOLDER --translate FOLDER --backend tensorflow --rounds 3

FOLDER: a model folder `zoo.from_pretrained` opens (a causal LM for
`--sample`: `zoo.generate` of a 3-token prompt, 4 new tokens; an
encoder-decoder carrying its tokenizer for `--translate`: `zoo.translate`
of a 4-word sentence, 4 beams, at most 5 tokens). Each checkout has its
own cache folder; round 0 fills it and is not reported. Each row: the
seconds of that call (trace, conversion, the program loaded, the
tokens) in each round, the checkouts in turn within a round, so that a
slower hour of the machine falls on all of them.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CALL = """
import sys, time
import zoo
kind, folder = sys.argv[1], sys.argv[2]
model = zoo.from_pretrained(folder)
start = time.perf_counter()
if kind == "sample":
    zoo.generate(model, [[5, 7, 9]], max_new_tokens=4)
else:
    zoo.translate(model, ["w1 w2 w3 w4"], max_length=5, num_beams=4)
print(f"SECONDS {time.perf_counter() - start:.2f}")
"""


def first_call(checkout, kind, folder, backend, home):
    env = {**os.environ, "KERAS_BACKEND": backend, "ZOO_HOME": str(home), "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(checkout)}
    env.pop("TF_XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", CALL, kind, str(folder)], env=env, cwd=checkout,
                          capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SECONDS ")]
    if done.returncode or not lines:
        sys.exit(f"{checkout}: {done.stderr[-3000:]}")
    return float(lines[-1].split()[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--sample", type=Path, help="a causal LM's folder")
    parser.add_argument("--translate", type=Path, help="an encoder-decoder's folder")
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    kinds = [(kind, folder) for kind, folder in (("sample", args.sample), ("translate", args.translate)) if folder]
    if not kinds:
        parser.error("give --sample FOLDER, --translate FOLDER or both")
    with tempfile.TemporaryDirectory() as scratch:
        seconds = {}
        for round in range(args.rounds + 1):
            for kind, folder in kinds:
                for i, checkout in enumerate(args.checkouts):
                    took = first_call(checkout.resolve(), kind, folder, args.backend, Path(scratch) / f"home-{i}")
                    print(f"round {round} {kind} {checkout}: {took:.2f} s{' (fills the cache)' if not round else ''}",
                          flush=True)
                    if round:
                        seconds.setdefault((kind, str(checkout)), []).append(took)
    print("\n| call | checkout | seconds, each round |")
    print("|---|---|---|")
    for (kind, checkout), values in seconds.items():
        print(f"| {kind} | {checkout} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
