"""The first token of `zoo sample` (or `zoo translate`) in a first and a
second process: what the persistent compilation cache saves.

    python benchmarks/generation/first_token.py                       # TensorFlow and JAX
    python benchmarks/generation/first_token.py --backends jax --new-tokens 4
    python benchmarks/generation/first_token.py --command translate --backends jax

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

With `--command translate`, the model is a Marian of opus-mt base's shape
(random weights, saved by transformers' `save_pretrained` with its
SentencePiece files, as `benchmarks/deployment/cpu_translation.py` writes
it; its generation_config.json asks for 4 beams and at most
`--new-tokens` tokens), and each process runs `zoo translate FOLDER
SENTENCE`: a sentence of 4 words, then one of 9.
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


def make_marian(folder, new_tokens):
    """opus-mt base's shape with random weights, decoding 4 beams of at most `new_tokens` tokens."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "deployment"))
    from cpu_translation import write_marian_folder

    write_marian_folder(folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update(num_beams=4, max_length=new_tokens + 1, min_length=0)
    (folder / "generation_config.json").write_text(json.dumps(config))


def first_token(run, prompt, max_length, backend, home, cache=True, command="sample"):
    """`zoo sample` (or `zoo translate`) in a new process: (seconds, its `zoo:` stderr lines, its output)."""
    env = {**os.environ, "KERAS_BACKEND": backend, "ZOO_HOME": str(home), "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT)}
    env.pop("TF_XLA_FLAGS", None)
    if not cache:
        env["ZOO_COMPILE_CACHE"] = "0"
    argv = [sys.executable, "-m", "recipes.cli", command, str(run), prompt]
    if command == "sample":
        argv += ["--max-length", str(max_length), "--seed", "0"]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    return seconds, [line for line in done.stderr.splitlines() if line.startswith("zoo:")], done.stdout.strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--command", choices=("sample", "translate"), default="sample")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        run.mkdir()
        if args.command == "sample":
            make_run(run)
            short, longer = "w1 w2 w3", "w1 w2 w3 w4 w5 w6 w7 w8 w9"
        else:
            make_marian(run, args.new_tokens)
            short, longer = "to be or not", "now is the winter of our discontent made glorious"
        rows = []
        for backend in args.backends:
            home = Path(scratch) / f"home-{backend}"
            for label, prompt, cache in (("first process", short, True), ("second process", short, True),
                                         ("second process, another prompt length", longer, True),
                                         ("cache off", short, False)):
                length = len(prompt.split()) + args.new_tokens
                seconds, said, text = first_token(run, prompt, length, backend, home, cache, args.command)
                rows.append(dict(backend=backend, process=label, seconds=round(seconds, 1), stderr=said))
                print(json.dumps(rows[-1]), flush=True)
        print("\n| backend | process | seconds to the first token | compiled |")
        print("|---|---|---|---|")
        for row in rows:
            compiled = "; ".join(line.removeprefix("zoo: ") for line in row["stderr"]) or "nothing said"
            print(f"| {row['backend']} | {row['process']} | {row['seconds']} | {compiled} |")


if __name__ == "__main__":
    main()
