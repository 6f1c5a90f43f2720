"""The first token of `zoo sample` in a first and a second process: what
the persistent compilation cache saves.

    python benchmarks/generation/first_token.py                       # TensorFlow and JAX
    python benchmarks/generation/first_token.py --backends jax --new-tokens 4

The model: `zoo.build("smollm2-135m", task="causal_lm")` (SmolLM2-135M's
shape: 30 layers, width 576, 9 heads and 3 key/value heads), random
weights, with a word tokenizer of SmolLM2's 49,152-token vocabulary
("w0" ... "w49150"), saved as a run folder. For each backend, in a new,
empty cache folder (ZOO_HOME), `zoo sample RUN PROMPT --max-length N`
runs in turn as:

1. the first process: compiles (and writes the cache);
2. a second process, the same prompt: loads from the cache;
3. a third process, a prompt of another length (in the same length
   bucket): loads from the cache too, if bucketing shares the program;
4. a process with `ZOO_COMPILE_CACHE=0`: compiles again.

Each row is the command's wall time (start to exit: Python, the backend
and the model's loading included; the new tokens are few, so this is the
time to the first token) and the `zoo: compiling ...` lines it wrote on
stderr.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VOCABULARY = 49152


def make_run(folder):
    """A run folder holding a SmolLM2-135M-shaped random Llama with a word tokenizer."""
    script = f"""
import json, keras, zoo
from zoo.tokenizers import WordTokenizer
keras.utils.set_random_seed(0)
tokenizer = WordTokenizer.from_texts([" ".join(f"w{{i}}" for i in range({VOCABULARY} - 2))])
model = zoo.build("smollm2-135m", task="causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
zoo.save(model, "{folder}/model.keras")
json.dump({{"recipe": "gpt_finetune", "args": {{}}, "finished": True}}, open("{folder}/run.json", "w"))
"""
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "ZOO_COMPILE_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=ROOT)


def sample(run, prompt, max_length, backend, home, cache=True):
    env = {**os.environ, "KERAS_BACKEND": backend, "ZOO_HOME": str(home), "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT)}
    env.pop("TF_XLA_FLAGS", None)
    if not cache:
        env["ZOO_COMPILE_CACHE"] = "0"
    command = [sys.executable, "-m", "recipes.cli", "sample", str(run), prompt, "--max-length", str(max_length),
               "--seed", "0"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    return seconds, [line for line in done.stderr.splitlines() if line.startswith("zoo:")], done.stdout.strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--new-tokens", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        run.mkdir()
        make_run(run)
        rows = []
        for backend in args.backends:
            home = Path(scratch) / f"home-{backend}"
            short, longer = "w1 w2 w3", "w1 w2 w3 w4 w5 w6 w7 w8 w9"
            for label, prompt, cache in (("first process", short, True), ("second process", short, True),
                                         ("second process, another prompt length", longer, True),
                                         ("cache off", short, False)):
                length = len(prompt.split()) + args.new_tokens
                seconds, said, text = sample(run, prompt, length, backend, home, cache)
                rows.append(dict(backend=backend, process=label, seconds=round(seconds, 1), stderr=said))
                print(json.dumps(rows[-1]), flush=True)
        print("\n| backend | process | seconds to the first token | compiled |")
        print("|---|---|---|---|")
        for row in rows:
            compiled = "; ".join(line.removeprefix("zoo: ") for line in row["stderr"]) or "nothing said"
            print(f"| {row['backend']} | {row['process']} | {row['seconds']} | {compiled} |")


if __name__ == "__main__":
    main()
